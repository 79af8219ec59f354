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
