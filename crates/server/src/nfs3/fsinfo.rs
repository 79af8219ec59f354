//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn fsstat(_n: &Nfs3, _ctx: &CallContext, _args: Fsstat3args) -> Fsstat3res {
    todo!("fsstat")
}
pub async fn fsinfo(_n: &Nfs3, _ctx: &CallContext, _args: Fsinfo3args) -> Fsinfo3res {
    todo!("fsinfo")
}
pub async fn pathconf(_n: &Nfs3, _ctx: &CallContext, _args: Pathconf3args) -> Pathconf3res {
    todo!("pathconf")
}
