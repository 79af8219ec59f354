//! The soak test's client and checker (hidden commands; scripts/soak.sh
//! runs them). `tarn soak-client URL --ledger FILE` runs a mixed workload
//! in the directory URL names (write with FILE_SYNC and read back, read
//! old files, rename, remove, lock and unlock, list) until the file
//! `--stop` appears, writing every acknowledged change to its ledger: a
//! line after the server acknowledged it, and an intent line before a
//! rename or remove (a client killed in between may have done it or not).
//! Errors it did not expect are ledger lines too (`E ...`).
//! `tarn soak-verify EXPORT LEDGER...` replays the ledgers against the
//! server's export directory: every acknowledged file is there with its
//! SHA-256; it prints a summary and fails on any loss or error line.

use super::conn::{self, Client};
use super::url::NfsUrl;
use bytes::Bytes;
use client::remote::{Fh, Range, Remote, Stable};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args)]
pub struct SoakArgs {
    /// The client's directory (which exists), as nfs://host:port/path?vers=...
    url: String,
    /// Where acknowledged changes are appended.
    #[arg(long)]
    ledger: PathBuf,
    /// The run ends (cleanly: CLOSE, DESTROY_SESSION) once this file exists.
    #[arg(long)]
    stop: PathBuf,
    /// Files kept at most; past it removes are favoured.
    #[arg(long, default_value_t = 40)]
    max_files: usize,
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The server's export directory (the ledgers' paths are relative to it).
    export: PathBuf,
    ledgers: Vec<PathBuf>,
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

struct Ledger(std::fs::File);

impl Ledger {
    fn line(&mut self, s: &str) {
        // One write per line: a killed client leaves whole lines.
        let _ = self.0.write_all(format!("{s}\n").as_bytes());
    }
}

