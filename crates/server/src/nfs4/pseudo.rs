//! The pseudo filesystem that joins the exports into one tree (RFC 8881
//! §7.3): PUTROOTFH lands at its root. Directories that exist only to lead
//! to an export are pseudo nodes; an export at `/` is the root itself, and
//! exports below a real export directory are junctions in it.

use crate::export::{Export, Exports};
use std::collections::HashMap;
use std::sync::Arc;
use tracing::warn;
use vfs::{Cred, Fid};

/// Where a name in the tree leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Node(u32),
    Export(u32),
}

pub struct Node {
    pub parent: u32,
    pub children: Vec<(Vec<u8>, Target)>,
}

/// A place an export is mounted on: a pseudo node, or a directory of
/// another export (with that directory's fileid for mounted_on_fileid).
#[derive(Clone, Copy, Debug)]
pub enum MountedOn {
    Node(u32),
    Dir { export: u32, fid: Fid, fileid: u64 },
}

/// Names in one directory that lead to other exports, with their export ids.
pub type Junctions = Vec<(Vec<u8>, u32)>;

pub struct Pseudo {
    pub nodes: Vec<Node>,
    /// The export that is the root, when one is exported at `/`.
    pub root_export: Option<u32>,
    /// Export id → what it is mounted on (none for the root export).
    pub mounted_on: HashMap<u32, MountedOn>,
    /// (export, directory) → names in it that lead to other exports.
    pub junctions: HashMap<(u32, Fid), Junctions>,
}

/// Fileids of pseudo nodes: small numbers in their own fsid.
pub fn node_fileid(node: u32) -> u64 {
    node as u64 + 1
}

impl Pseudo {
    pub fn build(exports: &Exports) -> Pseudo {
        let mut p = Pseudo {
            nodes: vec![Node {
                parent: 0,
                children: Vec::new(),
            }],
            root_export: None,
            mounted_on: HashMap::new(),
            junctions: HashMap::new(),
        };
        let mut list: Vec<(&Arc<Export>, Vec<Vec<u8>>)> = exports
            .iter()
            .map(|e| {
                let comps = e
                    .pseudo
                    .as_bytes()
                    .split(|&b| b == b'/')
                    .filter(|c| !c.is_empty())
                    .map(|c| c.to_vec())
                    .collect();
                (e, comps)
            })
            .collect();
        // Parents before children, so a junction's directory already exists.
        list.sort_by_key(|(_, c)| c.len());
        for (e, comps) in list {
            if comps.is_empty() {
                if p.root_export.is_none() {
                    p.root_export = Some(e.id);
                } else {
                    warn!(export = %e.path.display(), "a second export at / is unreachable over NFSv4");
                }
                continue;
            }
            if let Err(why) = p.place(exports, e, &comps) {
                warn!(export = %e.path.display(), pseudo = %e.pseudo, why, "export unreachable over NFSv4");
            }
        }
        p
    }

