//! The one unsafe module of the CephFS backend: libcephfs.so.2, opened at
//! run time (dlopen through `libloading`) so Tarn builds and runs on
//! machines without Ceph, and the safe types the backend uses on top of it.
//!
//! Every libcephfs object this module hands out is owned by a Rust value
//! that releases it on drop: [`Mount`] (ceph_unmount + ceph_release),
//! [`InodeRef`] (one reference, ceph_ll_put), [`FileRef`] (ceph_ll_close),
//! [`DirRef`] (ceph_ll_releasedir), [`Perms`] (ceph_userperm_destroy). The
//! borrowed forms keep a `&Mount` so none outlives its mount. libcephfs
//! serialises calls on one mount with its own client lock, so one mount is
//! shared by all threads (Send + Sync below).
//!
//! Signatures are those of libcephfs.h in Ceph 16 (Pacific); every call
//! returns 0 or a byte count on success and a negated errno on failure.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::Arc;

use libloading::Library;

/// The file name the loader looks for (the dynamic linker's search path).
pub const LIBRARY: &str = "libcephfs.so.2";
/// Names another file to load instead (a Ceph built elsewhere, or in tests
/// one that is not there).
pub const LIBRARY_ENV: &str = "TARN_LIBCEPHFS";

fn open_library() -> Result<Library, String> {
    let name = std::env::var_os(LIBRARY_ENV).unwrap_or_else(|| LIBRARY.into());
    // SAFETY: loading runs the library's initialisers, which only set up
    // Ceph's global state; nothing here depends on them having run.
    unsafe { Library::new(&name) }.map_err(|e| {
        format!(
            "cannot load {} (install libcephfs2, or name the file with {LIBRARY_ENV}): {e}",
            name.to_string_lossy()
        )
    })
}

/// `struct ceph_statx` (ceph_ll_client.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Statx {
    pub mask: u32,
    pub blksize: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mode: u16,
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub dev: libc::dev_t,
    pub rdev: libc::dev_t,
    pub atime: libc::timespec,
    pub ctime: libc::timespec,
    pub mtime: libc::timespec,
    pub btime: libc::timespec,
    pub version: u64,
}

impl Default for Statx {
    fn default() -> Statx {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        Statx {
            mask: 0,
            blksize: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            mode: 0,
            ino: 0,
            size: 0,
            blocks: 0,
            dev: 0,
            rdev: 0,
            atime: ts,
            ctime: ts,
            mtime: ts,
            btime: ts,
            version: 0,
        }
    }
}

pub const STATX_BASIC_STATS: u32 = 0x7ff;
pub const STATX_BTIME: u32 = 0x800;
/// Answer from the client's cache when it has the attribute at all.
pub const AT_STATX_DONT_SYNC: u32 = 0x4000;

pub const SETATTR_MODE: c_int = 1 << 0;
pub const SETATTR_UID: c_int = 1 << 1;
pub const SETATTR_GID: c_int = 1 << 2;
pub const SETATTR_MTIME: c_int = 1 << 3;
pub const SETATTR_ATIME: c_int = 1 << 4;
pub const SETATTR_SIZE: c_int = 1 << 5;

// Opaque libcephfs types.
type Cmount = c_void;
type Inode = c_void;
type Fh = c_void;
type DirResult = c_void;
type UserPerm = c_void;

/// `struct inodeno_t`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct InodeNo {
    val: u64,
}