/// A small xorshift generator: the workload needs variety, not secrecy.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub async fn client(a: SoakArgs) -> Result<(), String> {
    let url: NfsUrl = conn::parse(&a.url)?;
    let rel = url.path.trim_start_matches('/').to_string();
    let mut ledger = Ledger(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&a.ledger)
            .map_err(|e| format!("{}: {e}", a.ledger.display()))?,
    );
    let mut c = Client::default();
    let r = c.remote(&url).await?;
    let dir = r
        .lookup_path(&url.path)
        .await
        .map_err(|e| conn::nfs_err(&url.path, e))?;
    let mut rng = Rng((std::process::id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // name -> SHA-256 of what the server acknowledged.
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut n = 0u64;
    let mut errors = 0u64;
    while !a.stop.exists() {
        n += 1;
        let pick = rng.below(100);
        let res = if files.is_empty() || pick < 35 || (files.len() < 3 && pick < 70) {
            write_new(&r, &dir, &rel, n, &mut rng, &mut files, &mut ledger).await
        } else {
            let k = rng.below(files.len() as u64) as usize;
            let name = files.keys().nth(k).cloned().expect("k < len");
            if pick < 55 {
                read_check(&r, &dir, &name, &files[&name]).await
            } else if pick < 70 || files.len() > a.max_files {
                let path = format!("{rel}/{name}");
                ledger.line(&format!("R? {path}"));
                let res = r
                    .remove(&dir, &name)
                    .await
                    .map_err(|e| conn::nfs_err(&path, e));
                if res.is_ok() {
                    files.remove(&name);
                    ledger.line(&format!("R {path}"));
                }
                res
            } else if pick < 82 {
                let to = format!("m{n}");
                ledger.line(&format!("M? {rel}/{name} {rel}/{to}"));
                let res = r
                    .rename(&dir, &name, &dir, &to)
                    .await
                    .map_err(|e| conn::nfs_err(&name, e));
                if res.is_ok() {
                    let sum = files.remove(&name).expect("listed");
                    files.insert(to.clone(), sum);
                    ledger.line(&format!("M {rel}/{name} {rel}/{to}"));
                }
                res
            } else if pick < 94 {
                lock_unlock(&r, &dir, &name, &mut rng).await
            } else {
                list_check(&r, &dir, &files).await
            }
        };
        if let Err(e) = res {
            errors += 1;
            ledger.line(&format!("E {e}"));
            // A client that keeps failing must not spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    ledger.line(&format!("END ops={n} errors={errors}"));
    c.close().await;
    Ok(())
}

async fn write_new(
    r: &Remote,
    dir: &Fh,
    rel: &str,
    n: u64,
    rng: &mut Rng,
    files: &mut BTreeMap<String, String>,
    ledger: &mut Ledger,
) -> Result<(), String> {
    let name = format!("f{n}");
    let len = 1024 + rng.below(192 << 10) as usize;
    let mut data = vec![0u8; len];
    for chunk in data.chunks_mut(8) {
        let v = rng.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    let sum = hex(&Sha256::digest(&data));
    let err = |e| conn::nfs_err(&name, e);
    let f = r.open_write(dir, &name, 0o644, true).await.map_err(err)?;
    let chunk = r.wsize().max(4096) as usize;
    let mut off = 0;
    while off < len {
        let end = (off + chunk).min(len);
        let w = r
            .write(
                &f,
                off as u64,
                Bytes::copy_from_slice(&data[off..end]),
                Stable::FileSync,
            )
            .await
            .map_err(err)?;
        if w.count == 0 {
            return Err(format!("{name}: WRITE wrote nothing"));
        }
        off += w.count as usize;
    }
    r.close(&f).await.map_err(err)?;
    // Acknowledged (FILE_SYNC, closed): from here it must not be lost.
    ledger.line(&format!("A {rel}/{name} {sum}"));
    files.insert(name.clone(), sum.clone());
    read_check(r, dir, &name, &sum).await
}

async fn read_all(r: &Remote, fh: &Fh) -> client::remote::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let (b, eof) = r.read(fh, out.len() as u64, r.rsize()).await?;
        out.extend_from_slice(&b);
        if eof || b.is_empty() {
            return Ok(out);
        }
    }
}

async fn read_check(r: &Remote, dir: &Fh, name: &str, sum: &str) -> Result<(), String> {
    let err = |e| conn::nfs_err(name, e);
    let fh = r.lookup(dir, name).await.map_err(err)?;
    let data = read_all(r, &fh).await.map_err(err)?;
    let got = hex(&Sha256::digest(&data));
    if got != sum {
        return Err(format!(
            "{name}: read back {} bytes with SHA-256 {got}, wrote {sum}",
            data.len()
        ));
    }
    Ok(())
}

async fn lock_unlock(r: &Remote, dir: &Fh, name: &str, rng: &mut Rng) -> Result<(), String> {
    let err = |e| conn::nfs_err(name, e);
    let fh = r.lookup(dir, name).await.map_err(err)?;
    let range = Range {
        offset: rng.below(4096),
        len: 1 + rng.below(4096),
    };
    // Only this client uses its files: the lock is free, so no wait.
    let held = r
        .lock(&fh, (dir, name), range, rng.below(2) == 0, false)
        .await
        .map_err(err)?
        .ok_or_else(|| format!("{name}: lock refused though nobody else holds one"))?;
    r.unlock(held).await.map_err(err)
}

async fn list_check(r: &Remote, dir: &Fh, files: &BTreeMap<String, String>) -> Result<(), String> {
    let listed = r
        .readdir(dir)
        .await
        .map_err(|e| conn::nfs_err("readdir", e))?;
    for name in files.keys() {
        if !listed.iter().any(|e| e.name == *name) {
            return Err(format!("{name}: missing from READDIR"));
        }
    }
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Pending {
    /// A rename: the file is at either name.
    Move(String, String),
    /// A remove: the file is there or not.
    Remove(String),
    /// A write over an existing file (libnfs clients reuse names): any content.
    Write(String),
}

/// What one ledger says should be in the export.
#[derive(Default)]
struct Expect {
    /// path -> SHA-256.
    files: BTreeMap<String, String>,
    /// A change whose outcome is unknown (the client may have been killed
    /// during it): the last intent line not followed by its completion.
    pending: Option<Pending>,
    errors: Vec<String>,
}

fn replay(text: &str) -> Expect {
    let mut x = Expect::default();
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(3, ' ').collect();
        match f[..] {
            ["A", path, sum] => {
                x.files.insert(path.into(), sum.into());
                x.pending = None;
            }
            ["R?", path] => x.pending = Some(Pending::Remove(path.into())),
            ["W?", path] => x.pending = Some(Pending::Write(path.into())),
            ["R", path] => {
                x.files.remove(path);
                x.pending = None;
            }
            ["M?", from, to] => x.pending = Some(Pending::Move(from.into(), to.into())),
            ["M", from, to] => {
                if let Some(s) = x.files.remove(from) {
                    x.files.insert(to.into(), s);
                }
                x.pending = None;
            }
            ["E", ..] => x.errors.push(line[2..].to_string()),
            _ => {}
        }
    }
    x
}

fn sum_of(p: &Path) -> Option<String> {
    std::fs::read(p).ok().map(|d| hex(&Sha256::digest(&d)))
}

pub fn verify(a: VerifyArgs) -> Result<(), String> {
    let (mut checked, mut lost, mut errors) = (0usize, Vec::new(), Vec::new());
    for l in &a.ledgers {
        let text = std::fs::read_to_string(l).map_err(|e| format!("{}: {e}", l.display()))?;
        let x = replay(&text);
        for e in x.errors {
            errors.push(format!("{}: {e}", l.display()));
        }
        for (path, sum) in &x.files {
            checked += 1;
            let here = sum_of(&a.export.join(path));
            // A rename or remove the client may not have lived to record.
            let ok = here.as_deref() == Some(sum.as_str())
                || match &x.pending {
                    Some(Pending::Move(from, to)) if from == path => {
                        sum_of(&a.export.join(to)).as_deref() == Some(sum.as_str())
                    }
                    Some(Pending::Remove(p)) if p == path => here.is_none(),
                    Some(Pending::Write(p)) => p == path,
                    _ => false,
                };
            if !ok {
                lost.push(format!(
                    "{path}: expected SHA-256 {sum}, found {}",
                    here.as_deref().unwrap_or("no file")
                ));
            }
        }
    }
    println!(
        "soak-verify: {} ledgers, {checked} acknowledged files checked, {} lost or changed, {} unexpected errors",
        a.ledgers.len(),
        lost.len(),
        errors.len()
    );
    for l in lost.iter().chain(errors.iter()).take(40) {
        println!("  {l}");
    }
    if lost.is_empty() && errors.is_empty() {
        Ok(())
    } else {
        Err("acknowledged data lost or unexpected errors".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_follows_renames_and_removes() {
        let x = replay("A d/f1 aa\nA d/f2 bb\nM? d/f1 d/m3\nM d/f1 d/m3\nR? d/f2\nR d/f2\nA d/f4 cc\nM? d/f4 d/m5\nE oops\n");
        assert_eq!(x.files.len(), 2);
        assert_eq!(x.files["d/m3"], "aa");
        assert_eq!(x.files["d/f4"], "cc");
        assert_eq!(x.pending, Some(Pending::Move("d/f4".into(), "d/m5".into())));
        assert_eq!(x.errors, vec!["oops".to_string()]);
        // An overwrite that completed clears its intent.
        let x = replay("A d/f1 aa\nW? d/f1\nA d/f1 bb\n");
        assert_eq!((x.files["d/f1"].as_str(), x.pending), ("bb", None));
    }
}
