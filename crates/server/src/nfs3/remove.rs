//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn remove(_n: &Nfs3, _ctx: &CallContext, _args: Remove3args) -> Remove3res {
    todo!("remove")
}
pub async fn rmdir(_n: &Nfs3, _ctx: &CallContext, _args: Rmdir3args) -> Rmdir3res {
    todo!("rmdir")
}
