//! Thin safe wrappers over the Linux syscalls the local backend needs.
//!
//! This is the only module of the crate with `unsafe`: each block is a single
//! FFI call whose pointer arguments come from live Rust buffers/`CStr`s of the
//! stated length, and whose returned fd (if any) is owned immediately. We use
//! `libc` directly (not `nix`/`rustix`) because several calls have no wrapper
//! there in the versions we'd pull in (openat2 resolve flags, fchmodat2,
//! faccessat2 with AT_EMPTY_PATH, per-thread setgroups), and one dependency
//! already in the workspace keeps the build small.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub const EMPTY: &CStr = c"";

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_long(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_fd(r: libc::c_long) -> io::Result<OwnedFd> {
    let fd = cvt_long(r)? as RawFd;
    // SAFETY: the kernel just returned this new descriptor; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Turns a name into a `CString` (callers already rejected NUL bytes).
pub fn cstr(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `/proc/self/fd/N`, to reach an O_PATH fd's inode in calls that don't take
/// AT_EMPTY_PATH without a capability.
pub fn proc_path(fd: BorrowedFd<'_>) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
}

pub fn open_path(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: path is a valid C string.
    cvt_fd(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) } as libc::c_long)
}

pub fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: name is a valid C string; dir is a live fd.
    cvt_fd(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    } as libc::c_long)
}

/// openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: the name can never
/// resolve outside `dir`, whatever it contains.
pub fn openat_beneath(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    // open_how is non_exhaustive in libc; zero it and fill the fields.
    // SAFETY: open_how is plain old data; all-zero is a valid value.
    let mut how: libc::open_how = unsafe { MaybeUninit::zeroed().assume_init() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
        mode as u64
    } else {
        0
    };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    if crate::nowait::active() {
        // Fails with EAGAIN unless every component is in the dentry cache.
        how.resolve |= libc::RESOLVE_CACHED;
    }
    // SAFETY: how is a valid open_how of the size we pass; name is a C string.
    cvt_fd(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    })
}

/// A kernel file handle as returned by name_to_handle_at.
pub struct KernelHandle {
    pub htype: i32,
    pub len: usize,
    pub bytes: [u8; 128],
    pub mount_id: i32,
}

#[repr(C)]
struct FileHandleBuf {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; 128],
}

/// name_to_handle_at(dir, name, flags); never follows a trailing symlink
/// (we don't pass AT_SYMLINK_FOLLOW).
pub fn name_to_handle(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
) -> io::Result<KernelHandle> {
    let mut fh = FileHandleBuf {
        handle_bytes: 128,
        handle_type: 0,
        f_handle: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: fh is a file_handle header followed by 128 bytes, as announced
    // in handle_bytes; mount_id is a valid int out-pointer.
    cvt(unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut fh as *mut FileHandleBuf as *mut libc::file_handle,
            &mut mount_id,
            flags,
        )
    })?;
    Ok(KernelHandle {
        htype: fh.handle_type,
        len: fh.handle_bytes as usize,
        bytes: fh.f_handle,
        mount_id,
    })
}

/// open_by_handle_at; needs CAP_DAC_READ_SEARCH in the effective set, so it
/// must run *before* the thread's fsuid is switched to a non-root user.
pub fn open_by_handle(
    mount: BorrowedFd<'_>,
    htype: i32,
    bytes: &[u8],
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    if bytes.len() > 128 {
        return Err(io::Error::from_raw_os_error(libc::ESTALE));
    }
    let mut fh = FileHandleBuf {
        handle_bytes: bytes.len() as libc::c_uint,
        handle_type: htype,
        f_handle: [0; 128],
    };
    fh.f_handle[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: fh is a valid file_handle with handle_bytes bytes of payload.
    cvt_fd(unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            &mut fh as *mut FileHandleBuf as *mut libc::file_handle,
            flags | libc::O_CLOEXEC,
        )
    } as libc::c_long)
}

pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is a valid out-pointer; fstat fills it on success.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialized by the successful call.
    Ok(unsafe { st.assume_init() })
}

