//! [`MemFs`]: an in-memory tree implementing [`Backend`](crate::Backend),
//! for unit tests of the server.
//!
//! - Fids are 12 bytes: inode number (8, big endian) and a generation (4).
//!   Inode numbers are not reused, and every object gets a fresh generation,
//!   so a fid of a removed object gives [`FsError::Stale`]; any other length
//!   gives [`FsError::BadHandle`].
//! - Permissions: plain owner/group/other mode bits only (uid 0 bypasses them
//!   except execute, which needs some x bit). No ACLs, no sticky-directory
//!   rule, no setgid inheritance. chown needs uid 0 (an owner may change the
//!   group to one of their own groups).
//! - Readdir cookies: `1` after `.`, `2` after `..`, then each entry's
//!   insertion sequence number (≥ 3), so cookies stay valid while the
//!   directory changes and a page resumes with a range query.
//! - Nothing is persisted; `commit`/`sync_all` do nothing and every write is
//!   reported `FileSync`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::backend::verifier_times;
use crate::mode::{may, R, W, X};
use crate::{
    check_name, check_new_name, check_rename_names, Access, Attr, ChangeNotify, Core, CreateHow,
    Cred, DirEnd, DirItem, DirSink, Fid, FileType, FsError, FsStat, SeekWhat, SetAttr, SetTime,
    Stable, Timespec, XattrSet,
};

const ROOT_INO: u64 = 1;
const FSID: u64 = 0x4d45_4d46; // "MEMF"
/// Largest file [`MemFs::new`] accepts, to keep a buggy test from eating all memory.
const MAX_FILE: u64 = 1 << 32;

/// An in-memory filesystem. See the module docs.
pub struct MemFs {
    state: Mutex<State>,
}

struct State {
    /// Largest file size; past it writes and size changes are FBig.
    max_file: u64,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    next_gen: u32,
}

struct Inode {
    gen: u32,
    attr: Attr,
    data: Data,
    /// User extended attributes, by name without the `user.` prefix.
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

enum Data {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(Vec<u8>),
    Special,
}

struct Dir {
    parent: u64,
    by_seq: BTreeMap<u64, (Vec<u8>, u64)>,
    by_name: HashMap<Vec<u8>, u64>,
    next_seq: u64,
}

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir {
            parent,
            by_seq: BTreeMap::new(),
            by_name: HashMap::new(),
            next_seq: 3,
        }
    }
    fn get(&self, name: &[u8]) -> Option<u64> {
        self.by_name.get(name).map(|s| self.by_seq[s].1)
    }
    fn insert(&mut self, name: &[u8], ino: u64) {
        let s = self.next_seq;
        self.next_seq += 1;
        self.by_seq.insert(s, (name.to_vec(), ino));
        self.by_name.insert(name.to_vec(), s);
    }
    fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let s = self.by_name.remove(name)?;
        self.by_seq.remove(&s).map(|(_, ino)| ino)
    }
}

fn now() -> Timespec {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Timespec {
        secs: d.as_secs() as i64,
        nsecs: d.subsec_nanos(),
    }
}

fn is_owner(cred: &Cred, a: &Attr) -> bool {
    cred.uid == 0 || cred.uid == a.uid
}

impl Default for MemFs {
    fn default() -> Self {
        Self::new()
    }
}

impl MemFs {
    /// An empty filesystem whose root is a 0777 directory owned by root.
    pub fn new() -> MemFs {
        Self::with_max_file(MAX_FILE)
    }

    /// A MemFs whose files may grow to `max` bytes only (a fuzzer's memory
    /// is counted per input: a WRITE at a large offset must fail FBIG, not
    /// allocate the gigabytes below it).
    pub fn with_max_file(max: u64) -> MemFs {
        let mut st = State {
            max_file: max,
            inodes: HashMap::new(),
            next_ino: ROOT_INO,
            next_gen: 1,
        };
        st.alloc(
            FileType::Directory,
            0o777,
            &Cred::root(),
            Data::Dir(Dir::new(ROOT_INO)),
        );
        MemFs {
            state: Mutex::new(st),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> Result<T, FsError>) -> Result<T, FsError> {
        f(&mut self.state.lock().unwrap())
    }
}

fn fid_of(ino: u64, gen: u32) -> Fid {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&ino.to_be_bytes());
    b[8..].copy_from_slice(&gen.to_be_bytes());
    Fid::new(&b).unwrap()
}

