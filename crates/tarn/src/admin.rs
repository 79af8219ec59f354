//! `tarn exports` (what a running server exports to whom, like
//! `showmount -e` and `exportfs -v`) and `tarn reload` (re-read the
//! configuration and say what changed), over the admin socket. The server
//! side builds the JSON answers here; the tools print them.

use crate::config::ExportConfig;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn sec_names(e: &ExportConfig) -> Vec<&'static str> {
    e.sec.iter().map(|f| f.name()).collect()
}

/// The server's answer to `exports`; `id` gives the export id of a directory.
pub fn exports_json(
    exports: &[ExportConfig],
    id: impl Fn(&Path) -> Option<u32>,
    source: Option<&Path>,
) -> Value {
    let list: Vec<Value> = exports
        .iter()
        .map(|e| {
            let rules: Vec<Value> = e
                .rules
                .iter()
                .map(|r| {
                    json!({
                        "client": r.client.to_string(),
                        "rw": r.rw,
                        "squash": match r.squash {
                            server::export::Squash::Root => "root",
                            server::export::Squash::All => "all",
                            server::export::Squash::None => "none",
                        },
                        "anonuid": r.anon_uid,
                        "anongid": r.anon_gid,
                        "secure": r.secure,
                        "options": r.describe(),
                    })
                })
                .collect();
            json!({
                "id": id(&e.path),
                "path": e.path.display().to_string(),
                "pseudo": e.pseudo,
                "sec": sec_names(e),
                "delegations": e.delegations.to_string(),
                "rules": rules,
            })
        })
        .collect();
    json!({
        "source": source.map(|s| s.display().to_string()),
        "exports": list,
    })
}

/// What a reload changes, one line per difference, in the new file's order
/// (removed exports last).
pub fn diff(old: &[ExportConfig], new: &[ExportConfig]) -> Vec<String> {
    let mut out = Vec::new();
    let rules = |e: &ExportConfig| -> Vec<(String, String)> {
        e.rules
            .iter()
            .map(|r| (r.client.to_string(), r.describe()))
            .collect()
    };
    for n in new {
        let p = n.path.display();
        let Some(o) = old.iter().find(|o| o.path == n.path) else {
            let to: Vec<String> = rules(n).iter().map(|(c, d)| format!("{c} ({d})")).collect();
            out.push(format!(
                "added {p} as {} (sec={}) to {}",
                n.pseudo,
                sec_names(n).join(","),
                if to.is_empty() {
                    "nobody".to_string()
                } else {
                    to.join(", ")
                }
            ));
            continue;
        };
        if o.pseudo != n.pseudo {
            out.push(format!(
                "changed {p}: mounted as {} (was {})",
                n.pseudo, o.pseudo
            ));
        }
        if o.sec != n.sec {
            out.push(format!(
                "changed {p}: sec={} (was {})",
                sec_names(n).join(","),
                sec_names(o).join(",")
            ));
        }
        if o.delegations != n.delegations {
            out.push(format!(
                "changed {p}: delegations {} (was {})",
                n.delegations, o.delegations
            ));
        }
        let (or, nr) = (rules(o), rules(n));
        for (c, d) in &nr {
            match or.iter().find(|(oc, _)| oc == c) {
                None => out.push(format!("changed {p}: {c} now allowed: {d}")),
                Some((_, od)) if od != d => out.push(format!("changed {p}: {c}: {d} (was {od})")),
                Some(_) => {}
            }
        }
        for (c, _) in &or {
            if !nr.iter().any(|(nc, _)| nc == c) {
                out.push(format!("changed {p}: {c} no longer allowed"));
            }
        }
        let order = |v: &[(String, String)], other: &[(String, String)]| -> Vec<String> {
            v.iter()
                .filter(|(c, _)| other.iter().any(|(x, _)| x == c))
                .map(|(c, _)| c.clone())
                .collect()
        };
        if order(&or, &nr) != order(&nr, &or) {
            out.push(format!(
                "changed {p}: rules reordered (the first matching rule wins)"
            ));
        }
    }
    for o in old {
        if !new.iter().any(|n| n.path == o.path) {
            out.push(format!(
                "removed {} (was mounted as {})",
                o.path.display(),
                o.pseudo
            ));
        }
    }
    out
}

