//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn setattr(_n: &Nfs3, _ctx: &CallContext, _args: Setattr3args) -> Setattr3res {
    todo!("setattr")
}