/// fstatat(dir, name, AT_SYMLINK_NOFOLLOW): the entry itself, never what a
/// symlink points to; `name` is a single component.
pub fn lstatat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: name is a C string, st a valid out-pointer filled on success.
    cvt(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: initialized by the successful call.
    Ok(unsafe { st.assume_init() })
}

/// faccessat2(fd, "", mode, AT_EACCESS|AT_EMPTY_PATH): the kernel's own
/// permission check (mode bits, ACLs, caps) against the thread's fs creds.
pub fn access_fd(fd: BorrowedFd<'_>, mode: libc::c_int) -> io::Result<()> {
    // SAFETY: empty C string path with AT_EMPTY_PATH refers to fd itself.
    cvt_long(unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            mode,
            libc::AT_EACCESS | libc::AT_EMPTY_PATH,
        )
    })
    .map(drop)
}

pub fn readlink_fd(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: buf has buf.len() writable bytes.
    let n = cvt_long(unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        ) as libc::c_long
    })? as usize;
    buf.truncate(n);
    Ok(buf)
}

pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    // In no-wait mode, RWF_NOWAIT: EAGAIN unless the data is in the page cache.
    let flags = if crate::nowait::active() {
        libc::RWF_NOWAIT
    } else {
        0
    };
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: iov describes buf, which has buf.len() writable bytes.
    cvt_long(unsafe {
        libc::preadv2(fd.as_raw_fd(), &iov, 1, offset as libc::off_t, flags) as libc::c_long
    })
    .map(|n| n as usize)
}

pub fn pwrite(fd: BorrowedFd<'_>, data: &[u8], offset: u64) -> io::Result<usize> {
    // SAFETY: data has data.len() readable bytes.
    cvt_long(unsafe {
        libc::pwrite(
            fd.as_raw_fd(),
            data.as_ptr() as *const libc::c_void,
            data.len(),
            offset as libc::off_t,
        ) as libc::c_long
    })
    .map(|n| n as usize)
}

pub fn fsync(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain fd call.
    cvt(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop)
}

pub fn fdatasync(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain fd call.
    cvt(unsafe { libc::fdatasync(fd.as_raw_fd()) }).map(drop)
}

pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain fd call.
    cvt(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

pub fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    // SAFETY: plain fd call.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) }).map(drop)
}

/// chmod of the object behind an O_PATH fd: fchmodat2 (Linux 6.6+), else via
/// /proc/self/fd. Both check ownership against the thread's fsuid.
pub fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: empty C string path with AT_EMPTY_PATH refers to fd itself.
    let r = cvt_long(unsafe {
        libc::syscall(
            libc::SYS_fchmodat2,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            mode as libc::c_uint,
            libc::AT_EMPTY_PATH,
        )
    });
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let p = proc_path(fd);
            // SAFETY: valid C string.
            cvt(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) }).map(drop)
        }
        r => r.map(drop),
    }
}

