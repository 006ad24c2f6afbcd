//! `logs` (the MCP tool; the CLI reads the files itself): a world's
//! captured service output, the newest lines or those written since a
//! cursor the previous call returned, read by name across a rotation.

use crate::daemon::Daemon;
use crate::daemon::world::stages::locate::{find_world, locate};
use crate::protocol::{ApiError, LogLine, LogsReport, WorldRef};
use crate::supervisor::logs::{Follower, Mark, split_stamp, tail};
use std::path::{Path, PathBuf};

/// The lines of world `wref`'s logs (of `service` alone when given): the
/// newest `lines` (at most [`LogsReport::MAX_LINES`]; 0 means that many),
/// or with `cursor` those written since, interleaved by the time each was
/// written. Text is masked of secrets at the server boundary.
///
/// # Errors
/// No such world, no log for `service` (the services with logs are
/// named), or a cursor this daemon did not give.
pub(crate) fn logs(
    d: &Daemon,
    wref: WorldRef,
    service: Option<String>,
    lines: usize,
    cursor: Option<String>,
) -> Result<LogsReport, ApiError> {
    let loc = locate(d, &wref)?;
    let w = find_world(d, &loc, &wref.name)?;
    let mut files = service_logs(&d.paths.world_logs(&loc.name, &w.slug));
    if let Some(s) = &service {
        let all: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        let hint = if all.is_empty() {
            "no service has printed anything yet".to_owned()
        } else {
            format!("services with logs: {}", all.join(", "))
        };
        files.retain(|(n, _)| n == s);
        if files.is_empty() {
            return Err(
                ApiError::new(format!("no log for service `{s}` in world `{}`", w.name)).hint(hint),
            );
        }
    }
    let since = cursor.as_deref().map(parse_cursor).transpose()?;
    let limit = match lines {
        0 => LogsReport::MAX_LINES,
        n => n.min(LogsReport::MAX_LINES),
    };
    let mut report = LogsReport {
        notes: super::sleep::sleeping_note(&w).into_iter().collect(),
        ..LogsReport::default()
    };
    let mut marks = Vec::new();
    for (svc, path) in &files {
        let (text, mark, lost) = match since
            .as_ref()
            .and_then(|c| c.iter().find(|(s, _)| s == svc))
        {
            Some((_, m)) => read_since(path, *m),
            // A service new since the cursor: all it printed.
            None if since.is_some() => read_since(
                path,
                Mark {
                    dev: 0,
                    ino: 0,
                    offset: 0,
                },
            ),
            None => {
                let mark = Follower::from_end(path).mark();
                (tail(path, limit), mark, false)
            }
        };
        report.truncated |= lost && since.is_some();
        let mut last_ts = None;
        for l in text {
            let (ts, body) = split_stamp(&l);
            if let Some(ts) = ts {
                last_ts = Some(ts.to_owned());
            }
            report.lines.push(LogLine {
                service: svc.clone(),
                ts: last_ts.clone(),
                text: body.to_owned(),
            });
        }
        marks.push((svc.clone(), mark));
    }
    // Stable: each log keeps its own order among lines of one time.
    report.lines.sort_by(|a, b| a.ts.cmp(&b.ts));
    if report.lines.len() > limit {
        report.truncated |= since.is_some();
        report.lines.drain(..report.lines.len() - limit);
    }
    report.cursor = render_cursor(&marks);
    Ok(report)
}

/// The folder holding world `wref`'s logs (made when missing, so it can
/// be watched before a service has printed anything).
///
/// # Errors
/// No such world, or the folder cannot be made.
pub(crate) fn log_dir(d: &Daemon, wref: &WorldRef) -> Result<PathBuf, ApiError> {
    let loc = locate(d, wref)?;
    let w = find_world(d, &loc, &wref.name)?;
    let dir = d.paths.world_logs(&loc.name, &w.slug);
    std::fs::create_dir_all(&dir).map_err(|e| {
        ApiError::new(format!("cannot make {}: {e}", dir.display()))
            .hint("check that BINKY_HOME is writable")
    })?;
    Ok(dir)
}

