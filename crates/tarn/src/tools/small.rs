//! Small files in one round trip each: a tree of small files costs its
//! round trips, not its bytes. Writing is one COMPOUND from the root:
//! LOOKUPs, OPEN (create, truncate), WRITE (UNSTABLE) and COMMIT, SETATTR
//! (mode and times) and CLOSE, on the 4.1 "current stateid" that OPEN sets
//! (RFC 8881 §16.2.3.1.2). UNSTABLE and COMMIT cost the server what one
//! FILE_SYNC WRITE does, but a tree of small files does not look like the
//! small synchronous writes `tarn doctor` warns of. Reading is LOOKUPs and one READ with the
//! anonymous stateid. Anything unexpected (a short WRITE or READ, a path
//! too deep for the session's operations) returns `None`/`false` and the
//! caller copies the file the general way.

use bytes::Bytes;
use client::nfs4::{check, Session, SetAttrs, ANON_STATEID};
use proto::nfs4::*;

/// Files up to this size take the one-COMPOUND path.
pub const SMALL: u64 = 64 << 10;

/// The special stateid meaning "the current stateid" (seqid 1, other 0).
const CURRENT: Stateid4 = Stateid4 {
    seqid: 1,
    other: [0; 12],
};

/// OPEN of `name` in the current directory for writing, created or
/// truncated, mode 0600 until the copy is done (see [`keep_mode_and_times`]).
pub(super) fn open_truncating(s: &Session, name: &str) -> NfsArgop4 {
    let create = SetAttrs {
        size: Some(0),
        mode: Some(0o600),
        ..Default::default()
    };
    NfsArgop4::OP_OPEN(Open4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_WRITE,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: s.open_owner(),
        openhow: Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(create.encode())),
        claim: OpenClaim4::CLAIM_NULL(Bytes::copy_from_slice(name.as_bytes())),
    })
}

/// SETATTR giving a copied file its source's mode, and its mtime as both
/// access and modification time.
pub(super) fn keep_mode_and_times(stateid: Stateid4, mode: u32, mtime: &Nfstime4) -> NfsArgop4 {
    let set = SetAttrs {
        mode: Some(mode),
        atime: Some(Settime4::SET_TO_CLIENT_TIME4(mtime.clone())),
        mtime: Some(Settime4::SET_TO_CLIENT_TIME4(mtime.clone())),
        ..Default::default()
    };
    NfsArgop4::OP_SETATTR(Setattr4args {
        stateid,
        obj_attributes: set.encode(),
    })
}

fn lookups(s: &Session, path: &[&str], after: usize) -> Option<Vec<NfsArgop4>> {
    // SEQUENCE and PUTROOTFH come first.
    if path.len() + after + 2 > s.fore_channel().ca_maxoperations as usize {
        return None;
    }
    let mut ops = vec![NfsArgop4::OP_PUTROOTFH];
    ops.extend(path.iter().map(|c| {
        NfsArgop4::OP_LOOKUP(Lookup4args {
            objname: Bytes::copy_from_slice(c.as_bytes()),
        })
    }));
    Some(ops)
}

/// Whether a file of `size` bytes fits one COMPOUND's request or reply.
pub fn fits(s: &Session, size: u64) -> bool {
    let ch = s.fore_channel();
    size <= SMALL && size + 4096 <= ch.ca_maxrequestsize.min(ch.ca_maxresponsesize) as u64
}

/// Creates `dir/name` holding `data` with `mode` and `mtime` (also the
/// access time). Ok(false): not done this way (short write, path too deep,
/// the server restarted between WRITE and COMMIT);
/// the file may exist and is closed, and the caller copies it again.
pub async fn put(
    s: &Session,
    dir: &[&str],
    name: &str,
    data: Bytes,
    mode: u32,
    mtime: &Nfstime4,
) -> client::nfs4::Result<bool> {
    let Some(mut ops) = lookups(s, dir, 6) else {
        return Ok(false);
    };
    let len = data.len() as u32;
    ops.push(open_truncating(s, name));
    ops.push(NfsArgop4::OP_GETFH);
    if len > 0 {
        ops.push(NfsArgop4::OP_WRITE(Write4args {
            stateid: CURRENT,
            offset: 0,
            stable: StableHow4::UNSTABLE4,
            data,
        }));
        ops.push(NfsArgop4::OP_COMMIT(Commit4args {
            offset: 0,
            count: 0,
        }));
    }
    ops.push(keep_mode_and_times(CURRENT, mode, mtime));
    ops.push(NfsArgop4::OP_CLOSE(Close4args {
        seqid: 0,
        open_stateid: CURRENT,
    }));
    let res = s.call_raw(ops).await?;
    let (mut sid, mut fh, mut wrote) = (None, None, 0);
    let (mut wverf, mut cverf) = (None, None);
    for r in &res.resarray {
        match r {
            NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)) => sid = Some(ok.stateid.clone()),
            NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => fh = Some(ok.object.clone()),
            NfsResop4::OP_WRITE(Write4res::NFS4_OK(ok)) => {
                wrote = ok.count;
                wverf = (ok.committed == StableHow4::UNSTABLE4).then_some(ok.writeverf);
            }
            NfsResop4::OP_COMMIT(Commit4res::NFS4_OK(ok)) => cverf = Some(ok.writeverf),
            _ => {}
        }
    }
    if res.status != Nfsstat4::NFS4_OK {
        // Opened, then stopped before its CLOSE (or at it): close it.
        if let (Some(sid), Some(fh)) = (&sid, &fh) {
            let _ = s.close(fh, sid).await;
        }
        check(&res)?;
    }
    let durable = wverf.is_none() || wverf == cverf;
    Ok(wrote == len && durable)
}

/// The first `size` bytes of the file at `path`, or None when the server
/// returned fewer and no end of file (the caller reads it the general way).
pub async fn get(s: &Session, path: &[&str], size: u64) -> client::nfs4::Result<Option<Bytes>> {
    let Some(mut ops) = lookups(s, path, 1) else {
        return Ok(None);
    };
    ops.push(NfsArgop4::OP_READ(Read4args {
        stateid: ANON_STATEID,
        offset: 0,
        count: size as u32,
    }));
    let r = s.call(ops).await?;
    match r.into_iter().last() {
        Some(NfsResop4::OP_READ(Read4res::NFS4_OK(ok)))
            if ok.data.len() as u64 == size || ok.eof =>
        {
            Ok(Some(ok.data))
        }
        _ => Ok(None),
    }
}
