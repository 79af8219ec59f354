//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn lookup(_n: &Nfs3, _ctx: &CallContext, _args: Lookup3args) -> Lookup3res {
    todo!("lookup")
}
