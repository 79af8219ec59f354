//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn access(_n: &Nfs3, _ctx: &CallContext, _args: Access3args) -> Access3res {
    todo!("access")
}