impl State {
    fn alloc(&mut self, ftype: FileType, mode: u32, cred: &Cred, data: Data) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1);
        let t = now();
        let size = match &data {
            Data::Symlink(t) => t.len() as u64,
            _ => 0,
        };
        let attr = Attr {
            ftype,
            mode: mode & 0o7777,
            nlink: if ftype == FileType::Directory { 2 } else { 1 },
            uid: cred.uid,
            gid: cred.gid,
            size,
            used: size,
            rdev: (0, 0),
            fsid: FSID,
            fileid: ino,
            atime: t,
            mtime: t,
            ctime: t,
        };
        self.inodes.insert(
            ino,
            Inode {
                gen,
                attr,
                data,
                xattrs: BTreeMap::new(),
            },
        );
        ino
    }

    fn resolve(&self, fid: &Fid) -> Result<u64, FsError> {
        let b = fid.as_bytes();
        if b.len() != 12 {
            return Err(FsError::BadHandle);
        }
        let ino = u64::from_be_bytes(b[..8].try_into().unwrap());
        let gen = u32::from_be_bytes(b[8..].try_into().unwrap());
        match self.inodes.get(&ino) {
            Some(i) if i.gen == gen => Ok(ino),
            _ => Err(FsError::Stale),
        }
    }

    fn node(&self, ino: u64) -> &Inode {
        &self.inodes[&ino]
    }

    fn node_mut(&mut self, ino: u64) -> &mut Inode {
        self.inodes.get_mut(&ino).unwrap()
    }

    fn fid(&self, ino: u64) -> Fid {
        fid_of(ino, self.node(ino).gen)
    }

    fn dir(&self, ino: u64) -> Result<&Dir, FsError> {
        match &self.node(ino).data {
            Data::Dir(d) => Ok(d),
            _ => Err(FsError::NotDir),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir, FsError> {
        match &mut self.node_mut(ino).data {
            Data::Dir(d) => Ok(d),
            _ => Err(FsError::NotDir),
        }
    }

    /// Resolves a directory fid the caller may modify (w+x).
    fn writable_dir(&self, cred: &Cred, fid: &Fid) -> Result<u64, FsError> {
        let d = self.resolve(fid)?;
        self.dir(d)?;
        if !may(cred, &self.node(d).attr, W | X) {
            return Err(FsError::Acces);
        }
        Ok(d)
    }

    fn touch_dir(&mut self, d: u64) {
        let t = now();
        let a = &mut self.node_mut(d).attr;
        a.mtime = t;
        a.ctime = t;
    }

    fn new_entry(
        &mut self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        ftype: FileType,
        mode: u32,
        data: Data,
    ) -> Result<u64, FsError> {
        check_new_name(name)?;
        let d = self.writable_dir(cred, dir)?;
        if self.dir(d)?.get(name).is_some() {
            return Err(FsError::Exist);
        }
        let is_dir = matches!(data, Data::Dir(_));
        let ino = self.alloc(ftype, mode, cred, data);
        self.dir_mut(d)?.insert(name, ino);
        if is_dir {
            self.node_mut(d).attr.nlink += 1;
        }
        self.touch_dir(d);
        Ok(ino)
    }

    /// After creating `ino` with its mode: applies the rest of the client's
    /// attributes (owner, times; a new object has no size to set) and returns
    /// its fid and attributes.
    fn finish_new(&mut self, cred: &Cred, ino: u64, set: &SetAttr) -> Result<(Fid, Attr), FsError> {
        self.setattr(
            cred,
            ino,
            &SetAttr {
                mode: None,
                size: None,
                ..set.clone()
            },
        )?;
        Ok((self.fid(ino), self.node(ino).attr.clone()))
    }

    fn setattr(&mut self, cred: &Cred, ino: u64, set: &SetAttr) -> Result<(), FsError> {
        let a = self.node(ino).attr.clone();
        if set.uid.is_some_and(|u| u != a.uid) && cred.uid != 0 {
            return Err(FsError::Perm);
        }
        if let Some(g) = set.gid.filter(|&g| g != a.gid) {
            if !(cred.uid == 0 || (cred.uid == a.uid && cred.in_group(g))) {
                return Err(FsError::Perm);
            }
        }
        if set.mode.is_some() && !is_owner(cred, &a) {
            return Err(FsError::Perm);
        }
        if let Some(size) = set.size {
            match a.ftype {
                FileType::Regular => {}
                FileType::Directory => return Err(FsError::IsDir),
                _ => return Err(FsError::Inval),
            }
            if !(is_owner(cred, &a) || may(cred, &a, W)) {
                return Err(FsError::Acces);
            }
            if size > self.max_file {
                return Err(FsError::FBig);
            }
        }
        for t in [set.atime, set.mtime] {
            match t {
                SetTime::DontChange => {}
                SetTime::ServerTime if is_owner(cred, &a) || may(cred, &a, W) => {}
                SetTime::ServerTime => return Err(FsError::Acces),
                SetTime::ClientTime(_) if is_owner(cred, &a) => {}
                SetTime::ClientTime(_) => return Err(FsError::Perm),
            }
        }
        let t = now();
        let node = self.node_mut(ino);
        let changed = *set != SetAttr::default();
        if let Some(u) = set.uid {
            node.attr.uid = u;
        }
        if let Some(g) = set.gid {
            node.attr.gid = g;
        }
        if let Some(m) = set.mode {
            node.attr.mode = m & 0o7777;
        }
        if let Some(size) = set.size {
            if let Data::File(v) = &mut node.data {
                v.resize(size as usize, 0);
                node.attr.size = size;
                node.attr.used = size;
                node.attr.mtime = t;
            }
        }
        match set.atime {
            SetTime::DontChange => {}
            SetTime::ServerTime => node.attr.atime = t,
            SetTime::ClientTime(c) => node.attr.atime = c,
        }
        match set.mtime {
            SetTime::DontChange => {}
            SetTime::ServerTime => node.attr.mtime = t,
            SetTime::ClientTime(c) => node.attr.mtime = c,
        }
        if changed {
            node.attr.ctime = t;
        }
        Ok(())
    }

    /// Drops one link of `ino`, freeing it at zero.
    fn unlink_ino(&mut self, ino: u64) {
        let a = &mut self.node_mut(ino).attr;
        a.nlink = a.nlink.saturating_sub(1);
        a.ctime = now();
        if a.nlink == 0 || a.ftype == FileType::Directory {
            self.inodes.remove(&ino);
        }
    }

    fn is_ancestor(&self, anc: u64, mut ino: u64) -> bool {
        loop {
            if ino == anc {
                return true;
            }
            match &self.node(ino).data {
                Data::Dir(d) if d.parent != ino => ino = d.parent,
                _ => return false,
            }
        }
    }
}

impl Core for MemFs {
    fn root(&self) -> Fid {
        self.with(|s| Ok(s.fid(ROOT_INO))).unwrap()
    }

    fn getattr(&self, fid: &Fid) -> Result<Attr, FsError> {
        self.with(|s| Ok(s.node(s.resolve(fid)?).attr.clone()))
    }

    fn supports_nowait(&self) -> bool {
        // Everything is in memory: nothing ever waits.
        true
    }

    fn setattr(&self, cred: &Cred, fid: &Fid, set: &SetAttr) -> Result<Attr, FsError> {
        self.with(|s| {
            let ino = s.resolve(fid)?;
            s.setattr(cred, ino, set)?;
            Ok(s.node(ino).attr.clone())
        })
    }

    fn lookup(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(Fid, Attr), FsError> {
        check_name(name)?;
        self.with(|s| {
            let d = s.resolve(dir)?;
            let dd = s.dir(d)?;
            if !may(cred, &s.node(d).attr, X) {
                return Err(FsError::Acces);
            }
            let ino = match name {
                b"." => d,
                b".." => dd.parent,
                _ => dd.get(name).ok_or(FsError::NoEnt)?,
            };
            Ok((s.fid(ino), s.node(ino).attr.clone()))
        })
    }

    fn access(&self, cred: &Cred, fid: &Fid, want: Access) -> Result<Access, FsError> {
        self.with(|s| {
            let a = &s.node(s.resolve(fid)?).attr;
            Ok(crate::mode::access(cred, a, want))
        })
    }

    fn readlink(&self, _cred: &Cred, fid: &Fid) -> Result<Vec<u8>, FsError> {
        self.with(|s| match &s.node(s.resolve(fid)?).data {
            Data::Symlink(t) => Ok(t.clone()),
            _ => Err(FsError::Inval),
        })
    }

    fn read(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, bool), FsError> {
        self.with(|s| {
            let v = file_data_to_read(cred, s.node(s.resolve(fid)?))?;
            let len = v.len() as u64;
            if offset >= len {
                return Ok((0, true));
            }
            let k = buf.len().min((len - offset) as usize);
            buf[..k].copy_from_slice(&v[offset as usize..offset as usize + k]);
            Ok((k, offset + k as u64 >= len))
        })
    }

    fn write(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        data: &[u8],
        _stable: Stable,
    ) -> Result<(usize, Stable), FsError> {
        self.with(|s| {
            let max = s.max_file;
            let ino = s.resolve(fid)?;
            let n = s.node_mut(ino);
            if !(is_owner(cred, &n.attr) || may(cred, &n.attr, W)) {
                return Err(FsError::Acces);
            }
            let end = offset
                .checked_add(data.len() as u64)
                .filter(|&e| e <= max)
                .ok_or(FsError::FBig)?;
            let Data::File(v) = &mut n.data else {
                return Err(if n.attr.ftype == FileType::Directory {
                    FsError::IsDir
                } else {
                    FsError::Inval
                });
            };
            if v.len() < end as usize {
                v.resize(end as usize, 0);
            }
            v[offset as usize..end as usize].copy_from_slice(data);
            let t = now();
            n.attr.size = v.len() as u64;
            n.attr.used = n.attr.size;
            n.attr.mtime = t;
            n.attr.ctime = t;
            if cred.uid != 0 {
                n.attr.mode &= !0o6000; // writes by non-root clear suid/sgid
            }
            Ok((data.len(), Stable::FileSync))
        })
    }

    fn commit(&self, fid: &Fid) -> Result<(), FsError> {
        self.with(|s| s.resolve(fid).map(drop))
    }

    fn create(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        how: &CreateHow,
    ) -> Result<(Fid, Attr), FsError> {
        self.with(|s| {
            check_new_name(name)?;
            let d = s.resolve(dir)?;
            if let Some(ino) = s.dir(d)?.get(name) {
                if !may(cred, &s.node(d).attr, X) {
                    return Err(FsError::Acces);
                }
                if let Some(size) = how.on_existing(&s.node(ino).attr)? {
                    let only = SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    };
                    s.setattr(cred, ino, &only)?;
                }
                return Ok((s.fid(ino), s.node(ino).attr.clone()));
            }
            let (mode, set) = how.for_new_file();
            let ino = s.new_entry(
                cred,
                dir,
                name,
                FileType::Regular,
                mode,
                Data::File(Vec::new()),
            )?;
            // The creator owns the file, so uid/gid/size/times apply as owner.
            let set = SetAttr { mode: None, ..set };
            s.setattr(cred, ino, &set)?;
            if let CreateHow::Exclusive(v) = how {
                let (m, a) = verifier_times(v);
                let attr = &mut s.node_mut(ino).attr;
                attr.mtime = m;
                attr.atime = a;
            }
            Ok((s.fid(ino), s.node(ino).attr.clone()))
        })
    }

    fn mkdir(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        self.with(|s| {
            let d = s.resolve(dir)?;
            let mode = set.mode.unwrap_or(0o755);
            let ino = s.new_entry(
                cred,
                dir,
                name,
                FileType::Directory,
                mode,
                Data::Dir(Dir::new(d)),
            )?;
            s.finish_new(cred, ino, set)
        })
    }

    fn symlink(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        if target.is_empty() {
            return Err(FsError::NoEnt);
        }
        if target.contains(&0) {
            return Err(FsError::Inval);
        }
        self.with(|s| {
            let ino = s.new_entry(
                cred,
                dir,
                name,
                FileType::Symlink,
                0o777,
                Data::Symlink(target.to_vec()),
            )?;
            s.finish_new(cred, ino, set)
        })
    }

    fn mknod(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        ftype: FileType,
        rdev: (u32, u32),
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        let rdev = match ftype {
            FileType::Fifo | FileType::Socket => (0, 0),
            FileType::CharDev | FileType::BlockDev if cred.uid == 0 => rdev,
            FileType::CharDev | FileType::BlockDev => return Err(FsError::Perm),
            _ => return Err(FsError::BadType),
        };
        self.with(|s| {
            let mode = set.mode.unwrap_or(0o644);
            let ino = s.new_entry(cred, dir, name, ftype, mode, Data::Special)?;
            s.node_mut(ino).attr.rdev = rdev;
            s.finish_new(cred, ino, set)
        })
    }

    fn remove(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        check_name(name)?;
        if name == b"." || name == b".." {
            return Err(FsError::Inval);
        }
        self.with(|s| {
            let d = s.writable_dir(cred, dir)?;
            let ino = s.dir(d)?.get(name).ok_or(FsError::NoEnt)?;
            if s.node(ino).attr.ftype == FileType::Directory {
                return Err(FsError::IsDir);
            }
            s.dir_mut(d)?.remove(name);
            s.unlink_ino(ino);
            s.touch_dir(d);
            Ok(())
        })
    }

    fn rmdir(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        check_name(name)?;
        match name {
            b"." => return Err(FsError::Inval),
            b".." => return Err(FsError::NotEmpty),
            _ => {}
        }
        self.with(|s| {
            let d = s.writable_dir(cred, dir)?;
            let ino = s.dir(d)?.get(name).ok_or(FsError::NoEnt)?;
            if !s.dir(ino)?.by_seq.is_empty() {
                return Err(FsError::NotEmpty);
            }
            s.dir_mut(d)?.remove(name);
            s.unlink_ino(ino);
            s.node_mut(d).attr.nlink -= 1;
            s.touch_dir(d);
            Ok(())
        })
    }

    fn rename(
        &self,
        cred: &Cred,
        from_dir: &Fid,
        from_name: &[u8],
        to_dir: &Fid,
        to_name: &[u8],
    ) -> Result<(), FsError> {
        check_rename_names(from_name, to_name)?;
        self.with(|s| {
            let fd = s.writable_dir(cred, from_dir)?;
            let td = s.writable_dir(cred, to_dir)?;
            let src = s.dir(fd)?.get(from_name).ok_or(FsError::NoEnt)?;
            let src_is_dir = s.node(src).attr.ftype == FileType::Directory;
            if src_is_dir && s.is_ancestor(src, td) {
                return Err(FsError::Inval);
            }
            if let Some(dst) = s.dir(td)?.get(to_name) {
                if dst == src {
                    return Ok(());
                }
                let dst_is_dir = s.node(dst).attr.ftype == FileType::Directory;
                match (src_is_dir, dst_is_dir) {
                    (true, false) => return Err(FsError::NotDir),
                    (false, true) => return Err(FsError::IsDir),
                    (true, true) if !s.dir(dst)?.by_seq.is_empty() => {
                        return Err(FsError::NotEmpty)
                    }
                    _ => {}
                }
                s.dir_mut(td)?.remove(to_name);
                s.unlink_ino(dst);
                if dst_is_dir {
                    s.node_mut(td).attr.nlink -= 1;
                }
            }
            s.dir_mut(fd)?.remove(from_name);
            s.dir_mut(td)?.insert(to_name, src);
            if src_is_dir {
                s.dir_mut(src)?.parent = td;
                s.node_mut(fd).attr.nlink -= 1;
                s.node_mut(td).attr.nlink += 1;
            }
            s.node_mut(src).attr.ctime = now();
            s.touch_dir(fd);
            s.touch_dir(td);
            Ok(())
        })
    }

    fn link(&self, cred: &Cred, fid: &Fid, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        check_new_name(name)?;
        self.with(|s| {
            let ino = s.resolve(fid)?;
            if s.node(ino).attr.ftype == FileType::Directory {
                return Err(FsError::IsDir);
            }
            let d = s.writable_dir(cred, dir)?;
            if s.dir(d)?.get(name).is_some() {
                return Err(FsError::Exist);
            }
            s.dir_mut(d)?.insert(name, ino);
            let a = &mut s.node_mut(ino).attr;
            a.nlink += 1;
            a.ctime = now();
            s.touch_dir(d);
            Ok(())
        })
    }

    fn readdir_into(
        &self,
        cred: &Cred,
        dir: &Fid,
        cookie: u64,
        _verifier: [u8; 8],
        plus: bool,
        sink: &mut dyn DirSink,
    ) -> Result<DirEnd, FsError> {
        self.with(|s| {
            let d = s.resolve(dir)?;
            let dd = s.dir(d)?;
            if !may(cred, &s.node(d).attr, R) {
                return Err(FsError::Acces);
            }
            let may_lookup = may(cred, &s.node(d).attr, X);
            let dots = [(&b"."[..], d, 1u64), (&b".."[..], dd.parent, 2u64)];
            let it = dots.into_iter().filter(|&(_, _, c)| c > cookie).chain(
                dd.by_seq
                    .range(cookie.max(2) + 1..)
                    .map(|(&c, (n, ino))| (n.as_slice(), *ino, c)),
            );
            for (name, ino, c) in it {
                // The sink is asked before the entry's attributes are made.
                let taken = sink.room_for(name)
                    && sink.push(DirItem {
                        name,
                        fileid: ino,
                        cookie: c,
                        plus: (plus && may_lookup).then(|| (s.fid(ino), s.node(ino).attr.clone())),
                    });
                if !taken {
                    return Ok(DirEnd {
                        eof: false,
                        verifier: [0; 8],
                    });
                }
            }
            Ok(DirEnd {
                eof: true,
                verifier: [0; 8],
            })
        })
    }

    fn fsstat(&self, fid: &Fid) -> Result<FsStat, FsError> {
        self.with(|s| {
            s.resolve(fid)?;
            let used: u64 = s.inodes.values().map(|i| i.attr.size).sum();
            let total = 1u64 << 40;
            let files = 1u64 << 32;
            let n = s.inodes.len() as u64;
            Ok(FsStat {
                total_bytes: total,
                free_bytes: total.saturating_sub(used),
                avail_bytes: total.saturating_sub(used),
                total_files: files,
                free_files: files - n,
                avail_files: files - n,
            })
        })
    }

    fn sync_all(&self) -> Result<(), FsError> {
        Ok(())
    }
}

impl crate::SharedLocks for MemFs {}

impl crate::SharedDelegations for MemFs {}

impl crate::Space for MemFs {
    fn seek(&self, cred: &Cred, fid: &Fid, offset: u64, what: SeekWhat) -> Result<u64, FsError> {
        self.with(|s| {
            let v = file_data_to_read(cred, s.node(s.resolve(fid)?))?;
            let len = v.len() as u64;
            if offset >= len {
                return Err(FsError::NxIo);
            }
            let want_hole = what == SeekWhat::Hole;
            let first = offset / HOLE_BLOCK;
            for b in first..len.div_ceil(HOLE_BLOCK) {
                let start = b * HOLE_BLOCK;
                let block = &v[start as usize..(start + HOLE_BLOCK).min(len) as usize];
                if block.iter().all(|&x| x == 0) == want_hole {
                    return Ok(start.max(offset));
                }
            }
            // No hole before the end: the implicit one at the end.
            if want_hole {
                Ok(len)
            } else {
                Err(FsError::NxIo)
            }
        })
    }

    fn allocate(&self, cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError> {
        self.with(|s| {
            let max = s.max_file;
            let n = s.node_mut(s.resolve(fid)?);
            let end = range_end(offset, len, max)?;
            let v = file_data_to_change(cred, n)?;
            if (v.len() as u64) < end {
                v.resize(end as usize, 0);
                changed(cred, n);
            }
            Ok(())
        })
    }

    fn deallocate(&self, cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError> {
        self.with(|s| {
            let max = s.max_file;
            let n = s.node_mut(s.resolve(fid)?);
            let end = range_end(offset, len, max)?;
            let v = file_data_to_change(cred, n)?;
            let size = v.len() as u64;
            if offset < size {
                v[offset as usize..end.min(size) as usize].fill(0);
            }
            changed(cred, n);
            Ok(())
        })
    }

    /// Copies the bytes. CLONE stays `NotSupp` (the default): nothing here
    /// shares storage, and a clone that copies would claim what it is not.
    fn copy_range(
        &self,
        cred: &Cred,
        src: &Fid,
        src_off: u64,
        dst: &Fid,
        dst_off: u64,
        len: u64,
    ) -> Result<u64, FsError> {
        self.with(|s| {
            let (si, di) = (s.resolve(src)?, s.resolve(dst)?);
            let v = file_data_to_read(cred, s.node(si))?;
            if si == di && crate::backend::ranges_overlap(src_off, dst_off, len) {
                return Err(FsError::Inval);
            }
            let size = v.len() as u64;
            let k = len.min(size.saturating_sub(src_off));
            let bytes = v[src_off.min(size) as usize..(src_off.min(size) + k) as usize].to_vec();
            let max = s.max_file;
            let n = s.node_mut(di);
            let end = dst_off
                .checked_add(k)
                .filter(|&e| e <= max)
                .ok_or(FsError::FBig)?;
            let v = file_data_to_change(cred, n)?;
            if k == 0 {
                return Ok(0);
            }
            if (v.len() as u64) < end {
                v.resize(end as usize, 0);
            }
            v[dst_off as usize..end as usize].copy_from_slice(&bytes);
            changed(cred, n);
            Ok(k)
        })
    }
}

impl crate::Xattrs for MemFs {
    fn xattr_support(&self) -> bool {
        true
    }

    fn getxattr(&self, cred: &Cred, fid: &Fid, name: &[u8]) -> Result<Vec<u8>, FsError> {
        crate::user_xattr_name(name)?;
        self.with(|s| {
            let n = s.node(s.resolve(fid)?);
            if !may(cred, &n.attr, R) {
                return Err(FsError::Acces);
            }
            n.xattrs.get(name).cloned().ok_or(FsError::NoXattr)
        })
    }

    fn setxattr(
        &self,
        cred: &Cred,
        fid: &Fid,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), FsError> {
        crate::user_xattr_name(name)?;
        crate::backend::check_xattr_value(value)?;
        self.with(|s| {
            let n = xattr_node_to_change(cred, s.node_mut(s.resolve(fid)?))?;
            match (how, n.xattrs.contains_key(name)) {
                (XattrSet::Create, true) => return Err(FsError::Exist),
                (XattrSet::Replace, false) => return Err(FsError::NoXattr),
                _ => {}
            }
            n.xattrs.insert(name.to_vec(), value.to_vec());
            n.attr.ctime = now();
            Ok(())
        })
    }

    fn listxattrs(&self, cred: &Cred, fid: &Fid) -> Result<Vec<Vec<u8>>, FsError> {
        self.with(|s| {
            let n = s.node(s.resolve(fid)?);
            if !may(cred, &n.attr, R) {
                return Err(FsError::Acces);
            }
            Ok(n.xattrs.keys().cloned().collect())
        })
    }

    fn removexattr(&self, cred: &Cred, fid: &Fid, name: &[u8]) -> Result<(), FsError> {
        crate::user_xattr_name(name)?;
        self.with(|s| {
            let n = xattr_node_to_change(cred, s.node_mut(s.resolve(fid)?))?;
            n.xattrs.remove(name).ok_or(FsError::NoXattr)?;
            n.attr.ctime = now();
            Ok(())
        })
    }
}

impl ChangeNotify for MemFs {}

/// An inode whose user xattrs `cred` may change: as Linux, only regular
/// files and directories carry them (EPERM), and changing them needs write
/// permission.
fn xattr_node_to_change<'a>(cred: &Cred, n: &'a mut Inode) -> Result<&'a mut Inode, FsError> {
    if !matches!(n.attr.ftype, FileType::Regular | FileType::Directory) {
        return Err(FsError::Perm);
    }
    if !may(cred, &n.attr, W) {
        return Err(FsError::Acces);
    }
    Ok(n)
}

/// SEEK's holes: an aligned block of this size (or the last, shorter one)
/// whose bytes are all zero is a hole. Nothing else is kept: space is not
/// modelled, so ALLOCATE only extends the size (the new bytes are zeros and
/// so holes, as unwritten extents are on ext4 and XFS) and DEALLOCATE writes
/// zeros.
const HOLE_BLOCK: u64 = 4096;

/// A regular file's bytes, for reading: the owner, or a caller who may
/// read or execute it (as knfsd lets an executable's pages be read).
fn file_data_to_read<'a>(cred: &Cred, n: &'a Inode) -> Result<&'a Vec<u8>, FsError> {
    let Data::File(v) = &n.data else {
        return Err(if n.attr.ftype == FileType::Directory {
            FsError::IsDir
        } else {
            FsError::Inval
        });
    };
    if !(is_owner(cred, &n.attr) || may(cred, &n.attr, R) || may(cred, &n.attr, X)) {
        return Err(FsError::Acces);
    }
    Ok(v)
}

