//! `ls`, `stat` and `df`: reading attributes and directories.

use super::conn::{is_dir, nfs_err, parse, Client};
use super::fmt::{full_time, ls_time, mode_string, now_secs, type_name};
use super::url::NfsUrl;
use client::nfs4::{Attrs, Session};
use proto::nfs4::*;
use std::io::Write;

/// What `ls -l` shows, fetched with READDIR in the same pass.
const LS_BITS: &[u32] = &[
    FATTR4_TYPE,
    FATTR4_SIZE,
    FATTR4_FILEID,
    FATTR4_MODE,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_TIME_MODIFY,
];

#[derive(Clone, Copy)]
pub struct LsOpts {
    pub long: bool,
    pub recursive: bool,
    pub all: bool,
}

pub async fn ls(c: &mut Client, arg: &str, o: LsOpts) -> Result<(), String> {
    let url = parse(arg)?;
    let s = c.session(&url).await?;
    let (fh, a) = s
        .lookup_path_attrs(&url.path, LS_BITS)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    let mut out = std::io::stdout().lock();
    if !is_dir(a.ftype) {
        let rows = [(url.to_string(), a)];
        return print_rows(&mut out, &rows, o.long);
    }
    let mut dirs = vec![(url, fh)];
    let mut first = true;
    while let Some((url, fh)) = dirs.pop() {
        let mut entries = s
            .readdir_with(&fh, LS_BITS)
            .await
            .map_err(|e| nfs_err(&url, e))?;
        entries.retain(|e| o.all || !e.name.starts_with('.'));
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        if o.recursive {
            if !first {
                writeln!(out).map_err(io)?;
            }
            writeln!(out, "{url}:").map_err(io)?;
        }
        first = false;
        let rows: Vec<(String, Attrs)> = entries
            .iter()
            .map(|e| (e.name.clone(), e.attrs.clone()))
            .collect();
        print_rows(&mut out, &rows, o.long)?;
        if o.recursive {
            // Pushed in reverse so that they are listed in name order.
            for e in entries.iter().rev().filter(|e| is_dir(e.attrs.ftype)) {
                let child = url.join(&e.name);
                let cfh = s
                    .lookup(&fh, &e.name)
                    .await
                    .map_err(|er| nfs_err(&child, er))?;
                dirs.push((child, cfh));
            }
        }
    }
    Ok(())
}

fn io(e: std::io::Error) -> String {
    format!("standard output: {e}")
}

/// One line per entry; long lines have their columns aligned as ls does.
fn print_rows(out: &mut impl Write, rows: &[(String, Attrs)], long: bool) -> Result<(), String> {
    if !long {
        for (name, _) in rows {
            writeln!(out, "{name}").map_err(io)?;
        }
        return Ok(());
    }
    let now = now_secs();
    let q = || "?".to_string();
    let cols: Vec<[String; 4]> = rows
        .iter()
        .map(|(_, a)| {
            [
                a.numlinks.map(|n| n.to_string()).unwrap_or_else(q),
                a.owner.clone().unwrap_or_else(q),
                a.owner_group.clone().unwrap_or_else(q),
                a.size.map(|n| n.to_string()).unwrap_or_else(q),
            ]
        })
        .collect();
    let w = |i: usize| cols.iter().map(|c| c[i].len()).max().unwrap_or(0);
    let (wl, wo, wg, ws) = (w(0), w(1), w(2), w(3));
    for ((name, a), [links, owner, group, size]) in rows.iter().zip(&cols) {
        writeln!(
            out,
            "{} {links:>wl$} {owner:<wo$} {group:<wg$} {size:>ws$} {} {name}",
            mode_string(a.ftype, a.mode),
            ls_time(a.time_modify.as_ref(), now),
        )
        .map_err(io)?;
    }
    Ok(())
}

const STAT_BITS: &[u32] = client::nfs4::attr::STAT;

pub async fn stat(c: &mut Client, arg: &str) -> Result<(), String> {
    let url = parse(arg)?;
    let s = c.session(&url).await?;
    let (_, a) = s
        .lookup_path_attrs(&url.path, STAT_BITS)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
    let fsid = a
        .fsid
        .as_ref()
        .map(|f| format!("{:x}:{:x}", f.major, f.minor))
        .unwrap_or_else(|| "-".into());
    println!("  File: {url}");
    println!("  Type: {}", type_name(a.ftype));
    println!(
        "  Size: {:<12} Space used: {}",
        opt(a.size),
        opt(a.space_used)
    );
    println!(
        "  Mode: {:<12} Links: {}",
        match a.mode {
            Some(m) => format!("{m:04o} ({})", mode_string(a.ftype, Some(m))),
            None => "-".into(),
        },
        opt(a.numlinks.map(u64::from))
    );
    println!(
        " Owner: {:<12} Group: {}",
        a.owner.as_deref().unwrap_or("-"),
        a.owner_group.as_deref().unwrap_or("-")
    );
    println!(
        "FileID: {:<12} Fsid: {fsid}  Change: {}",
        opt(a.fileid),
        opt(a.change)
    );
    println!("Access: {}", full_time(a.time_access.as_ref()));
    println!("Modify: {}", full_time(a.time_modify.as_ref()));
    println!(" Ctime: {}", full_time(a.time_metadata.as_ref()));
    Ok(())
}

const DF_BITS: &[u32] = &[
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
];

pub async fn df(c: &mut Client, arg: &str) -> Result<(), String> {
    let url = parse(arg)?;
    let s = c.session(&url).await?;
    let a = df_attrs(&s, &url).await?;
    let total = a.space_total.unwrap_or(0);
    let used = total.saturating_sub(a.space_free.unwrap_or(0));
    let avail = a.space_avail.unwrap_or(0);
    // As df: used over what non-root users can reach.
    let pct = if used + avail == 0 {
        "-".to_string()
    } else {
        format!("{}%", (used * 100).div_ceil(used + avail))
    };
    let ftotal = a.files_total.unwrap_or(0);
    let fused = ftotal.saturating_sub(a.files_free.unwrap_or(0));
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
        a.files_avail.unwrap_or(0)
    );
    Ok(())
}

async fn df_attrs(s: &Session, url: &NfsUrl) -> Result<Attrs, String> {
    let (_, a) = s
        .lookup_path_attrs(&url.path, DF_BITS)
        .await
        .map_err(|e| nfs_err(url, e))?;
    Ok(a)
}
