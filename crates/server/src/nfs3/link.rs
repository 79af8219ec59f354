//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn link(_n: &Nfs3, _ctx: &CallContext, _args: Link3args) -> Link3res {
    todo!("link")
}
