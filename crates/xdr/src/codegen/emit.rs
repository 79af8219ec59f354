//! Turns parsed definitions into Rust source: one type per XDR type, `Pack`
//! and `Unpack` impls, constants and procedure tables, and under `cfg(test)`
//! proptest strategies with a round-trip and a garbage-input test per type.
//!
//! Mapping (documented for the readers of generated code):
//! - `int`/`unsigned int`/`hyper`/`unsigned hyper`/`bool` → i32/u32/i64/u64/bool
//! - `opaque x[N]` → `[u8; N]`; `opaque x<>` and `string x<>` → `bytes::Bytes`
//! - `T x[N]` → `[T; N]`; `T x<>` → `Vec<T>`; `T *x` → `Option<Box<T>>`
//! - a struct whose last field points to its own type is an XDR linked list:
//!   the pointer field is dropped and every `T *x` elsewhere becomes `Vec<T>`,
//!   coded iteratively (long directory listings must not recurse)
//! - a union switched on `bool` with one void arm → `Option<T>`
//! - other unions → a Rust enum with one variant per case label (named as
//!   the label), and `Default(discriminant, arm)` for the default arm; this
//!   holds for unions on `bool` whose arms both carry data (variants `TRUE`
//!   and `FALSE`, e.g. NFSv4's `locker4`) and for unions switched on an
//!   integer or a typedef of one whose labels are constants or members of
//!   an enum (NFSv4's `nfs_cb_argop4` switches on `unsigned` with
//!   `nfs_cb_opnum4` labels: the discriminant stays a `u32`)
//! - a discriminant named through a typedef chain is followed to its enum
//! - type names become CamelCase (`post_op_attr` → `PostOpAttr`); enum
//!   members, constants and procedure names keep their spec spelling. Two
//!   spec names that would give the same Rust name, or a name the generated
//!   code needs (`Option`, `Vec`, `Box`, ...), are reported as errors.
//!   Fields named like Rust keywords become raw identifiers (`r#type`).
//! - constants are `u32` or `i32` when they fit, else `u64`/`i64`
//!   (`NFS4_UINT64_MAX = 0xffffffffffffffff` is a `u64`)
//! - an enum member that repeats an earlier member's value becomes an
//!   associated constant equal to that member (a Rust enum cannot have two
//!   variants with one discriminant)
//!
//! The tests are two per type, each a call of a generic helper
//! (`roundtrip::<T>()`, `garbage::<T>()`): a `proptest!` expansion per type
//! made a spec the size of NFSv4 noticeably slower to compile.

use super::parse::*;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

pub struct Emitter {
    consts: HashMap<String, i128>,
    types: HashMap<String, Body>,
    typedefs: HashMap<String, Decl>,
    order: Vec<Item>,
    lists: BTreeSet<String>,
    out: String,
}

/// A version of a program: its name, number and (procedure name, number) pairs.
type VersionTable = (String, i128, Vec<(String, i128)>);

enum Item {
    Const(String, i128),
    Type(String),
    Typedef(String),
    Program(String, i128, Vec<VersionTable>),
}

pub fn camel(name: &str) -> String {
    let mut s = String::new();
    for part in name.split('_').filter(|p| !p.is_empty()) {
        let mut cs = part.chars();
        if let Some(c) = cs.next() {
            s.push(c.to_ascii_uppercase());
            s.extend(cs.map(|c| c.to_ascii_lowercase()));
        }
    }
    s
}

fn field(name: &str) -> String {
    const KW: &[&str] = &[
        "as", "break", "const", "continue", "else", "enum", "extern", "false", "fn", "for", "if",
        "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
        "static", "struct", "trait", "true", "type", "unsafe", "use", "where", "while", "async",
        "await", "dyn", "abstract", "become", "box", "do", "final", "macro", "override", "priv",
        "typeof", "unsized", "virtual", "yield", "try",
    ];
    match name {
        "self" | "Self" | "super" | "crate" => format!("{name}_"),
        n if KW.contains(&n) => format!("r#{n}"),
        n => n.to_string(),
    }
}

type R<T> = Result<T, String>;

/// A union's discriminant type, and the enum it names if it is one.
type Disc = (String, Option<String>);

/// A union's case: variant, discriminant pattern, the arm's declaration.
type Case<'u> = (String, String, &'u Decl);

/// Writes `line` of each of `items`, one a line: the fields of a struct,
/// the cases of a union.
fn lines<T>(o: &mut String, items: &[T], line: impl Fn(&T) -> R<String>) -> R<()> {
    for i in items {
        writeln!(o, "{}", line(i)?).unwrap();
    }
    Ok(())
}

