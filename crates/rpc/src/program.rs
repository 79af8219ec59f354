//! What a server knows about the programs it serves: one table per
//! (program, version) listing each procedure's name, idempotence and
//! metric label, indexed by procedure number (as Linux nfsd's
//! `nfsd_procedures3[]`), and the [`Service`] trait whose answers default
//! to that table.

use crate::context::CallContext;
use crate::msg::CallError;
use bytes::BytesMut;
use std::future::Future;
use xdr::Decoder;

/// One procedure of a program version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Procedure {
    /// The name in the protocol spec, for logs ("NFSPROC3_GETATTR").
    pub name: &'static str,
    /// The op label of its metrics ("GETATTR"; empty: unnamed); the slot
    /// is the table's `slot_base` plus the procedure number.
    pub metric: &'static str,
    /// Whether it can safely be executed twice. Non-idempotent procedures
    /// go through the duplicate request cache.
    pub idempotent: bool,
}

impl Procedure {
    /// For tables (a `const fn`, so tables are statics).
    pub const fn new(name: &'static str, metric: &'static str, idempotent: bool) -> Self {
        Procedure {
            name,
            metric,
            idempotent,
        }
    }
}

/// The procedures of one program version, indexed by procedure number.
#[derive(Debug)]
pub struct Program {
    pub prog: u32,
    pub vers: u32,
    /// The program label of its metrics ("nfs3").
    pub label: &'static str,
    /// The metric slot of procedure 0 (None: not counted per op).
    pub slot_base: Option<usize>,
    /// What is said of a procedure number the table does not hold (and of
    /// holes in its numbering).
    pub unknown: Procedure,
    /// Indexed by procedure number.
    pub procs: &'static [Procedure],
}

impl Program {
    pub fn procedure(&'static self, proc_: u32) -> &'static Procedure {
        self.procs.get(proc_ as usize).unwrap_or(&self.unknown)
    }

    /// The metric slot of a procedure number within the table.
    pub fn slot(&self, proc_: u32) -> Option<usize> {
        let base = self.slot_base?;
        ((proc_ as usize) < self.procs.len()).then(|| base + proc_ as usize)
    }

    pub fn name(&'static self, proc_: u32) -> &'static str {
        self.procedure(proc_).name
    }
}

/// The table of (prog, vers) among `programs`.
pub fn find(programs: &[&'static Program], prog: u32, vers: u32) -> Option<&'static Program> {
    programs
        .iter()
        .copied()
        .find(|p| p.prog == prog && p.vers == vers)
}

/// An RPC program (or several): the server calls it for every well-formed call
/// to a program and version it claims, except NULL (procedure 0), which the
/// server answers itself. The questions about procedures default to the
/// tables of [`Service::programs`].
pub trait Service: Send + Sync + 'static {
    /// One table per (program, version) served.
    fn programs(&self) -> &'static [&'static Program] {
        &[]
    }

    /// The lowest and highest version of `prog` served, or None if `prog` is not served.
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        let mut vs = self
            .programs()
            .iter()
            .filter(|p| p.prog == prog)
            .map(|p| p.vers);
        let first = vs.next()?;
        Some(vs.fold((first, first), |(l, h), v| (l.min(v), h.max(v))))
    }

    /// Whether a procedure can safely be executed twice. Non-idempotent
    /// procedures go through the duplicate request cache.
    fn idempotent(&self, prog: u32, vers: u32, proc_: u32) -> bool {
        find(self.programs(), prog, vers).is_none_or(|p| p.procedure(proc_).idempotent)
    }

    /// Whether this call goes through the duplicate request cache, given
    /// its (unprotected) arguments: by default, when the procedure is not
    /// idempotent. A program whose procedures differ by argument (the
    /// NFSv4 COMPOUND's minor version) looks at them; after the call it
    /// may still drop the entry ([`CallContext::skip_cache`]).
    fn cacheable(&self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> bool {
        let _ = args;
        !self.idempotent(prog, vers, proc_)
    }

    /// A procedure's name, for logs.
    fn procedure_name(&self, prog: u32, vers: u32, proc_: u32) -> &'static str {
        find(self.programs(), prog, vers).map_or("unknown", |p| p.name(proc_))
    }

    /// The metrics slot of a procedure (per-op counters are an array index).
    fn op_slot(&self, prog: u32, vers: u32, proc_: u32) -> Option<usize> {
        find(self.programs(), prog, vers).and_then(|p| p.slot(proc_))
    }

    /// Executes a call. The SUCCESS reply header is already in `out`; the
    /// service appends its results. On `Err`, whatever was appended is
    /// discarded and the server sends the RPC-level error instead.
    fn call<'a>(
        &'a self,
        ctx: &'a CallContext,
        args: Decoder,
        out: &'a mut BytesMut,
    ) -> impl Future<Output = Result<(), CallError>> + Send + 'a;
}

#[cfg(test)]
mod tests {
    use super::*;

    static P: Program = Program {
        prog: 7,
        vers: 2,
        label: "p",
        slot_base: Some(10),
        unknown: Procedure::new("P_UNKNOWN", "", false),
        procs: &[
            Procedure::new("P_NULL", "NULL", true),
            Procedure::new("P_SET", "SET", false),
        ],
    };
    static Q: Program = Program {
        prog: 7,
        vers: 4,
        label: "q",
        slot_base: None,
        unknown: Procedure::new("Q_UNKNOWN", "", true),
        procs: &[Procedure::new("Q_NULL", "NULL", true)],
    };

    struct S;
    impl Service for S {
        fn programs(&self) -> &'static [&'static Program] {
            static ALL: &[&Program] = &[&P, &Q];
            ALL
        }
        async fn call(
            &self,
            _: &CallContext,
            _: Decoder,
            _: &mut BytesMut,
        ) -> Result<(), CallError> {
            Ok(())
        }
    }

    #[test]
    fn answers_come_from_the_tables() {
        assert_eq!(S.versions(7), Some((2, 4)));
        assert_eq!(S.versions(8), None);
        assert!(S.idempotent(7, 2, 0));
        assert!(!S.idempotent(7, 2, 1));
        assert!(S.cacheable(7, 2, 1, &[]));
        assert!(
            !S.idempotent(7, 2, 9),
            "the table says what unknown numbers are"
        );
        assert!(S.idempotent(7, 4, 9));
        assert!(S.idempotent(9, 1, 0), "unknown programs are not cached");
        assert_eq!(S.procedure_name(7, 2, 1), "P_SET");
        assert_eq!(S.procedure_name(7, 2, 5), "P_UNKNOWN");
        assert_eq!(S.procedure_name(9, 1, 0), "unknown");
        assert_eq!(S.op_slot(7, 2, 1), Some(11));
        assert_eq!(S.op_slot(7, 2, 2), None);
        assert_eq!(S.op_slot(7, 4, 0), None);
    }
}
