//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn commit(_n: &Nfs3, _ctx: &CallContext, _args: Commit3args) -> Commit3res {
    todo!("commit")
}
