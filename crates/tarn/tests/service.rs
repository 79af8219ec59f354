//! Running as a system service: logs that suit files, the journal and log
//! shippers.

mod common;

use common::*;

fn stopped_log(extra: &[&str], wrapper_env: &[(&str, String)]) -> String {
    let (_tmp, export, state) = temp_export();
    let port = free_port();
    // The file TestServer::launch appends the server's stderr to.
    let log = state.join(format!("server-{port}.log"));
    std::fs::write(&log, "").unwrap();
    let mut wrapper: Vec<String> = Vec::new();
    if !wrapper_env.is_empty() {
        wrapper.push("env".into());
        for (k, v) in wrapper_env {
            wrapper.push(format!("{k}={v}"));
        }
    }
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut s = TestServer::launch(&export, &state, port, extra, &wrapper);
    s.stop();
    let text = s.log_text();
    assert!(text.contains("stopped"), "{text}");
    text
}

#[test]
fn text_logs_in_a_file_have_no_colour_codes() {
    let text = stopped_log(&[], &[]);
    assert!(
        !text.contains('\x1b'),
        "escape codes in the log file:\n{text}"
    );
    assert!(text.contains(" INFO "), "{text}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let text = stopped_log(&["--log-format", "json"], &[]);
    let mut n = 0;
    for l in text.lines().filter(|l| !l.is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{l}");
        assert!(v["message"].is_string(), "{l}");
        n += 1;
    }
    assert!(n >= 3, "{text}");
    assert!(text.contains("\"message\":\"stopped\""), "{text}");
}

#[test]
fn under_the_journal_lines_carry_a_priority_and_no_timestamp() {
    use std::os::unix::fs::MetadataExt;
    // JOURNAL_STREAM names stderr's device and inode: here, the log file.
    let (_tmp, export, state) = temp_export();
    let port = free_port();
    let log = state.join(format!("server-{port}.log"));
    std::fs::write(&log, "").unwrap();
    let m = std::fs::metadata(&log).unwrap();
    let stream = format!("JOURNAL_STREAM={}:{}", m.dev(), m.ino());
    let mut s = TestServer::launch(&export, &state, port, &[], &["env", &stream]);
    s.stop();
    let text = s.log_text();
    assert!(!text.contains('\x1b'), "{text}");
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("<6> INFO ") || first.starts_with("<7>DEBUG "),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l == "<6> INFO tarn: stopped"),
        "{text}"
    );
    // JOURNAL_STREAM inherited from elsewhere (stderr is not that stream)
    // changes nothing.
    let text = stopped_log(&[], &[("JOURNAL_STREAM", "1:2".into())]);
    assert!(text.lines().all(|l| !l.starts_with('<')), "{text}");
}

fn recv(sock: &std::os::unix::net::UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).expect("a notification within 30 s");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// systemd's Type=notify protocol, with a listener standing in for systemd:
/// READY=1 once the server listens, RELOADING=1 then READY=1 around a
/// reload, STOPPING=1 on SIGTERM.
#[test]
fn sd_notify_ready_reloading_stopping() {
    use std::process::{Command, Stdio};
    let (tmp, a, state) = temp_export();
    let sock_path = tmp.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let file = tmp.path().join("exports");
    std::fs::write(&file, format!("{} 127.0.0.1(rw,insecure)\n", a.display())).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(["serve", "--exports", file.to_str().unwrap()])
        .args(["--state-dir", state.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(state.join("server.log")).unwrap())
        .spawn()
        .unwrap();
    let ready = recv(&sock);
    assert!(
        ready.starts_with("READY=1\n") && ready.contains(&format!("127.0.0.1:{port}")),
        "{ready:?}"
    );
    // Ready means ready: the port and the admin socket answer.
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("listening when READY=1");
    let admin = state.join("admin.sock");
    tarn(&["reload", "--socket", admin.to_str().unwrap()]);
    assert_eq!(recv(&sock), "RELOADING=1");
    assert!(recv(&sock).starts_with("READY=1\n"));
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(recv(&sock).starts_with("STOPPING=1\n"));
    assert!(child.wait().unwrap().success());
}

/// `@name` in NOTIFY_SOCKET is a socket in the abstract namespace.
#[test]
fn sd_notify_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("tarn-test-notify-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let (_tmp, export, state) = temp_export();
    let env = format!("NOTIFY_SOCKET=@{name}");
    let mut s = TestServer::launch(&export, &state, free_port(), &[], &["env", &env]);
    assert!(recv(&sock).starts_with("READY=1\n"));
    s.stop();
    assert!(recv(&sock).starts_with("STOPPING=1\n"));
}

/// `tarn import-exports`: the TOML on stdout (as the corpus expects), what
/// did not carry over on stderr as FILE:LINE: ...
#[test]
fn import_exports_prints_toml_and_names_lines() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exports");
    let f = dir.join("02-home-lab.exports");
    let out = tarn_output(&["import-exports", f.to_str().unwrap()]);
    assert!(out.status.success());
    let want = std::fs::read_to_string(dir.join("02-home-lab.toml"))
        .unwrap()
        .replace("02-home-lab.exports", f.to_str().unwrap());
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        format!("tarn: {}:4: async: not supported, ignored: Tarn answers stable WRITEs and COMMIT only once data is on disk (as sync)", f.display())
    );
    let out = tarn_output(&["import-exports", "/nonexistent/exports"]);
    assert!(!out.status.success());
}
