//! `tarn bench --compare A=FILE --compare B=FILE`: one side-by-side table of
//! two `tarn bench --json` outputs (A is the server measured, B the reference).

use super::Row;
use std::collections::HashMap;

fn parse_line(line: &str) -> Result<Row, String> {
    serde_json::from_str(line).map_err(|e| format!("not a bench row ({e}): {line}"))
}

fn load(spec: &str) -> Result<(String, Vec<Row>), String> {
    let (label, path) = spec
        .split_once('=')
        .ok_or_else(|| format!("--compare {spec:?}: want LABEL=FILE"))?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let rows = text
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(parse_line)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((label.to_string(), rows))
}

/// The headline number of a row: (value, unit name); higher is better.
fn metric(r: &Row) -> (Option<f64>, &'static str) {
    match r.op.as_str() {
        "read1m" | "write1m" => (r.mb_per_s, "MB/s"),
        "readdirplus" => (r.entries_per_s, "entries/s"),
        "create" => (r.ops_per_s, "files/s"),
        _ => (r.ops_per_s, "ops/s"),
    }
}

fn fmt_num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

fn fmt_us(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(us) if us >= 100_000.0 => format!("{:.2}s", us / 1e6),
        Some(us) if us >= 10_000.0 => format!("{:.1}ms", us / 1e3),
        Some(us) => format!("{us:.0}"),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

pub fn print(specs: &[String]) -> Result<(), String> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for line in table(specs)? {
        // A reader that has seen enough (`| head`) closes the pipe: stop
        // quietly, as other tools do.
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    Ok(())
}

/// One row of the table's columns.
fn line(c: [&str; 13]) -> String {
    format!(
        "{:<17} {:>4} {:>9} {:>10} {:>10} {:>7} | {:>7} {:>7} | {:>7} {:>7} | {:>9} {:>9} {:>7}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12]
    )
}

/// The side-by-side table's lines.
fn table(specs: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    if specs.len() != 2 {
        return Err("--compare wants exactly two LABEL=FILE".into());
    }
    let (la, ra) = load(&specs[0])?;
    let (lb, rb) = load(&specs[1])?;
    // The workload's name, with its flavor unless AUTH_SYS ("read1m krb5p").
    let workload = |r: &Row| match r.sec.as_str() {
        "" | "sys" => r.op.clone(),
        sec => format!("{} {sec}", r.op),
    };
    let key = |r: &Row| (workload(r), r.inflight);
    let index: HashMap<_, _> = rb.iter().map(|r| (key(r), r)).collect();
    let short = |s: &str| s.chars().take(7).collect::<String>();
    let (a1, b1) = (short(&la), short(&lb));
    let initial = |s: &str| s.chars().next().unwrap_or('?').to_uppercase().to_string();
    let rname = format!("{}/{}", initial(&la), initial(&lb));
    out.push(line([
        "",
        "",
        "",
        "",
        "",
        "",
        "p50 us",
        "",
        "p99 us",
        "",
        "server",
        "cpu us/op",
        "",
    ]));
    out.push(line([
        "workload", "infl", "unit", &a1, &b1, &rname, &a1, &b1, &a1, &b1, &a1, &b1, &rname,
    ]));
    for r in &ra {
        let Some(o) = index.get(&key(r)) else {
            continue;
        };
        let (va, unit) = metric(r);
        let (vb, _) = metric(o);
        let (ca, cb) = (r.server_cpu_us_per_op, o.server_cpu_us_per_op);
        out.push(line([
            &workload(r),
            &key(r).1.to_string(),
            unit,
            &fmt_num(va),
            &fmt_num(vb),
            &ratio(va, vb),
            &fmt_us(r.p50_us),
            &fmt_us(o.p50_us),
            &fmt_us(r.p99_us),
            &fmt_us(o.p99_us),
            &fmt_num(ca),
            &fmt_num(cb),
            &ratio(ca, cb),
        ]));
    }
    out.push(format!(
        "{rname} = {la}/{lb}: throughput (higher is better for {la}); cpu (lower is better). \
readdirplus: latency and cpu per whole listing; create: per file (CREATE+WRITE+COMMIT)."
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_pair_up_by_workload_level_and_flavor() {
        let dir = tempfile::tempdir().unwrap();
        let row = |label: &str, sec: &str, rate: f64| {
            format!(
                r#"{{"label":"{label}","sec":"{sec}","op":"read1m","inflight":1,"mb_per_s":{rate},"p50_us":10,"p99_us":20,"server_cpu_us_per_op":5}}"#
            )
        };
        let write = |name: &str, lines: &[String]| {
            let p = dir.path().join(name);
            std::fs::write(&p, lines.join("\n")).unwrap();
            p.display().to_string()
        };
        let a = write(
            "a.json",
            &[row("a", "sys", 300.0), row("a", "krb5p", 200.0)],
        );
        let b = write(
            "b.json",
            &[row("b", "krb5p", 100.0), row("b", "sys", 300.0)],
        );
        let t = table(&[format!("a={a}"), format!("b={b}")]).unwrap();
        let sys = t.iter().find(|l| l.starts_with("read1m ")).unwrap();
        let krb = t.iter().find(|l| l.starts_with("read1m krb5p")).unwrap();
        assert!(sys.contains("1.00x"), "{sys}");
        assert!(krb.contains("2.00x"), "{krb}");
    }

    #[test]
    fn parses_bench_json() {
        let r = parse_line(r#"{"label":"t\"a","op":"getattr","inflight":64,"server_cpu_s":null,"p99_us":-1.5e3,"new_field":1}"#)
            .unwrap();
        assert_eq!(r.label, "t\"a");
        assert_eq!(r.inflight, 64);
        assert_eq!(r.server_cpu_s, None);
        assert_eq!(r.p99_us, Some(-1500.0));
        assert!(parse_line("{\"inflight\":\"many\"}").is_err());
    }
}
