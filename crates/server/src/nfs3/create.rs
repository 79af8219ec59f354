//! TODO

use super::Nfs3;
use proto::nfs3::*;
use rpc::CallContext;

pub async fn create(_n: &Nfs3, _ctx: &CallContext, _args: Create3args) -> Create3res {
    todo!("create")
}
pub async fn mkdir(_n: &Nfs3, _ctx: &CallContext, _args: Mkdir3args) -> Mkdir3res {
    todo!("mkdir")
}
pub async fn symlink(_n: &Nfs3, _ctx: &CallContext, _args: Symlink3args) -> Symlink3res {
    todo!("symlink")
}
pub async fn mknod(_n: &Nfs3, _ctx: &CallContext, _args: Mknod3args) -> Mknod3res {
    todo!("mknod")
}