/// The world's logs, `(service, path)` by service name.
fn service_logs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log").map(|s| (s.to_owned(), e.path()))
        })
        .collect();
    files.sort();
    files
}

/// The whole lines written to `path` since `mark`, where to carry on, and
/// whether the place was lost (the log rotated twice since).
fn read_since(path: &Path, mark: Mark) -> (Vec<String>, Mark, bool) {
    let (mut f, lost) = Follower::resume(path, mark);
    let bytes = f.poll();
    // A line still being written is left for the next call.
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    f.unread(bytes.len() - whole);
    let text = String::from_utf8_lossy(&bytes[..whole]);
    let lines = text.lines().map(str::to_owned).collect();
    (lines, f.mark(), lost)
}

/// `service:dev:ino:offset` per log, comma-separated. Service names are
/// `[a-z0-9_-]`, so neither separator can occur in one.
fn render_cursor(marks: &[(String, Mark)]) -> String {
    marks
        .iter()
        .map(|(s, m)| format!("{s}:{}:{}:{}", m.dev, m.ino, m.offset))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_cursor(text: &str) -> Result<Vec<(String, Mark)>, ApiError> {
    let bad = || {
        ApiError::new("`cursor` is not one this daemon returned")
            .hint("pass the `cursor` of the previous answer as it was, or leave it out for the newest lines")
            .with_kind(crate::protocol::ErrorKind::InvalidInput)
    };
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(|part| {
            let mut it = part.split(':');
            let (Some(s), Some(dev), Some(ino), Some(off), None) =
                (it.next(), it.next(), it.next(), it.next(), it.next())
            else {
                return Err(bad());
            };
            let n = |x: &str| x.parse::<u64>().map_err(|_| bad());
            Ok((
                s.to_owned(),
                Mark {
                    dev: n(dev)?,
                    ino: n(ino)?,
                    offset: n(off)?,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_cursor_reads_on_across_a_rotation_and_holds_back_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("web.log");
        let append = |path: &Path, s: &str| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            f.write_all(s.as_bytes()).unwrap();
        };
        append(&p, "one\ntwo\nhal");
        let start = Follower::resume(
            &p,
            Mark {
                dev: 0,
                ino: 0,
                offset: 0,
            },
        )
        .0
        .mark();
        let (lines, mark, lost) = read_since(&p, Mark { offset: 0, ..start });
        assert_eq!(
            (lines, lost),
            (vec!["one".to_owned(), "two".to_owned()], false)
        );
        // The rest of the partial line, then a rotation by rename and a
        // new file at the name.
        append(&p, "f\nthree\n");
        std::fs::rename(&p, dir.path().join("web.log.1")).unwrap();
        append(&p, "four\n");
        let (lines, mark, lost) = read_since(&p, mark);
        assert_eq!(lines, ["half", "three", "four"]);
        assert!(!lost);
        let (lines, _, _) = read_since(&p, mark);
        assert!(lines.is_empty(), "{lines:?}");
        // Rotated twice: the place is lost, and said.
        std::fs::rename(dir.path().join("web.log.1"), dir.path().join("web.log.2")).unwrap();
        std::fs::rename(&p, dir.path().join("web.log.1")).unwrap();
        append(&p, "five\n");
        let (lines, _, lost) = read_since(&p, start);
        assert_eq!((lines, lost), (vec!["five".to_owned()], true));
    }

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
        let marks = vec![(
            "web".to_owned(),
            Mark {
                dev: 2049,
                ino: 77,
                offset: 123,
            },
        )];
        let text = render_cursor(&marks);
        assert_eq!(parse_cursor(&text).unwrap(), marks);
        for bad in ["web:1:2", "web:a:b:c", "web:1:2:3:4"] {
            let e = parse_cursor(bad).unwrap_err();
            assert!(e.message.contains("cursor"), "{e:?}");
        }
    }
}
