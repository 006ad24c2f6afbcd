//! `binky logs`: a world's service logs, followed or not, interleaved by
//! time, with text a service printed made safe for the terminal.

use super::paths_or_exit;
use crate::cli::LogsArgs;
use crate::output::{DIM, paint};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The log folder of a world, found without the daemon.
fn log_dir(project: Option<&str>, name: &str) -> Result<(PathBuf, String), ExitCode> {
    let paths = paths_or_exit()?;
    let project_name = match project {
        Some(p) if !Path::new(p).exists() && !p.contains('/') => p.to_owned(),
        other => super::project_name(other.unwrap_or("."))?,
    };
    let slug = crate::slug::world_slug(name);
    Ok((paths.world_logs(&project_name, &slug), project_name))
}

/// `binky logs`.
pub fn logs(args: &LogsArgs, project: Option<&str>) -> ExitCode {
    let (dir, project_name) = match log_dir(project, &args.name) {
        Ok(v) => v,
        Err(c) => return c,
    };
    let files = match log_files(&dir, &project_name, args) {
        Ok(f) => f,
        Err(c) => return c,
    };
    let width = files.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    print_tail(&files, args.lines, width);
    if !args.follow {
        return ExitCode::SUCCESS;
    }
    follow(&files, width)
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

/// Follows the logs by name (as `tail -F`): lines as they are appended, in
/// arrival order, across a rotation of any log. Ends only with the process.
fn follow(files: &[(String, PathBuf)], width: usize) -> ExitCode {
    let mut followers: Vec<crate::supervisor::logs::Follower> = files
        .iter()
        .map(|(_, p)| crate::supervisor::logs::Follower::from_end(p))
        .collect();
    let mut partial: Vec<String> = vec![String::new(); files.len()];
    loop {
        for (i, (svc, _)) in files.iter().enumerate() {
            let buf = followers[i].poll();
            if buf.is_empty() {
                continue;
            }
            partial[i].push_str(&String::from_utf8_lossy(&buf));
            while let Some(pos) = partial[i].find('\n') {
                let line: String = partial[i].drain(..=pos).collect();
                let text = crate::supervisor::logs::split_stamp(line.trim_end_matches('\n')).1;
                anstream::println!(
                    "{} {}",
                    paint(DIM, format!("{svc:<width$} |")),
                    crate::output::untrusted(text)
                );
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
