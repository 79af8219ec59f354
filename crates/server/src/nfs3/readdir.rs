//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn readdir(_n: &Nfs3, _ctx: &CallContext, _args: Readdir3args) -> Readdir3res {
    todo!("readdir")
}
pub async fn readdirplus(
    _n: &Nfs3,
    _ctx: &CallContext,
    _args: Readdirplus3args,
) -> Readdirplus3res {
    todo!("readdirplus")
}
