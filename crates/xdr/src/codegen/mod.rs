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
