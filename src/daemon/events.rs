//! `$BINKY_HOME/events.log`: one JSON object a line, rotated by size.
//!
//! Events carry names (event, project, world, service, adapter) and a short
//! detail, never config values or credentials: callers pass a detail written
//! by Binky, not text copied from the user's config or environment.

pub(crate) use crate::protocol::{Event, EventKind};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Rotate when the log passes this size, in bytes.
pub(crate) const ROTATE_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated generations kept (`events.log.1` … `.3`).
pub(crate) const KEEP: u32 = 3;

/// How many events a subscriber may fall behind before it is told how
/// many it missed ([`crate::protocol::Reply::Lagged`]): the bound on what a
/// slow reader costs the daemon (events are a few hundred bytes).
pub(crate) const BACKLOG: usize = 1024;

/// The event log writer, and the fan-out to subscribers.
pub(crate) struct EventLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
    rotate_bytes: u64,
    /// Every emitted event, to whoever subscribed; sending never waits.
    bus: tokio::sync::broadcast::Sender<Event>,
}

/// Opens the log for appending. A last line left torn (a crash mid-write)
/// is ended first, so the next event starts a line of its own and both
/// stay readable apart.
fn open(path: &Path) -> Option<File> {
    // Never through a link planted at the name: it is replaced by a new
    // file (see `logs::open_log`); no text line is added to a log of JSON.
    let mut f = crate::supervisor::logs::open_log(path, true, false).ok()?;
    let len = f.metadata().map_or(0, |m| m.len());
    if len > 0 {
        use std::io::{Read, Seek, SeekFrom};
        let mut last = [0u8; 1];
        if f.seek(SeekFrom::Start(len - 1)).is_ok()
            && f.read_exact(&mut last).is_ok()
            && last[0] != b'\n'
        {
            let _ = f.write_all(b"\n");
        }
    }
    Some(f)
}

/// The longest detail an event keeps, in characters: an event is a line
/// for people and followers, not a place for a whole error text (a tail
/// reads the log's last 256 KiB, which one huge line would fill).
pub(crate) const MAX_DETAIL_CHARS: usize = 1000;

impl EventLog {
    /// Opens (appending) the log at `path`.
    pub(crate) fn new(path: PathBuf) -> Self {
        Self::with_rotation(path, ROTATE_BYTES)
    }

    /// As [`EventLog::new`] with a custom rotation size (tests).
    pub(crate) fn with_rotation(path: PathBuf, rotate_bytes: u64) -> Self {
        let file = open(&path);
        EventLog {
            path,
            file: Mutex::new(file),
            rotate_bytes,
            bus: tokio::sync::broadcast::channel(BACKLOG).0,
        }
    }

    /// The newest `tail` events of the log (as many as its last 256 KiB
    /// hold), and a receiver of every event emitted after them: taken under
    /// the log's lock, so no event is missed or seen twice between the two.
    pub(crate) fn subscribe(
        &self,
        tail: usize,
    ) -> (Vec<Event>, tokio::sync::broadcast::Receiver<Event>) {
        let _guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let past = if tail == 0 {
            Vec::new()
        } else {
            crate::supervisor::logs::tail(&self.path, tail)
                .iter()
                // A line an older binky wrote with a kind this one lacks
                // is skipped.
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        };
        (past, self.bus.subscribe())
    }

    /// How many subscriptions are open now (`binky events -f`, `status
    /// --watch`, the dashboard, log followers): each holds one receiver
    /// from [`Self::subscribe`] until its connection ends.
    pub(crate) fn followers(&self) -> usize {
        self.bus.receiver_count()
    }