pub fn chown_fd(fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    // SAFETY: empty path + AT_EMPTY_PATH acts on fd itself (O_PATH fds allowed).
    cvt(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            uid.unwrap_or(u32::MAX),
            gid.unwrap_or(u32::MAX),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// utimensat on the fd itself; `times` uses UTIME_OMIT / UTIME_NOW as usual.
pub fn utimens_fd(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: times points at two timespecs; empty path + AT_EMPTY_PATH.
    cvt(unsafe {
        libc::utimensat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid C string.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: valid C strings.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

pub fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, rdev: (u32, u32)) -> io::Result<()> {
    let dev = libc::makedev(rdev.0, rdev.1);
    // SAFETY: valid C string.
    cvt(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t, dev) })
        .map(drop)
}

pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: valid C string.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

pub fn renameat(
    from: BorrowedFd<'_>,
    from_name: &CStr,
    to: BorrowedFd<'_>,
    to_name: &CStr,
) -> io::Result<()> {
    // SAFETY: valid C strings.
    cvt(unsafe {
        libc::renameat(
            from.as_raw_fd(),
            from_name.as_ptr(),
            to.as_raw_fd(),
            to_name.as_ptr(),
        )
    })
    .map(drop)
}

/// Hard-links the object behind `fd` as `dir/name`. Goes through
/// /proc/self/fd (AT_SYMLINK_FOLLOW) because linkat(AT_EMPTY_PATH) needs
/// CAP_DAC_READ_SEARCH, which a switched fsuid has dropped.
pub fn link_fd(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let p = proc_path(fd);
    // SAFETY: valid C strings.
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            p.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

pub fn lseek_set(fd: BorrowedFd<'_>, off: u64) -> io::Result<u64> {
    // SAFETY: plain fd call.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off as libc::off_t, libc::SEEK_SET) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

/// lseek(2) with SEEK_DATA or SEEK_HOLE: the offset found (ENXIO when
/// there is none). Moves the fd's file position, which nothing here uses
/// (reads and writes are positional).
pub fn lseek_data_hole(fd: BorrowedFd<'_>, off: u64, hole: bool) -> io::Result<u64> {
    let whence = if hole {
        libc::SEEK_HOLE
    } else {
        libc::SEEK_DATA
    };
    let off = libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::ENXIO))?;
    // SAFETY: plain fd call.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off, whence) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

/// fallocate(2): `mode` 0 reserves space (and extends the size),
/// PUNCH_HOLE|KEEP_SIZE frees it.
pub fn fallocate(fd: BorrowedFd<'_>, mode: libc::c_int, off: u64, len: u64) -> io::Result<()> {
    let big = || io::Error::from_raw_os_error(libc::EFBIG);
    let off = libc::off_t::try_from(off).map_err(|_| big())?;
    let len = libc::off_t::try_from(len).map_err(|_| big())?;
    // SAFETY: plain fd call.
    cvt(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, len) }).map(drop)
}

/// copy_file_range(2) of up to `len` bytes between two regular files at
/// explicit offsets (the descriptors' own positions are not used); returns
/// the bytes copied, 0 at the source's end.
pub fn copy_file_range(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: usize,
) -> io::Result<usize> {
    let big = || io::Error::from_raw_os_error(libc::EFBIG);
    let mut off_in = libc::off64_t::try_from(src_off).map_err(|_| big())?;
    let mut off_out = libc::off64_t::try_from(dst_off).map_err(|_| big())?;
    // SAFETY: the two offsets are live locals the kernel updates in place.
    cvt_long(unsafe {
        libc::copy_file_range(
            src.as_raw_fd(),
            &mut off_in,
            dst.as_raw_fd(),
            &mut off_out,
            len,
            0,
        ) as libc::c_long
    })
    .map(|n| n as usize)
}

/// The FICLONERANGE ioctl: `dst` at `dst_off` shares the extents of `src`
/// from `src_off` for `len` bytes (0: to the source's end).
pub fn clone_range(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: u64,
) -> io::Result<()> {
    let arg = libc::file_clone_range {
        src_fd: src.as_raw_fd() as i64,
        src_offset: src_off,
        src_length: len,
        dest_offset: dst_off,
    };
    // SAFETY: `arg` is a live struct of the type this ioctl reads.
    cvt(unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONERANGE, &arg) }).map(drop)
}

/// posix_fadvise(2) over `len` bytes at `off` (0: to the end).
pub fn fadvise(fd: BorrowedFd<'_>, off: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    let off = libc::off_t::try_from(off).unwrap_or(libc::off_t::MAX);
    let len = libc::off_t::try_from(len).unwrap_or(0);
    // SAFETY: plain fd call; it returns the error number instead of -1.
    match unsafe { libc::posix_fadvise(fd.as_raw_fd(), off, len, advice) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// getxattr(2) of the object behind `fd` (an O_PATH descriptor of a
/// regular file or directory, which the /proc/self/fd link resolves to
/// without following anything further): the value's length, and with a
/// non-empty `buf` the value in it (ERANGE when it does not fit).
pub fn getxattr_fd(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let p = proc_path(fd);
    // SAFETY: valid C strings; buf has buf.len() writable bytes (a NULL
    // pointer with size 0 asks for the length).
    cvt_long(unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr().cast()
            },
            buf.len(),
        ) as libc::c_long
    })
    .map(|n| n as usize)
}

