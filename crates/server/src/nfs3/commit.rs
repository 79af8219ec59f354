//! COMMIT: make earlier unstable writes durable.

use super::{attr, failed, failed_with, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn commit(n: &Nfs3, ctx: &CallContext, args: Commit3args) -> Commit3res {
    // Not resolve_rw: COMMIT changes nothing a read-only export protects.
    let t = or_failed!(ctx, n.resolve(ctx, &args.file));
    let b = t.export.backend.clone();
    // The whole file is synced whatever range was asked: simpler, and a
    // superset of what the client needs.
    let (r, file_wcc) = n
        .run(move || attr::with_wcc(&*b, &t.fid, || b.commit(&t.fid)))
        .await;
    match r {
        Ok(()) => Commit3res::NFS3_OK(Commit3resok {
            file_wcc,
            verf: n.write_verf.get(),
        }),
        Err(e) => {
            let f: super::Fail = e.into();
            n.write_verf.reset_if(super::write::lost(f.status));
            failed_with(ctx, f, file_wcc)
        }
    }
}
