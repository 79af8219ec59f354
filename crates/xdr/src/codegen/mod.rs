//! The XDR code generator: reads `.x` specifications (RFC 4506, plus rpcgen
//! `program` blocks) and writes Rust. Call [`generate_file`] from a build script.

mod emit;
pub mod parse;

pub use emit::camel;

/// Generates Rust source for one specification.
pub fn generate(src: &str) -> Result<String, String> {
    let defs = parse::parse(src).map_err(|e| e.to_string())?;
    emit::Emitter::new(defs)?.emit()
}

/// Reads `spec`, writes the generated code to `out`; errors name the file and line.
pub fn generate_file(spec: &std::path::Path, out: &std::path::Path) -> Result<(), String> {
    let src = std::fs::read_to_string(spec).map_err(|e| format!("{}: {e}", spec.display()))?;
    let code = generate(&src).map_err(|e| format!("{}: {e}", spec.display()))?;
    std::fs::write(out, code).map_err(|e| format!("{}: {e}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::generate;

    #[test]
    fn sixty_four_bit_constants() {
        let code = generate(
            "const A = 0xffffffffffffffff; const B = 0x7fffffff; const C = -1; const D = 0x100000000;",
        )
        .unwrap();
        assert!(
            code.contains("pub const A: u64 = 18446744073709551615;"),
            "{code}"
        );
        assert!(code.contains("pub const B: u32 = 2147483647;"));
        assert!(code.contains("pub const C: i32 = -1;"));
        assert!(code.contains("pub const D: u64 = 4294967296;"));
        let e = generate("const A = 0x1ffffffffffffffff;").unwrap_err();
        assert!(e.contains("fits neither"), "{e}");
    }

    #[test]
    fn duplicate_enum_values_become_aliases() {
        let code = generate("enum e { A = 1, B = 2, C = 1 };").unwrap();
        assert!(code.contains("pub const C: Self = E::A;"), "{code}");
        assert!(!code.contains("    C = 1,"));
    }

    #[test]
    fn colliding_names_are_reported() {
        let e = generate("struct foo_bar { int a; }; struct Foo_Bar { int b; };").unwrap_err();
        assert!(e.contains("both become the Rust name FooBar"), "{e}");
        let e = generate("typedef int option;").unwrap_err();
        assert!(e.contains("Option"), "{e}");
    }

    #[test]
    fn rfc_union_shapes() {
        let src = r#"
            enum op { OP_A = 3, OP_B = 4 };
            typedef op op_alias;
            struct a { int type; };
            union by_alias switch (op_alias o) { case OP_A: a x; case OP_B: void; };
            union by_uint switch (unsigned o) { case OP_A: a x; case OP_B: void; };
            union both_bool switch (bool b) { case TRUE: a x; case FALSE: int y; };
            struct fixed { a items[2]; unsigned long n; };
        "#;
        let code = generate(src).unwrap();
        assert!(code.contains("pub r#type: i32,"), "{code}");
        assert!(code.contains("3u32 => ByUint::OP_A("), "{code}");
        assert!(code.contains("Op::OP_A => ByAlias::OP_A("), "{code}");
        assert!(code.contains("true => BothBool::TRUE("), "{code}");
        assert!(code.contains("pub items: [A; 2],"), "{code}");
    }
}
