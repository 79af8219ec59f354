//! Generates Rust types and codecs from every `specs/*.x` file.
fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=specs");
    for entry in std::fs::read_dir("specs").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "x") {
            println!("cargo:rerun-if-changed={}", path.display());
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            if let Err(e) = xdr::codegen::generate_file(&path, &out.join(format!("{stem}.rs"))) {
                panic!("XDR generation failed: {e}");
            }
        }
    }
}
