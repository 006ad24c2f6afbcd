//! The supervisor: one task per service process.
//!
//! Each service runs in its own process group (so stopping it reaches npm/pnpm
//! trees), with stdout and stderr appended straight to its log file — not
//! through the daemon, so a restarting daemon loses no output. Exits are
//! reaped as they happen (tokio waits on the child through SIGCHLD, no
//! polling). What to do after an exit is [`restart::decide`].
//!
//! | module | holds |
//! |---|---|
//! | `group` | spawning a process group with its log, describing an exit, stopping a group |
//! | `ready` | readiness: the probe, or the service's own group listening on its port |
//! | [`health`] | the probes themselves (http, tcp, cmd) |
//! | [`restart`] | what to do after an exit |
//! | [`logs`] | log files that survive rotation by rename |
//! | `watcher` | `watch` globs and the settling file watcher |
//! | `task` | a service's task: run, obey control messages, decide after an exit; carry on with an adopted process |
//! | here | what a service is ([`ServiceSpec`]), its [`State`] and [`Event`]s, spawn or adopt one, its [`Handle`] |

pub(crate) mod health;
pub(crate) mod logs;
pub(crate) mod restart;

use crate::config::Restart;
use crate::protocol::ServiceState;
use health::ProbeSpec;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

mod group;
mod ready;
mod task;
use task::{run, run_adopted};
mod watcher;
use group::stop_strays;
pub(crate) use group::{stop_child_group, stop_pgid, terminate};
use watcher::start_watcher;

/// Log files roll at this size, while they are written (see
/// [`logs::LogFile`]).
pub(crate) const LOG_ROLL_BYTES: u64 = 5 * 1024 * 1024;
/// Rolled generations kept.
pub(crate) const LOG_GENERATIONS: u32 = 3;
/// How a service that exited with status 0 is described (in
/// [`State::Stopped`]).
const CLEAN_EXIT: &str = "exited with code 0";
/// How long a service without a health probe must stay up to count as
/// ready. Long enough for a missing program, a syntax error or a bad
/// import to show (each exits within tens of milliseconds); short enough
/// not to slow `up` noticeably.
pub(crate) const NO_PROBE_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// A fully rendered service, ready to run.
#[derive(Clone)]
pub(crate) struct ServiceSpec {
    /// Service name.
    pub name: String,
    /// Shell command line (rendered).
    pub cmd: String,
    /// Working directory.
    pub cwd: PathBuf,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// Log file.
    pub log: PathBuf,
    /// Primary port, if any.
    pub port: Option<u16>,
    /// The service is proxied on `port` (a url service): with no probe, it
    /// is ready only once its own processes listen there.
    pub must_listen: bool,
    /// Health probe and its timing.
    pub health: Option<(ProbeSpec, Duration, Duration)>,
    /// Restart policy.
    pub restart: Restart,
    /// Stop signal name (`SIGTERM`…).
    pub stop_signal: String,
    /// Grace before SIGKILL.
    pub stop_timeout: Duration,
    /// Globs (relative to `watch_root`) that restart the service on change.
    pub watch: Vec<String>,
    /// Folder the watch globs are relative to.
    pub watch_root: PathBuf,
    /// The `binky` executable, run as `binky log-writer <log>` to timestamp
    /// each output line. `None` writes output to the log file directly.
    pub log_writer: Option<PathBuf>,
    /// How this service's processes are found after they leave its process
    /// group; `None` when its world has no mark (they are then reached
    /// through the group alone).
    pub mark: Option<Mark>,
}

/// The variables every process of one service inherits and keeps whatever
/// group or session it moves to (`setsid()`, a double fork): with them, a
/// restart, a stop and a `reset` reach what the old instance left behind,
/// as `down` does for the whole world. A process is the service's only when
/// its environment holds all three pairs, each `(name, value)`.
///
/// No `Debug`: the token is not for logs.
#[derive(Clone)]
pub(crate) struct Mark {
    /// The daemon's home: only processes a daemon of this home started.
    pub home: (String, String),
    /// The world's random token.
    pub token: (String, String),
    /// The service's name within its world.
    pub service: (String, String),
}

// Hand-written so environment values (which may hold credentials) never
// reach a log through `{:?}`.
impl std::fmt::Debug for ServiceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceSpec")
            .field("name", &self.name)
            .field("cwd", &self.cwd)
            .field("env", &format_args!("<{} variables>", self.env.len()))
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// A service's state, as the supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Process started; health probe pending.
    Starting {
        /// Its pid (and process group).
        pid: u32,
    },
    /// Running (and healthy, if it has a probe).
    Running {
        /// Its pid.
        pid: u32,
    },
    /// Running, but its probe did not pass within the timeout.
    Unhealthy {
        /// Its pid.
        pid: u32,
        /// Why.
        reason: String,
    },
    /// Exited; will start again after a delay.
    Backoff {
        /// The delay.
        delay: Duration,
    },
    /// Stopped for good: by request, or the policy says not to restart.
    Stopped {
        /// Exit description, when it exited on its own.
        exit: Option<String>,
    },
    /// Gave up, or could not start at all.
    Failed {
        /// Why.
        reason: String,
    },
}

