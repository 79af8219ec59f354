//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn read(_n: &Nfs3, _ctx: &CallContext, _args: Read3args, _out: &mut bytes::BytesMut) {
    todo!("read")
}
