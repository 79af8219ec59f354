//! `ls`, `stat` and `df`: reading attributes and directories.

use super::conn::{is_dir, nfs_err, parse, Client};
use super::fmt::{full_time, ls_time, mode_string, now_secs, type_name};
use client::remote::{Attr, Entry, Fh, FileType, Remote};
use client::url::NfsUrl;
use std::io::Write;

#[derive(Clone, Copy)]
pub struct LsOpts {
    pub long: bool,
    pub recursive: bool,
    pub all: bool,
}

pub async fn ls(c: &mut Client, arg: &str, o: LsOpts) -> Result<(), String> {
    let (url, r, fh, a) = c.resolve(arg).await?;
    let mut out = std::io::stdout().lock();
    if !is_dir(&a) {
        let target = link_target(&r, &fh, &a, o.long)
            .await
            .map_err(|e| nfs_err(&url, e))?;
        let rows = [(url.to_string(), a, target)];
        return print_rows(&mut out, &rows, o.long);
    }
    let mut dirs = vec![(url, fh)];
    let mut first = true;
    while let Some((url, fh)) = dirs.pop() {
        let mut entries = r.readdir(&fh).await.map_err(|e| nfs_err(&url, e))?;
        entries.retain(|e| o.all || !e.name.starts_with('.'));
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        if o.recursive {
            if !first {
                writeln!(out).map_err(io)?;
            }
            writeln!(out, "{url}:").map_err(io)?;
        }
        first = false;
        let mut rows = Vec::with_capacity(entries.len());
        for e in &entries {
            let target = if o.long && e.attr.ftype == Some(FileType::Symlink) {
                let child = url.join(&e.name);
                let lfh = child_fh(&r, &fh, e, &child).await?;
                link_target(&r, &lfh, &e.attr, true)
                    .await
                    .map_err(|er| nfs_err(&child, er))?
            } else {
                None
            };
            rows.push((e.name.clone(), e.attr.clone(), target));
        }
        print_rows(&mut out, &rows, o.long)?;
        if o.recursive {
            // Pushed in reverse so that they are listed in name order.
            for e in entries.iter().rev().filter(|e| is_dir(&e.attr)) {
                let child = url.join(&e.name);
                let cfh = child_fh(&r, &fh, e, &child).await?;
                dirs.push((child, cfh));
            }
        }
    }
    Ok(())
}

/// A symbolic link's target, for `ls -l`'s "name -> target".
/// The handle of the listed entry `e` of `dir`: as READDIR gave it, else looked up.
async fn child_fh(r: &Remote, dir: &Fh, e: &Entry, child: &NfsUrl) -> Result<Fh, String> {
    match &e.fh {
        Some(h) => Ok(h.clone()),
        None => r
            .lookup(dir, &e.name)
            .await
            .map_err(|er| nfs_err(child, er)),
    }
}

async fn link_target(
    r: &Remote,
    fh: &Fh,
    a: &Attr,
    long: bool,
) -> Result<Option<String>, client::remote::Error> {
    if !long || a.ftype != Some(FileType::Symlink) {
        return Ok(None);
    }
    r.readlink(fh).await.map(Some)
}

fn io(e: std::io::Error) -> String {
    format!("standard output: {e}")
}

/// One line per entry; long lines have their columns aligned as ls does.
type Row = (String, Attr, Option<String>);

fn print_rows(out: &mut impl Write, rows: &[Row], long: bool) -> Result<(), String> {
    if !long {
        for (name, _, _) in rows {
            writeln!(out, "{name}").map_err(io)?;
        }
        return Ok(());
    }
    let now = now_secs();
    let q = || "?".to_string();
    let cols: Vec<[String; 4]> = rows
        .iter()
        .map(|(_, a, _)| {
            [
                a.nlink.map(|n| n.to_string()).unwrap_or_else(q),
                a.owner.clone().unwrap_or_else(q),
                a.group.clone().unwrap_or_else(q),
                a.size.map(|n| n.to_string()).unwrap_or_else(q),
            ]
        })
        .collect();
    let w = |i: usize| cols.iter().map(|c| c[i].len()).max().unwrap_or(0);
    let (wl, wo, wg, ws) = (w(0), w(1), w(2), w(3));
    for ((name, a, target), [links, owner, group, size]) in rows.iter().zip(&cols) {
        let arrow = target
            .as_ref()
            .map(|t| format!(" -> {t}"))
            .unwrap_or_default();
        writeln!(
            out,
            "{} {links:>wl$} {owner:<wo$} {group:<wg$} {size:>ws$} {} {name}{arrow}",
            mode_string(a.ftype, a.mode),
            ls_time(a.mtime.as_ref(), now),
        )
        .map_err(io)?;
    }
    Ok(())
}

pub async fn stat(c: &mut Client, arg: &str) -> Result<(), String> {
    let (url, r, fh, a) = c.resolve(arg).await?;
    let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
    let fsid = a
        .fsid
        .map(|(major, minor)| format!("{major:x}:{minor:x}"))
        .unwrap_or_else(|| "-".into());
    let target = link_target(&r, &fh, &a, true)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    match target {
        Some(t) => println!("  File: {url} -> {t}"),
        None => println!("  File: {url}"),
    }
    println!("  Type: {}", type_name(a.ftype));
    println!("  Size: {:<12} Space used: {}", opt(a.size), opt(a.used));
    println!(
        "  Mode: {:<12} Links: {}",
        match a.mode {
            Some(m) => format!("{m:04o} ({})", mode_string(a.ftype, Some(m))),
            None => "-".into(),
        },
        opt(a.nlink.map(u64::from))
    );
    println!(
        " Owner: {:<12} Group: {}",
        a.owner.as_deref().unwrap_or("-"),
        a.group.as_deref().unwrap_or("-")
    );
    println!(
        "FileID: {:<12} Fsid: {fsid}  Change: {}",
        opt(a.fileid),
        opt(a.change)
    );
    println!("Access: {}", full_time(a.atime.as_ref()));
    println!("Modify: {}", full_time(a.mtime.as_ref()));
    println!(" Ctime: {}", full_time(a.ctime.as_ref()));
    Ok(())
}

pub async fn df(c: &mut Client, arg: &str) -> Result<(), String> {
    let url = parse(arg)?;
    let r = c.remote(&url).await?;
    let fh = r
        .lookup_path(&url.path)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    let a = r.fsstat(&fh).await.map_err(|e| nfs_err(&url, e))?;
    let total = a.total;
    let used = total.saturating_sub(a.free);
    let avail = a.avail;
    // As df: used over what non-root users can reach.
    let pct = if used + avail == 0 {
        "-".to_string()
    } else {
        format!("{}%", (used * 100).div_ceil(used + avail))
    };
    let ftotal = a.files_total;
    let fused = ftotal.saturating_sub(a.files_free);
    println!(
        "{:<30} {:>12} {:>12} {:>12} {:>5} {:>10} {:>10} {:>10}",
        "Filesystem", "1K-blocks", "Used", "Available", "Use%", "Inodes", "IUsed", "IFree"
    );
    println!(
        "{:<30} {:>12} {:>12} {:>12} {:>5} {:>10} {:>10} {:>10}",
        url.to_string(),
        total / 1024,
        used / 1024,
        avail / 1024,
        pct,
        ftotal,
        fused,
        a.files_avail
    );
    Ok(())
}
