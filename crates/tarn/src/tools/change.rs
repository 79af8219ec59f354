//! `mkdir`, `rm` and `mv`: changing the namespace.

use super::conn::{is_dir, nfs_err, parse, resolve, resolve_parent, status_err, Client};
use super::url::NfsUrl;
use client::nfs4::Session;
use proto::nfs4::*;

/// Directories are made 0755, as mkdir(1) does under the usual umask.
const DIR_MODE: u32 = 0o755;

pub async fn mkdir(c: &mut Client, arg: &str, parents: bool) -> Result<(), String> {
    let url = parse(arg)?;
    let s = c.session(&url).await?;
    if parents {
        mkdir_p(&s, &url, DIR_MODE).await?;
        return Ok(());
    }
    if url.split_last().is_none() {
        return Err(status_err(&url, Nfsstat4::NFS4ERR_EXIST));
    }
    let (dir, name) = resolve_parent(&s, &url).await?;
    s.mkdir(&dir, &name, DIR_MODE)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    Ok(())
}

/// Every missing directory of `url`'s path, from the root down; an
/// existing one is fine, an existing non-directory is an error.
pub async fn mkdir_p(s: &Session, url: &NfsUrl, mode: u32) -> Result<NfsFh4, String> {
    let mut fh = resolve(s, &url.with_path("/")).await?;
    let mut at = url.with_path("/");
    for name in url.components() {
        at = at.join(name);
        fh = match s.lookup(&fh, name).await {
            Ok(h) => h,
            Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_NOENT) => {
                match s.mkdir(&fh, name, mode).await {
                    Ok(h) => h,
                    // Made by someone else meanwhile.
                    Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_EXIST) => {
                        s.lookup(&fh, name).await.map_err(|e| nfs_err(&at, e))?
                    }
                    Err(e) => return Err(nfs_err(&at, e)),
                }
            }
            Err(e) => return Err(nfs_err(&at, e)),
        };
        let a = s
            .attrs(&fh, &[FATTR4_TYPE])
            .await
            .map_err(|e| nfs_err(&at, e))?;
        if !is_dir(a.ftype) {
            return Err(status_err(&at, Nfsstat4::NFS4ERR_NOTDIR));
        }
    }
    Ok(fh)
}

pub async fn rm(c: &mut Client, arg: &str, recursive: bool) -> Result<(), String> {
    let url = parse(arg)?;
    let s = c.session(&url).await?;
    if url.split_last().is_none() {
        return Err(format!("{url}: refusing to remove the root"));
    }
    let (dir, name) = resolve_parent(&s, &url).await?;
    let fh = s.lookup(&dir, &name).await.map_err(|e| nfs_err(&url, e))?;
    let a = s
        .attrs(&fh, &[FATTR4_TYPE])
        .await
        .map_err(|e| nfs_err(&url, e))?;
    if is_dir(a.ftype) {
        if !recursive {
            return Err(format!(
                "{}; use -r to remove it and its contents",
                status_err(&url, Nfsstat4::NFS4ERR_ISDIR)
            ));
        }
        empty_tree(&s, &fh, &url).await?;
    }
    s.remove(&dir, &name).await.map_err(|e| nfs_err(&url, e))?;
    Ok(())
}

/// Removes everything below the directory `fh`, depth first.
async fn empty_tree(s: &Session, fh: &NfsFh4, url: &NfsUrl) -> Result<(), String> {
    // Read whole before removing: removing while paging would move cookies.
    let entries = s
        .readdir_with(fh, &[FATTR4_TYPE])
        .await
        .map_err(|e| nfs_err(url, e))?;
    for e in entries {
        let child = url.join(&e.name);
        if is_dir(e.attrs.ftype) {
            let cfh = s
                .lookup(fh, &e.name)
                .await
                .map_err(|er| nfs_err(&child, er))?;
            Box::pin(empty_tree(s, &cfh, &child)).await?;
        }
        s.remove(fh, &e.name)
            .await
            .map_err(|er| nfs_err(&child, er))?;
    }
    Ok(())
}

pub async fn mv(c: &mut Client, from: &str, to: &str) -> Result<(), String> {
    let (from, to) = (parse(from)?, parse(to)?);
    if !from.same_server(&to) {
        return Err(format!(
            "{from} and {to}: mv works within one server (and one uid/gid/vers); use cp and rm"
        ));
    }
    let s = c.session(&from).await?;
    let (fdir, fname) = resolve_parent(&s, &from).await?;
    // Into `to` when it is a directory, as mv(1) does.
    let target = match s.lookup_path_attrs(&to.path, &[FATTR4_TYPE]).await {
        Ok((fh, a)) if is_dir(a.ftype) => Some((fh, fname.clone(), to.join(&fname))),
        _ => None,
    };
    let (tdir, tname, turl) = match target {
        Some(t) => t,
        None => {
            let (tdir, tname) = resolve_parent(&s, &to).await?;
            (tdir, tname, to.clone())
        }
    };
    s.rename(&fdir, &fname, &tdir, &tname)
        .await
        .map_err(|e| nfs_err(&format!("{from} -> {turl}"), e))?;
    Ok(())
}
