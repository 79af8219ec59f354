//! `mkdir`, `rm`, `mv` and `ln`: changing the namespace.

use super::conn::{is_dir, nfs_err, parse, resolve_parent, status_err, Client};
use super::url::NfsUrl;
use client::remote::{Fh, Kind, Remote};

/// Directories are made 0755, as mkdir(1) does under the usual umask.
const DIR_MODE: u32 = 0o755;

pub async fn mkdir(c: &mut Client, arg: &str, parents: bool) -> Result<(), String> {
    let url = parse(arg)?;
    let r = c.remote(&url).await?;
    if parents {
        mkdir_p(&r, &url, DIR_MODE).await?;
        return Ok(());
    }
    if url.split_last().is_none() {
        return Err(status_err(&url, &r, Kind::Exist));
    }
    let (dir, name) = resolve_parent(&r, &url).await?;
    r.mkdir(&dir, &name, DIR_MODE)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    Ok(())
}

/// Every missing directory of `url`'s path, from the root down; an
/// existing one is fine, an existing non-directory is an error. Over
/// NFSv3 the walk starts at the first path that can be reached (the
/// export: what lies above it is no directory of the server's).
pub async fn mkdir_p(r: &Remote, url: &NfsUrl, mode: u32) -> Result<Fh, String> {
    let comps = url.components();
    let mut fh: Option<Fh> = None;
    let mut at = url.with_path("/");
    for i in 0..=comps.len() {
        if i > 0 {
            at = at.join(comps[i - 1]);
        }
        let here = match (&fh, i) {
            (Some(dir), i) if i > 0 => {
                let name = comps[i - 1];
                match r.lookup(dir, name).await {
                    Ok(h) => h,
                    Err(e) if e.is(Kind::NoEnt) => match r.mkdir(dir, name, mode).await {
                        Ok(h) => h,
                        // Made by someone else meanwhile.
                        Err(e) if e.is(Kind::Exist) => {
                            r.lookup(dir, name).await.map_err(|e| nfs_err(&at, e))?
                        }
                        Err(e) => return Err(nfs_err(&at, e)),
                    },
                    Err(e) => return Err(nfs_err(&at, e)),
                }
            }
            _ => match r.lookup_path(&at.path).await {
                Ok(h) => h,
                Err(_) if i < comps.len() => continue,
                Err(e) => return Err(nfs_err(&at, e)),
            },
        };
        let a = r.stat(&here).await.map_err(|e| nfs_err(&at, e))?;
        if !is_dir(&a) {
            return Err(status_err(&at, r, Kind::NotDir));
        }
        fh = Some(here);
    }
    fh.ok_or_else(|| format!("{url}: nothing to make"))
}

pub async fn rm(c: &mut Client, arg: &str, recursive: bool) -> Result<(), String> {
    let url = parse(arg)?;
    let r = c.remote(&url).await?;
    if url.split_last().is_none() {
        return Err(format!("{url}: refusing to remove the root"));
    }
    let (dir, name) = resolve_parent(&r, &url).await?;
    let fh = r.lookup(&dir, &name).await.map_err(|e| nfs_err(&url, e))?;
    let a = r.stat(&fh).await.map_err(|e| nfs_err(&url, e))?;
    if is_dir(&a) {
        if !recursive {
            return Err(format!(
                "{}; use -r to remove it and its contents",
                status_err(&url, &r, Kind::IsDir)
            ));
        }
        empty_tree(&r, &fh, &url).await?;
        r.rmdir(&dir, &name).await.map_err(|e| nfs_err(&url, e))?;
    } else {
        r.remove(&dir, &name).await.map_err(|e| nfs_err(&url, e))?;
    }
    Ok(())
}

/// Removes everything below the directory `fh`, depth first.
async fn empty_tree(r: &Remote, fh: &Fh, url: &NfsUrl) -> Result<(), String> {
    // Read whole before removing: removing while paging would move cookies.
    let entries = r.readdir(fh).await.map_err(|e| nfs_err(url, e))?;
    for e in entries {
        let child = url.join(&e.name);
        if is_dir(&e.attr) {
            let cfh = match &e.fh {
                Some(h) => h.clone(),
                None => r
                    .lookup(fh, &e.name)
                    .await
                    .map_err(|er| nfs_err(&child, er))?,
            };
            Box::pin(empty_tree(r, &cfh, &child)).await?;
            r.rmdir(fh, &e.name)
                .await
                .map_err(|er| nfs_err(&child, er))?;
        } else {
            r.remove(fh, &e.name)
                .await
                .map_err(|er| nfs_err(&child, er))?;
        }
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
    let r = c.remote(&from).await?;
    let (fdir, fname) = resolve_parent(&r, &from).await?;
    let (tdir, tname, turl) = into_dir(&r, &to, &fname).await?;
    r.rename(&fdir, &fname, &tdir, &tname)
        .await
        .map_err(|e| nfs_err(&format!("{from} -> {turl}"), e))?;
    Ok(())
}

/// Where a new name goes: into `to` when it is a directory (as mv(1)
/// and ln(1) do), else `to` itself. The directory's handle, the name and
/// the whole URL.
async fn into_dir(r: &Remote, to: &NfsUrl, name: &str) -> Result<(Fh, String, NfsUrl), String> {
    match r.lookup_path_attr(&to.path).await {
        Ok((fh, a)) if is_dir(&a) => Ok((fh, name.to_string(), to.join(name))),
        _ => {
            let (tdir, tname) = resolve_parent(r, to).await?;
            Ok((tdir, tname, to.clone()))
        }
    }
}

/// `ln TARGET URL` (a hard link: TARGET is a URL on the same server) or
/// `ln -s TARGET URL` (TARGET is the link's text, stored as given).
pub async fn ln(c: &mut Client, target: &str, link: &str, symbolic: bool) -> Result<(), String> {
    let link = parse(link)?;
    let r = c.remote(&link).await?;
    if symbolic {
        let base = target
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .filter(|b| !b.is_empty() && *b != "..")
            .unwrap_or(target);
        let (dir, name, url) = into_dir(&r, &link, base).await?;
        r.symlink(&dir, &name, target)
            .await
            .map_err(|e| nfs_err(&url, e))?;
        return Ok(());
    }
    let from = parse(target).map_err(|e| {
        format!(
            "{e} (a hard link's target is a URL on the same server; ln -s makes a symbolic link)"
        )
    })?;
    if !from.same_server(&link) {
        return Err(format!(
            "{from} and {link}: a hard link stays within one server (and one uid/gid/vers)"
        ));
    }
    let (fh, a) = r
        .lookup_path_attr(&from.path)
        .await
        .map_err(|e| nfs_err(&from, e))?;
    if is_dir(&a) {
        return Err(format!("{}: hard link not allowed for directory", from));
    }
    let fname = from.split_last().map(|(_, n)| n).unwrap_or_default();
    let (dir, name, url) = into_dir(&r, &link, &fname).await?;
    r.link(&fh, &dir, &name)
        .await
        .map_err(|e| nfs_err(&format!("{url} => {from}"), e))?;
    Ok(())
}