/// The entry points used, resolved once when the library is opened.
struct Api {
    create: unsafe extern "C" fn(*mut *mut Cmount, *const c_char) -> c_int,
    conf_read_file: unsafe extern "C" fn(*mut Cmount, *const c_char) -> c_int,
    conf_parse_env: unsafe extern "C" fn(*mut Cmount, *const c_char) -> c_int,
    conf_set: unsafe extern "C" fn(*mut Cmount, *const c_char, *const c_char) -> c_int,
    conf_get: unsafe extern "C" fn(*mut Cmount, *const c_char, *mut c_char, usize) -> c_int,
    select_filesystem: unsafe extern "C" fn(*mut Cmount, *const c_char) -> c_int,
    init: unsafe extern "C" fn(*mut Cmount) -> c_int,
    start_reclaim: unsafe extern "C" fn(*mut Cmount, *const c_char, u32) -> c_int,
    finish_reclaim: unsafe extern "C" fn(*mut Cmount),
    set_uuid: unsafe extern "C" fn(*mut Cmount, *const c_char),
    mount: unsafe extern "C" fn(*mut Cmount, *const c_char) -> c_int,
    unmount: unsafe extern "C" fn(*mut Cmount) -> c_int,
    release: unsafe extern "C" fn(*mut Cmount) -> c_int,
    sync_fs: unsafe extern "C" fn(*mut Cmount) -> c_int,
    userperm_new: unsafe extern "C" fn(u32, u32, c_int, *mut u32) -> *mut UserPerm,
    userperm_destroy: unsafe extern "C" fn(*mut UserPerm),
    ll_lookup_root: unsafe extern "C" fn(*mut Cmount, *mut *mut Inode) -> c_int,
    ll_lookup_inode: unsafe extern "C" fn(*mut Cmount, InodeNo, *mut *mut Inode) -> c_int,
    ll_lookup: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        *mut *mut Inode,
        *mut Statx,
        u32,
        u32,
        *const UserPerm,
    ) -> c_int,
    ll_put: unsafe extern "C" fn(*mut Cmount, *mut Inode) -> c_int,
    ll_getattr: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *mut Statx,
        u32,
        u32,
        *const UserPerm,
    ) -> c_int,
    ll_setattr:
        unsafe extern "C" fn(*mut Cmount, *mut Inode, *mut Statx, c_int, *const UserPerm) -> c_int,
    ll_open: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        c_int,
        *mut *mut Fh,
        *const UserPerm,
    ) -> c_int,
    ll_close: unsafe extern "C" fn(*mut Cmount, *mut Fh) -> c_int,
    ll_delegation: unsafe extern "C" fn(
        *mut Cmount,
        *mut Fh,
        c_uint,
        Option<unsafe extern "C" fn(*mut Fh, *mut c_void)>,
        *mut c_void,
    ) -> c_int,
    set_deleg_timeout: unsafe extern "C" fn(*mut Cmount, u32) -> c_int,
    ll_getlk: unsafe extern "C" fn(*mut Cmount, *mut Fh, *mut libc::flock, u64) -> c_int,
    ll_setlk: unsafe extern "C" fn(*mut Cmount, *mut Fh, *mut libc::flock, u64, c_int) -> c_int,
    ll_read: unsafe extern "C" fn(*mut Cmount, *mut Fh, i64, u64, *mut c_char) -> c_int,
    ll_write: unsafe extern "C" fn(*mut Cmount, *mut Fh, i64, u64, *const c_char) -> c_int,
    ll_fsync: unsafe extern "C" fn(*mut Cmount, *mut Fh, c_int) -> c_int,
    ll_sync_inode: unsafe extern "C" fn(*mut Cmount, *mut Inode, c_int) -> c_int,
    ll_create: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        libc::mode_t,
        c_int,
        *mut *mut Inode,
        *mut *mut Fh,
        *mut Statx,
        u32,
        u32,
        *const UserPerm,
    ) -> c_int,
    ll_mknod: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        libc::mode_t,
        libc::dev_t,
        *mut *mut Inode,
        *mut Statx,
        u32,
        u32,
        *const UserPerm,
    ) -> c_int,
    ll_mkdir: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        libc::mode_t,
        *mut *mut Inode,
        *mut Statx,
        u32,
        u32,
        *const UserPerm,
    ) -> c_int,
    ll_symlink: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        *const c_char,
        *mut *mut Inode,
        *mut Statx,
        u32,
        u32,
        *const UserPerm,
    ) -> c_int,
    ll_readlink:
        unsafe extern "C" fn(*mut Cmount, *mut Inode, *mut c_char, usize, *const UserPerm) -> c_int,
    ll_link: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *mut Inode,
        *const c_char,
        *const UserPerm,
    ) -> c_int,
    ll_unlink:
        unsafe extern "C" fn(*mut Cmount, *mut Inode, *const c_char, *const UserPerm) -> c_int,
    ll_rmdir:
        unsafe extern "C" fn(*mut Cmount, *mut Inode, *const c_char, *const UserPerm) -> c_int,
    ll_rename: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        *mut Inode,
        *const c_char,
        *const UserPerm,
    ) -> c_int,
    ll_opendir: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *mut *mut DirResult,
        *const UserPerm,
    ) -> c_int,
    ll_releasedir: unsafe extern "C" fn(*mut Cmount, *mut DirResult) -> c_int,
    readdir_r: unsafe extern "C" fn(*mut Cmount, *mut DirResult, *mut libc::dirent) -> c_int,
    readdirplus_r: unsafe extern "C" fn(
        *mut Cmount,
        *mut DirResult,
        *mut libc::dirent,
        *mut Statx,
        u32,
        u32,
        *mut *mut Inode,
    ) -> c_int,
    telldir: unsafe extern "C" fn(*mut Cmount, *mut DirResult) -> i64,
    seekdir: unsafe extern "C" fn(*mut Cmount, *mut DirResult, i64),
    ll_statfs: unsafe extern "C" fn(*mut Cmount, *mut Inode, *mut libc::statvfs) -> c_int,
    ll_lseek: unsafe extern "C" fn(*mut Cmount, *mut Fh, libc::off_t, c_int) -> libc::off_t,
    ll_fallocate: unsafe extern "C" fn(*mut Cmount, *mut Fh, c_int, i64, i64) -> c_int,
    ll_getxattr: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        *mut c_void,
        usize,
        *const UserPerm,
    ) -> c_int,
    ll_setxattr: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *const c_char,
        *const c_void,
        usize,
        c_int,
        *const UserPerm,
    ) -> c_int,
    ll_listxattr: unsafe extern "C" fn(
        *mut Cmount,
        *mut Inode,
        *mut c_char,
        usize,
        *mut usize,
        *const UserPerm,
    ) -> c_int,
    ll_removexattr:
        unsafe extern "C" fn(*mut Cmount, *mut Inode, *const c_char, *const UserPerm) -> c_int,
}

/// Resolves `name` in `lib` as a function pointer of type `T`.
macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the field's type is the C prototype of this symbol in
        // libcephfs.h (Ceph 16); the pointer stays valid while `lib` is
        // loaded, which `Mount` guarantees by owning it.
        unsafe {
            *$lib
                .get(concat!($name, "\0").as_bytes())
                .map_err(|e| format!("{}: {}: {e}", LIBRARY, $name))?
        }
    };
}

impl Api {
    fn load(lib: &Library) -> Result<Api, String> {
        Ok(Api {
            create: sym!(lib, "ceph_create"),
            conf_read_file: sym!(lib, "ceph_conf_read_file"),
            conf_parse_env: sym!(lib, "ceph_conf_parse_env"),
            conf_set: sym!(lib, "ceph_conf_set"),
            conf_get: sym!(lib, "ceph_conf_get"),
            select_filesystem: sym!(lib, "ceph_select_filesystem"),
            init: sym!(lib, "ceph_init"),
            start_reclaim: sym!(lib, "ceph_start_reclaim"),
            finish_reclaim: sym!(lib, "ceph_finish_reclaim"),
            set_uuid: sym!(lib, "ceph_set_uuid"),
            mount: sym!(lib, "ceph_mount"),
            unmount: sym!(lib, "ceph_unmount"),
            release: sym!(lib, "ceph_release"),
            sync_fs: sym!(lib, "ceph_sync_fs"),
            userperm_new: sym!(lib, "ceph_userperm_new"),
            userperm_destroy: sym!(lib, "ceph_userperm_destroy"),
            ll_lookup_root: sym!(lib, "ceph_ll_lookup_root"),
            ll_lookup_inode: sym!(lib, "ceph_ll_lookup_inode"),
            ll_lookup: sym!(lib, "ceph_ll_lookup"),
            ll_put: sym!(lib, "ceph_ll_put"),
            ll_getattr: sym!(lib, "ceph_ll_getattr"),
            ll_setattr: sym!(lib, "ceph_ll_setattr"),
            ll_open: sym!(lib, "ceph_ll_open"),
            ll_close: sym!(lib, "ceph_ll_close"),
            ll_delegation: sym!(lib, "ceph_ll_delegation"),
            set_deleg_timeout: sym!(lib, "ceph_set_deleg_timeout"),
            ll_getlk: sym!(lib, "ceph_ll_getlk"),
            ll_setlk: sym!(lib, "ceph_ll_setlk"),
            ll_read: sym!(lib, "ceph_ll_read"),
            ll_write: sym!(lib, "ceph_ll_write"),
            ll_fsync: sym!(lib, "ceph_ll_fsync"),
            ll_sync_inode: sym!(lib, "ceph_ll_sync_inode"),
            ll_create: sym!(lib, "ceph_ll_create"),
            ll_mknod: sym!(lib, "ceph_ll_mknod"),
            ll_mkdir: sym!(lib, "ceph_ll_mkdir"),
            ll_symlink: sym!(lib, "ceph_ll_symlink"),
            ll_readlink: sym!(lib, "ceph_ll_readlink"),
            ll_link: sym!(lib, "ceph_ll_link"),
            ll_unlink: sym!(lib, "ceph_ll_unlink"),
            ll_rmdir: sym!(lib, "ceph_ll_rmdir"),
            ll_rename: sym!(lib, "ceph_ll_rename"),
            ll_opendir: sym!(lib, "ceph_ll_opendir"),
            ll_releasedir: sym!(lib, "ceph_ll_releasedir"),
            readdir_r: sym!(lib, "ceph_readdir_r"),
            readdirplus_r: sym!(lib, "ceph_readdirplus_r"),
            telldir: sym!(lib, "ceph_telldir"),
            seekdir: sym!(lib, "ceph_seekdir"),
            ll_statfs: sym!(lib, "ceph_ll_statfs"),
            ll_lseek: sym!(lib, "ceph_ll_lseek"),
            ll_fallocate: sym!(lib, "ceph_ll_fallocate"),
            ll_getxattr: sym!(lib, "ceph_ll_getxattr"),
            ll_setxattr: sym!(lib, "ceph_ll_setxattr"),
            ll_listxattr: sym!(lib, "ceph_ll_listxattr"),
            ll_removexattr: sym!(lib, "ceph_ll_removexattr"),
        })
    }
}

