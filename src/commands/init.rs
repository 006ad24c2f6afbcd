//! `binky init [dir] [-f FILE] [--force] [--stdout]`: a starting
//! binky.toml from the project's compose file.
//!
//! Exit 0 written (or printed), 1 the compose file cannot be used or a
//! binky.toml is already there, 2 no compose file to read.

use crate::cli::InitArgs;
use crate::init::{self, Role};
use crate::output::{self, DIM, OK, paint};
use std::io::Write as _;
use std::process::ExitCode;

/// Runs `binky init`.
pub(crate) fn run(args: &InitArgs) -> ExitCode {
    let target = args.dir.join(crate::config::FILE_NAME);
    // Refused before reading anything: nothing to lose, nothing half-done.
    // A dangling symlink is a binky.toml too: writing would follow it.
    if !args.stdout && !args.force && target.symlink_metadata().is_ok() {
        output::error(
            format!("{} already exists", target.display()),
            Some(
                "`binky init --force` overwrites it; `binky init --stdout` prints what it would write",
            ),
        );
        return ExitCode::from(1);
    }
    if !args.dir.is_dir() {
        output::error(
            format!("{} is not a folder", args.dir.display()),
            Some("pass the folder that holds the compose file"),
        );
        return ExitCode::from(2);
    }
    let made = match init::generate(&args.dir, args.file.as_deref(), &|n| std::env::var(n).ok()) {
        Ok(m) => m,
        Err(e) => {
            output::error(&e, Some(&e.hint));
            let missing = e.line.is_none() && !e.file.is_file();
            return ExitCode::from(if missing { 2 } else { 1 });
        }
    };
    for n in &made.notes {
        anstream::eprintln!("{} {n}", paint(crate::output::WARN, "warning:"));
    }
    if args.stdout {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(made.toml.as_bytes());
        return ExitCode::SUCCESS;
    }
    if let Err(e) = super::write_atomically(&target, &made.toml) {
        output::error(
            format!("cannot write {}: {e}", target.display()),
            Some("check that the folder is writable"),
        );
        return ExitCode::from(1);
    }
    summary(&target, &made);
    ExitCode::SUCCESS
}

/// What was written, what was mapped, and what needs the user.
fn summary(target: &std::path::Path, made: &init::Generated) {
    let files: Vec<String> = made.files.iter().map(|f| f.display().to_string()).collect();
    anstream::println!(
        "{} wrote {} from {}",
        paint(OK, "✓"),
        target.display(),
        files.join(" + ")
    );
    if made.services.is_empty() {
        anstream::println!(
            "  the compose file defines no services: binky.toml holds only [project]"
        );
        return;
    }
    let mut mapped = Vec::new();
    let mut todo = Vec::new();
    let mut commented = Vec::new();
    for p in &made.services {
        match (&p.role, p.commented()) {
            (Role::Resource { adapter, .. }, false) => {
                mapped.push(format!("{} → {adapter}", p.name))
            }
            (Role::App, _) if p.profiles.is_empty() => todo.push(p.name.clone()),
            _ => commented.push(p.name.clone()),
        }
    }
    if !mapped.is_empty() {
        anstream::println!("  mapped:    {}", names(&mapped));
    }
    if !todo.is_empty() {
        anstream::println!(
            "  needs you: {} {}",
            names(&todo),
            paint(
                DIM,
                "(commented out, with a TODO(build) for its command on this machine)"
            )
        );
    }
    if !commented.is_empty() {
        anstream::println!(
            "  commented: {} {}",
            names(&commented),
            paint(
                DIM,
                "(admin UIs, profiles, a second slice of one adapter: the file says why)"
            )
        );
    }
    if mapped.is_empty() {
        anstream::println!("next: `binky check`, then fill in the TODOs");
    } else {
        anstream::println!(
            "next: export the admin URLs the file's header lists, then `binky check` and `binky up <branch>`"
        );
    }
}

/// At most the first ten of `items`, then how many more.
fn names(items: &[String]) -> String {
    const SHOWN: usize = 10;
    if items.len() <= SHOWN {
        return items.join(", ");
    }
    format!(
        "{}, and {} more",
        items[..SHOWN].join(", "),
        items.len() - SHOWN
    )
}
