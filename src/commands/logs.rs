//! `binky logs`: a world's service logs, followed or not, interleaved by
//! time, with text a service printed made safe for the terminal.

use super::paths_or_exit;
use crate::cli::LogsArgs;
use crate::client::Feed;
use crate::output::{DIM, paint};
use crate::protocol::{ApiError, LogFollow, LogsReport, Subscription, WorldRef};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The log folder of a world, found without the daemon.
fn log_dir(project: Option<&str>, name: &str) -> Result<(PathBuf, String), ExitCode> {
    let paths = paths_or_exit()?;
    let project_name = match project {
        Some(p) if !Path::new(p).exists() && !p.contains('/') => p.to_owned(),
        other => super::project_name(other.unwrap_or("."), false)?,
    };
    let slug = crate::slug::world_slug(name);
    Ok((paths.world_logs(&project_name, &slug), project_name))
}

/// `binky logs`.
pub(crate) fn logs(args: &LogsArgs, project: Option<&str>) -> ExitCode {
    let (dir, project_name) = match log_dir(project, &args.name) {
        Ok(v) => v,
        Err(c) => return c,
    };
    let files = match log_files(&dir, &project_name, args) {
        Ok(f) => f,
        Err(c) => return c,
    };
    let width = files.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    if !args.follow {
        print_tail(&files, args.lines, width);
        return ExitCode::SUCCESS;
    }
    follow(args, project, width)
}

/// The world's logs, `(service, path)` sorted by service; just the one of
/// `args.service` when given.
///
/// # Errors
/// No logs for the world, or none for that service (the error is printed;
/// the exit code is returned).
fn log_files(
    dir: &Path,
    project_name: &str,
    args: &LogsArgs,
) -> Result<Vec<(String, PathBuf)>, ExitCode> {
    let mut files: Vec<(String, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".log").map(|s| (s.to_owned(), e.path()))
            })
            .collect(),
        Err(_) => {
            crate::output::error(
                format!(
                    "no logs for world `{}` of project {project_name}",
                    args.name
                ),
                Some("`binky status` lists the worlds; logs appear once a world has been up"),
            );
            return Err(ExitCode::from(1));
        }
    };
    files.sort();
    let all_names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    if let Some(s) = &args.service {
        files.retain(|(n, _)| n == s);
        if files.is_empty() {
            crate::output::error(
                format!("no log for service `{s}` in world `{}`", args.name),
                Some(&format!("services with logs: {}", all_names.join(", "))),
            );
            return Err(ExitCode::from(1));
        }
    }
    Ok(files)
}

/// The last `lines` lines of each log, interleaved by when each was
/// written, prefixed with the service's name padded to `width`.
fn print_tail(files: &[(String, PathBuf)], lines: usize, width: usize) {
    // Interleave by the time each line was written (the log writer stamps
    // every line); a stable sort keeps each file's own order.
    let mut merged: Vec<(String, usize, usize, String)> = Vec::new();
    for (i, (_, path)) in files.iter().enumerate() {
        let mut last_ts = String::new();
        for (j, line) in crate::supervisor::logs::tail(path, lines)
            .into_iter()
            .enumerate()
        {
            let (ts, text) = crate::supervisor::logs::split_stamp(&line);
            if let Some(ts) = ts {
                last_ts = ts.to_owned();
            }
            merged.push((last_ts.clone(), i, j, text.to_owned()));
        }
    }
    merged.sort();
    let mut out = anstream::stdout().lock();
    for (_, i, _, text) in merged {
        let svc = &files[i].0;
        let _ = writeln!(
            out,
            "{} {}",
            paint(DIM, format!("{svc:<width$} |")),
            crate::output::untrusted(&text)
        );
    }
}

/// Follows the logs through the daemon's log subscription: the newest
/// `args.lines` lines, then each as it is written, in arrival order,
/// across a rotation of any log, a service's restart and a daemon
/// restart (carried on from the last line shown). Ends with the process,
/// or when the world is removed.
fn follow(args: &LogsArgs, project: Option<&str>, width: usize) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let world = match WorldRef::from_arg(project, &cwd, &args.name) {
        Ok(w) => w,
        Err(e) => return super::fail(&ApiError::new(e)),
    };
    let sub = Subscription {
        world: Some(world),
        tail: 0,
        logs: Some(LogFollow {
            service: args.service.clone(),
            lines: args.lines.min(LogsReport::MAX_LINES),
            cursor: None,
        }),
    };
    let mut out = anstream::stdout();
    let result = crate::client::follow(&paths, sub, true, &mut |feed| {
        let r = match feed {
            Feed::Logs(r) => r,
            Feed::Gone => {
                eprintln!("{}", super::events::DAEMON_GONE);
                return true;
            }
            _ => return true,
        };
        if r.truncated {
            let _ = writeln!(
                out,
                "{}",
                paint(DIM, "... lines skipped: this reader fell behind")
            );
        }
        for l in &r.lines {
            let svc = &l.service;
            // A closed pipe (`| head`) ends the follow quietly.
            if writeln!(
                out,
                "{} {}",
                paint(DIM, format!("{svc:<width$} |")),
                crate::output::untrusted(&l.text)
            )
            .is_err()
            {
                return false;
            }
        }
        out.flush().is_ok()
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::fail(&e),
    }
}