/// A negated errno from libcephfs, as a positive errno.
pub type Errno = i32;

fn check(r: c_int) -> Result<c_int, Errno> {
    if r < 0 {
        Err(-r)
    } else {
        Ok(r)
    }
}

/// Text for a libcephfs errno (for startup errors).
pub fn strerror(e: Errno) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// Whether libcephfs can be loaded here (for `tarn check-config`).
pub fn available() -> Result<(), String> {
    open_library().map(drop)
}

/// How to reach a CephFS.
pub struct MountOpts<'a> {
    /// Client id without `client.` (None: Ceph's default, `admin`).
    pub id: Option<&'a str>,
    /// ceph.conf (None: CEPH_CONF, /etc/ceph/ceph.conf, ...).
    pub conf: Option<&'a str>,
    pub keyring: Option<&'a str>,
    /// File system name (None: the cluster's default).
    pub fs_name: Option<&'a str>,
    /// Directory within the file system to mount as the root.
    pub root: &'a str,
    /// This client's name for the MDS, the same when the head restarts:
    /// the MDS then drops the old session (and its capabilities) at once
    /// instead of making everyone wait for it to time out.
    pub uuid: Option<&'a str>,
}

/// One mounted CephFS client.
pub struct Mount {
    api: Api,
    cm: *mut Cmount,
    /// Root's credential, made once (the backend's own calls use it).
    root: *mut UserPerm,
    // Last: the function pointers above point into it.
    _lib: Library,
}

// SAFETY: a ceph_mount_info is used from any thread; libcephfs's Client
// takes its own lock around every call, and the pointer is only released
// in Drop, when no borrow remains.
unsafe impl Send for Mount {}
unsafe impl Sync for Mount {}

fn cstring(s: &str, what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} contains a NUL byte"))
}

impl Mount {
    pub fn new(o: &MountOpts<'_>) -> Result<Mount, String> {
        let m = Self::client_handle(o)?;
        m.setup(o)?;
        Ok(m)
    }

