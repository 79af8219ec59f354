//! The recovery store in etcd (v3), through etcd's JSON gateway over plain
//! HTTP/1.1: a handful of POSTs (`/v3/kv/range`, `/v3/kv/txn`,
//! `/v3/kv/deleterange`, `/v3/lease/grant`, `/v3/lease/keepalive`) need no
//! gRPC stack (the `etcd-client` crate brings tonic, prost, hyper and h2,
//! minutes of build for a few calls a second). Keys and values are
//! base64 in the JSON; 64-bit numbers are strings.
//!
//! Keys, under `/tarn/<cluster>`:
//! - `heads/<node>`: present while the head's etcd lease lives;
//! - `clients/<node>/<owner hex>`: an NFSv4 client the head recorded, the
//!   value the epoch of the record;
//! - `nsm/<node>/<caller name hex>`: an NLM host the head granted
//!   monitored locks to, the value its address;
//! - `grace`: the shared [`ClusterGrace`] record, changed by
//!   compare-and-swap on its mod revision.
//!
//! Blocking, with short timeouts: callers run it off the async threads.

use super::store::{hex, unhex};
use super::{ClusterGrace, RecoveryStore};
use bytes::Bytes;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

pub struct Etcd {
    /// `host:port`, tried in order until one answers.
    endpoints: Vec<String>,
    /// `/tarn/<cluster>`.
    prefix: String,
    timeout: Duration,
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(B64[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn unb64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for ch in s.bytes().filter(|&b| b != b'=') {
        let v = B64.iter().position(|&x| x == ch)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// A number etcd sends as a string (int64 in JSON), or absent (0).
fn num(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

/// The first key after every key starting with `p` (etcd's range end).
fn prefix_end(p: &str) -> Vec<u8> {
    let mut e = p.as_bytes().to_vec();
    while let Some(last) = e.pop() {
        if last < 0xff {
            e.push(last + 1);
            return e;
        }
    }
    vec![0]
}

impl Etcd {
    pub fn new(endpoints: Vec<String>, cluster: &str) -> Etcd {
        Etcd {
            endpoints,
            prefix: format!("/tarn/{cluster}"),
            timeout: Duration::from_secs(3),
        }
    }

    fn key(&self, rest: &str) -> String {
        format!("{}/{rest}", self.prefix)
    }

    /// The records under `dir`: each key's hex-encoded last part (a client
    /// owner, a monitored host's name) and its value parsed; a record that
    /// does not parse is skipped.
    fn records<T: std::str::FromStr>(&self, dir: &str) -> io::Result<Vec<(Bytes, T)>> {
        let p = self.key(dir);
        Ok(self
            .range_prefix(&p)?
            .into_iter()
            .filter_map(|(k, v, _)| {
                let name = unhex(k.strip_prefix(&p)?)?;
                let value = std::str::from_utf8(&v).ok()?.trim().parse().ok()?;
                Some((name, value))
            })
            .collect())
    }

    /// One POST to the first endpoint that answers.
    fn call(&self, path: &str, body: &Value) -> io::Result<Value> {
        let mut last = io::Error::other("no etcd endpoint");
        for ep in &self.endpoints {
            match self.post(ep, path, body) {
                Ok(v) => return Ok(v),
                Err(e) => last = io::Error::new(e.kind(), format!("etcd {ep}{path}: {e}")),
            }
        }
        Err(last)
    }

    fn post(&self, ep: &str, path: &str, body: &Value) -> io::Result<Value> {
        let addr = ep
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| bad("no address"))?;
        let mut s = TcpStream::connect_timeout(&addr, self.timeout)?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        let body = body.to_string();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {ep}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes())?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)?;
        let split = resp
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| bad("no HTTP header end"))?;
        let head = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
        let mut payload = resp[split + 4..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            payload = dechunk(&payload).ok_or_else(|| bad("bad chunked body"))?;
        }
        let status = head.split(' ').nth(1).unwrap_or("");
        if status != "200" {
            return Err(io::Error::other(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&payload)
            )));
        }
        serde_json::from_slice(&payload).map_err(|e| bad(format!("JSON: {e}")))
    }

    /// Every key (and value, mod revision) starting with `p`.
    fn range_prefix(&self, p: &str) -> io::Result<Vec<(String, Vec<u8>, u64)>> {
        let v = self.call(
            "/v3/kv/range",
            &json!({"key": b64(p.as_bytes()), "range_end": b64(&prefix_end(p))}),
        )?;
        let mut out = Vec::new();
        for kv in v["kvs"].as_array().map(|a| a.as_slice()).unwrap_or(&[]) {
            let k = unb64(kv["key"].as_str().unwrap_or("")).ok_or_else(|| bad("key"))?;
            let val = unb64(kv["value"].as_str().unwrap_or("")).ok_or_else(|| bad("value"))?;
            out.push((
                String::from_utf8_lossy(&k).into_owned(),
                val,
                num(&kv["mod_revision"]),
            ));
        }
        Ok(out)
    }

    fn txn(&self, compare: Value, success: Value) -> io::Result<bool> {
        let v = self.call(
            "/v3/kv/txn",
            &json!({"compare": compare, "success": success}),
        )?;
        Ok(v["succeeded"].as_bool().unwrap_or(false))
    }

    fn delete_prefix(&self, p: &str) -> io::Result<()> {
        self.call(
            "/v3/kv/deleterange",
            &json!({"key": b64(p.as_bytes()), "range_end": b64(&prefix_end(p))}),
        )
        .map(drop)
    }

    /// Registers `node` under a new lease of `ttl`; returns the lease.
    pub fn register(&self, node: &str, ttl: Duration) -> io::Result<u64> {
        let v = self.call("/v3/lease/grant", &json!({"TTL": ttl.as_secs()}))?;
        let id = num(&v["ID"]);
        if id == 0 {
            return Err(bad(format!("lease grant: {v}")));
        }
        self.call(
            "/v3/kv/put",
            &json!({"key": b64(self.key(&format!("heads/{node}")).as_bytes()),
                    "value": b64(b"up"), "lease": id.to_string()}),
        )?;
        Ok(id)
    }

    /// Renews the lease; false: it expired (register again).
    pub fn keepalive(&self, lease: u64) -> io::Result<bool> {
        let v = self.call("/v3/lease/keepalive", &json!({"ID": lease.to_string()}))?;
        Ok(num(&v["result"]["TTL"]) > 0)
    }

    /// The heads whose lease lives.
    pub fn live_heads(&self) -> io::Result<BTreeSet<String>> {
        let p = self.key("heads/");
        Ok(self
            .range_prefix(&p)?
            .into_iter()
            .filter_map(|(k, _, _)| k.strip_prefix(&p).map(str::to_string))
            .collect())
    }

    /// Forgets every client and NSM host record of `node` (a failed head
    /// whose grace ended: its clients that did not come back had their
    /// chance).
    pub fn drop_clients(&self, node: &str) -> io::Result<()> {
        self.delete_prefix(&self.key(&format!("clients/{node}/")))?;
        self.delete_prefix(&self.key(&format!("nsm/{node}/")))
    }

    /// Records the name `node` gives its CephFS sessions (no lease: a
    /// surviving head reads it after `node`'s lease has gone).
    pub fn set_ceph_id(&self, node: &str, id: &str) -> io::Result<()> {
        self.call(
            "/v3/kv/put",
            &json!({"key": b64(self.key(&format!("ceph/{node}")).as_bytes()),
                    "value": b64(id.as_bytes())}),
        )
        .map(drop)
    }

    /// The name `node` gives its CephFS sessions, if it recorded one.
    pub fn ceph_id(&self, node: &str) -> io::Result<Option<String>> {
        let k = self.key(&format!("ceph/{node}"));
        Ok(self
            .range_prefix(&k)?
            .into_iter()
            .find(|(key, _, _)| *key == k)
            .map(|(_, v, _)| String::from_utf8_lossy(&v).into_owned()))
    }

    fn client_key(&self, node: &str, owner: &Bytes) -> String {
        self.key(&format!("clients/{node}/{}", hex(owner)))
    }
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_txt = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_txt.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

