//! The frames a daemon answers with: progress, then one [`Response`] or
//! [`ApiError`] (which always says what to do).

use super::reports::{
    DaemonInfo, Metrics, ServiceTarget, Settings, StatusReport, SweepItem, VerifyReport, WorldEnv,
    WorldOutcome,
};
use serde::{Deserialize, Serialize};

/// A frame from the daemon after the [`Welcome`](super::Welcome).
// One value per frame on the socket, moved once: boxing the answer would
// buy nothing but an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", content = "body", rename_all = "snake_case")]
pub enum Reply {
    /// Something a long operation is doing now.
    Progress(Progress),
    /// The operation finished.
    Ok(Response),
    /// The operation failed.
    Err(ApiError),
    /// Something happened (a subscription's frame).
    Event(super::Event),
    /// A subscriber read too slowly: this many events were dropped before
    /// the next one it gets.
    Lagged(u64),
    /// Lines a followed world's services printed (a log subscription's
    /// frame); its `cursor` resumes after them.
    Logs(super::LogsReport),
}

/// A progress event of a long operation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Progress {
    /// Which step of the verb this is.
    pub step: ProgressStep,
    /// The service concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Human text.
    pub message: String,
}

/// A step a long verb reports, one spelling on the wire (snake case).
/// Clients act on the step, never on the message's text.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProgressStep {
    /// `up` was admitted (the machine has room).
    Admitted,
    /// `up` waits in the admission queue; the message gives its place.
    Queued,
    /// The worktree is made, reused or re-made.
    Worktree,
    /// Ports are reserved.
    Ports,
    /// A new worktree is made ready: `[project] copy`, then `setup`.
    Setup,
    /// A resource's slice is made.
    Provision,
    /// A slice's `migrate` runs to catch up with the branch.
    Migrate,
    /// A service is started.
    Start,
    /// A service answers its probe (or finished as a one-shot).
    Ready,
    /// A world's processes are stopped.
    Stop,
    /// A `verify` command starts.
    Verify,
    /// A line a `verify` command printed.
    Output,
}

/// What kind of failure an [`ApiError`] is, for code that acts on it (the
/// MCP server, the CLI): never read from the words of the message, which
/// are for people and may change.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Nothing more is known: the message says it.
    #[default]
    Other,
    /// Refused to protect work (uncommitted changes, a folder or slice
    /// Binky did not make); the CLI's `--force` would override it, which an
    /// agent must not reach for on the user's behalf.
    NeedsForce,
    /// The caller cancelled the request (Ctrl-C, MCP `cancel`); what was
    /// made is kept, what was started is stopped.
    Cancelled,
    /// The request or the project's config is wrong (a name git refuses, an
    /// invalid `binky.toml`, a cursor this daemon did not give): the same
    /// request fails again until it is changed.
    InvalidInput,
    /// What the request names does not exist (a world, a project).
    NotFound,
    /// A server a slice lives on answered, and said no.
    Refused,
    /// The surroundings failed, not the request: a server that cannot be
    /// reached, a missing client program or grant, the registry's disk.
    /// The same request may succeed once they are fixed.
    Environmental,
    /// A bug in Binky (a task that panicked, a reply of the wrong kind);
    /// `daemon.log` has the trace.
    Bug,
}

impl ErrorKind {
    fn is_other(&self) -> bool {
        *self == ErrorKind::Other
    }
}

/// A failure the user can act on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApiError {
    /// What went wrong.
    pub message: String,
    /// What to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// What kind of failure it is; absent on the wire for
    /// [`ErrorKind::Other`], so a reply from an older daemon reads as that.
    #[serde(default, skip_serializing_if = "ErrorKind::is_other")]
    pub kind: ErrorKind,
}

impl ApiError {
    /// An error with no hint, of kind [`ErrorKind::Other`].
    pub fn new(message: impl Into<String>) -> Self {
        ApiError {
            message: message.into(),
            hint: None,
            kind: ErrorKind::Other,
        }
    }
    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    /// Says what kind of failure it is.
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }
}

/// The result of a finished request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum Response {
    /// For `ping` and `shutdown`.
    Done,
    /// A subscription's past events are sent; live ones follow.
    Subscribed,
    /// For `daemon_status`.
    DaemonStatus(DaemonInfo),
    /// For `status`.
    Status(StatusReport),
    /// For `config`, `set_reserve`, `set_ports`.
    Settings(Settings),
    /// For `metrics`.
    Metrics(Metrics),
    /// For `up`, `reload`, `down`, `remove`: the world afterwards.
    World(WorldOutcome),
    /// For `env`.
    Env(WorldEnv),
    /// For `locate`.
    Located(ServiceTarget),
    /// For `logs`.
    Logs(super::LogsReport),
    /// For `verify`.
    Verified(VerifyReport),
    /// For `gc`: what was (or, with `--dry-run`, would be) swept.
    Swept(Vec<SweepItem>),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind crosses the socket, and an error of no particular kind
    /// looks as it did before kinds (an older daemon's reads as `Other`).
    #[test]
    fn an_errors_kind_crosses_the_wire_and_other_is_left_out() {
        let plain = ApiError::new("m").hint("h");
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            serde_json::json!({"message": "m", "hint": "h"})
        );
        let forced = ApiError::new("m").with_kind(ErrorKind::NeedsForce);
        let wire = serde_json::to_string(&forced).unwrap();
        assert!(wire.contains(r#""kind":"needs_force""#), "{wire}");
        assert_eq!(serde_json::from_str::<ApiError>(&wire).unwrap(), forced);
        let old: ApiError = serde_json::from_str(r#"{"message":"m"}"#).unwrap();
        assert_eq!(old.kind, ErrorKind::Other);
    }
}