    /// A client handle as `o.id`, created but not configured or mounted;
    /// Drop releases it (ceph_unmount of one never mounted only says so).
    fn client_handle(o: &MountOpts<'_>) -> Result<Mount, String> {
        let lib = open_library()?;
        let api = Api::load(&lib)?;
        let id = o.id.map(|s| cstring(s, "ceph client id")).transpose()?;
        let mut cm: *mut Cmount = std::ptr::null_mut();
        // SAFETY: `cm` is an out pointer; `id` is a C string or NULL.
        let r = unsafe {
            (api.create)(
                &mut cm,
                id.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        if r < 0 || cm.is_null() {
            return Err(format!("ceph_create: {}", strerror(-r)));
        }
        // SAFETY: no groups to copy.
        let root = unsafe { (api.userperm_new)(0, 0, 0, std::ptr::null_mut()) };
        assert!(!root.is_null(), "ceph_userperm_new: out of memory");
        Ok(Mount {
            api,
            cm,
            root,
            _lib: lib,
        })
    }

    /// Ends the session another client left under `uuid` (a failed head
    /// of the cluster): a client is made for the request only, never
    /// mounted. Ok(false): there was no such session.
    pub fn reset_session(o: &MountOpts<'_>, uuid: &str) -> Result<bool, String> {
        const CEPH_RECLAIM_RESET: u32 = 1;
        let m = Self::client_handle(o)?;
        m.configure(o)?;
        let u = cstring(uuid, "ceph client uuid")?;
        // SAFETY: created, unmounted handle; reclaim needs it initialised.
        let r = unsafe { (m.api.init)(m.cm) };
        if r < 0 {
            return Err(format!("ceph_init: {}", strerror(-r)));
        }
        // SAFETY: C string; finish_reclaim only after a started reclaim.
        let r = unsafe { (m.api.start_reclaim)(m.cm, u.as_ptr(), CEPH_RECLAIM_RESET) };
        match -r {
            0 => {
                // SAFETY: a reclaim was started on this handle.
                unsafe { (m.api.finish_reclaim)(m.cm) };
                Ok(true)
            }
            libc::ENOENT => Ok(false),
            e => Err(format!("ceph_start_reclaim: {}", strerror(e))),
        }
    }

    fn setup(&self, o: &MountOpts<'_>) -> Result<(), String> {
        self.configure(o)?;
        if let Some(u) = o.uuid {
            self.reclaim(u)?;
        }
        let root = cstring(o.root, "ceph path")?;
        // SAFETY: C string; connects to the monitors and the MDS.
        let r = unsafe { (self.api.mount)(self.cm, root.as_ptr()) };
        if r < 0 {
            return Err(format!("ceph_mount {:?}: {}", o.root, strerror(-r)));
        }
        Ok(())
    }

    /// Reads the configuration and picks the file system, before init.
    fn configure(&self, o: &MountOpts<'_>) -> Result<(), String> {
        let conf = o.conf.map(|s| cstring(s, "ceph_conf")).transpose()?;
        // SAFETY: `self.cm` is a created, unmounted handle; strings are C strings or NULL.
        let r = unsafe {
            (self.api.conf_read_file)(
                self.cm,
                conf.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        if r < 0 {
            return Err(format!(
                "reading the Ceph configuration ({}): {}",
                o.conf.unwrap_or("CEPH_CONF or /etc/ceph/ceph.conf"),
                strerror(-r)
            ));
        }
        // SAFETY: NULL means CEPH_ARGS.
        unsafe { (self.api.conf_parse_env)(self.cm, std::ptr::null()) };
        if let Some(k) = o.keyring {
            self.conf_set("keyring", k)?;
        }
        // By default libcephfs gathers its client's debug lines in memory
        // up to level 5 ("0/5"), and every ll_ call writes some: formatting
        // and flushing them took 40% of the server's CPU per GETATTR and
        // per 4 KiB READ here. Off where the configuration left Ceph's
        // default; any other value set in ceph.conf or CEPH_ARGS is kept.
        for (k, default) in [
            ("debug_client", "0/5"),
            ("debug_objectcacher", "0/5"),
            ("debug_objecter", "0/1"),
        ] {
            if self.conf_get(k).as_deref() == Some(default) {
                self.conf_set(k, "0/0")?;
            }
        }
        // Ceph waits 300 s for an unreachable cluster by default, which
        // would hold `tarn serve` silent that long on a wrong address:
        // 30 s unless the configuration asks for something else.
        if self
            .conf_get("client_mount_timeout")
            .and_then(|v| v.parse::<f64>().ok())
            == Some(300.0)
        {
            self.conf_set("client_mount_timeout", "30")?;
        }
        if let Some(f) = o.fs_name {
            let c = cstring(f, "ceph file system name")?;
            // SAFETY: C string.
            let r = unsafe { (self.api.select_filesystem)(self.cm, c.as_ptr()) };
            if r < 0 {
                return Err(format!("ceph_select_filesystem {f:?}: {}", strerror(-r)));
            }
        }
        Ok(())
    }

    /// Ends the session an earlier client with this uuid left behind (a
    /// head that crashed), then takes the uuid for this one.
    fn reclaim(&self, uuid: &str) -> Result<(), String> {
        const CEPH_RECLAIM_RESET: u32 = 1;
        let u = cstring(uuid, "ceph client uuid")?;
        // SAFETY: created, unmounted handle; reclaim needs it initialised.
        let r = unsafe { (self.api.init)(self.cm) };
        if r < 0 {
            return Err(format!("ceph_init: {}", strerror(-r)));
        }
        // SAFETY: C string; finish_reclaim only after a started reclaim.
        let r = unsafe { (self.api.start_reclaim)(self.cm, u.as_ptr(), CEPH_RECLAIM_RESET) };
        match -r {
            0 => unsafe { (self.api.finish_reclaim)(self.cm) },
            // No earlier session: nothing to end.
            libc::ENOENT => {}
            e => {
                tracing::warn!(error = %strerror(e), "ceph_start_reclaim: an earlier session of this head may hold capabilities until it times out")
            }
        }
        // SAFETY: C string, before mount.
        unsafe { (self.api.set_uuid)(self.cm, u.as_ptr()) };
        Ok(())
    }

    fn conf_set(&self, k: &str, v: &str) -> Result<(), String> {
        let (kc, vc) = (cstring(k, "option")?, cstring(v, k)?);
        // SAFETY: C strings.
        let r = unsafe { (self.api.conf_set)(self.cm, kc.as_ptr(), vc.as_ptr()) };
        if r < 0 {
            return Err(format!("ceph option {k} = {v:?}: {}", strerror(-r)));
        }
        Ok(())
    }

    fn conf_get(&self, k: &str) -> Option<String> {
        let kc = CString::new(k).ok()?;
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` is writable for its length; libcephfs NUL-terminates.
        let r = unsafe {
            (self.api.conf_get)(self.cm, kc.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        };
        if r < 0 {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0)?;
        String::from_utf8(buf[..end].to_vec()).ok()
    }

    /// A credential for the calls that check permissions.
    pub fn perms(&self, uid: u32, gid: u32, gids: &[u32]) -> Perms<'_> {
        let mut g: Vec<u32> = gids.to_vec();
        // SAFETY: libcephfs copies the group list.
        let p = unsafe { (self.api.userperm_new)(uid, gid, g.len() as c_int, g.as_mut_ptr()) };
        assert!(!p.is_null(), "ceph_userperm_new: out of memory");
        Perms {
            m: self,
            p,
            owned: true,
        }
    }

    /// Root's credential (the mount's own, made once).
    pub fn root_perms(&self) -> Perms<'_> {
        Perms {
            m: self,
            p: self.root,
            owned: false,
        }
    }

    /// Whether libcephfs checks POSIX ACLs (`client_acl_type`), so that
    /// mode bits alone do not say who may open a file.
    pub fn acls_enforced(&self) -> bool {
        self.conf_get("client_acl_type")
            .is_some_and(|v| !v.trim().is_empty())
    }

    fn inode(&self, r: c_int, p: *mut Inode) -> Result<InodeRef<'_>, Errno> {
        check(r)?;
        if p.is_null() {
            return Err(libc::EIO);
        }
        Ok(InodeRef { m: self, p })
    }

    pub fn lookup_root(&self) -> Result<InodeRef<'_>, Errno> {
        let mut p = std::ptr::null_mut();
        // SAFETY: out pointer; the reference taken is dropped by InodeRef.
        let r = unsafe { (self.api.ll_lookup_root)(self.cm, &mut p) };
        self.inode(r, p)
    }

    /// The inode numbered `ino` (asked of the MDS if this client has never seen it).
    pub fn lookup_inode(&self, ino: u64) -> Result<InodeRef<'_>, Errno> {
        let mut p = std::ptr::null_mut();
        // SAFETY: as in lookup_root.
        let r = unsafe { (self.api.ll_lookup_inode)(self.cm, InodeNo { val: ino }, &mut p) };
        self.inode(r, p)
    }

    pub fn lookup(
        &self,
        dir: &InodeRef<'_>,
        name: &CStr,
        perms: &Perms<'_>,
    ) -> Result<(InodeRef<'_>, Statx), Errno> {
        let mut p = std::ptr::null_mut();
        let mut st = Statx::default();
        let want = STATX_BASIC_STATS | STATX_BTIME;
        // SAFETY: live inode, C string, out pointers, live perms.
        let r = unsafe {
            (self.api.ll_lookup)(
                self.cm,
                dir.p,
                name.as_ptr(),
                &mut p,
                &mut st,
                want,
                0,
                perms.p,
            )
        };
        Ok((self.inode(r, p)?, st))
    }

    /// Attributes; `cached` answers from the client's cache when it can.
    pub fn getattr(
        &self,
        i: &InodeRef<'_>,
        perms: &Perms<'_>,
        cached: bool,
    ) -> Result<Statx, Errno> {
        self.getattr_of(i.p, perms, cached)
    }

    /// `getattr` of an inode this mount holds a reference to.
    fn getattr_of(&self, i: *mut Inode, perms: &Perms<'_>, cached: bool) -> Result<Statx, Errno> {
        let mut st = Statx::default();
        let flags = if cached { AT_STATX_DONT_SYNC } else { 0 };
        // SAFETY: a referenced inode of this mount, out struct, live perms.
        check(unsafe {
            (self.api.ll_getattr)(
                self.cm,
                i,
                &mut st,
                STATX_BASIC_STATS | STATX_BTIME,
                flags,
                perms.p,
            )
        })?;
        Ok(st)
    }

    pub fn setattr(
        &self,
        i: &InodeRef<'_>,
        st: &Statx,
        mask: c_int,
        perms: &Perms<'_>,
    ) -> Result<(), Errno> {
        let mut st = *st;
        // SAFETY: live inode; libcephfs reads the fields named by `mask`.
        check(unsafe { (self.api.ll_setattr)(self.cm, i.p, &mut st, mask, perms.p) }).map(drop)
    }

    pub fn open(
        &self,
        i: &InodeRef<'_>,
        flags: c_int,
        perms: &Perms<'_>,
    ) -> Result<FileRef<'_>, Errno> {
        let mut fh = std::ptr::null_mut();
        // SAFETY: live inode, out pointer; FileRef closes it.
        check(unsafe { (self.api.ll_open)(self.cm, i.p, flags, &mut fh, perms.p) })?;
        Ok(FileRef { m: self, fh })
    }

    /// Opens a file to keep beyond this call (see [`KeptFile`]), taking
    /// over `i`'s inode reference.
    pub fn keep_open(
        self: &Arc<Self>,
        i: InodeRef<'_>,
        flags: c_int,
        perms: &Perms<'_>,
    ) -> Result<KeptFile, Errno> {
        assert!(std::ptr::eq(i.m, &**self), "inode of another mount");
        let mut fh = std::ptr::null_mut();
        // SAFETY: live inode, out pointer; KeptFile closes it.
        check(unsafe { (self.api.ll_open)(self.cm, i.p, flags, &mut fh, perms.p) })?;
        let ino = i.p;
        // Its reference is the KeptFile's now, put when that drops.
        std::mem::forget(i);
        Ok(KeptFile {
            m: self.clone(),
            ino,
            fh,
        })
    }

    /// Keeps a file opened by [`Mount::create`] (see [`KeptFile`]).
    pub fn keep(self: &Arc<Self>, i: InodeRef<'_>, f: FileRef<'_>) -> KeptFile {
        assert!(
            std::ptr::eq(i.m, &**self) && std::ptr::eq(f.m, &**self),
            "file of another mount"
        );
        let (ino, fh) = (i.p, f.fh);
        // Their reference and handle are the KeptFile's now.
        std::mem::forget(i);
        std::mem::forget(f);
        KeptFile {
            m: self.clone(),
            ino,
            fh,
        }
    }

    fn read_fh(&self, fh: *mut Fh, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let len = buf.len().min(i32::MAX as usize) as u64;
        // SAFETY: an open handle of this mount; `buf` is writable for `len` bytes.
        let n = check(unsafe {
            (self.api.ll_read)(self.cm, fh, off as i64, len, buf.as_mut_ptr().cast())
        })?;
        Ok(n as usize)
    }

    fn write_fh(&self, fh: *mut Fh, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let len = data.len().min(i32::MAX as usize) as u64;
        // SAFETY: an open handle of this mount; `data` is readable for `len` bytes.
        let n = check(unsafe {
            (self.api.ll_write)(self.cm, fh, off as i64, len, data.as_ptr().cast())
        })?;
        Ok(n as usize)
    }

    fn fsync_fh(&self, fh: *mut Fh, data_only: bool) -> Result<(), Errno> {
        // SAFETY: an open handle of this mount.
        check(unsafe { (self.api.ll_fsync)(self.cm, fh, data_only as c_int) }).map(drop)
    }

    pub fn sync_inode(&self, i: &InodeRef<'_>) -> Result<(), Errno> {
        // SAFETY: live inode.
        check(unsafe { (self.api.ll_sync_inode)(self.cm, i.p, 0) }).map(drop)
    }

    /// Creates (or with `oflags` lacking O_EXCL, opens) a regular file.
    pub fn create(
        &self,
        dir: &InodeRef<'_>,
        name: &CStr,
        mode: u32,
        oflags: c_int,
        perms: &Perms<'_>,
    ) -> Result<(InodeRef<'_>, FileRef<'_>, Statx), Errno> {
        let (mut p, mut fh) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut st = Statx::default();
        // SAFETY: live inode, C string, out pointers (both owned on success).
        let r = unsafe {
            (self.api.ll_create)(
                self.cm,
                dir.p,
                name.as_ptr(),
                mode as libc::mode_t,
                oflags,
                &mut p,
                &mut fh,
                &mut st,
                STATX_BASIC_STATS | STATX_BTIME,
                0,
                perms.p,
            )
        };
        let i = self.inode(r, p)?;
        Ok((i, FileRef { m: self, fh }, st))
    }

    pub fn mknod(
        &self,
        dir: &InodeRef<'_>,
        name: &CStr,
        mode: u32,
        rdev: u64,
        perms: &Perms<'_>,
    ) -> Result<(InodeRef<'_>, Statx), Errno> {
        let mut p = std::ptr::null_mut();
        let mut st = Statx::default();
        // SAFETY: as in create.
        let r = unsafe {
            (self.api.ll_mknod)(
                self.cm,
                dir.p,
                name.as_ptr(),
                mode as libc::mode_t,
                rdev as libc::dev_t,
                &mut p,
                &mut st,
                STATX_BASIC_STATS | STATX_BTIME,
                0,
                perms.p,
            )
        };
        Ok((self.inode(r, p)?, st))
    }

    pub fn mkdir(
        &self,
        dir: &InodeRef<'_>,
        name: &CStr,
        mode: u32,
        perms: &Perms<'_>,
    ) -> Result<(InodeRef<'_>, Statx), Errno> {
        let mut p = std::ptr::null_mut();
        let mut st = Statx::default();
        // SAFETY: as in create.
        let r = unsafe {
            (self.api.ll_mkdir)(
                self.cm,
                dir.p,
                name.as_ptr(),
                mode as libc::mode_t,
                &mut p,
                &mut st,
                STATX_BASIC_STATS | STATX_BTIME,
                0,
                perms.p,
            )
        };
        Ok((self.inode(r, p)?, st))
    }

    pub fn symlink(
        &self,
        dir: &InodeRef<'_>,
        name: &CStr,
        target: &CStr,
        perms: &Perms<'_>,
    ) -> Result<(InodeRef<'_>, Statx), Errno> {
        let mut p = std::ptr::null_mut();
        let mut st = Statx::default();
        // SAFETY: as in create.
        let r = unsafe {
            (self.api.ll_symlink)(
                self.cm,
                dir.p,
                name.as_ptr(),
                target.as_ptr(),
                &mut p,
                &mut st,
                STATX_BASIC_STATS | STATX_BTIME,
                0,
                perms.p,
            )
        };
        Ok((self.inode(r, p)?, st))
    }

    pub fn readlink(&self, i: &InodeRef<'_>, perms: &Perms<'_>) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: `buf` is writable for its length.
        let n = check(unsafe {
            (self.api.ll_readlink)(self.cm, i.p, buf.as_mut_ptr().cast(), buf.len(), perms.p)
        })?;
        buf.truncate(n as usize);
        Ok(buf)
    }

    pub fn link(
        &self,
        i: &InodeRef<'_>,
        dir: &InodeRef<'_>,
        name: &CStr,
        perms: &Perms<'_>,
    ) -> Result<(), Errno> {
        // SAFETY: live inodes, C string.
        check(unsafe { (self.api.ll_link)(self.cm, i.p, dir.p, name.as_ptr(), perms.p) }).map(drop)
    }

    pub fn unlink(&self, dir: &InodeRef<'_>, name: &CStr, perms: &Perms<'_>) -> Result<(), Errno> {
        // SAFETY: live inode, C string.
        check(unsafe { (self.api.ll_unlink)(self.cm, dir.p, name.as_ptr(), perms.p) }).map(drop)
    }

    pub fn rmdir(&self, dir: &InodeRef<'_>, name: &CStr, perms: &Perms<'_>) -> Result<(), Errno> {
        // SAFETY: live inode, C string.
        check(unsafe { (self.api.ll_rmdir)(self.cm, dir.p, name.as_ptr(), perms.p) }).map(drop)
    }

    pub fn rename(
        &self,
        from: &InodeRef<'_>,
        from_name: &CStr,
        to: &InodeRef<'_>,
        to_name: &CStr,
        perms: &Perms<'_>,
    ) -> Result<(), Errno> {
        // SAFETY: live inodes, C strings.
        check(unsafe {
            (self.api.ll_rename)(
                self.cm,
                from.p,
                from_name.as_ptr(),
                to.p,
                to_name.as_ptr(),
                perms.p,
            )
        })
        .map(drop)
    }

    pub fn opendir(&self, i: &InodeRef<'_>, perms: &Perms<'_>) -> Result<DirRef<'_>, Errno> {
        let mut d = std::ptr::null_mut();
        // SAFETY: live inode, out pointer; DirRef releases it.
        check(unsafe { (self.api.ll_opendir)(self.cm, i.p, &mut d, perms.p) })?;
        Ok(DirRef { m: self, d })
    }

    /// Positions the listing at an offset an earlier `next_entry` returned (0: start).
    pub fn seekdir(&self, d: &DirRef<'_>, off: u64) {
        // SAFETY: live directory stream.
        unsafe { (self.api.seekdir)(self.cm, d.d, off as i64) }
    }

    /// The next entry (name, inode number) and the offset right after it;
    /// None at the end.
    pub fn next_entry(&self, d: &DirRef<'_>) -> Result<Option<(Vec<u8>, u64, u64)>, Errno> {
        // SAFETY: dirent is plain data; all zero is a valid value.
        let mut de: libc::dirent = unsafe { std::mem::zeroed() };
        // SAFETY: live directory stream, out struct.
        let r = check(unsafe { (self.api.readdir_r)(self.cm, d.d, &mut de) })?;
        if r == 0 {
            return Ok(None);
        }
        Ok(Some(self.entry_at(d, &de)))
    }

    /// Like [`Mount::next_entry`], with the entry's attributes, which the
    /// MDS sends with the listing: one call per entry instead of a
    /// lookup and a getattr each (READDIRPLUS).
    pub fn next_entry_plus(&self, d: &DirRef<'_>) -> Result<Option<(Vec<u8>, Statx, u64)>, Errno> {
        // SAFETY: dirent is plain data; all zero is a valid value.
        let mut de: libc::dirent = unsafe { std::mem::zeroed() };
        let mut st = Statx::default();
        // SAFETY: live directory stream, out structs; a NULL inode out
        // pointer takes no reference.
        let r = check(unsafe {
            (self.api.readdirplus_r)(
                self.cm,
                d.d,
                &mut de,
                &mut st,
                STATX_BASIC_STATS | STATX_BTIME,
                0,
                std::ptr::null_mut(),
            )
        })?;
        if r == 0 {
            return Ok(None);
        }
        let (name, _, next) = self.entry_at(d, &de);
        Ok(Some((name, st, next)))
    }

    /// The name of a filled-in dirent, its inode number, and the stream's
    /// offset after it.
    fn entry_at(&self, d: &DirRef<'_>, de: &libc::dirent) -> (Vec<u8>, u64, u64) {
        // SAFETY: libcephfs NUL-terminates d_name within its 256 bytes.
        let name = unsafe { CStr::from_ptr(de.d_name.as_ptr()) }
            .to_bytes()
            .to_vec();
        // SAFETY: live directory stream.
        let next = unsafe { (self.api.telldir)(self.cm, d.d) };
        (name, de.d_ino, next as u64)
    }

    pub fn statfs(&self, i: &InodeRef<'_>) -> Result<libc::statvfs, Errno> {
        // SAFETY: statvfs is plain data.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: live inode, out struct.
        check(unsafe { (self.api.ll_statfs)(self.cm, i.p, &mut s) })?;
        Ok(s)
    }

    /// lseek(2) on an open file (SEEK_DATA / SEEK_HOLE).
    pub fn lseek(&self, f: &FileRef<'_>, off: u64, whence: c_int) -> Result<u64, Errno> {
        // SAFETY: live file.
        let r = unsafe { (self.api.ll_lseek)(self.cm, f.fh, off as libc::off_t, whence) };
        if r < 0 {
            return Err(-(r as c_int));
        }
        Ok(r as u64)
    }

    /// fallocate(2) on an open file.
    pub fn fallocate(&self, f: &FileRef<'_>, mode: c_int, off: u64, len: u64) -> Result<(), Errno> {
        // SAFETY: live file.
        check(unsafe { (self.api.ll_fallocate)(self.cm, f.fh, mode, off as i64, len as i64) })
            .map(drop)
    }

    /// The value of extended attribute `name` (at most `max` bytes, else ERANGE).
    pub fn getxattr(
        &self,
        i: &InodeRef<'_>,
        name: &CStr,
        max: usize,
        perms: &Perms<'_>,
    ) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; max];
        // SAFETY: `buf` is writable for its length.
        let n = check(unsafe {
            (self.api.ll_getxattr)(
                self.cm,
                i.p,
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                perms.p,
            )
        })?;
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// `flags`: 0, XATTR_CREATE or XATTR_REPLACE.
    pub fn setxattr(
        &self,
        i: &InodeRef<'_>,
        name: &CStr,
        value: &[u8],
        flags: c_int,
        perms: &Perms<'_>,
    ) -> Result<(), Errno> {
        // SAFETY: `value` is readable for its length.
        check(unsafe {
            (self.api.ll_setxattr)(
                self.cm,
                i.p,
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
                perms.p,
            )
        })
        .map(drop)
    }

    /// The NUL-separated names of the inode's extended attributes.
    pub fn listxattr(
        &self,
        i: &InodeRef<'_>,
        max: usize,
        perms: &Perms<'_>,
    ) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; max];
        let mut used = 0usize;
        // SAFETY: `buf` is writable for its length; `used` is an out value.
        check(unsafe {
            (self.api.ll_listxattr)(
                self.cm,
                i.p,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut used,
                perms.p,
            )
        })?;
        buf.truncate(used.min(max));
        Ok(buf)
    }

    pub fn removexattr(
        &self,
        i: &InodeRef<'_>,
        name: &CStr,
        perms: &Perms<'_>,
    ) -> Result<(), Errno> {
        // SAFETY: C string.
        check(unsafe { (self.api.ll_removexattr)(self.cm, i.p, name.as_ptr(), perms.p) }).map(drop)
    }

    /// Opens a file for POSIX locks. The handle outlives any borrow (the
    /// backend keeps it while locks are held through it) and must be given
    /// back to [`Mount::close_lock_fh`] of this mount.
    pub fn open_lock_fh(
        &self,
        i: &InodeRef<'_>,
        flags: c_int,
        perms: &Perms<'_>,
    ) -> Result<LockFh, Errno> {
        let mut fh = std::ptr::null_mut();
        // SAFETY: live inode, out pointer; closed by close_lock_fh.
        check(unsafe { (self.api.ll_open)(self.cm, i.p, flags, &mut fh, perms.p) })?;
        Ok(LockFh { cm: self.cm, fh })
    }

    /// Allows delegations on this mount: one recalled and not given back
    /// within `secs` makes libcephfs unmount the whole mount (so its
    /// holder must give recalled ones back well before). EINVAL: longer
    /// than the cluster lets a client hold capabilities.
    pub fn set_deleg_timeout(&self, secs: u32) -> Result<(), Errno> {
        // SAFETY: mounted handle.
        check(unsafe { (self.api.set_deleg_timeout)(self.cm, secs) }).map(drop)
    }

    /// Takes a read delegation (`ceph_ll_delegation` CEPH_DELEGATION_RD)
    /// through a handle of this mount: until it is given back, a
    /// conflicting open by another client of the file system (another
    /// head) waits, and `recall` is called so the holder gives it back.
    /// `recall` runs on a libcephfs thread that may hold the client lock:
    /// it must not call into libcephfs, only pass the news on. EAGAIN: a
    /// conflicting open exists.
    pub fn delegate(
        &self,
        f: &LockFh,
        recall: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Delegation, Errno> {
        assert_eq!(f.cm, self.cm, "handle of another mount");
        let private = Box::into_raw(Box::new(recall));
        // SAFETY: open handle of this mount; `private` stays valid until
        // the delegation is given back (Delegation keeps it, and frees it
        // only in give_back, after libcephfs has let go of it).
        let r = unsafe {
            (self.api.ll_delegation)(
                self.cm,
                f.fh,
                CEPH_DELEGATION_RD,
                Some(recall_trampoline),
                private.cast(),
            )
        };
        if r < 0 {
            // SAFETY: not handed to libcephfs (refused): still ours alone.
            drop(unsafe { Box::from_raw(private) });
            return Err(-r);
        }
        Ok(Delegation {
            cm: self.cm,
            private,
        })
    }

    /// Gives a delegation back and closes the handle it was taken through.
    pub fn give_back(&self, f: LockFh, d: Delegation) {
        assert_eq!(f.cm, self.cm, "handle of another mount");
        assert_eq!(d.cm, self.cm, "delegation of another mount");
        // SAFETY: open handle of this mount, with the delegation on it.
        // With it gone (and the handle closed, which drops any delegation
        // too) libcephfs holds no pointer to `private` any more.
        unsafe {
            (self.api.ll_delegation)(
                self.cm,
                f.fh,
                CEPH_DELEGATION_NONE,
                None,
                std::ptr::null_mut(),
            );
            (self.api.ll_close)(self.cm, f.fh);
            drop(Box::from_raw(d.private));
        }
    }

    /// Closes a lock handle: libcephfs drops every lock taken through it.
    pub fn close_lock_fh(&self, f: LockFh) {
        assert_eq!(f.cm, self.cm, "lock handle of another mount");
        // SAFETY: opened on this mount by open_lock_fh; `f` is consumed, so
        // it is closed once.
        unsafe { (self.api.ll_close)(self.cm, f.fh) };
    }

    /// `ceph_ll_setlk` without waiting: `l_type` F_RDLCK, F_WRLCK or
    /// F_UNLCK on `[start, start + len)` (`len` 0: to the end) for `owner`.
    /// EAGAIN: another owner (of this or another client) holds a
    /// conflicting lock.
    pub fn setlk(
        &self,
        f: &LockFh,
        l_type: c_int,
        start: u64,
        len: u64,
        owner: u64,
    ) -> Result<(), Errno> {
        assert_eq!(f.cm, self.cm, "lock handle of another mount");
        let mut fl = flock(l_type, start, len);
        // SAFETY: open handle of this mount, initialised flock; sleep 0
        // never blocks on a conflict.
        check(unsafe { (self.api.ll_setlk)(self.cm, f.fh, &mut fl, owner, 0) }).map(drop)
    }

    /// `ceph_ll_getlk`: None if `owner` could take the lock, else one
    /// conflicting lock as (type, start, len; `len` 0 to the end).
    pub fn getlk(
        &self,
        f: &LockFh,
        l_type: c_int,
        start: u64,
        len: u64,
        owner: u64,
    ) -> Result<Option<(c_int, u64, u64)>, Errno> {
        assert_eq!(f.cm, self.cm, "lock handle of another mount");
        let mut fl = flock(l_type, start, len);
        // SAFETY: open handle of this mount; libcephfs writes the answer
        // into `fl`.
        check(unsafe { (self.api.ll_getlk)(self.cm, f.fh, &mut fl, owner) })?;
        if fl.l_type as c_int == libc::F_UNLCK {
            return Ok(None);
        }
        Ok(Some((
            fl.l_type as c_int,
            fl.l_start.max(0) as u64,
            fl.l_len.max(0) as u64,
        )))
    }

    pub fn sync_fs(&self) -> Result<(), Errno> {
        // SAFETY: mounted handle.
        check(unsafe { (self.api.sync_fs)(self.cm) }).map(drop)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // SAFETY: no borrow of the mount remains (every ref type borrows it);
        // unmount flushes, release frees the handle.
        unsafe {
            (self.api.unmount)(self.cm);
            (self.api.release)(self.cm);
            (self.api.userperm_destroy)(self.root);
        }
    }
}

/// A caller's credential (ceph UserPerm).
pub struct Perms<'m> {
    m: &'m Mount,
    p: *mut UserPerm,
    /// Made for this value (else the mount's, which it destroys).
    owned: bool,
}

impl Drop for Perms<'_> {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: made by ceph_userperm_new, destroyed once.
            unsafe { (self.m.api.userperm_destroy)(self.p) }
        }
    }
}

/// One reference to a libcephfs inode.
pub struct InodeRef<'m> {
    m: &'m Mount,
    p: *mut Inode,
}

impl Drop for InodeRef<'_> {
    fn drop(&mut self) {
        // SAFETY: this value holds exactly one reference.
        unsafe { (self.m.api.ll_put)(self.m.cm, self.p) };
    }
}

/// An open file (ceph Fh).
pub struct FileRef<'m> {
    m: &'m Mount,
    fh: *mut Fh,
}

impl Drop for FileRef<'_> {
    fn drop(&mut self) {
        if !self.fh.is_null() {
            // SAFETY: opened by ll_open/ll_create, closed once.
            unsafe { (self.m.api.ll_close)(self.m.cm, self.fh) };
        }
    }
}

/// A file kept open beyond one call (the backend's open-file cache): an
/// inode reference, a handle on it, and the mount both belong to, which
/// they keep alive. Dropping it closes the handle and puts the reference.
pub struct KeptFile {
    m: Arc<Mount>,
    ino: *mut Inode,
    fh: *mut Fh,
}

// SAFETY: as LockFh: used from any thread, under libcephfs's client lock,
// only through the mount that made it (which it keeps alive).
unsafe impl Send for KeptFile {}
unsafe impl Sync for KeptFile {}

impl KeptFile {
    pub fn getattr(&self, perms: &Perms<'_>) -> Result<Statx, Errno> {
        assert!(std::ptr::eq(perms.m, &*self.m), "perms of another mount");
        self.m.getattr_of(self.ino, perms, false)
    }

    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        self.m.read_fh(self.fh, off, buf)
    }

    pub fn write(&self, off: u64, data: &[u8]) -> Result<usize, Errno> {
        self.m.write_fh(self.fh, off, data)
    }

    pub fn fsync(&self, data_only: bool) -> Result<(), Errno> {
        self.m.fsync_fh(self.fh, data_only)
    }
}

impl Drop for KeptFile {
    fn drop(&mut self) {
        // SAFETY: opened by keep_open and closed once; the reference taken
        // over there is put once.
        unsafe {
            (self.m.api.ll_close)(self.m.cm, self.fh);
            (self.m.api.ll_put)(self.m.cm, self.ino);
        }
    }
}

fn flock(l_type: c_int, start: u64, len: u64) -> libc::flock {
    // SAFETY: flock is plain integers; all zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = l_type as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start.min(i64::MAX as u64) as libc::off_t;
    fl.l_len = len.min(i64::MAX as u64) as libc::off_t;
    fl
}

/// An open file kept for POSIX locks (ceph Fh), not tied to a borrow of
/// its mount: the owner closes it with [`Mount::close_lock_fh`] (a handle
/// never closed stays open until the mount is released, which drops its
/// locks too).
pub struct LockFh {
    cm: *mut Cmount,
    fh: *mut Fh,
}

// SAFETY: a Fh is used from any thread under libcephfs's client lock; the
// pointers are only dereferenced by libcephfs, through the mount that made
// them (checked on every use).
unsafe impl Send for LockFh {}
unsafe impl Sync for LockFh {}

const CEPH_DELEGATION_NONE: c_uint = 0;
const CEPH_DELEGATION_RD: c_uint = 1;

/// A delegation taken with [`Mount::delegate`]; given back with
/// [`Mount::give_back`] (one never given back lasts until the mount is
/// released, and its callback's closure is leaked).
pub struct Delegation {
    cm: *mut Cmount,
    private: *mut Arc<dyn Fn() + Send + Sync>,
}

// SAFETY: `private` is a Box's pointer to a Send + Sync closure, read only
// by the trampoline and freed once, by give_back; `cm` is only compared.
unsafe impl Send for Delegation {}
unsafe impl Sync for Delegation {}

/// libcephfs's recall callback: calls the closure [`Mount::delegate`] was
/// given. A panic must not unwind into C.
unsafe extern "C" fn recall_trampoline(_fh: *mut Fh, private: *mut c_void) {
    // SAFETY: `private` is the pointer delegate() passed, live until
    // give_back, which runs only after libcephfs has let go of it.
    let recall = unsafe { &*(private as *const Arc<dyn Fn() + Send + Sync>) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| recall()));
}

/// An open directory stream.
pub struct DirRef<'m> {
    m: &'m Mount,
    d: *mut DirResult,
}

impl Drop for DirRef<'_> {
    fn drop(&mut self) {
        // SAFETY: opened by ll_opendir, released once.
        unsafe { (self.m.api.ll_releasedir)(self.m.cm, self.d) };
    }
}
