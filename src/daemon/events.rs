//! `$BINKY_HOME/events.log`: one JSON object a line, rotated by size.
//!
//! Events carry names (event, project, world, service, adapter) and a short
//! detail, never config values or credentials: callers pass a detail written
//! by Binky, not text copied from the user's config or environment.

use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Rotate when the log passes this size, in bytes.
pub const ROTATE_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated generations kept (`events.log.1` … `.3`).
pub const KEEP: u32 = 3;

/// What happened: one spelling each, snake case in `events.log` (the names
/// scripts and tests read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `daemon_started`
    DaemonStarted,
    /// `daemon_stopped`
    DaemonStopped,
    /// `settings_changed`
    SettingsChanged,
    /// `connection_refused`
    ConnectionRefused,
    /// `proxy_bind_failed`
    ProxyBindFailed,
    /// `https_unavailable`
    HttpsUnavailable,
    /// `memory_pressure`
    MemoryPressure,
    /// `admission_queued`
    AdmissionQueued,
    /// `admission_cancelled`
    AdmissionCancelled,
    /// `admission_withdrawn`
    AdmissionWithdrawn,
    /// `admitted`
    Admitted,
    /// `resumed`
    Resumed,
    /// `suspended`
    Suspended,
    /// `up_started`
    UpStarted,
    /// `up`
    Up,
    /// `up_failed`
    UpFailed,
    /// `up_cancelled`
    UpCancelled,
    /// `interrupted`
    Interrupted,
    /// `down`
    Down,
    /// `removed`
    Removed,
    /// `teardown_deferred`
    TeardownDeferred,
    /// `gc`
    Gc,
    /// `worktree_recreated`
    WorktreeRecreated,
    /// `port_moved`
    PortMoved,
    /// `port_skipped`
    PortSkipped,
    /// `provisioned`
    Provisioned,
    /// `migrated`
    Migrated,
    /// `clone_fallback`
    CloneFallback,
    /// `golden_built`
    GoldenBuilt,
    /// `golden_moved`
    GoldenMoved,
    /// `adopted`
    Adopted,
    /// `adopt_failed`
    AdoptFailed,
    /// `orphan_stopped`
    OrphanStopped,
    /// `exited`
    Exited,
    /// `failed`
    Failed,
    /// `unhealthy`
    Unhealthy,
    /// `restarting`
    Restarting,
    /// `gave_up`
    GaveUp,
    /// `watch_restart`
    WatchRestart,
    /// `verify_passed`
    VerifyPassed,
    /// `verify_failed`
    VerifyFailed,
    /// `verify_interrupted`
    VerifyInterrupted,
    /// `test_event` (the log's own tests)
    #[cfg(test)]
    TestEvent,
}

/// One event.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// RFC 3339 time, filled in by [`EventLog::emit`].
    pub ts: String,
    /// What happened.
    pub event: EventKind,
    /// Project name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// World (worktree) name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// Service name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Adapter name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Short Binky-written detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    /// An event with only a name.
    pub fn named(event: EventKind) -> Self {
        Event {
            ts: String::new(),
            event,
            project: None,
            worktree: None,
            service: None,
            adapter: None,
            detail: None,
        }
    }
    /// Sets the detail.
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}

/// The event log writer.
pub struct EventLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
    rotate_bytes: u64,
}

fn open(path: &Path) -> Option<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .ok()
}

impl EventLog {
    /// Opens (appending) the log at `path`.
    pub fn new(path: PathBuf) -> Self {
        Self::with_rotation(path, ROTATE_BYTES)
    }

    /// As [`EventLog::new`] with a custom rotation size (tests).
    pub fn with_rotation(path: PathBuf, rotate_bytes: u64) -> Self {
        let file = open(&path);
        EventLog {
            path,
            file: Mutex::new(file),
            rotate_bytes,
        }
    }

    /// Appends one event. Failures to write are logged, never fatal: the
    /// event log is for people, not for correctness.
    pub fn emit(&self, mut ev: Event) {
        ev.ts = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        // A detail may quote a command's or an adapter's words.
        if let Some(d) = ev.detail.as_mut() {
            crate::secrets::scrub_in_place(d);
        }
        let Ok(mut line) = serde_json::to_vec(&ev) else {
            return;
        };
        line.push(b'\n');
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
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
}
