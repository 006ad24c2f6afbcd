//! Reading logs: a tail, the current run (after the last run mark), and
//! quoting it under an error.

use super::{open_append, split_stamp};
use crate::platform;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The last `n` lines of `path` (reads at most the final 256 KiB).
pub(crate) fn tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut f) = platform::open_read_nofollow(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(256 * 1024);
    let _ = f.seek(SeekFrom::Start(start));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(n);
    lines[skip..].iter().map(|s| (*s).to_owned()).collect()
}

/// What starts the separator line [`mark_run`] writes before each
/// (re)start of a process: a line of text no program prints by chance.
pub(crate) const RUN_MARK: &str = "=== binky: ";

/// Appends a stamped separator line — `<time> === binky: <what> ===` — so a
/// log that holds several runs shows where each began, and
/// [`current_run`] can quote only the last. Best effort: a log that cannot
/// be written is reported where its process's output fails.
pub(crate) fn mark_run(path: &Path, what: &str) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = open_append(path) {
        use std::io::Write;
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        let _ = writeln!(f, "{now} {RUN_MARK}{what} ===");
    }
}

/// The lines of the last run in `path` (after its last [`mark_run`] line,
/// timestamps removed), from at most the final 256 KiB: what the process
/// started last printed, never an earlier run's words.
pub(crate) fn current_run(path: &Path) -> Vec<String> {
    let lines = tail_text(path, usize::MAX);
    let start = lines
        .iter()
        .rposition(|l| l.starts_with(RUN_MARK))
        .map_or(0, |i| i + 1);
    lines[start..].to_vec()
}

/// The first `head` and last `tail` lines of `lines` (all of them when
/// they are few), with a line saying how many were left out between, each
/// prefixed `  | ` for quoting under an error. Starting lines often say the
/// cause (a missing variable), the last ones where it stopped.
pub(crate) fn quote_head_tail(lines: &[String], head: usize, tail: usize) -> String {
    let mut out = Vec::new();
    if lines.len() <= head + tail + 1 {
        out.extend(lines.iter().map(|l| format!("  | {l}")));
    } else {
        out.extend(lines[..head].iter().map(|l| format!("  | {l}")));
        out.push(format!(
            "  | … {} line(s) left out …",
            lines.len() - head - tail
        ));
        out.extend(
            lines[lines.len() - tail..]
                .iter()
                .map(|l| format!("  | {l}")),
        );
    }
    out.join("\n")
}

/// [`tail`] with timestamps removed: what the service printed.
pub(crate) fn tail_text(path: &Path, n: usize) -> Vec<String> {
    tail(path, n)
        .into_iter()
        .map(|l| split_stamp(&l).1.to_owned())
        .collect()
}
