//! Registration with a real rpcbind (Debian's), run with the server inside a
//! private network and mount namespace so the host's rpcbind (and its
//! /run/rpcbind.sock, which network namespaces do not separate) is untouched.

mod common;
use std::process::Command;

#[test]
fn registers_with_rpcbind_and_unregisters_at_stop() {
    assert!(
        Command::new("sh").args(["-c", "command -v rpcbind && command -v rpcinfo && command -v unshare"]).output().unwrap().status.success(),
        "rpcbind, rpcinfo and unshare are needed: install Debian's rpcbind (the README's test command does)"
    );
    let (_tmp, export, state) = common::temp_export();
    let script = format!(
        r#"
set -u
ip link set lo up
mount -t tmpfs tmpfs /run && mkdir -p /run/rpcbind
rpcbind -w -f & RPCB=$!
for i in $(seq 100); do rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.05; done
{tarn} serve {export} --listen 127.0.0.1:2049 --state-dir {state} > {state}/out 2> {state}/log & TARN=$!
for i in $(seq 200); do grep -q exporting {state}/out 2>/dev/null && break; sleep 0.05; done
echo "--- running"; rpcinfo -p 127.0.0.1
kill -TERM $TARN; wait $TARN
echo "--- stopped"; rpcinfo -p 127.0.0.1
kill $RPCB; wait $RPCB 2>/dev/null
true
"#,
        tarn = env!("CARGO_BIN_EXE_tarn"),
        export = export.display(),
        state = state.display()
    );
    // The script stops what it starts; --kill-child makes sure of it if the test dies.
    let out = Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--fork",
            "--kill-child",
            "bash",
            "-c",
            &script,
        ])
        .output()
        .expect("unshare");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let log = std::fs::read_to_string(state.join("log")).unwrap_or_default();
    let (running, stopped) = text.split_once("--- stopped").unwrap_or_else(|| {
        panic!(
            "script output: {text}\n{}\nserver log: {log}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let has_v = |s: &str, prog: &str, vers: &str| {
        s.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 4 && f[0] == prog && f[1] == vers && f[2] == "tcp" && f[3] == "2049"
        })
    };
    let all = |s: &str| {
        [
            ("100003", "3"),
            ("100005", "3"),
            ("100021", "4"),
            ("100024", "1"),
        ]
        .map(|(p, v)| has_v(s, p, v))
    };
    assert_eq!(
        all(running),
        [true; 4],
        "NFS v3, MOUNT v3, NLM v4 and NSM v1 registered on 2049:\n{running}\nserver log: {log}"
    );
    // NLM is offered as version 4 only.
    assert!(!has_v(running, "100021", "1") && !has_v(running, "100021", "3"));
    assert_eq!(all(stopped), [false; 4], "unregistered at stop:\n{stopped}");
    assert!(
        log.contains("registered NFS v3, MOUNT v3, NLM v4 and NSM v1 with rpcbind"),
        "{log}"
    );
}
