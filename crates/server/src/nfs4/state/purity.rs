//! The state core stays pure: no runtime, sockets, files or clock in its
//! sources (test-only files aside), so every state is reachable from a
//! unit test or the simulator with time passed in.

use std::path::Path;

/// Test-only files, which may use the clock.
const EXEMPT: [&str; 4] = ["tests.rs", "audit.rs", "purity.rs", "copy_tests.rs"];

const FORBIDDEN: [&str; 5] = [
    "tokio",
    "std::fs",
    "std::net",
    "Instant::now",
    "SystemTime::now",
];

fn check(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    for f in FORBIDDEN {
        assert!(!text.contains(f), "{} mentions {f}", path.display());
    }
}

#[test]
fn state_sources_do_no_io_and_read_no_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    for e in std::fs::read_dir(src.join("nfs4/state")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".rs") && !EXEMPT.contains(&name.as_str()) {
            check(&path);
            checked += 1;
        }
    }
    assert!(checked >= 2, "mod.rs and session.rs at least");
    // The grace period both protocols share is part of the core.
    check(&src.join("grace.rs"));
}