/// setxattr(2) of the object behind `fd` (see [`getxattr_fd`]); `flags`
/// 0, XATTR_CREATE or XATTR_REPLACE.
pub fn setxattr_fd(
    fd: BorrowedFd<'_>,
    name: &CStr,
    value: &[u8],
    flags: libc::c_int,
) -> io::Result<()> {
    let p = proc_path(fd);
    // SAFETY: valid C strings; value has value.len() readable bytes.
    cvt(unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// listxattr(2) of the object behind `fd` (see [`getxattr_fd`]): the
/// NUL-separated names' length, and with a non-empty `buf` the names.
pub fn listxattr_fd(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let p = proc_path(fd);
    // SAFETY: valid C string; buf has buf.len() writable bytes (NULL with
    // size 0 asks for the length).
    cvt_long(unsafe {
        libc::listxattr(
            p.as_ptr(),
            if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr().cast()
            },
            buf.len(),
        ) as libc::c_long
    })
    .map(|n| n as usize)
}

/// removexattr(2) of the object behind `fd` (see [`getxattr_fd`]).
pub fn removexattr_fd(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let p = proc_path(fd);
    // SAFETY: valid C strings.
    cvt(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }).map(drop)
}

/// Raw getdents64 into `buf`; returns bytes filled (0 = end of directory).
pub fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf has buf.len() writable bytes.
    cvt_long(unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    })
    .map(|n| n as usize)
}

/// fanotify_init for a notification-only group that reports file handles
/// (FAN_REPORT_FID); non-blocking reads.
pub fn fanotify_fid_group() -> io::Result<OwnedFd> {
    let flags =
        libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | libc::FAN_REPORT_FID;
    // SAFETY: no pointer arguments.
    let fd = cvt(unsafe { libc::fanotify_init(flags, libc::O_RDONLY as libc::c_uint) })?;
    // SAFETY: the kernel just returned this new descriptor; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// fanotify_mark(group, flags, mask, fd, NULL): marks the object of `fd`
/// (or, with FAN_MARK_FILESYSTEM, its whole filesystem).
pub fn fanotify_mark(
    group: BorrowedFd<'_>,
    flags: libc::c_uint,
    mask: u64,
    fd: BorrowedFd<'_>,
) -> io::Result<()> {
    // SAFETY: a NULL path means "the object of fd"; no other pointers.
    cvt(unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            flags,
            mask,
            fd.as_raw_fd(),
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// read(2) into `buf`; a non-blocking descriptor with nothing to read gives
/// `Ok(0)`.
pub fn read_nonblocking(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(0),
            _ => return Err(e),
        }
    }
}

/// poll(2) with a zero timeout: for each `(fd, events)`, the events it
/// reports now.
pub fn poll_now<const N: usize>(fds: [(BorrowedFd<'_>, i16); N]) -> io::Result<[i16; N]> {
    let mut p = fds.map(|(fd, events)| libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    });
    // SAFETY: N valid pollfds; zero timeout.
    cvt(unsafe { libc::poll(p.as_mut_ptr(), N as libc::nfds_t, 0) })?;
    Ok(p.map(|p| p.revents))
}

/// Waits up to `timeout_ms` for `events` on `fd`; whether any came.
pub fn poll_for(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    match cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) }) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

pub fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<libc::statvfs> {
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: valid out-pointer.
    cvt(unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialized by the successful call.
    Ok(unsafe { st.assume_init() })
}

pub fn geteuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

pub fn getegid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getegid() }
}

/// The calling thread's supplementary groups.
pub fn getgroups() -> io::Result<Vec<u32>> {
    let mut v = vec![0 as libc::gid_t; 65536];
    // SAFETY: v has v.len() slots.
    let n = cvt(unsafe { libc::getgroups(v.len() as libc::c_int, v.as_mut_ptr()) })?;
    v.truncate(n as usize);
    Ok(v)
}

