//! The daemon's one typed API, shared by the CLI, MCP and the dashboard.
//!
//! Wire format: newline-delimited JSON over the local socket. The client sends
//! a [`Hello`] first and the daemon answers [`Welcome`] with its own version;
//! a mismatch becomes an instruction ("run `binky daemon stop`") instead of a
//! decode error. Then the client sends one [`Request`] and reads [`Reply`]
//! frames: zero or more `progress`, then exactly one `ok` or `err`.
//!
//! `Hello`, `Welcome` and the `daemon_status`/`shutdown` requests must stay
//! decodable across versions: they are how a new CLI stops an old daemon.

pub mod codec;
mod events;
pub use events::{Event, EventKind};
pub mod states;

pub use states::{
    Intent, ServiceKind, ServiceState, SliceState, SweepKind, SweepResult, UnknownState,
    VerifyOutcome, WorldState,
};

use serde::{Deserialize, Serialize};

mod reply;
mod reports;
mod request;
pub use reply::{ApiError, ErrorKind, Progress, ProgressStep, Reply, Response};
pub use reports::{
    DEFAULT_QUEUE_MAX, DEFAULT_QUEUE_PER_GROUP, DaemonInfo, LogLine, LogsReport, Metrics,
    ProjectStatus, ProxyMetrics, ProxyStatus, QueuePlace, ServiceStatus, ServiceTarget, Settings,
    SparesStatus, StatusReport, SweepItem, TornDownSlice, Usage, VerifyCheck, VerifyReport,
    WorldEnv, WorldOutcome, WorldStatus, natural_cmp,
};
pub use request::{ClientEnv, LogFollow, Request, ResetRequest, Subscription, UpRequest, WorldRef};
pub mod limits;

/// Bumped whenever a frame changes shape.
pub const PROTOCOL: u32 = 6;

/// This build's package version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Largest frame either side accepts, in bytes.
pub const MAX_FRAME: usize = 4 * 1024 * 1024;

/// First frame, client → daemon.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    /// The client's [`PROTOCOL`].
    pub protocol: u32,
    /// The client's package version.
    pub version: String,
}

impl Hello {
    /// This build's hello.
    pub fn current() -> Self {
        Hello {
            protocol: PROTOCOL,
            version: VERSION.to_owned(),
        }
    }
}

/// First frame, daemon → client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Welcome {
    /// The daemon's [`PROTOCOL`].
    pub protocol: u32,
    /// The daemon's package version.
    pub version: String,
    /// The daemon's pid.
    pub pid: u32,
}
