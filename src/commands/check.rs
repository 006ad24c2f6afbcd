//! `binky check [path]`: validate a binky.toml and print located findings.
//!
//! Exit 0 when valid (warnings printed), 1 on errors, 2 when the file cannot
//! be found or read.

use crate::cli::CheckArgs;
use crate::config::{self, LoadError, Severity};
use crate::output::{self, DIM, ERROR, OK, WARN, paint};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Runs `binky check`.
pub(crate) fn run(args: &CheckArgs, project: Option<&str>) -> ExitCode {
    // -p means exactly the project's folder or its binky.toml, as for every
    // verb; the positional path may be any folder to search upward from.
    let from_flag = match (&args.path, project) {
        (None, Some(p)) => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            match crate::protocol::WorldRef::from_arg(Some(p), &cwd, "") {
                Ok(w) => w.project_dir.map(PathBuf::from),
                Err(e) => {
                    output::error(e, Some("pass the project's folder or its binky.toml"));
                    return ExitCode::from(2);
                }
            }
        }
        _ => None,
    };
    let start = args
        .path
        .clone()
        .or(from_flag)
        .unwrap_or_else(|| PathBuf::from("."));
    let path = match config::find(&start) {
        Ok(p) => p,
        Err(e) => {
            let hint = matches!(e, LoadError::NotFound { .. }).then_some(
                "run it in a project folder, or pass the path: `binky check path/to/binky.toml`",
            );
            return unreadable(&e, hint, args.json);
        }
    };
    let report = match config::check_file_here(&path) {
        Ok(r) => r,
        Err(e) => return unreadable(&e, None, args.json),
    };
    let shown = display_path(&path);
    if args.json {
        print_json(&shown, &report);
    } else {
        print_text(&shown, &report);
    }
    if report.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The report as one JSON object (`file`, `valid`, counts, `diagnostics`).
fn print_json(shown: &str, report: &config::Report) {
    let value = serde_json::json!({
        "file": shown,
        "valid": report.errors() == 0,
        "errors": report.errors(),
        "warnings": report.warnings(),
        "diagnostics": report.diagnostics,
    });
    println!("{}", serde_json::to_string_pretty(&value).expect("json"));
}

/// The report as located findings, then a one-line verdict.
fn print_text(shown: &str, report: &config::Report) {
    for d in &report.diagnostics {
        let text = d.render(shown);
        let (label, style) = match d.severity {
            Severity::Error => ("error", ERROR),
            Severity::Warning => ("warning", WARN),
        };
        // Colour only the severity word; the rest stays plain for grep.
        let text = text.replacen(
            &format!("{label}["),
            &format!("{}[", paint(style, label)),
            1,
        );
        let text = text.replacen("\n  hint:", &format!("\n  {}", paint(DIM, "hint:")), 1);
        anstream::println!("{text}");
    }
    let (e, w) = (report.errors(), report.warnings());
    if e > 0 {
        anstream::println!(
            "{} {shown}: {}, {}",
            paint(ERROR, "✗"),
            plural(e, "error"),
            plural(w, "warning")
        );
    } else {
        let what = report
            .config
            .as_ref()
            .map(|c| {
                format!(
                    "project {}, {}",
                    c.project.name,
                    plural(c.services.len(), "service")
                )
            })
            .unwrap_or_default();
        let warn = if w > 0 {
            format!(", {}", plural(w, "warning"))
        } else {
            String::new()
        };
        anstream::println!("{} {shown}: valid ({what}){warn}", paint(OK, "✓"));
    }
}

fn unreadable(e: &LoadError, hint: Option<&str>, json: bool) -> ExitCode {
    if json {
        let v = serde_json::json!({"valid": false, "error": e.to_string()});
        println!("{v}");
    } else {
        output::error(e, hint);
    }
    ExitCode::from(2)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The path as the user would type it: relative to the current folder when
/// inside it.
fn display_path(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let rel = cwd
        .as_deref()
        .and_then(|c| path.strip_prefix(c).ok())
        .unwrap_or(path);
    let s = rel.display().to_string();
    s.strip_prefix("./").map(str::to_owned).unwrap_or(s)
}
