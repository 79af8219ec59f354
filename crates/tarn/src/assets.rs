//! `tarn generate-assets DIR` (hidden): the man pages and shell completions
//! a package installs, generated from the clap definitions so they never
//! drift from `--help`.

use clap::CommandFactory;
use std::path::Path;

pub fn generate(dir: &Path) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let man = dir.join("man");
    let comp = dir.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    let cmd = crate::Cli::command();
    // tarn.1, then tarn-SUB.1 for each subcommand (as git does).
    let mut pages = vec![("tarn".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("tarn-{}", sub.get_name());
        // clap takes &'static names; this runs once, at package build time.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let page = sub
            .clone()
            .name(leak(name.clone()))
            .bin_name(leak(format!("tarn {}", sub.get_name())));
        pages.push((name, page));
    }
    for (name, page) in pages {
        let mut buf = Vec::new();
        clap_mangen::Man::new(page)
            .render(&mut buf)
            .map_err(|e| format!("{name}.1: {e}"))?;
        let p = man.join(format!("{name}.1"));
        std::fs::write(&p, buf).map_err(|e| io(&p, e))?;
    }
    // Completions offer what --help lists: the hidden commands are left out
    // (fish and zsh would offer them otherwise).
    let mut visible = clap::Command::new("tarn")
        .version(env!("CARGO_PKG_VERSION"))
        .about(cmd.get_about().cloned().unwrap_or_default())
        .subcommand_required(true);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        visible = visible.subcommand(sub.clone());
    }
    use clap_complete::Shell;
    for (shell, file) in [
        (Shell::Bash, "tarn"),
        (Shell::Zsh, "_tarn"),
        (Shell::Fish, "tarn.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut visible, "tarn", &mut buf);
        let p = comp.join(file);
        std::fs::write(&p, buf).map_err(|e| io(&p, e))?;
    }
    Ok(())
}
