//! A `--metrics` endpoint's Prometheus text, and samples in it.

use std::io::{Read, Write};
use std::net::TcpStream;

/// The Prometheus text of a `--metrics` endpoint.
pub fn metrics_text(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    r
}

/// The sum of the samples of `name` (over its label sets) in Prometheus
/// text; None if it has none.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
}

/// One sample's value (`name{labels}` prefix match) at `addr`, 0 if absent.
pub fn metric(addr: &str, prefix: &str) -> f64 {
    metrics_text(addr)
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The value of the sample `series` (its name and labels exactly) in
/// Prometheus text; panics, showing the text, when there is none.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}