/// Per-thread credential switches. Raw syscalls on purpose: the glibc
/// wrappers for setgroups (and set*id) broadcast the change to every thread
/// of the process, while the kernel syscalls only touch the calling thread.
pub fn set_thread_groups(gids: &[u32]) -> io::Result<()> {
    // SAFETY: gids points at gids.len() gid_t values.
    cvt_long(unsafe { libc::syscall(libc::SYS_setgroups, gids.len(), gids.as_ptr()) }).map(drop)
}

/// Raises or drops CAP_SYS_RESOURCE in this thread's effective set (it
/// stays permitted). Without it, disk quotas and the blocks a filesystem
/// keeps for root apply to the thread, as they do to the user it acts for.
/// Only that bit changes: the rest is read back first, since setfsuid
/// moves the filesystem capabilities in and out of the effective set.
pub fn set_thread_sys_resource(on: bool) -> io::Result<()> {
    use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
    let mut sets = capabilities(None)?;
    if !sets.permitted.contains(CapabilitySet::SYS_RESOURCE) {
        return Ok(());
    }
    sets.effective.set(CapabilitySet::SYS_RESOURCE, on);
    Ok(set_capabilities(None, sets)?)
}

/// setfsuid can't report errors; it returns the previous fsuid.
pub fn set_thread_fsuid(uid: u32) -> u32 {
    // SAFETY: plain syscall on the current thread.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

pub fn set_thread_fsgid(gid: u32) -> u32 {
    // SAFETY: plain syscall on the current thread.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

/// Raises the soft limit on open files to the hard limit (the descriptor
/// caches keep thousands open); returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if r.rlim_cur < r.rlim_max {
        r.rlim_cur = r.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(r.rlim_cur)
}

/// pread of up to `len` bytes into the spare capacity of `buf`, whose
/// length grows by what was read. No zero-fill first.
pub fn pread_append(
    fd: BorrowedFd<'_>,
    buf: &mut bytes::BytesMut,
    len: usize,
    off: u64,
) -> io::Result<usize> {
    buf.reserve(len);
    let spare = &mut buf.spare_capacity_mut()[..len];
    // SAFETY: the kernel writes at most `len` bytes into spare capacity we own.
    let n = cvt_long(unsafe {
        libc::pread(
            fd.as_raw_fd(),
            spare.as_mut_ptr().cast(),
            len,
            off as libc::off_t,
        ) as libc::c_long
    })? as usize;
    // SAFETY: pread initialised the first n (≤ len ≤ spare) bytes.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Moves up to `len` bytes of `fd` from `off` into `pipe` (its write end)
/// without copying them: the pipe takes references to the cached pages.
pub fn splice_to_pipe(
    fd: BorrowedFd<'_>,
    off: u64,
    pipe: BorrowedFd<'_>,
    len: usize,
) -> io::Result<usize> {
    let mut off = off as libc::loff_t;
    // SAFETY: plain descriptors; `off` lives across the call.
    cvt_long(unsafe {
        libc::splice(
            fd.as_raw_fd(),
            &mut off,
            pipe.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_NONBLOCK,
        ) as libc::c_long
    })
    .map(|n| n as usize)
}

/// cachestat(2) (Linux 6.5; the same number on every architecture).
const SYS_CACHESTAT: libc::c_long = 451;

/// Whether every page of `len` bytes of `fd` from `off` is in the page
/// cache (cachestat(2); an error on kernels without it).
pub fn cached(fd: BorrowedFd<'_>, off: u64, len: usize) -> io::Result<bool> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    if len == 0 {
        return Ok(true);
    }
    let range = Range {
        off,
        len: len as u64,
    };
    let mut st = Stat::default();
    // SAFETY: both structs are laid out as the kernel's and outlive the call.
    cvt_long(unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const Range,
            &mut st as *mut Stat,
            0u32,
        )
    })?;
    let page = 4096u64;
    let pages = (off + len as u64).div_ceil(page) - off / page;
    Ok(st.nr_cache >= pages)
}

/// An all-zero `stat`: a placeholder, and for tests that make up
/// attributes.
pub fn zero_stat() -> libc::stat {
    // SAFETY: libc::stat is plain integers; all-zero is a valid value.
    unsafe { MaybeUninit::zeroed().assume_init() }
}
