//! Lexer and recursive-descent parser for the XDR language (RFC 4506 section 6)
//! plus the rpcgen `program` definitions of RFC 5531 section 12.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Num(i128),
    Name(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Int,
    UInt,
    Hyper,
    UHyper,
    Bool,
    Named(String),
    /// An inline `struct { ... }`, `enum { ... }` or `union switch ...`,
    /// named by the generator after the declaration that holds it.
    Inline(Box<Body>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decl {
    Void,
    Plain {
        name: String,
        ty: Ty,
    },
    FixedArray {
        name: String,
        ty: Ty,
        len: Value,
    },
    VarArray {
        name: String,
        ty: Ty,
        max: Option<Value>,
    },
    FixedOpaque {
        name: String,
        len: Value,
    },
    VarOpaque {
        name: String,
        max: Option<Value>,
    },
    Str {
        name: String,
        max: Option<Value>,
    },
    Optional {
        name: String,
        ty: Ty,
    },
}

impl Decl {
    pub fn name(&self) -> Option<&str> {
        match self {
            Decl::Void => None,
            Decl::Plain { name, .. }
            | Decl::FixedArray { name, .. }
            | Decl::VarArray { name, .. }
            | Decl::FixedOpaque { name, .. }
            | Decl::VarOpaque { name, .. }
            | Decl::Str { name, .. }
            | Decl::Optional { name, .. } => Some(name),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Arm {
    pub labels: Vec<Value>,
    pub decl: Decl,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UnionBody {
    pub disc: Decl,
    pub arms: Vec<Arm>,
    pub default: Option<Decl>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Struct(Vec<Decl>),
    Enum(Vec<(String, Value)>),
    Union(UnionBody),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Procedure {
    pub name: String,
    pub number: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub name: String,
    pub number: Value,
    pub procedures: Vec<Procedure>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Definition {
    Const(String, Value),
    Typedef(Decl),
    Type(String, Body),
    Program {
        name: String,
        number: Value,
        versions: Vec<Version>,
    },
}

#[derive(Debug)]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Num(i128),
    Punct(char),
}

struct Lexer {
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    let (mut i, mut line) = (0, 1);
    let mut at_line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            at_line_start = true;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // rpcgen passes lines starting with '%' through to C; they mean nothing here.
        if at_line_start && c == b'%' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        at_line_start = false;
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            if i + 1 >= b.len() {
                return Err(ParseError {
                    line,
                    msg: "unterminated comment".into(),
                });
            }
            i += 2;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(src[s..i].to_string()), line));
            continue;
        }
        if c.is_ascii_digit() || (c == b'-' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let s = i;
            i += 1;
            while i < b.len() && (b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            let text = &src[s..i];
            let (neg, t) = match text.strip_prefix('-') {
                Some(t) => (true, t),
                None => (false, text),
            };
            let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                i128::from_str_radix(h, 16)
            } else if t.len() > 1 && t.starts_with('0') {
                i128::from_str_radix(&t[1..], 8)
            } else {
                t.parse::<i128>()
            }
            .map_err(|_| ParseError {
                line,
                msg: format!("bad number {text:?}"),
            })?;
            out.push((Tok::Num(if neg { -v } else { v }), line));
            continue;
        }
        if b"{}[]<>()=;,:*".contains(&c) {
            out.push((Tok::Punct(c as char), line));
            i += 1;
            continue;
        }
        return Err(ParseError {
            line,
            msg: format!("unexpected character {:?}", c as char),
        });
    }
    Ok(out)
}

pub fn parse(src: &str) -> Result<Vec<Definition>, ParseError> {
    let mut p = Lexer {
        toks: lex(src)?,
        pos: 0,
    };
    let mut defs = Vec::new();
    while p.pos < p.toks.len() {
        defs.push(p.definition()?);
    }
    Ok(defs)
}

impl Lexer {
    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map(|t| t.1)
            .unwrap_or(0)
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T, ParseError> {
        let found = match self.toks.get(self.pos) {
            Some((Tok::Ident(s), _)) => format!("'{s}'"),
            Some((Tok::Num(n), _)) => n.to_string(),
            Some((Tok::Punct(c), _)) => format!("'{c}'"),
            None => "end of file".into(),
        };
        Err(ParseError {
            line: self.line(),
            msg: format!("expected {}, found {found}", msg.into()),
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(s)) if s == w)
    }

    fn punct(&mut self, c: char) -> Result<(), ParseError> {
        if self.is_punct(c) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(format!("'{c}'"))
        }
    }

    fn word(&mut self, w: &str) -> Result<(), ParseError> {
        if self.is_word(w) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(format!("'{w}'"))
        }
    }

    fn ident(&mut self) -> Result<String, ParseError> {
        match self.peek() {
            Some(Tok::Ident(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => self.err("an identifier"),
        }
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        match self.peek() {
            Some(Tok::Num(n)) => {
                let n = *n;
                self.pos += 1;
                Ok(Value::Num(n))
            }
            Some(Tok::Ident(_)) => Ok(Value::Name(self.ident()?)),
            _ => self.err("a number or constant name"),
        }
    }

    fn definition(&mut self) -> Result<Definition, ParseError> {
        let kw = self.ident()?;
        let d = match kw.as_str() {
            "const" => {
                let name = self.ident()?;
                self.punct('=')?;
                Definition::Const(name, self.value()?)
            }
            "typedef" => Definition::Typedef(self.declaration()?),
            "struct" | "enum" | "union" => {
                let name = self.ident()?;
                Definition::Type(name, self.body(&kw)?)
            }
            "program" => return self.program(),
            _ => {
                self.pos -= 1;
                return self.err("'const', 'typedef', 'struct', 'enum', 'union' or 'program'");
            }
        };
        self.punct(';')?;
        Ok(d)
    }

    fn program(&mut self) -> Result<Definition, ParseError> {
        let name = self.ident()?;
        self.punct('{')?;
        let mut versions = Vec::new();
        while !self.is_punct('}') {
            self.word("version")?;
            let vname = self.ident()?;
            self.punct('{')?;
            let mut procedures = Vec::new();
            while !self.is_punct('}') {
                self.type_spec()?; // result type: the procedure table only needs names and numbers
                let pname = self.ident()?;
                self.punct('(')?;
                loop {
                    self.type_spec()?;
                    if self.is_punct(',') {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                self.punct(')')?;
                self.punct('=')?;
                procedures.push(Procedure {
                    name: pname,
                    number: self.value()?,
                });
                self.punct(';')?;
            }
            self.punct('}')?;
            self.punct('=')?;
            versions.push(Version {
                name: vname,
                number: self.value()?,
                procedures,
            });
            self.punct(';')?;
        }
        self.punct('}')?;
        self.punct('=')?;
        let number = self.value()?;
        self.punct(';')?;
        Ok(Definition::Program {
            name,
            number,
            versions,
        })
    }

    fn body(&mut self, kw: &str) -> Result<Body, ParseError> {
        match kw {
            "struct" => {
                self.punct('{')?;
                let mut decls = Vec::new();
                while !self.is_punct('}') {
                    decls.push(self.declaration()?);
                    self.punct(';')?;
                }
                self.punct('}')?;
                Ok(Body::Struct(decls))
            }
            "enum" => {
                self.punct('{')?;
                let mut items = Vec::new();
                loop {
                    let n = self.ident()?;
                    self.punct('=')?;
                    items.push((n, self.value()?));
                    if self.is_punct(',') {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                self.punct('}')?;
                Ok(Body::Enum(items))
            }
            _ => {
                self.word("switch")?;
                self.punct('(')?;
                let disc = self.declaration()?;
                self.punct(')')?;
                self.punct('{')?;
                let mut arms = Vec::new();
                let mut default = None;
                while !self.is_punct('}') {
                    if self.is_word("default") {
                        self.pos += 1;
                        self.punct(':')?;
                        default = Some(self.declaration()?);
                        self.punct(';')?;
                        continue;
                    }
                    let mut labels = Vec::new();
                    while self.is_word("case") {
                        self.pos += 1;
                        labels.push(self.value()?);
                        self.punct(':')?;
                    }
                    if labels.is_empty() {
                        return self.err("'case', 'default' or '}'");
                    }
                    let decl = self.declaration()?;
                    self.punct(';')?;
                    arms.push(Arm { labels, decl });
                }
                self.punct('}')?;
                Ok(Body::Union(UnionBody {
                    disc,
                    arms,
                    default,
                }))
            }
        }
    }

    fn type_spec(&mut self) -> Result<Ty, ParseError> {
        let w = self.ident()?;
        Ok(match w.as_str() {
            "unsigned" => {
                if self.is_word("int") || self.is_word("long") {
                    self.pos += 1;
                    Ty::UInt
                } else if self.is_word("hyper") {
                    self.pos += 1;
                    Ty::UHyper
                } else {
                    Ty::UInt
                }
            }
            "int" | "long" | "int32_t" => Ty::Int,
            "uint32_t" => Ty::UInt,
            "hyper" | "int64_t" => Ty::Hyper,
            "uint64_t" => Ty::UHyper,
            "bool" => Ty::Bool,
            "void" => Ty::Named("void".into()),
            "float" | "double" | "quadruple" => {
                self.pos -= 1;
                return self.err("a type Tarn's generator supports (floating point is not used by its protocols)");
            }
            "struct" | "enum" | "union" => {
                if !self.is_punct('{') && !self.is_word("switch") {
                    // `struct foo x;` refers to a named type, C style.
                    Ty::Named(self.ident()?)
                } else {
                    Ty::Inline(Box::new(self.body(&w)?))
                }
            }
            _ => Ty::Named(w),
        })
    }

    fn declaration(&mut self) -> Result<Decl, ParseError> {
        if self.is_word("void") {
            self.pos += 1;
            return Ok(Decl::Void);
        }
        if self.is_word("opaque") || self.is_word("string") {
            let kw = self.ident()?;
            let name = self.ident()?;
            if kw == "opaque" && self.is_punct('[') {
                self.pos += 1;
                let len = self.value()?;
                self.punct(']')?;
                return Ok(Decl::FixedOpaque { name, len });
            }
            self.punct('<')?;
            let max = if self.is_punct('>') {
                None
            } else {
                Some(self.value()?)
            };
            self.punct('>')?;
            return Ok(if kw == "opaque" {
                Decl::VarOpaque { name, max }
            } else {
                Decl::Str { name, max }
            });
        }
        let ty = self.type_spec()?;
        if self.is_punct('*') {
            self.pos += 1;
            return Ok(Decl::Optional {
                name: self.ident()?,
                ty,
            });
        }
        let name = self.ident()?;
        if self.is_punct('[') {
            self.pos += 1;
            let len = self.value()?;
            self.punct(']')?;
            return Ok(Decl::FixedArray { name, ty, len });
        }
        if self.is_punct('<') {
            self.pos += 1;
            let max = if self.is_punct('>') {
                None
            } else {
                Some(self.value()?)
            };
            self.punct('>')?;
            return Ok(Decl::VarArray { name, ty, max });
        }
        Ok(Decl::Plain { name, ty })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_rfc_shapes() {
        let src = r#"
            const MAXLEN = 0x10; /* comment */
            % passthrough line
            typedef opaque fh<MAXLEN>;
            enum color { RED = 0, GREEN = 1 };
            struct node { int v; node *next; };
            union res switch (color c) { case RED: int r; case GREEN: void; default: void; };
            struct s { struct { int a; } inner; unsigned hyper h; string name<>; };
            program P { version V { void NULLPROC(void) = 0; res GET(fh) = 1; } = 3; } = 100003;
        "#;
        let defs = parse(src).unwrap();
        assert_eq!(defs.len(), 7);
        assert!(matches!(&defs[0], Definition::Const(n, Value::Num(16)) if n == "MAXLEN"));
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("const A = 1;\nstruct s { int };").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("identifier"), "{e}");
    }
}
