//! Reads the principal names in an MIT keytab file (never the keys), so the
//! server can say at start when its keytab holds no `nfs/` service key
//! instead of failing every client's context later. Format: MIT's
//! keytab.txt (versions 0x0501 and 0x0502).

use std::path::Path;

/// The principals (`nfs/host@REALM`) of a keytab file's live entries.
pub fn principals(bytes: &[u8]) -> Result<Vec<String>, String> {
    let bad = |what: &str| format!("not an MIT keytab ({what})");
    if bytes.len() < 2 || bytes[0] != 5 || !(1..=2).contains(&bytes[1]) {
        return Err(bad("bad version header"));
    }
    let v1 = bytes[1] == 1;
    // Version 1 writes numbers in the host's order; version 2 big-endian.
    let u16_at = |b: &[u8]| -> u16 {
        let a = [b[0], b[1]];
        if v1 {
            u16::from_ne_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    };
    let i32_at = |b: &[u8]| -> i32 {
        let a = [b[0], b[1], b[2], b[3]];
        if v1 {
            i32::from_ne_bytes(a)
        } else {
            i32::from_be_bytes(a)
        }
    };
    let mut out = Vec::new();
    let mut at = 2;
    while at + 4 <= bytes.len() {
        let size = i32_at(&bytes[at..]);
        at += 4;
        let len = size.unsigned_abs() as usize;
        if len > bytes.len() - at {
            return Err(bad("entry runs past the end"));
        }
        let entry = &bytes[at..at + len];
        at += len;
        if size <= 0 {
            continue; // a hole left by a deleted entry
        }
        let mut p = 0;
        let mut take = |n: usize| -> Result<&[u8], String> {
            let s = entry.get(p..p + n).ok_or_else(|| bad("short entry"))?;
            p += n;
            Ok(s)
        };
        let mut count = u16_at(take(2)?) as usize;
        if v1 {
            count = count.saturating_sub(1); // version 1 counts the realm too
        }
        let mut string = || -> Result<String, String> {
            let n = u16_at(take(2)?) as usize;
            Ok(String::from_utf8_lossy(take(n)?).into_owned())
        };
        let realm = string()?;
        let parts = (0..count)
            .map(|_| string())
            .collect::<Result<Vec<_>, _>>()?;
        let name = format!("{}@{realm}", parts.join("/"));
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// The keytab file behind a `KRB5_KTNAME` value (`FILE:`, `WRFILE:` or a
/// bare path); None for other kinds (MEMORY:, KEYRING: …), not checked.
pub fn file_of(ktname: &str) -> Option<&Path> {
    match ktname.split_once(':') {
        Some(("FILE" | "WRFILE", p)) => Some(Path::new(p)),
        Some((kind, _)) if kind.len() > 1 && !kind.contains('/') => None,
        _ => Some(Path::new(ktname)),
    }
}

/// Checks that the keytab exists and holds an `nfs/` service key: the
/// error says what it holds instead.
pub fn check(ktname: &str) -> Result<Vec<String>, String> {
    let Some(path) = file_of(ktname) else {
        return Ok(vec![]);
    };
    let bytes = std::fs::read(path).map_err(|e| format!("keytab {}: {e}", path.display()))?;
    let names = principals(&bytes).map_err(|e| format!("keytab {}: {e}", path.display()))?;
    let nfs: Vec<String> = names
        .iter()
        .filter(|n| n.starts_with("nfs/"))
        .cloned()
        .collect();
    if nfs.is_empty() {
        return Err(format!(
            "keytab {} holds no nfs/<host> service key (it holds: {}); add one, e.g. kadmin -q \"ktadd -k {} nfs/$(hostname -f)\"",
            path.display(),
            if names.is_empty() { "nothing".to_string() } else { names.join(", ") },
            path.display()
        ));
    }
    Ok(nfs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 2 entry: principal components, realm, a fake key.
    fn entry(realm: &str, parts: &[&str]) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend((parts.len() as u16).to_be_bytes());
        for s in std::iter::once(&realm).chain(parts) {
            e.extend((s.len() as u16).to_be_bytes());
            e.extend(s.as_bytes());
        }
        e.extend(1u32.to_be_bytes()); // name type
        e.extend(0u32.to_be_bytes()); // timestamp
        e.push(2); // kvno
        e.extend(18u16.to_be_bytes()); // aes256
        e.extend(32u16.to_be_bytes());
        e.extend([0x42; 32]);
        let mut out = (e.len() as i32).to_be_bytes().to_vec();
        out.extend(e);
        out
    }

    #[test]
    fn names_holes_and_errors() {
        let mut kt = vec![5, 2];
        kt.extend(entry("EX.COM", &["host", "a.ex.com"]));
        kt.extend((-8i32).to_be_bytes()); // a hole
        kt.extend([0; 8]);
        kt.extend(entry("EX.COM", &["nfs", "a.ex.com"]));
        kt.extend(entry("EX.COM", &["nfs", "a.ex.com"])); // another enctype
        assert_eq!(
            principals(&kt).unwrap(),
            vec!["host/a.ex.com@EX.COM", "nfs/a.ex.com@EX.COM"]
        );
        assert!(principals(&[5, 3]).is_err());
        assert!(principals(&kt[..kt.len() - 3]).is_err());
        assert_eq!(file_of("FILE:/etc/k"), Some(Path::new("/etc/k")));
        assert_eq!(file_of("/etc/k"), Some(Path::new("/etc/k")));
        assert_eq!(file_of("MEMORY:x"), None);

        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("kt");
        let mut host_only = vec![5, 2];
        host_only.extend(entry("EX.COM", &["host", "a.ex.com"]));
        std::fs::write(&f, &host_only).unwrap();
        let e = check(&format!("FILE:{}", f.display())).unwrap_err();
        assert!(
            e.contains("no nfs/<host> service key") && e.contains("host/a.ex.com@EX.COM"),
            "{e}"
        );
        assert!(!e.contains("BBBB"), "never the key");
        std::fs::write(&f, &kt).unwrap();
        assert_eq!(
            check(f.to_str().unwrap()).unwrap(),
            vec!["nfs/a.ex.com@EX.COM"]
        );
        assert!(check("/nonexistent/kt")
            .unwrap_err()
            .contains("No such file"));
    }
}