/// A regular file's bytes once `cred` may write them.
fn file_data_to_change<'a>(cred: &Cred, n: &'a mut Inode) -> Result<&'a mut Vec<u8>, FsError> {
    if !(is_owner(cred, &n.attr) || may(cred, &n.attr, W)) {
        return Err(FsError::Acces);
    }
    match &mut n.data {
        Data::File(v) => Ok(v),
        _ if n.attr.ftype == FileType::Directory => Err(FsError::IsDir),
        _ => Err(FsError::Inval),
    }
}

/// The end of an ALLOCATE or DEALLOCATE range, as fallocate(2) checks it.
fn range_end(offset: u64, len: u64, max: u64) -> Result<u64, FsError> {
    if len == 0 {
        return Err(FsError::Inval);
    }
    offset
        .checked_add(len)
        .filter(|&e| e <= max)
        .ok_or(FsError::FBig)
}

/// After a change of a file's contents, as a WRITE does it: times, size,
/// and suid/sgid cleared unless root made the change.
fn changed(cred: &Cred, n: &mut Inode) {
    if let Data::File(v) = &n.data {
        n.attr.size = v.len() as u64;
        n.attr.used = n.attr.size;
    }
    let t = now();
    n.attr.mtime = t;
    n.attr.ctime = t;
    if cred.uid != 0 {
        n.attr.mode &= !0o6000;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    fn root() -> Cred {
        Cred::root()
    }

    /// A new file of mode 0644 in the root directory, made by root.
    fn new_file(fs: &MemFs, name: &[u8]) -> Fid {
        let how = CreateHow::Guarded(SetAttr::mode(0o644));
        fs.create(&root(), &fs.root(), name, &how).unwrap().0
    }

    /// The compound_exec fuzz target's out-of-memory input (fuzz/corpus/
    /// compound_exec/regress-write-far-out-of-memory): a WRITE at a large
    /// offset must be FBIG past the limit, not a buffer that large.
    #[test]
    fn files_stop_at_the_size_limit() {
        let fs = MemFs::with_max_file(1 << 20);
        let f = new_file(&fs, b"a");
        assert!(fs
            .write(&root(), &f, (1 << 20) - 1, b"x", Stable::Unstable)
            .is_ok());
        let far = fs.write(&root(), &f, 1 << 40, b"x", Stable::Unstable);
        assert_eq!(far.map(|_| ()), Err(FsError::FBig));
        let grow = SetAttr {
            size: Some(1 << 30),
            ..SetAttr::default()
        };
        assert_eq!(
            fs.setattr(&root(), &f, &grow).map(|_| ()),
            Err(FsError::FBig)
        );
        assert_eq!(fs.allocate(&root(), &f, 0, 1 << 30), Err(FsError::FBig));
    }

    #[test]
    fn basic_tree() {
        let fs = MemFs::new();
        let r = fs.root();
        let f = new_file(&fs, b"a");
        assert_eq!(
            fs.write(&root(), &f, 2, b"hi", Stable::Unstable).unwrap(),
            (2, Stable::FileSync)
        );
        let mut buf = [0u8; 8];
        assert_eq!(fs.read(&root(), &f, 0, &mut buf).unwrap(), (4, true));
        assert_eq!(&buf[..4], b"\0\0hi");
        let (d, _) = fs.mkdir(&root(), &r, b"d", &SetAttr::mode(0o755)).unwrap();
        assert_eq!(fs.lookup(&root(), &d, b"..").unwrap().0, r);
        assert_eq!(fs.lookup(&root(), &r, b"..").unwrap().0, r);
        fs.rename(&root(), &r, b"a", &d, b"b").unwrap();
        assert_eq!(fs.lookup(&root(), &d, b"b").unwrap().0, f);
        fs.link(&root(), &f, &r, b"c").unwrap();
        assert_eq!(fs.getattr(&f).unwrap().nlink, 2);
        fs.remove(&root(), &d, b"b").unwrap();
        fs.remove(&root(), &r, b"c").unwrap();
        assert_eq!(fs.getattr(&f), Err(FsError::Stale));
        assert_eq!(fs.rmdir(&root(), &r, b"d"), Ok(()));
        assert_eq!(fs.getattr(&d), Err(FsError::Stale));
        assert_eq!(
            fs.getattr(&Fid::new(b"x").unwrap()),
            Err(FsError::BadHandle)
        );
    }

    #[test]
    fn zero_blocks_are_holes_for_seek() {
        let fs = MemFs::new();
        let r = fs.root();
        let how = CreateHow::Guarded(SetAttr::mode(0o644));
        let (f, _) = fs.create(&root(), &r, b"s", &how).unwrap();
        // Data in block 0 and at the start of block 3; 100 bytes of block 3.
        fs.write(&root(), &f, 10, b"a", Stable::Unstable).unwrap();
        fs.write(&root(), &f, 3 * 4096, &[b'b'; 100], Stable::Unstable)
            .unwrap();
        let size = 3 * 4096 + 100;
        let seek = |off, what| fs.seek(&root(), &f, off, what);
        assert_eq!(seek(0, SeekWhat::Data), Ok(0));
        assert_eq!(seek(0, SeekWhat::Hole), Ok(4096));
        assert_eq!(seek(5000, SeekWhat::Hole), Ok(5000));
        assert_eq!(seek(5000, SeekWhat::Data), Ok(3 * 4096));
        assert_eq!(seek(3 * 4096, SeekWhat::Hole), Ok(size));
        assert_eq!(seek(size, SeekWhat::Hole), Err(FsError::NxIo));
        // Punching block 3 leaves no data after block 0.
        fs.deallocate(&root(), &f, 3 * 4096, 4096).unwrap();
        assert_eq!(fs.getattr(&f).unwrap().size, size);
        assert_eq!(seek(4096, SeekWhat::Data), Err(FsError::NxIo));
        // ALLOCATE extends with zeros, which are holes here.
        fs.allocate(&root(), &f, size, 1000).unwrap();
        assert_eq!(fs.getattr(&f).unwrap().size, size + 1000);
        assert_eq!(seek(4096, SeekWhat::Hole), Ok(4096));
        assert_eq!(fs.allocate(&root(), &f, 0, 0), Err(FsError::Inval));
        let user = Cred::user(1000, 1000);
        assert_eq!(fs.allocate(&user, &f, 0, 1), Err(FsError::Acces));
        assert_eq!(fs.deallocate(&user, &f, 0, 1), Err(FsError::Acces));
        assert_eq!(fs.seek(&user, &f, 0, SeekWhat::Data), Ok(0));
    }

    #[test]
    fn exclusive_create_is_idempotent() {
        let fs = MemFs::new();
        let r = fs.root();
        let v = CreateHow::Exclusive(*b"12345678");
        let (f, _) = fs.create(&root(), &r, b"x", &v).unwrap();
        assert_eq!(fs.create(&root(), &r, b"x", &v).unwrap().0, f);
        assert_eq!(
            fs.create(&root(), &r, b"x", &CreateHow::Exclusive(*b"00000000")),
            Err(FsError::Exist)
        );
    }

    #[test]
    fn readdir_pages_with_cookies() {
        let fs = MemFs::new();
        let r = fs.root();
        for i in 0..250 {
            fs.create(
                &root(),
                &r,
                format!("f{i}").as_bytes(),
                &CreateHow::Unchecked(SetAttr::default()),
            )
            .unwrap();
        }
        let mut names = std::collections::HashSet::new();
        let mut cookie = 0;
        loop {
            let p = fs.readdir(&root(), &r, cookie, [0; 8], 100, true).unwrap();
            for e in &p.entries {
                assert!(names.insert(e.name.clone()));
                assert!(e.plus.is_some());
                cookie = e.cookie;
            }
            if p.eof {
                break;
            }
        }
        assert_eq!(names.len(), 252);
    }

    #[test]
    fn mode_bits_apply() {
        let fs = MemFs::new();
        let r = fs.root();
        let (d, _) = fs.mkdir(&root(), &r, b"d", &SetAttr::mode(0o755)).unwrap();
        let (f, _) = fs
            .create(&root(), &d, b"f", &CreateHow::Guarded(SetAttr::mode(0o600)))
            .unwrap();
        let u = Cred::user(1000, 1000);
        let mut b = [0u8; 4];
        assert_eq!(fs.read(&u, &f, 0, &mut b), Err(FsError::Acces));
        assert_eq!(
            fs.create(&u, &d, b"g", &CreateHow::Guarded(SetAttr::default())),
            Err(FsError::Acces)
        );
        assert_eq!(fs.access(&u, &f, Access::ALL).unwrap(), Access::empty());
        assert_eq!(
            fs.access(&u, &d, Access::ALL).unwrap(),
            Access::READ | Access::LOOKUP
        );
    }

    #[test]
    fn copy_range_copies_bytes_and_clone_is_notsupp() {
        let fs = MemFs::new();
        let r = fs.root();
        let how = CreateHow::Guarded(SetAttr::mode(0o644));
        let (a, _) = fs.create(&root(), &r, b"a", &how).unwrap();
        let (b, _) = fs.create(&root(), &r, b"b", &how).unwrap();
        fs.write(&root(), &a, 0, b"0123456789", Stable::Unstable)
            .unwrap();
        assert_eq!(fs.copy_range(&root(), &a, 2, &b, 3, 5), Ok(5));
        assert_eq!(fs.copy_range(&root(), &a, 8, &b, 0, 100), Ok(2));
        assert_eq!(fs.copy_range(&root(), &a, 10, &b, 0, 100), Ok(0));
        let mut buf = [0u8; 16];
        assert_eq!(fs.read(&root(), &b, 0, &mut buf).unwrap(), (8, true));
        assert_eq!(&buf[..8], b"89\x0023456");
        assert_eq!(fs.copy_range(&root(), &a, 0, &a, 5, 6), Err(FsError::Inval));
        assert_eq!(fs.copy_range(&root(), &a, 0, &a, 10, 5), Ok(5));
        assert_eq!(fs.copy_range(&root(), &r, 0, &b, 0, 5), Err(FsError::IsDir));
        // Read on the source, write on the destination.
        let u = Cred::user(1000, 1000);
        let (secret, _) = fs
            .create(
                &root(),
                &r,
                b"secret",
                &CreateHow::Guarded(SetAttr::mode(0o600)),
            )
            .unwrap();
        assert_eq!(fs.copy_range(&u, &secret, 0, &b, 0, 1), Err(FsError::Acces));
        assert_eq!(fs.copy_range(&u, &a, 0, &b, 0, 1), Err(FsError::Acces));
        assert_eq!(
            fs.clone_range(&root(), &a, 0, &b, 0, 0),
            Err(FsError::NotSupp)
        );
    }

    #[test]
    fn xattrs_per_inode() {
        let fs = MemFs::new();
        let f = new_file(&fs, b"f");
        let g = new_file(&fs, b"g");
        assert_eq!(fs.getxattr(&root(), &f, b"a"), Err(FsError::NoXattr));
        fs.setxattr(&root(), &f, b"b", b"2", XattrSet::Create)
            .unwrap();
        fs.setxattr(&root(), &f, b"a", b"1", XattrSet::Either)
            .unwrap();
        assert_eq!(
            fs.setxattr(&root(), &f, b"a", b"x", XattrSet::Create),
            Err(FsError::Exist)
        );
        assert_eq!(
            fs.setxattr(&root(), &g, b"a", b"x", XattrSet::Replace),
            Err(FsError::NoXattr)
        );
        assert_eq!(fs.getxattr(&root(), &f, b"a").unwrap(), b"1");
        assert_eq!(
            fs.listxattrs(&root(), &f).unwrap(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
        assert!(fs.listxattrs(&root(), &g).unwrap().is_empty());
        let u = Cred::user(1000, 1000);
        assert_eq!(fs.getxattr(&u, &f, b"a").unwrap(), b"1");
        assert_eq!(
            fs.setxattr(&u, &f, b"a", b"x", XattrSet::Either),
            Err(FsError::Acces)
        );
        assert_eq!(fs.removexattr(&u, &f, b"a"), Err(FsError::Acces));
        fs.removexattr(&root(), &f, b"a").unwrap();
        assert_eq!(fs.removexattr(&root(), &f, b"a"), Err(FsError::NoXattr));
        assert_eq!(
            fs.setxattr(
                &root(),
                &f,
                b"v",
                &vec![0; crate::XATTR_SIZE_MAX + 1],
                XattrSet::Either
            ),
            Err(FsError::XattrTooBig)
        );
    }
}