    fn place(
        &mut self,
        exports: &Exports,
        e: &Export,
        comps: &[Vec<u8>],
    ) -> Result<(), &'static str> {
        enum At {
            Node(u32),
            Dir(u32, Fid),
        }
        let mut at = match self.root_export {
            Some(r) => At::Dir(r, exports.get(r).unwrap().backend.root()),
            None => At::Node(0),
        };
        for (k, name) in comps.iter().enumerate() {
            let last = k + 1 == comps.len();
            at = match at {
                At::Node(n) => {
                    let found = self.nodes[n as usize]
                        .children
                        .iter()
                        .find(|(c, _)| c == name)
                        .map(|(_, t)| *t);
                    match (found, last) {
                        (Some(_), true) => return Err("another export already has this path"),
                        (None, true) => {
                            self.nodes[n as usize]
                                .children
                                .push((name.clone(), Target::Export(e.id)));
                            self.mounted_on.insert(e.id, MountedOn::Node(n));
                            return Ok(());
                        }
                        (Some(Target::Node(c)), false) => At::Node(c),
                        (Some(Target::Export(x)), false) => {
                            At::Dir(x, exports.get(x).unwrap().backend.root())
                        }
                        (None, false) => {
                            let c = self.nodes.len() as u32;
                            self.nodes.push(Node {
                                parent: n,
                                children: Vec::new(),
                            });
                            self.nodes[n as usize]
                                .children
                                .push((name.clone(), Target::Node(c)));
                            At::Node(c)
                        }
                    }
                }
                At::Dir(x, dir) => {
                    let b = &exports.get(x).unwrap().backend;
                    let found = b.lookup(&Cred::root(), &dir, name);
                    if last {
                        let fileid = found.map(|(_, a)| a.fileid).map_err(|_| {
                            "the directory it is mounted on does not exist in the export above it"
                        })?;
                        self.junctions
                            .entry((x, dir))
                            .or_default()
                            .push((name.clone(), e.id));
                        self.mounted_on.insert(
                            e.id,
                            MountedOn::Dir {
                                export: x,
                                fid: dir,
                                fileid,
                            },
                        );
                        return Ok(());
                    }
                    // A junction to a deeper export may pass through another junction.
                    if let Some(j) = self
                        .junctions
                        .get(&(x, dir))
                        .and_then(|v| v.iter().find(|(n, _)| n == name))
                    {
                        let y = j.1;
                        At::Dir(y, exports.get(y).unwrap().backend.root())
                    } else {
                        let (fid, _) = found.map_err(|_| {
                            "a directory on its path does not exist in the export above it"
                        })?;
                        At::Dir(x, fid)
                    }
                }
            };
        }
        Ok(())
    }

    /// The export a name in an export directory crosses into, if any.
    pub fn junction(&self, export: u32, dir: &Fid, name: &[u8]) -> Option<u32> {
        if self.junctions.is_empty() {
            return None;
        }
        self.junctions
            .get(&(export, *dir))?
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| *e)
    }

    pub fn lookup(&self, node: u32, name: &[u8]) -> Option<Target> {
        self.nodes
            .get(node as usize)?
            .children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::Squash;

    fn export(pseudo: &str, backend: Arc<dyn vfs::Backend>) -> Export {
        Export::simple(
            format!("/srv{pseudo}"),
            pseudo,
            backend,
            &[],
            false,
            Squash::Root,
        )
    }

    #[test]
    fn pseudo_nodes_lead_to_exports() {
        let m = || Arc::new(vfs::memory::MemFs::new()) as Arc<dyn vfs::Backend>;
        let ex = Exports::new(vec![
            export("/a/b", m()),
            export("/a/c", m()),
            export("/d", m()),
        ]);
        let p = Pseudo::build(&ex);
        assert_eq!(p.root_export, None);
        let Some(Target::Node(a)) = p.lookup(0, b"a") else {
            panic!()
        };
        assert_eq!(p.lookup(a, b"b"), Some(Target::Export(0)));
        assert_eq!(p.lookup(a, b"c"), Some(Target::Export(1)));
        assert_eq!(p.lookup(0, b"d"), Some(Target::Export(2)));
        assert_eq!(p.nodes[a as usize].parent, 0);
        assert!(matches!(p.mounted_on[&0], MountedOn::Node(n) if n == a));
    }

    #[test]
    fn exports_below_the_root_export_are_junctions() {
        let root = Arc::new(vfs::memory::MemFs::new());
        let sub = root
            .mkdir(
                &Cred::root(),
                &root.root(),
                b"sub",
                &vfs::SetAttr::default(),
            )
            .unwrap();
        use vfs::Core;
        let ex = Exports::new(vec![
            export("/", root.clone()),
            export("/sub", Arc::new(vfs::memory::MemFs::new())),
            export("/missing", Arc::new(vfs::memory::MemFs::new())),
        ]);
        let p = Pseudo::build(&ex);
        assert_eq!(p.root_export, Some(0));
        assert_eq!(p.junction(0, &root.root(), b"sub"), Some(1));
        assert!(
            matches!(p.mounted_on[&1], MountedOn::Dir { export: 0, fileid, .. } if fileid == sub.1.fileid)
        );
        assert!(!p.mounted_on.contains_key(&2));
    }
}
