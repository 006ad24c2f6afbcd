//! What happened, as the daemon tells it: one [`Event`] a line in
//! `events.log`, and the frames a subscriber ([`super::Request::Subscribe`])
//! receives as they happen.
//!
//! Events carry names (event, project, world, service, adapter) and a short
//! detail written by Binky, never config values or credentials.

use serde::{Deserialize, Serialize};

/// What happened: one spelling each, snake case in `events.log` (the names
/// scripts and tests read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    /// `slept`: a world idle for its `idle_after` was stopped (the detail
    /// says for how long it was idle).
    Slept,
    /// `woke`: a sleeping world is brought up again (the detail says by
    /// what: a request to a URL, `up`, `verify`).
    Woke,
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
    /// `cloned`: a slice was copied from a golden template (the detail
    /// names the template, how it was copied and how long it took)
    Cloned,
    /// `clone_fallback`
    CloneFallback,
    /// `spare_made`: a spare clone of a golden template was made ahead of
    /// time (`template`, `how`, `ms`, `bytes`).
    SpareMade,
    /// `spare_taken`: a world's slice is a spare, renamed (`template`,
    /// `ms`).
    SpareTaken,
    /// `spare_dropped`: a spare was dropped (its template's key changed,
    /// `options.spares` lowered, or it could not be taken); `detail` says
    /// why.
    SpareDropped,
    /// `clone_rebuilt`: a fresh clone's catch-up `migrate` failed, so the
    /// slice was built from scratch instead
    CloneRebuilt,
    /// `reset`: a world's slices were rebuilt (`binky reset`)
    Reset,
    /// `setup_ran`: `[project] setup` passed in a new worktree
    SetupRan,
    /// `template_dropped`: `gc` dropped a golden template no world uses
    TemplateDropped,
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
    /// `started`: a service's process was spawned (the detail is its pid)
    Started,
    /// `ready`: a service passed its health probe
    Ready,
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

/// One event, as `events.log` holds it and a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// RFC 3339 time, filled in when the daemon emits it.
    pub ts: String,
    /// What happened.
    pub event: EventKind,
    /// Project name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// World (worktree) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// Service name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Adapter name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Short Binky-written detail, for a person: the data a script reads
    /// is in the fields below, never to be parsed out of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `cloned`: the golden template the slice was cloned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// `cloned`: how the adapter copied it (e.g. `TEMPLATE STRATEGY
    /// WAL_LOG`, `reflink`, `copy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
    /// `cloned`: how long the copy took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// `cloned`: the disk the copy took, bytes: the fall in its
    /// filesystem's free space across the copy (so a copy-on-write clone
    /// reads near 0), when Binky can see the folder the data is kept in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// `port_skipped`, `port_moved`: the port held outside Binky.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `port_moved`: the port the service got instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<u16>,
    /// `watch_restart`: the changed paths (relative to the worktree) that
    /// restarted the service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
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
            template: None,
            how: None,
            ms: None,
            bytes: None,
            port: None,
            moved_to: None,
            changed: Vec::new(),
        }
    }
    /// Sets the detail.
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}