/// The Rust type of a constant: the smallest of i32, u32, i64, u64 that holds it
/// (so `const X = 0xffffffffffffffff;`, as NFSv4 writes `NFS4_UINT64_MAX`, is a u64).
fn const_ty(v: i128) -> Option<&'static str> {
    Some(if v < i64::MIN as i128 || v > u64::MAX as i128 {
        return None;
    } else if v < i32::MIN as i128 {
        "i64"
    } else if v < 0 {
        "i32"
    } else if v <= u32::MAX as i128 {
        "u32"
    } else {
        "u64"
    })
}

/// Names the generated code itself uses unqualified: a spec type must not take them.
const RESERVED_TYPE_NAMES: &[&str] = &[
    "Option", "Some", "None", "Box", "Vec", "Result", "Ok", "Err", "Self", "String", "Default",
];

impl Emitter {
    pub fn new(defs: Vec<Definition>) -> R<Emitter> {
        let mut e = Emitter {
            consts: HashMap::new(),
            types: HashMap::new(),
            typedefs: HashMap::new(),
            order: Vec::new(),
            lists: BTreeSet::new(),
            out: String::new(),
        };
        let mut programs = Vec::new();
        for d in defs {
            match d {
                Definition::Const(n, v) => {
                    let v = e.value(&v)?;
                    e.consts.insert(n.clone(), v);
                    e.order.push(Item::Const(n, v));
                }
                Definition::Typedef(mut decl) => {
                    let name = decl.name().ok_or("typedef of void")?.to_string();
                    e.hoist_decl(&name, &mut decl)?;
                    e.typedefs.insert(name.clone(), decl);
                    e.order.push(Item::Typedef(name));
                }
                Definition::Type(n, body) => e.add_type(n, body)?,
                Definition::Program {
                    name,
                    number,
                    versions,
                } => programs.push((name, number, versions)),
            }
        }
        for (name, number, versions) in programs {
            let mut vs = Vec::new();
            for v in versions {
                let mut ps = Vec::new();
                for p in v.procedures {
                    ps.push((p.name, e.value(&p.number)?));
                }
                vs.push((v.name, e.value(&v.number)?, ps));
            }
            let n = e.value(&number)?;
            e.order.push(Item::Program(name, n, vs));
        }
        // Linked lists: a struct whose last field points to its own type.
        for (n, b) in &e.types {
            if let Body::Struct(ds) = b {
                for (i, d) in ds.iter().enumerate() {
                    if let Decl::Optional {
                        ty: Ty::Named(t),
                        name,
                    } = d
                    {
                        if t == n {
                            if i + 1 != ds.len() {
                                return Err(format!(
                                    "{n}: self-pointer {name} must be the last field"
                                ));
                            }
                            e.lists.insert(n.clone());
                        }
                    }
                }
            }
        }
        Ok(e)
    }

    fn add_type(&mut self, name: String, mut body: Body) -> R<()> {
        match &mut body {
            Body::Struct(ds) => {
                for d in ds.iter_mut() {
                    let dn = d.name().unwrap_or("void").to_string();
                    self.hoist_decl(&format!("{name}_{dn}"), d)?;
                }
            }
            Body::Union(u) => {
                let dn = u.disc.name().unwrap_or("disc").to_string();
                self.hoist_decl(&format!("{name}_{dn}"), &mut u.disc)?;
                for a in u.arms.iter_mut() {
                    let dn = a.decl.name().unwrap_or("void").to_string();
                    self.hoist_decl(&format!("{name}_{dn}"), &mut a.decl)?;
                }
                if let Some(d) = u.default.as_mut() {
                    let dn = d.name().unwrap_or("void").to_string();
                    self.hoist_decl(&format!("{name}_{dn}"), d)?;
                }
            }
            Body::Enum(items) => {
                for (m, v) in items.iter() {
                    let v = self.value(v)?;
                    self.consts.insert(m.clone(), v);
                }
            }
        }
        if self.types.insert(name.clone(), body).is_some() {
            return Err(format!("type {name} defined twice"));
        }
        self.order.push(Item::Type(name));
        Ok(())
    }

    /// Gives an inline type a name of its own so that it can be emitted like any other.
    fn hoist_decl(&mut self, synth: &str, d: &mut Decl) -> R<()> {
        let ty = match d {
            Decl::Plain { ty, .. }
            | Decl::FixedArray { ty, .. }
            | Decl::VarArray { ty, .. }
            | Decl::Optional { ty, .. } => ty,
            _ => return Ok(()),
        };
        if let Ty::Inline(body) = ty {
            let body = (**body).clone();
            *ty = Ty::Named(synth.to_string());
            self.add_type(synth.to_string(), body)?;
        }
        Ok(())
    }

    fn value(&self, v: &Value) -> R<i128> {
        match v {
            Value::Num(n) => Ok(*n),
            Value::Name(n) => self
                .consts
                .get(n)
                .copied()
                .ok_or_else(|| format!("unknown constant {n}")),
        }
    }

