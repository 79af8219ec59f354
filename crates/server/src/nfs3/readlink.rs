//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn readlink(_n: &Nfs3, _ctx: &CallContext, _args: Readlink3args) -> Readlink3res {
    todo!("readlink")
}