/// `tarn exports`: prints the answer to `exports`.
pub fn print_exports(v: &Value) {
    if let Some(s) = v["source"].as_str() {
        println!("from {s}:");
    }
    for e in v["exports"].as_array().into_iter().flatten() {
        let (path, pseudo) = (
            e["path"].as_str().unwrap_or("?"),
            e["pseudo"].as_str().unwrap_or("?"),
        );
        let sec = strings(&e["sec"]);
        let mounted = if path == pseudo {
            String::new()
        } else {
            format!(" (mounted as {pseudo})")
        };
        println!(
            "{path}{mounted}  sec={} delegations={}",
            sec.join(","),
            e["delegations"].as_str().unwrap_or("?")
        );
        let mut any = false;
        for r in e["rules"].as_array().into_iter().flatten() {
            let c = r["client"].as_str().unwrap_or("?");
            any |= c == "*";
            println!("  {c:<24} {}", r["options"].as_str().unwrap_or("?"));
        }
        if !any {
            println!("  {:<24} no access", "anyone else");
        }
    }
}

/// The strings of a JSON array (none if `v` is not one).
fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str())
        .collect()
}

/// `tarn reload`: asks over the admin socket and prints what changed. A
/// server whose socket does not answer gets SIGHUP, sent to the PID in
/// STATE_DIR/lock (it then logs what changed).
pub fn reload(socket: &Path, state_dir: &Path) -> Result<(), String> {
    match metrics::endpoint::command(socket, "reload") {
        Ok(v) => {
            let changes = strings(&v["changes"]);
            println!(
                "reloaded {}: {} export(s){}",
                v["source"].as_str().unwrap_or("?"),
                v["exports"].as_u64().unwrap_or(0),
                if changes.is_empty() {
                    ", nothing changed"
                } else {
                    ""
                }
            );
            for c in changes {
                println!("  {c}");
            }
            Ok(())
        }
        Err(e) if e.starts_with("cannot connect") => {
            let lock = state_dir.join(crate::statelock::LOCK_FILE);
            let pid = std::fs::read_to_string(&lock)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .ok_or_else(|| format!("{e}; and no server PID in {}", lock.display()))?;
            let ok = std::process::Command::new("kill")
                .args(["-HUP", &pid.to_string()])
                .status()
                .map_err(|k| format!("{e}; cannot run kill: {k}"))?
                .success();
            if !ok {
                return Err(format!(
                    "{e}; and SIGHUP to PID {pid} (from {}) failed",
                    lock.display()
                ));
            }
            println!("the admin socket did not answer ({e}); sent SIGHUP to PID {pid}: its log says what changed");
            Ok(())
        }
        Err(e) => Err(format!("reload refused: {e}")),
    }
}

/// The state directory a socket path lives in (for the lock file).
pub fn state_dir_of(socket: &Path) -> PathBuf {
    socket.parent().unwrap_or(Path::new(".")).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(src: &str) -> Vec<ExportConfig> {
        crate::config::parse(Path::new("t.toml"), src)
            .unwrap()
            .exports
    }

    #[test]
    fn diff_names_added_removed_and_changed() {
        let old = cfg("[[export]]\npath = \"/a\"\nclients = [\"10.0.0.0/8\"]\n\n[[export]]\npath = \"/b\"\nclients = [\"10.0.0.1\"]\n");
        let new = cfg("[[export]]\npath = \"/a\"\nsec = [\"krb5p\"]\nread_only = true\nclients = [\"10.0.0.0/8\", \"::1\"]\n\n[[export]]\npath = \"/c\"\npseudo = \"/see\"\nrules = [{ client = \"*.x.org\" }]\n");
        assert_eq!(
            diff(&old, &new),
            vec![
                "changed /a: sec=krb5p (was sys)",
                "changed /a: 10.0.0.0/8: ro, root squashed to 65534:65534 (was rw, root squashed to 65534:65534)",
                "changed /a: ::1 now allowed: ro, root squashed to 65534:65534",
                "added /c as /see (sec=sys) to *.x.org (ro, root squashed to 65534:65534)",
                "removed /b (was mounted as /b)",
            ]
        );
        assert!(diff(&new, &new).is_empty());
    }
}