    /// A length or a maximum: it must fit the u32 of XDR's length fields.
    fn size(&self, v: &Value) -> R<i128> {
        let n = self.value(v)?;
        if !(0..=u32::MAX as i128).contains(&n) {
            return Err(format!(
                "length {v:?} = {n} is not an unsigned 32-bit number"
            ));
        }
        Ok(n)
    }

    fn max(&self, m: &Option<Value>) -> R<String> {
        Ok(match m {
            Some(v) => format!("Some({})", self.size(v)?),
            None => "None".into(),
        })
    }

    fn prim(&self, ty: &Ty) -> R<String> {
        Ok(match ty {
            Ty::Int => "i32".into(),
            Ty::UInt => "u32".into(),
            Ty::Hyper => "i64".into(),
            Ty::UHyper => "u64".into(),
            Ty::Bool => "bool".into(),
            Ty::Named(n) if n == "void" => return Err("void is not a data type".into()),
            Ty::Named(n) => {
                if !self.types.contains_key(n) && !self.typedefs.contains_key(n) {
                    return Err(format!("unknown type {n}"));
                }
                camel(n)
            }
            Ty::Inline(_) => return Err("inline type was not hoisted".into()),
        })
    }

    fn is_list(&self, ty: &Ty) -> bool {
        matches!(ty, Ty::Named(n) if self.lists.contains(n))
    }

    /// The Rust type that holds a declaration's value.
    fn field_ty(&self, d: &Decl) -> R<String> {
        Ok(match d {
            Decl::Void => "()".into(),
            Decl::Plain { ty, .. } => self.prim(ty)?,
            Decl::FixedOpaque { len, .. } => format!("[u8; {}]", self.size(len)?),
            Decl::VarOpaque { .. } | Decl::Str { .. } => "::bytes::Bytes".into(),
            Decl::FixedArray { ty, len, .. } => {
                format!("[{}; {}]", self.prim(ty)?, self.size(len)?)
            }
            Decl::VarArray { ty, .. } => format!("Vec<{}>", self.prim(ty)?),
            Decl::Optional { ty, .. } if self.is_list(ty) => format!("Vec<{}>", self.prim(ty)?),
            Decl::Optional { ty, .. } => format!("Option<Box<{}>>", self.prim(ty)?),
        })
    }

    fn pack(&self, d: &Decl, e: &str) -> R<String> {
        Ok(match d {
            Decl::Void => String::new(),
            Decl::Plain { .. } => format!("::xdr::Pack::pack(&{e}, out);"),
            Decl::FixedOpaque { .. } => format!("::xdr::pack_opaque_fixed(&{e}, out);"),
            Decl::VarOpaque { .. } | Decl::Str { .. } => format!("::xdr::pack_opaque(&{e}, out);"),
            Decl::FixedArray { .. } => format!("::xdr::pack_array_fixed(&{e}, out);"),
            Decl::VarArray { .. } => format!("::xdr::pack_array(&{e}, out);"),
            Decl::Optional { ty, .. } if self.is_list(ty) => {
                format!("::xdr::pack_list(&{e}, out);")
            }
            Decl::Optional { .. } => format!("::xdr::Pack::pack(&{e}, out);"),
        })
    }

    fn unpack(&self, d: &Decl) -> R<String> {
        Ok(match d {
            Decl::Void => "()".into(),
            Decl::Plain { ty, .. } => format!("<{} as ::xdr::Unpack>::unpack(d)?", self.prim(ty)?),
            Decl::FixedOpaque { len, .. } => format!("d.opaque_fixed::<{}>()?", self.size(len)?),
            Decl::VarOpaque { max, .. } | Decl::Str { max, .. } => {
                format!("d.opaque({})?", self.max(max)?)
            }
            Decl::FixedArray { ty, len, .. } => {
                format!(
                    "d.array_fixed::<{}, {}>()?",
                    self.prim(ty)?,
                    self.size(len)?
                )
            }
            Decl::VarArray { ty, max, .. } => {
                format!("d.array::<{}>({})?", self.prim(ty)?, self.max(max)?)
            }
            Decl::Optional { ty, .. } if self.is_list(ty) => {
                format!("d.list::<{}>()?", self.prim(ty)?)
            }
            Decl::Optional { ty, .. } => {
                format!(
                    "<Option<Box<{}>> as ::xdr::Unpack>::unpack(d)?",
                    self.prim(ty)?
                )
            }
        })
    }

