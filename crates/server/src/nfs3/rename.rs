//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn rename(_n: &Nfs3, _ctx: &CallContext, _args: Rename3args) -> Rename3res {
    todo!("rename")
}
