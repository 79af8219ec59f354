//! A file's space and data layout: fallocate (NFSv4.2 ALLOCATE and
//! DEALLOCATE), copy_file_range (COPY within the server) and lseek's
//! SEEK_DATA and SEEK_HOLE (SEEK), as the Linux NFS client offers them.
//! Each sends the file's buffered writes first, so the server sees them in
//! the order the program made them; what the kernel caches afterwards
//! (pages of the changed range, the size) it drops itself when the reply
//! comes, and the mount's attribute cache is refreshed from the server.
//!
//! Without NFSv4.2 (NFSv3, 4.0, 4.1) or when the server answers NOTSUPP:
//! fallocate is EOPNOTSUPP (as on a Linux NFS mount), copy_file_range is
//! EOPNOTSUPP so that the kernel copies through read and write itself,
//! and lseek is ENOSYS so that the kernel answers from the size (the
//! whole file data, the hole at its end) and stops asking.

use super::*;
use client::remote::Kind;

/// A COPY asks for at most this much: a synchronous COPY holds its RPC
/// until it is done; copy_file_range returns the short count and the
/// caller asks again for the rest.
const COPY_MAX: u64 = 64 << 20;

/// What an fallocate(2) mode asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    /// Mode 0: ALLOCATE, the size raised to the range's end.
    Allocate,
    /// PUNCH_HOLE | KEEP_SIZE: DEALLOCATE.
    Punch,
}

/// The modes the Linux NFS client passes on; every other one (ZERO_RANGE,
/// KEEP_SIZE alone, COLLAPSE_RANGE, ...) is EOPNOTSUPP there too.
fn space_of(mode: i32) -> Result<Space, i32> {
    if mode == 0 {
        Ok(Space::Allocate)
    } else if mode == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE {
        Ok(Space::Punch)
    } else {
        Err(libc::EOPNOTSUPP)
    }
}

/// The errno for a failed NFSv4.2 operation: one the server cannot do is
/// EOPNOTSUPP whatever version said so.
fn v42_errno(e: Error) -> i32 {
    if e.is(Kind::NotSupp) {
        libc::EOPNOTSUPP
    } else {
        errno(e)
    }
}

impl State {
    /// The open `fh` of `ino` (its stateid), or the file without state.
    fn file_of(&self, ino: u64, fh: u64) -> Result<OpenFile, i32> {
        match self.open_of(fh) {
            Ok(o) => Ok(o.file.clone()),
            Err(_) => Ok(OpenFile {
                fh: self.fh(ino)?,
                stateid: None,
            }),
        }
    }

    async fn fallocate(
        &self,
        ino: u64,
        fh: u64,
        off: u64,
        len: u64,
        what: Space,
    ) -> Result<(), i32> {
        self.flush_writes_of(ino).await?;
        let file = self.file_of(ino, fh)?;
        match what {
            Space::Allocate => self.remote.allocate(&file, off, len).await,
            Space::Punch => self.remote.deallocate(&file, off, len).await,
        }
        .map_err(v42_errno)?;
        // New size (ALLOCATE past the end) and change attribute.
        self.fetch_attr(ino).await?;
        Ok(())
    }

    /// One COPY of up to `len` bytes (fewer when the server copies fewer),
    /// made stable before it counts; returns the bytes copied.
    #[allow(clippy::too_many_arguments)]
    async fn copy(
        &self,
        ino_in: u64,
        fh_in: u64,
        off_in: u64,
        ino_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<u64, i32> {
        self.flush_writes_of(ino_in).await?;
        if ino_out != ino_in {
            self.flush_writes_of(ino_out).await?;
        }
        let src = self.file_of(ino_in, fh_in)?;
        let dst = self.file_of(ino_out, fh_out)?;
        let len = len.min(COPY_MAX);
        // A server that restarted between COPY and COMMIT may have lost
        // the copy: it is made again (Linux's client does the same).
        let mut tries = 0;
        let n = loop {
            let c = self
                .remote
                .copy(&src, &dst, off_in, off_out, len)
                .await
                .map_err(v42_errno)?;
            if !c.unstable || c.count == 0 {
                break c.count;
            }
            let v = self.remote.commit(&dst.fh).await.map_err(errno)?;
            if v == c.verf {
                break c.count;
            }
            tries += 1;
            if tries == 3 {
                return Err(libc::EIO);
            }
        };
        self.fetch_attr(ino_out).await?;
        Ok(n)
    }

    async fn seek(&self, ino: u64, fh: u64, off: u64, hole: bool) -> Result<u64, i32> {
        self.flush_writes_of(ino).await?;
        let file = self.file_of(ino, fh)?;
        self.remote.seek(&file, off, hole).await.map_err(|e| {
            if e.is(Kind::NotSupp) {
                libc::ENOSYS
            } else {
                errno(e)
            }
        })
    }
}

impl TarnFs {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_fallocate(
        &self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let what = match space_of(mode) {
            Ok(w) => w,
            Err(e) => return reply.error(e),
        };
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        if !self.st.remote.has_v42() {
            return reply.error(libc::EOPNOTSUPP);
        }
        if offset < 0 || length <= 0 {
            return reply.error(libc::EINVAL);
        }
        let st = self.st.clone();
        self.spawn_empty(req, reply, async move {
            st.fallocate(ino, fh, offset as u64, length as u64, what)
                .await
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_copy_file_range(
        &self,
        req: &Request<'_>,
        ino_in: u64,
        fh_in: u64,
        offset_in: i64,
        ino_out: u64,
        fh_out: u64,
        offset_out: i64,
        len: u64,
        flags: u32,
        reply: ReplyWrite,
    ) {
        if flags != 0 || offset_in < 0 || offset_out < 0 {
            return reply.error(libc::EINVAL);
        }
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        // The kernel copies through read and write on EOPNOTSUPP.
        if !self.st.remote.has_v42() {
            return reply.error(libc::EOPNOTSUPP);
        }
        // COPY's count 0 means "to the end of the file".
        if len == 0 {
            return reply.written(0);
        }
        let st = self.st.clone();
        self.spawn_reply(
            req,
            reply,
            async move {
                st.copy(
                    ino_in,
                    fh_in,
                    offset_in as u64,
                    ino_out,
                    fh_out,
                    offset_out as u64,
                    len,
                )
                .await
            },
            |reply, n| reply.written(n as u32),
        );
    }

    pub(super) fn on_lseek(
        &self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel asks only for these two; the others it answers itself.
        let hole = match whence {
            libc::SEEK_DATA => false,
            libc::SEEK_HOLE => true,
            _ => return reply.error(libc::EINVAL),
        };
        if !self.st.remote.has_v42() {
            return reply.error(libc::ENOSYS);
        }
        if offset < 0 {
            return reply.error(libc::ENXIO);
        }
        let st = self.st.clone();
        self.spawn(req, async move {
            match st.seek(ino, fh, offset as u64, hole).await {
                Ok(at) => reply.offset(at as i64),
                Err(e) => reply.error(e),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallocate_modes_are_those_of_linux_nfs() {
        assert_eq!(space_of(0), Ok(Space::Allocate));
        assert_eq!(
            space_of(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE),
            Ok(Space::Punch)
        );
        for m in [
            libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_ZERO_RANGE,
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
            libc::FALLOC_FL_PUNCH_HOLE,
        ] {
            assert_eq!(space_of(m), Err(libc::EOPNOTSUPP), "mode {m:#x}");
        }
    }
}
