//! STUB (replaced by the nlm branch's lock manager).
use std::sync::Mutex;
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OwnerKey {
    pub client: u64,
    pub owner: bytes::Bytes,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Read,
    Write,
}
#[derive(Clone, Debug)]
pub struct Conflict {
    pub offset: u64,
    pub length: u64,
    pub kind: LockKind,
    pub owner: OwnerKey,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub export: u32,
    pub fid: vfs::Fid,
}
#[allow(clippy::type_complexity)]
#[derive(Default)]
pub struct LockManager {
    l: Mutex<Vec<(FileKey, OwnerKey, LockKind, u64, u64)>>,
}
impl LockManager {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn lock(
        &self,
        file: FileKey,
        owner: &OwnerKey,
        kind: LockKind,
        offset: u64,
        length: u64,
    ) -> Result<(), Conflict> {
        self.test(file, owner, kind, offset, length)?;
        self.l
            .lock()
            .unwrap()
            .push((file, owner.clone(), kind, offset, length));
        Ok(())
    }
    pub fn test(
        &self,
        file: FileKey,
        owner: &OwnerKey,
        kind: LockKind,
        offset: u64,
        length: u64,
    ) -> Result<(), Conflict> {
        let end = offset.saturating_add(length);
        for (f, o, k, off, len) in self.l.lock().unwrap().iter() {
            if *f == file
                && o != owner
                && (kind == LockKind::Write || *k == LockKind::Write)
                && *off < end
                && offset < off.saturating_add(*len)
            {
                return Err(Conflict {
                    offset: *off,
                    length: *len,
                    kind: *k,
                    owner: o.clone(),
                });
            }
        }
        Ok(())
    }
    pub fn unlock(&self, file: FileKey, owner: &OwnerKey, _offset: u64, _length: u64) {
        self.l
            .lock()
            .unwrap()
            .retain(|(f, o, ..)| !(*f == file && o == owner));
    }
    pub fn release_owner(&self, owner: &OwnerKey) {
        self.l.lock().unwrap().retain(|(_, o, ..)| o != owner);
    }
    pub fn release_client(&self, client: u64) {
        self.l
            .lock()
            .unwrap()
            .retain(|(_, o, ..)| o.client != client);
    }
    pub fn owner_holds(&self, owner: &OwnerKey) -> bool {
        self.l.lock().unwrap().iter().any(|(_, o, ..)| o == owner)
    }
}