impl RecoveryStore for Etcd {
    fn clients(&self, node: &str) -> io::Result<Vec<(Bytes, u64)>> {
        self.records(&format!("clients/{node}/"))
    }

    fn add_client(&self, node: &str, owner: &Bytes, epoch: u64) -> io::Result<()> {
        let k = b64(self.client_key(node, owner).as_bytes());
        // Only if absent: an existing record keeps its epoch.
        self.txn(
            json!([{"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}]),
            json!([{"request_put": {"key": k, "value": b64(epoch.to_string().as_bytes())}}]),
        )
        .map(drop)
    }

    fn remove_client(&self, node: &str, owner: &Bytes) -> io::Result<()> {
        self.call(
            "/v3/kv/deleterange",
            &json!({"key": b64(self.client_key(node, owner).as_bytes())}),
        )
        .map(drop)
    }

    fn reclaimed(&self, node: &str, owner: &Bytes, epoch: u64, from: &[String]) -> io::Result<()> {
        let mut ops = vec![json!({"request_put": {
            "key": b64(self.client_key(node, owner).as_bytes()),
            "value": b64(epoch.to_string().as_bytes())}})];
        for f in from {
            ops.push(json!({"request_delete_range": {
                "key": b64(self.client_key(f, owner).as_bytes())}}));
        }
        self.txn(json!([]), Value::Array(ops)).map(drop)
    }

    fn monitored(&self, node: &str) -> io::Result<Vec<(Bytes, IpAddr)>> {
        self.records(&format!("nsm/{node}/"))
    }

    fn monitor(&self, node: &str, name: &[u8], addr: IpAddr) -> io::Result<()> {
        let k = self.key(&format!("nsm/{node}/{}", hex(name)));
        self.call(
            "/v3/kv/put",
            &json!({"key": b64(k.as_bytes()), "value": b64(addr.to_string().as_bytes())}),
        )
        .map(drop)
    }

    fn unmonitor(&self, node: &str, name: &[u8]) -> io::Result<()> {
        let k = self.key(&format!("nsm/{node}/{}", hex(name)));
        self.call("/v3/kv/deleterange", &json!({"key": b64(k.as_bytes())}))
            .map(drop)
    }

    fn grace(&self) -> io::Result<(Option<ClusterGrace>, u64)> {
        let k = self.key("grace");
        let v = self.call("/v3/kv/range", &json!({"key": b64(k.as_bytes())}))?;
        let Some(kv) = v["kvs"].as_array().and_then(|a| a.first()) else {
            return Ok((None, 0));
        };
        let val = unb64(kv["value"].as_str().unwrap_or("")).ok_or_else(|| bad("value"))?;
        // A record this version cannot read is started over, not a
        // reason to stop (the heads re-register on their next step).
        let g = ClusterGrace::decode(&String::from_utf8_lossy(&val));
        Ok((g, num(&kv["mod_revision"])))
    }

    fn swap_grace(&self, g: &ClusterGrace, version: u64) -> io::Result<bool> {
        let k = b64(self.key("grace").as_bytes());
        self.txn(
            json!([{"key": k, "target": "MOD", "result": "EQUAL", "mod_revision": version.to_string()}]),
            json!([{"request_put": {"key": k, "value": b64(g.encode().as_bytes())}}]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for s in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            assert_eq!(unb64(&b64(s.as_bytes())).unwrap(), s.as_bytes());
        }
        assert_eq!(b64(b"foo"), "Zm9v");
        assert_eq!(b64(b"fo"), "Zm8=");
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
    }

    /// The store's contract against a real etcd: a record keeps its epoch
    /// when added again, a reclaim moves it in one transaction, the grace
    /// record changes only at the version read, heads live with their
    /// lease, and concurrent swaps lose no update.
    #[test]
    fn store_contract_against_etcd() {
        // A throwaway etcd on loopback; the test is skipped without one.
        let Some(srv) = test_support::etcd::Etcd::start_temp() else {
            return;
        };
        let e = Etcd::new(vec!["127.0.0.1:1".into(), srv.addr().into()], "t");
        let (o1, o2) = (Bytes::from_static(b"\x00one"), Bytes::from_static(b"two"));
        e.add_client("a", &o1, 3).unwrap();
        e.add_client("a", &o1, 5).unwrap();
        e.add_client("a", &o2, 5).unwrap();
        let mut got = e.clients("a").unwrap();
        got.sort();
        assert_eq!(got, vec![(o1.clone(), 3), (o2.clone(), 5)]);
        e.reclaimed("b", &o1, 7, &["a".into()]).unwrap();
        assert_eq!(e.clients("a").unwrap(), vec![(o2.clone(), 5)]);
        assert_eq!(e.clients("b").unwrap(), vec![(o1.clone(), 7)]);
        e.remove_client("a", &o2).unwrap();
        assert!(e.clients("a").unwrap().is_empty());

        e.monitor("a", b"host1", "10.0.0.1".parse().unwrap())
            .unwrap();
        assert_eq!(
            e.monitored("a").unwrap(),
            vec![(Bytes::from_static(b"host1"), "10.0.0.1".parse().unwrap())]
        );
        e.drop_clients("b").unwrap();
        e.drop_clients("a").unwrap();
        assert!(e.monitored("a").unwrap().is_empty() && e.clients("b").unwrap().is_empty());

        let (none, v0) = e.grace().unwrap();
        assert!(none.is_none());
        let g = ClusterGrace {
            current: 4,
            ..ClusterGrace::default()
        };
        assert!(e.swap_grace(&g, v0).unwrap());
        assert!(!e.swap_grace(&g, v0).unwrap(), "a stale version must lose");
        let (got, v1) = e.grace().unwrap();
        assert_eq!(got, Some(g));

        // Four threads bump `current` 10 times each by read-modify-swap.
        let e = std::sync::Arc::new(e);
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let e = e.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        loop {
                            let (g, v) = e.grace().unwrap();
                            let mut g = g.unwrap();
                            g.current += 1;
                            if e.swap_grace(&g, v).unwrap() {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        let (g, v2) = e.grace().unwrap();
        assert_eq!(g.unwrap().current, 44);
        assert!(v2 > v1);

        let lease = e.register("h", Duration::from_secs(2)).unwrap();
        assert!(e.live_heads().unwrap().contains("h"));
        assert!(e.keepalive(lease).unwrap());
        std::thread::sleep(Duration::from_secs(4));
        assert!(!e.keepalive(lease).unwrap(), "the lease ran out");
        assert!(e.live_heads().unwrap().is_empty());
    }

    #[test]
    fn dechunks() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
    }
}