    /// A union shaped like optional data: bool discriminant, TRUE arm, void otherwise.
    fn option_arm<'a>(&self, u: &'a UnionBody) -> Option<&'a Decl> {
        let Decl::Plain { ty: Ty::Bool, .. } = &u.disc else {
            return None;
        };
        let mut t = None;
        let mut false_void = matches!(u.default, Some(Decl::Void));
        if u.default.as_ref().is_some_and(|d| *d != Decl::Void) {
            return None;
        }
        for a in &u.arms {
            for l in &a.labels {
                match (l, &a.decl) {
                    (Value::Name(n), d @ Decl::Plain { .. }) if n == "TRUE" => t = Some(d),
                    (Value::Name(n), Decl::Void) if n == "FALSE" => false_void = true,
                    _ => return None,
                }
            }
        }
        if false_void {
            t
        } else {
            None
        }
    }

    /// A typedef that is a plain alias (its encoding is that of the aliased Rust type).
    fn alias_ty(&self, d: &Decl) -> R<Option<String>> {
        Ok(match d {
            Decl::Plain { .. } | Decl::FixedOpaque { .. } => Some(self.field_ty(d)?),
            Decl::VarOpaque { max: None, .. } | Decl::Str { max: None, .. } => {
                Some(self.field_ty(d)?)
            }
            Decl::VarArray { max: None, .. } => Some(self.field_ty(d)?),
            Decl::Optional { ty, .. } if !self.is_list(ty) => Some(self.field_ty(d)?),
            _ => None,
        })
    }

    /// Spec names that would become the same Rust name, or a name the
    /// generated code needs for itself, are reported instead of producing
    /// code that does not compile (or, worse, compiles to something else).
    fn check_names(&self) -> R<()> {
        let mut names: Vec<&String> = self.types.keys().chain(self.typedefs.keys()).collect();
        names.sort();
        let mut seen: HashMap<String, &String> = HashMap::new();
        for n in names {
            let c = camel(n);
            if c.is_empty() || c.starts_with(|ch: char| ch.is_ascii_digit()) {
                return Err(format!("type {n} has no usable Rust name ({c:?})"));
            }
            if RESERVED_TYPE_NAMES.contains(&c.as_str()) {
                return Err(format!(
                    "type {n} would become the Rust name {c}, which generated code uses for std's {c}; rename it in the spec"
                ));
            }
            if let Some(prev) = seen.insert(c.clone(), n) {
                return Err(format!(
                    "types {prev} and {n} both become the Rust name {c}; rename one in the spec"
                ));
            }
        }
        Ok(())
    }

    pub fn emit(mut self) -> R<String> {
        self.check_names()?;
        let mut o = String::new();
        writeln!(
            o,
            "// Generated by xdr::codegen from an XDR specification. Do not edit."
        )
        .unwrap();
        let order = std::mem::take(&mut self.order);
        let mut tested = Vec::new();
        for it in &order {
            match it {
                Item::Const(n, v) => {
                    let t = const_ty(*v).ok_or_else(|| {
                        format!(
                            "constant {n} = {v} fits neither a 64-bit signed nor unsigned integer"
                        )
                    })?;
                    writeln!(o, "pub const {n}: {t} = {v};").unwrap();
                }
                Item::Typedef(n) => {
                    let d = self.typedefs[n].clone();
                    if let Some(t) = self.alias_ty(&d)? {
                        writeln!(o, "pub type {} = {t};", camel(n)).unwrap();
                    } else {
                        self.newtype(&mut o, n, &d)?;
                        tested.push(n.clone());
                    }
                }
                Item::Type(n) => {
                    let b = self.types[n].clone();
                    match &b {
                        Body::Struct(ds) => self.strukt(&mut o, n, ds)?,
                        Body::Enum(items) => self.enm(&mut o, n, items)?,
                        Body::Union(u) => {
                            if let Some(arm) = self.option_arm(u) {
                                writeln!(
                                    o,
                                    "pub type {} = Option<{}>;",
                                    camel(n),
                                    self.field_ty(arm)?
                                )
                                .unwrap();
                                continue;
                            }
                            self.union(&mut o, n, u)?
                        }
                    }
                    tested.push(n.clone());
                }
                Item::Program(n, num, vs) => {
                    writeln!(o, "pub const {n}: u32 = {num};").unwrap();
                    for (vn, vnum, ps) in vs {
                        writeln!(o, "pub const {vn}: u32 = {vnum};").unwrap();
                        for (pn, pnum) in ps {
                            writeln!(o, "pub const {pn}: u32 = {pnum};").unwrap();
                        }
                    }
                    writeln!(
                        o,
                        "/// The name of a procedure of program {n}, as the spec spells it."
                    )
                    .unwrap();
                    writeln!(o, "pub fn {}_procedure_name(vers: u32, proc_: u32) -> Option<&'static str> {{", n.to_lowercase()).unwrap();
                    writeln!(o, "    match (vers, proc_) {{").unwrap();
                    for (_, vnum, ps) in vs {
                        for (pn, pnum) in ps {
                            writeln!(o, "        ({vnum}, {pnum}) => Some(\"{pn}\"),").unwrap();
                        }
                    }
                    writeln!(o, "        _ => None,\n    }}\n}}").unwrap();
                }
            }
        }
        self.out = o;
        self.tests(&tested)?;
        Ok(self.out)
    }

    fn newtype(&self, o: &mut String, n: &str, d: &Decl) -> R<()> {
        let c = camel(n);
        writeln!(
            o,
            "#[derive(Clone, Debug, PartialEq, Eq)]\npub struct {c}(pub {});",
            self.field_ty(d)?
        )
        .unwrap();
        writeln!(o, "impl ::xdr::Pack for {c} {{\n    fn pack(&self, out: &mut ::bytes::BytesMut) {{ {} }}\n}}", self.pack(d, "self.0")?).unwrap();
        writeln!(o, "impl ::xdr::Unpack for {c} {{\n    fn unpack(d: &mut ::xdr::Decoder) -> ::xdr::Result<Self> {{ Ok({c}({})) }}\n}}", self.unpack(d)?).unwrap();
        Ok(())
    }

    fn struct_fields<'a>(&self, n: &str, ds: &'a [Decl]) -> &'a [Decl] {
        if self.lists.contains(n) {
            &ds[..ds.len() - 1]
        } else {
            ds
        }
    }

    fn strukt(&self, o: &mut String, n: &str, ds: &[Decl]) -> R<()> {
        let c = camel(n);
        let ds: Vec<&Decl> = self
            .struct_fields(n, ds)
            .iter()
            .filter(|d| **d != Decl::Void)
            .collect();
        writeln!(
            o,
            "#[derive(Clone, Debug, PartialEq, Eq)]\npub struct {c} {{"
        )
        .unwrap();
        lines(o, &ds, |d| {
            Ok(format!(
                "    pub {}: {},",
                field(d.name().unwrap()),
                self.field_ty(d)?
            ))
        })?;
        writeln!(o, "}}").unwrap();
        writeln!(o, "impl ::xdr::Pack for {c} {{\n    #[allow(unused_variables)]\n    fn pack(&self, out: &mut ::bytes::BytesMut) {{").unwrap();
        lines(o, &ds, |d| {
            let v = self.pack(d, &format!("self.{}", field(d.name().unwrap())))?;
            Ok(format!("        {v}"))
        })?;
        writeln!(o, "    }}\n}}").unwrap();
        writeln!(o, "impl ::xdr::Unpack for {c} {{\n    #[allow(unused_variables)]\n    fn unpack(d: &mut ::xdr::Decoder) -> ::xdr::Result<Self> {{\n        Ok({c} {{").unwrap();
        lines(o, &ds, |d| {
            let v = self.unpack(d)?;
            Ok(format!("            {}: {v},", field(d.name().unwrap())))
        })?;
        writeln!(o, "        }})\n    }}\n}}").unwrap();
        Ok(())
    }

    /// An enum's members in spec order: (name, value, the earlier member
    /// with the same value if there is one).
    fn enum_members(
        &self,
        n: &str,
        items: &[(String, Value)],
    ) -> R<Vec<(String, i32, Option<String>)>> {
        let mut seen: HashMap<i32, String> = HashMap::new();
        let mut out = Vec::new();
        for (m, v) in items {
            let v = self.value(v)?;
            let v = i32::try_from(v).map_err(|_| {
                format!("enum {n}: {m} = {v} does not fit XDR's 32-bit signed enum")
            })?;
            let dup = seen.get(&v).cloned();
            if dup.is_none() {
                seen.insert(v, m.clone());
            }
            out.push((m.clone(), v, dup));
        }
        Ok(out)
    }

    fn enm(&self, o: &mut String, n: &str, items: &[(String, Value)]) -> R<()> {
        let c = camel(n);
        let members = self.enum_members(n, items)?;
        writeln!(o, "#[allow(non_camel_case_types)]\n#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\n#[repr(i32)]\npub enum {c} {{").unwrap();
        for (m, v, dup) in &members {
            if dup.is_none() {
                writeln!(o, "    {m} = {v},").unwrap();
            }
        }
        writeln!(o, "}}").unwrap();
        writeln!(o, "#[allow(non_upper_case_globals)]\nimpl {c} {{").unwrap();
        // A member that repeats an earlier member's value (XDR allows it, a
        // Rust enum does not) is an alias of that member.
        for (m, _, dup) in &members {
            if let Some(first) = dup {
                writeln!(o, "    pub const {m}: Self = {c}::{first};").unwrap();
            }
        }
        writeln!(
            o,
            "    pub fn from_i32(v: i32) -> Option<Self> {{\n        match v {{"
        )
        .unwrap();
        for (m, v, dup) in &members {
            if dup.is_none() {
                writeln!(o, "            {v} => Some({c}::{m}),").unwrap();
            }
        }
        writeln!(o, "            _ => None,\n        }}\n    }}\n}}").unwrap();
        writeln!(o, "impl ::xdr::Pack for {c} {{\n    #[inline]\n    fn pack(&self, out: &mut ::bytes::BytesMut) {{ ::xdr::Pack::pack(&(*self as i32), out) }}\n}}").unwrap();
        writeln!(o, "impl ::xdr::Unpack for {c} {{\n    #[inline]\n    fn unpack(d: &mut ::xdr::Decoder) -> ::xdr::Result<Self> {{\n        let v = d.i32()?;\n        {c}::from_i32(v).ok_or(::xdr::Error::BadEnum {{ name: \"{n}\", value: v }})\n    }}\n}}").unwrap();
        Ok(())
    }

    /// What a union's discriminant is: its Rust type, and the enum it names, if any.
    fn disc(&self, u: &UnionBody) -> R<Disc> {
        let Decl::Plain { ty, .. } = &u.disc else {
            return Err("union discriminant must be a plain scalar".into());
        };
        let mut ty = ty.clone();
        // Follow typedef aliases down to an enum or a primitive.
        while let Ty::Named(n) = &ty {
            if let Some(Decl::Plain { ty: t, .. }) = self.typedefs.get(n) {
                ty = t.clone();
            } else {
                break;
            }
        }
        Ok(match &ty {
            Ty::Named(n) if matches!(self.types.get(n), Some(Body::Enum(_))) => {
                (camel(n), Some(n.clone()))
            }
            Ty::Int | Ty::UInt | Ty::Bool => (self.prim(&ty)?, None),
            _ => return Err(format!("unsupported union discriminant type {ty:?}")),
        })
    }

    fn label(&self, dt: &Disc, l: &Value) -> R<(String, String)> {
        // (variant name, match pattern / encode expression)
        Ok(match (dt.0.as_str(), &dt.1, l) {
            (_, Some(_), Value::Name(m)) => (m.clone(), format!("{}::{m}", dt.0)),
            ("bool", _, Value::Name(m)) if m == "TRUE" || m == "FALSE" => {
                (m.clone(), m.to_lowercase())
            }
            (t, None, Value::Name(m)) => (m.clone(), format!("{}{t}", self.value(l)?)),
            (t, None, Value::Num(v)) => (
                format!("V{}", v.to_string().replace('-', "_")),
                format!("{v}{t}"),
            ),
            _ => return Err(format!("bad case label {l:?}")),
        })
    }

    /// Every case label of `u`, arm by arm: (variant, discriminant
    /// pattern, the arm's declaration).
    fn cases<'u>(&self, u: &'u UnionBody, dt: &Disc) -> R<Vec<Case<'u>>> {
        let mut out = Vec::new();
        for a in &u.arms {
            for l in &a.labels {
                let (v, p) = self.label(dt, l)?;
                out.push((v, p, &a.decl));
            }
        }
        Ok(out)
    }

    fn union(&self, o: &mut String, n: &str, u: &UnionBody) -> R<()> {
        let c = camel(n);
        let dt = self.disc(u)?;
        writeln!(o, "#[allow(non_camel_case_types)]\n#[derive(Clone, Debug, PartialEq, Eq)]\npub enum {c} {{").unwrap();
        let cases = self.cases(u, &dt)?;
        lines(o, &cases, |(v, _, decl)| {
            Ok(match decl {
                Decl::Void => format!("    {v},"),
                d => format!("    {v}({}),", self.field_ty(d)?),
            })
        })?;
        match &u.default {
            None => {}
            Some(Decl::Void) => writeln!(o, "    Default({}),", dt.0).unwrap(),
            Some(d) => writeln!(o, "    Default({}, {}),", dt.0, self.field_ty(d)?).unwrap(),
        }
        writeln!(o, "}}").unwrap();
        writeln!(o, "impl ::xdr::Pack for {c} {{\n    fn pack(&self, out: &mut ::bytes::BytesMut) {{\n        match self {{").unwrap();
        lines(o, &cases, |(v, p, decl)| {
            Ok(match decl {
                Decl::Void => format!("            {c}::{v} => ::xdr::Pack::pack(&{p}, out),"),
                d => format!(
                    "            {c}::{v}(v) => {{ ::xdr::Pack::pack(&{p}, out); {} }}",
                    self.pack(d, "*v")?
                ),
            })
        })?;
        match &u.default {
            None => {}
            Some(Decl::Void) => writeln!(
                o,
                "            {c}::Default(c) => ::xdr::Pack::pack(c, out),"
            )
            .unwrap(),
            Some(d) => writeln!(
                o,
                "            {c}::Default(c, v) => {{ ::xdr::Pack::pack(c, out); {} }}",
                self.pack(d, "*v")?
            )
            .unwrap(),
        }
        writeln!(o, "        }}\n    }}\n}}").unwrap();
        writeln!(o, "impl ::xdr::Unpack for {c} {{\n    #[allow(unreachable_patterns)]\n    fn unpack(d: &mut ::xdr::Decoder) -> ::xdr::Result<Self> {{\n        let c = <{} as ::xdr::Unpack>::unpack(d)?;\n        Ok(match c {{", dt.0).unwrap();
        lines(o, &cases, |(v, p, decl)| {
            Ok(match decl {
                Decl::Void => format!("            {p} => {c}::{v},"),
                d => format!("            {p} => {c}::{v}({}),", self.unpack(d)?),
            })
        })?;
        match &u.default {
            None => writeln!(o, "            c => return Err(::xdr::Error::BadUnion {{ name: \"{n}\", value: c as i32 }}),").unwrap(),
            Some(Decl::Void) => writeln!(o, "            c => {c}::Default(c),").unwrap(),
            Some(d) => writeln!(o, "            c => {c}::Default(c, {}),", self.unpack(d)?).unwrap(),
        }
        writeln!(o, "        }})\n    }}\n}}").unwrap();
        Ok(())
    }

    // ---- property tests -------------------------------------------------

    fn strat_ty(&self, ty: &Ty) -> R<String> {
        Ok(match ty {
            Ty::Named(n) => {
                if let Some(d) = self.typedefs.get(n) {
                    if self.alias_ty(d)?.is_some() {
                        return self.strat(d);
                    }
                }
                if let Some(Body::Union(u)) = self.types.get(n) {
                    if let Some(arm) = self.option_arm(u) {
                        return Ok(format!(
                            "proptest::option::of({}).boxed()",
                            self.strat(arm)?
                        ));
                    }
                }
                format!("any::<{}>().boxed()", camel(n))
            }
            t => format!("any::<{}>().boxed()", self.prim(t)?),
        })
    }

    fn strat(&self, d: &Decl) -> R<String> {
        let small = |m: &Option<Value>| -> R<i128> {
            Ok(m.as_ref()
                .map(|v| self.value(v))
                .transpose()?
                .unwrap_or(i128::MAX)
                .min(24))
        };
        Ok(match d {
            Decl::Void => "Just(()).boxed()".into(),
            Decl::Plain { ty, .. } => self.strat_ty(ty)?,
            Decl::FixedOpaque { len, .. } => {
                let n = self.size(len)?;
                format!("proptest::collection::vec(any::<u8>(), {n}).prop_map(|v| <[u8; {n}]>::try_from(v).unwrap()).boxed()")
            }
            Decl::VarOpaque { max, .. } | Decl::Str { max, .. } => {
                format!("proptest::collection::vec(any::<u8>(), 0..={}).prop_map(::bytes::Bytes::from).boxed()", small(max)?)
            }
            Decl::FixedArray { ty, len, .. } => {
                let n = self.size(len)?;
                format!(
                    "proptest::collection::vec({}, {n}).prop_map(|v| <[{}; {n}]>::try_from(v).unwrap_or_else(|_| unreachable!())).boxed()",
                    self.strat_ty(ty)?,
                    self.prim(ty)?
                )
            }
            Decl::VarArray { ty, max, .. } => {
                format!(
                    "proptest::collection::vec({}, 0..={}).boxed()",
                    self.strat_ty(ty)?,
                    small(max)?.min(3)
                )
            }
            Decl::Optional { ty, .. } if self.is_list(ty) => {
                format!(
                    "proptest::collection::vec({}, 0..=3).boxed()",
                    self.strat_ty(ty)?
                )
            }
            Decl::Optional { ty, .. } => format!(
                "proptest::option::of({}.prop_map(Box::new)).boxed()",
                self.strat_ty(ty)?
            ),
        })
    }

    fn arbitrary(&self, o: &mut String, n: &str) -> R<()> {
        let c = camel(n);
        let body = if let Some(d) = self.typedefs.get(n) {
            format!("{}.prop_map({c}).boxed()", self.strat(d)?)
        } else {
            match &self.types[n] {
                Body::Enum(items) => {
                    let vs: Vec<String> = items.iter().map(|(m, _)| format!("{c}::{m}")).collect();
                    format!("proptest::sample::select(vec![{}]).boxed()", vs.join(", "))
                }
                Body::Struct(ds) => {
                    let ds: Vec<&Decl> = self
                        .struct_fields(n, ds)
                        .iter()
                        .filter(|d| **d != Decl::Void)
                        .collect();
                    if ds.is_empty() {
                        format!("Just({c} {{}}).boxed()")
                    } else {
                        let mut tuples = Vec::new();
                        let mut pats = Vec::new();
                        for (ci, chunk) in ds.chunks(8).enumerate() {
                            let mut ss = Vec::new();
                            let mut ps = Vec::new();
                            for (i, d) in chunk.iter().enumerate() {
                                ss.push(self.strat(d)?);
                                ps.push(format!("a{}", ci * 8 + i));
                            }
                            tuples.push(format!("({},)", ss.join(", ")));
                            pats.push(format!("({},)", ps.join(", ")));
                        }
                        let fields: Vec<String> = ds
                            .iter()
                            .enumerate()
                            .map(|(i, d)| format!("{}: a{i}", field(d.name().unwrap())))
                            .collect();
                        format!(
                            "({},).prop_map(|({},)| {c} {{ {} }}).boxed()",
                            tuples.join(", "),
                            pats.join(", "),
                            fields.join(", ")
                        )
                    }
                }
                Body::Union(u) => {
                    let dt = self.disc(u)?;
                    let mut arms = Vec::new();
                    let mut covered = Vec::new();
                    for a in &u.arms {
                        for l in &a.labels {
                            let (v, p) = self.label(&dt, l)?;
                            covered.push(p);
                            arms.push(match &a.decl {
                                Decl::Void => format!("Just({c}::{v}).boxed()"),
                                d => format!("{}.prop_map({c}::{v}).boxed()", self.strat(d)?),
                            });
                        }
                    }
                    if let Some(d) = &u.default {
                        let cs = match &dt.1 {
                            Some(en) => {
                                let Body::Enum(items) = &self.types[en] else {
                                    unreachable!()
                                };
                                let mut covered_vals = Vec::new();
                                for a in &u.arms {
                                    for l in &a.labels {
                                        covered_vals.push(self.value(l)?);
                                    }
                                }
                                let rest: Vec<String> = self
                                    .enum_members(en, items)?
                                    .into_iter()
                                    .filter(|(_, v, dup)| {
                                        dup.is_none() && !covered_vals.contains(&(*v as i128))
                                    })
                                    .map(|(m, _, _)| format!("{}::{m}", dt.0))
                                    .collect();
                                (!rest.is_empty()).then(|| {
                                    format!("proptest::sample::select(vec![{}])", rest.join(", "))
                                })
                            }
                            None => Some(format!(
                                "any::<{}>().prop_filter(\"a label\", |c| ![{}].contains(c))",
                                dt.0,
                                covered.join(", ")
                            )),
                        };
                        if let Some(cs) = cs {
                            arms.push(match d {
                                Decl::Void => format!("{cs}.prop_map({c}::Default).boxed()"),
                                d => format!(
                                    "({cs}, {}).prop_map(|(c, v)| {c}::Default(c, v)).boxed()",
                                    self.strat(d)?
                                ),
                            });
                        }
                    }
                    format!(
                        "proptest::strategy::Union::new(vec![{}]).boxed()",
                        arms.join(", ")
                    )
                }
            }
        };
        writeln!(o, "    impl Arbitrary for {c} {{\n        type Parameters = ();\n        type Strategy = BoxedStrategy<Self>;\n        fn arbitrary_with(_: ()) -> Self::Strategy {{ {body} }}\n    }}").unwrap();
        Ok(())
    }

    fn tests(&mut self, names: &[String]) -> R<()> {
        let mut o = String::new();
        writeln!(o, "#[cfg(test)]\n#[allow(unused_imports, clippy::all)]\nmod xdr_generated_tests {{\n    use super::*;\n    use proptest::prelude::*;").unwrap();
        for n in names {
            self.arbitrary(&mut o, n)?;
        }
        o.push_str(TEST_HELPERS);
        for n in names {
            let c = camel(n);
            let l = n.to_lowercase();
            writeln!(
                o,
                "    #[test]\n    fn roundtrip_{l}() {{\n        roundtrip::<{c}>();\n    }}"
            )
            .unwrap();
            writeln!(
                o,
                "    #[test]\n    fn garbage_{l}() {{\n        garbage::<{c}>();\n    }}"
            )
            .unwrap();
        }
        writeln!(o, "}}").unwrap();
        self.out.push_str(&o);
        Ok(())
    }
}

