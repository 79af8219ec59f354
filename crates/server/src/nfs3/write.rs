//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn write(_n: &Nfs3, _ctx: &CallContext, _args: Write3args) -> Write3res {
    todo!("write")
}