impl State {
    /// Stopped because it exited with status 0 on its own.
    pub(crate) fn exited_cleanly(&self) -> bool {
        matches!(self, State::Stopped { exit: Some(e) } if e == CLEAN_EXIT)
    }
    /// The service state `status`, the registry and the proxy record.
    pub(crate) fn label(&self) -> ServiceState {
        match self {
            State::Starting { .. } => ServiceState::Starting,
            State::Running { .. } => ServiceState::Running,
            State::Unhealthy { .. } => ServiceState::Unhealthy,
            State::Backoff { .. } => ServiceState::Restarting,
            State::Stopped { .. } => ServiceState::Stopped,
            State::Failed { .. } => ServiceState::Failed,
        }
    }
    /// The pid while a process exists.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self {
            State::Starting { pid } | State::Running { pid } | State::Unhealthy { pid, .. } => {
                Some(*pid)
            }
            _ => None,
        }
    }
    /// Whether the state will not change without a request.
    pub(crate) fn is_settled(&self) -> bool {
        !matches!(self, State::Starting { .. } | State::Backoff { .. })
    }
}

/// Something the daemon records (registry, event log).
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// A process started.
    Started {
        /// Pid = process group id.
        pid: u32,
        /// Start time in clock ticks since boot.
        start_time: Option<u64>,
    },
    /// The state changed.
    State(State),
    /// Restarting after an exit.
    Restarting {
        /// How it exited.
        exit: String,
        /// After this delay.
        delay: Duration,
    },
    /// Gave up after too many failures.
    GaveUp {
        /// Why.
        reason: String,
    },
    /// A watched file changed: the service restarts.
    WatchRestart {
        /// What changed, relative to the watch root (the first few, sorted),
        /// and how many more did.
        changed: Vec<String>,
    },
}

/// What the daemon can ask of a running service task.
enum Control {
    /// Stop for good; answered with what is left of the group, if anything.
    Stop(oneshot::Sender<Option<String>>),
    /// Restart for a watched change; what changed.
    Restart(Vec<String>),
}

/// Controls one service task.
pub(crate) struct Handle {
    /// Current state.
    pub state: watch::Receiver<State>,
    ctl: mpsc::UnboundedSender<Control>,
    /// What [`Handle::stop`] sweeps after the group: the service's name,
    /// mark, stop signal and grace.
    strays: Option<Strays>,
}

/// How to find and stop what instances of a service left outside its
/// process group (see [`Mark`]).
#[derive(Clone)]
struct Strays {
    service: String,
    mark: Mark,
    signal: String,
    grace: Duration,
}

impl Strays {
    fn of(spec: &ServiceSpec) -> Option<Strays> {
        spec.mark.clone().map(|mark| Strays {
            service: spec.name.clone(),
            mark,
            signal: spec.stop_signal.clone(),
            grace: spec.stop_timeout,
        })
    }

    /// Stops them (see [`group::stop_strays`]); what outlived SIGKILL, if
    /// anything.
    async fn stop(&self) -> Option<String> {
        stop_strays(&self.service, &self.mark, &self.signal, self.grace).await
    }
}

/// Both problems, when there are two.
fn both(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

impl Handle {
    /// Stops the service (signal, grace, SIGKILL to the whole group), then
    /// whatever its instances started that left the group (found by its
    /// [`Mark`]), and waits until every one of those processes has exited,
    /// so its ports are free when this returns. The sweep runs for a
    /// service whose task already ended too (one that exited cleanly after
    /// daemonizing a server). `Some(problem)` when processes outlived
    /// SIGKILL by [`KILL_WAIT`](group::KILL_WAIT) (stuck in the kernel, or another user's).
    pub(crate) async fn stop(&self) -> Option<String> {
        let (tx, rx) = oneshot::channel();
        let mut left = None;
        if self.ctl.send(Control::Stop(tx)).is_ok() {
            left = rx.await.ok().flatten();
        }
        match &self.strays {
            Some(s) => both(left, s.stop().await),
            None => left,
        }
    }
}

/// Receives everything worth recording, called inline by the service task
/// before the state it reports becomes visible on [`Handle::state`], so a
/// reader of the state never sees it ahead of the record.
pub(crate) type Recorder = std::sync::Arc<dyn Fn(Event) + Send + Sync>;

/// Starts supervising `spec`.
pub(crate) fn spawn(spec: ServiceSpec, events: Recorder) -> Handle {
    let (state_tx, state_rx) = watch::channel(State::Starting { pid: 0 });
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let watcher = start_watcher(&spec, ctl_tx.clone());
    let strays = Strays::of(&spec);
    tokio::spawn(async move {
        let _watcher = watcher;
        run(spec, state_tx, ctl_rx, events, false).await;
    });
    Handle {
        state: state_rx,
        ctl: ctl_tx,
        strays,
    }
}

/// Supervises a process a previous daemon started (`pid`, its own process
/// group): waits for its exit through the platform's exit notification
/// (pidfd on Linux), then carries on as [`spawn`] would, restart policy
/// included. Its exit status is not ours to read; an adopted exit counts as a
/// failure. `unhealthy`: the process never passed its probe (the reason as
/// recorded); it is adopted in that state, not taken for healthy.
pub(crate) fn adopt(
    spec: ServiceSpec,
    pid: u32,
    unhealthy: Option<String>,
    events: Recorder,
) -> Handle {
    let now = match unhealthy {
        Some(reason) => State::Unhealthy { pid, reason },
        None => State::Running { pid },
    };
    let (state_tx, state_rx) = watch::channel(now.clone());
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let watcher = start_watcher(&spec, ctl_tx.clone());
    let strays = Strays::of(&spec);
    tokio::spawn(async move {
        let _watcher = watcher;
        run_adopted(spec, now, pid, state_tx, ctl_rx, events).await;
    });
    Handle {
        state: state_rx,
        ctl: ctl_tx,
        strays,
    }
}
