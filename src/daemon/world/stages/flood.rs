//! A service flooding its log — a worker refused by its server and retrying
//! in a loop — passes every probe and shows `running`; `status` (and the
//! dashboard, which reads it) says so instead.
//!
//! Judged from the log file alone, when `status` is asked: a `stat` per
//! running process, and a read of the file's end only when it was written
//! within the window, so a quiet world costs one system call a service and
//! an idle daemon nothing.

use crate::daemon::world::Daemon;
use crate::protocol::{ServiceKind, ServiceState, StatusReport};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The window a flood is judged over.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);

/// Lines within [`WINDOW`] that make a flood: 50 a second, sustained. A dev
/// server that logs each request stays below it unless it is load-tested.
pub(crate) const FLOOD_LINES: usize = 500;

/// How much of a log's end is read: [`FLOOD_LINES`] lines of about 250
/// bytes. When all of it was written within the window, that is a flood
/// too (more than 12 KiB a second), however long its lines.
const TAIL_BYTES: u64 = 128 * 1024;

/// The lines `path` received in the [`WINDOW`] before `now`, counted from
/// the stamps the log writer puts on each (a lower bound when the whole
/// read tail lies in the window: then at least [`FLOOD_LINES`]). `None`
/// when it was not written in the window or cannot be read.
pub(crate) fn recent_lines(path: &Path, now: SystemTime) -> Option<usize> {
    let since = now.checked_sub(WINDOW)?;
    // Not through a link planted at the name.
    let mut f = crate::platform::open_read_nofollow(path).ok()?;
    let meta = f.metadata().ok()?;
    if meta.modified().ok()? < since {
        return None;
    }
    let start = meta.len().saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.take(TAIL_BYTES).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines = text.lines();
    if start > 0 {
        lines.next(); // begins mid-line
    }
    let mut count = 0;
    let mut all_recent = true;
    for line in lines.rev() {
        let (stamp, _) = crate::supervisor::logs::split_stamp(line);
        let Some(at) = stamp.and_then(|s| humantime::parse_rfc3339(s).ok()) else {
            continue; // a line of Binky's own, unstamped
        };
        if at < since {
            all_recent = false;
            break;
        }
        count += 1;
    }
    Some(if all_recent && start > 0 {
        count.max(FLOOD_LINES)
    } else {
        count
    })
}

/// Marks each running process of `report` whose log holds at least
/// [`FLOOD_LINES`] lines from the last [`WINDOW`] (`log_flood`), and adds a
/// note to its world saying so and where to look.
pub(crate) fn fill_log_floods(d: &Daemon, report: &mut StatusReport) {
    let now = SystemTime::now();
    for p in &mut report.projects {
        for w in &mut p.worlds {
            let dir = d.paths.world_logs(&p.name, &w.slug);
            for s in &mut w.services {
                let live = matches!(
                    s.state,
                    ServiceState::Running | ServiceState::Unhealthy | ServiceState::Starting
                );
                if s.kind != ServiceKind::Process || !live {
                    continue;
                }
                let Some(n) = recent_lines(&dir.join(format!("{}.log", s.name)), now)
                    .filter(|n| *n >= FLOOD_LINES)
                else {
                    continue;
                };
                s.log_flood = Some(n as u32);
                w.notes.push(format!(
                    "{svc} is flooding its log: {n} lines in the last {secs} s (a retry loop?): `binky logs {world} {svc}`",
                    svc = s.name,
                    secs = WINDOW.as_secs(),
                    world = w.name,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamped(at: SystemTime, text: &str) -> String {
        format!("{} {text}\n", humantime::format_rfc3339_millis(at))
    }

    #[test]
    fn counts_only_the_windows_stamped_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.log");
        let now = SystemTime::now();
        let mut text = String::new();
        for _ in 0..30 {
            text.push_str(&stamped(now - Duration::from_secs(60), "old"));
        }
        text.push_str("=== binky: started ===\n");
        for _ in 0..700 {
            text.push_str(&stamped(now - Duration::from_secs(2), "NOPERM, retrying"));
        }
        std::fs::write(&p, &text).unwrap();
        assert_eq!(recent_lines(&p, now), Some(700));
        // Judged a minute later, none of it is recent.
        assert_eq!(recent_lines(&p, now + Duration::from_secs(60)), None);
        assert_eq!(recent_lines(&d.path().join("none.log"), now), None);
    }

    #[test]
    fn a_tail_written_entirely_in_the_window_is_a_flood_however_long_its_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.log");
        let now = SystemTime::now();
        let long = "x".repeat(2000);
        let mut text = String::new();
        for _ in 0..100 {
            text.push_str(&stamped(now - Duration::from_secs(1), &long));
        }
        std::fs::write(&p, &text).unwrap();
        assert_eq!(recent_lines(&p, now), Some(FLOOD_LINES));
    }
}