    /// Appends one event and hands it to subscribers. Failures to write are
    /// logged, never fatal: the event log is for people, not for
    /// correctness.
    pub(crate) fn emit(&self, mut ev: Event) {
        ev.ts = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        // A detail may quote a command's or an adapter's words.
        if let Some(d) = ev.detail.as_mut() {
            crate::secrets::scrub_in_place(d);
            if let Some((cut, _)) = d.char_indices().nth(MAX_DETAIL_CHARS) {
                d.truncate(cut);
                d.push('…');
            }
        }
        let Ok(mut line) = serde_json::to_vec(&ev) else {
            return;
        };
        line.push(b'\n');
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock, so subscribers see events in the log's order; a
        // log that cannot be written still reaches them.
        let _ = self.bus.send(ev);
        if guard.is_none() {
            *guard = open(&self.path);
        }
        let Some(f) = guard.as_mut() else {
            tracing::warn!(path = %self.path.display(), "cannot open event log");
            return;
        };
        if let Err(e) = f.write_all(&line) {
            tracing::warn!(error = %e, "cannot write event log");
            return;
        }
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        if size >= self.rotate_bytes {
            *guard = None;
            self.rotate();
            *guard = open(&self.path);
        }
    }

    fn rotate(&self) {
        let gen_path = |n: u32| PathBuf::from(format!("{}.{n}", self.path.display()));
        let _ = std::fs::remove_file(gen_path(KEEP));
        for n in (1..KEEP).rev() {
            let _ = std::fs::rename(gen_path(n), gen_path(n + 1));
        }
        let _ = std::fs::rename(&self.path, gen_path(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names scripts and tests read in `events.log` are the ones the
    /// strings were before the enum.
    #[test]
    fn kinds_are_written_in_snake_case() {
        for (kind, name) in [
            (EventKind::UpStarted, "up_started"),
            (EventKind::Up, "up"),
            (EventKind::AdmissionWithdrawn, "admission_withdrawn"),
            (EventKind::GaveUp, "gave_up"),
            (EventKind::Gc, "gc"),
        ] {
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{name}\""));
        }
    }

    #[test]
    fn lines_are_json_and_rotate() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("events.log");
        let log = EventLog::with_rotation(p.clone(), 2000);
        for i in 0..100 {
            let mut e = Event::named(EventKind::TestEvent).detail(format!("n={i}"));
            e.project = Some("acme".into());
            log.emit(e);
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["event"], "test_event");
            assert!(v["ts"].as_str().unwrap().ends_with('Z'));
        }
        assert!(dir.path().join("events.log.1").exists());
        assert!(dir.path().join("events.log.3").exists());
        assert!(!dir.path().join("events.log.4").exists());
    }

    #[test]
    fn a_subscriber_gets_the_tail_then_every_new_event_and_a_slow_one_a_count_of_what_it_missed() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::new(dir.path().join("events.log"));
        let n = |i: usize| Event::named(EventKind::TestEvent).detail(format!("n={i}"));
        for i in 0..5 {
            log.emit(n(i));
        }
        let (past, mut rx) = log.subscribe(2);
        let details: Vec<_> = past.iter().filter_map(|e| e.detail.clone()).collect();
        assert_eq!(details, ["n=3", "n=4"]);
        log.emit(n(5));
        assert_eq!(rx.try_recv().unwrap().detail.as_deref(), Some("n=5"));
        // Falling behind by more than the backlog costs the daemon nothing
        // (emit never waits) and the reader learns how many it missed.
        for i in 0..BACKLOG + 7 {
            log.emit(n(6 + i));
        }
        match rx.try_recv() {
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(missed)) => {
                assert_eq!(missed, 7)
            }
            other => panic!("expected a lag, got {other:?}"),
        }
        // Then it carries on with the oldest event still held.
        assert_eq!(rx.try_recv().unwrap().detail.as_deref(), Some("n=13"));
    }

    #[test]
    fn a_torn_last_line_is_ended_and_a_long_detail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("events.log");
        std::fs::write(&p, "{\"ts\":\"x\",\"event\":\"up\"").unwrap();
        let log = EventLog::new(p.clone());
        log.emit(Event::named(EventKind::TestEvent).detail("x".repeat(5000)));
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        let detail = v["detail"].as_str().unwrap();
        assert_eq!(detail.chars().count(), MAX_DETAIL_CHARS + 1);
        assert!(detail.ends_with('…'));
    }
}