/// The bodies of the generated tests, generic over the type under test, so
/// that each type adds two one-line tests rather than two `proptest!`
/// expansions (which made a spec the size of NFSv4 slow to compile).
const TEST_HELPERS: &str = r#"
    fn config() -> proptest::test_runner::Config {
        proptest::test_runner::Config {
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        }
    }

    /// Random values encode to a multiple of four bytes and decode back to themselves.
    fn roundtrip<T>()
    where
        T: Arbitrary + ::xdr::Pack + ::xdr::Unpack + PartialEq + std::fmt::Debug,
    {
        let mut runner = proptest::test_runner::TestRunner::new(config());
        let result = runner.run(&any::<T>(), |v| {
            let b = ::xdr::to_bytes(&v);
            let mut d = ::xdr::Decoder::new(b.clone());
            prop_assert_eq!(<T as ::xdr::Unpack>::unpack(&mut d).unwrap(), v);
            prop_assert_eq!(d.remaining(), 0);
            prop_assert_eq!(b.len() % 4, 0);
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }

    /// Random bytes decode to a value or an error, never a panic.
    fn garbage<T: ::xdr::Unpack>() {
        let mut runner = proptest::test_runner::TestRunner::new(config());
        let result = runner.run(&proptest::collection::vec(any::<u8>(), 0..256), |v| {
            let _ = <T as ::xdr::Unpack>::unpack(&mut ::xdr::Decoder::new(v.into()));
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }
"#;
