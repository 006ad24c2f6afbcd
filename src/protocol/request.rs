//! What a client asks: the [`Request`] verbs, the world they name
//! ([`WorldRef`]), and the caller's environment ([`ClientEnv`], never
//! printed).

use serde::{Deserialize, Serialize};

/// One verb of the daemon.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "verb", rename_all = "snake_case")]
pub enum Request {
    /// Liveness.
    Ping,
    /// pid, version, uptime, socket.
    DaemonStatus,
    /// Stop the daemon (not the services it supervises).
    Shutdown,
    /// Every world, optionally one project's.
    Status {
        /// Limit to this project name.
        project: Option<String>,
        /// Also measure what each running world holds now
        /// ([`WorldStatus::usage`](super::WorldStatus::usage)): one pass
        /// over the process table, so only a caller that shows it asks.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        usage: bool,
    },
    /// The machine-global settings.
    Config,
    /// Set RAM/disk reserves and the parallelism limit; `None` leaves a
    /// value unchanged.
    SetReserve {
        /// Percent of RAM to keep free, 0–90.
        ram_pct: Option<f64>,
        /// Gigabytes of disk to keep free, ≥ 0.
        disk_gb: Option<f64>,
        /// Most worlds running or starting at once; 0 is unlimited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_parallel: Option<u32>,
        /// Most `up`s queued at once, in all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue_max: Option<u32>,
        /// Most `up`s one caller's group may have queued.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue_per_group: Option<u32>,
    },
    /// Set the proxy ports; `None` leaves a value unchanged.
    SetPorts {
        /// HTTP proxy port.
        proxy: Option<u32>,
        /// HTTPS port.
        https: Option<u32>,
    },
    /// Point-in-time metrics.
    Metrics,
    /// Bring a world up (streams progress).
    Up(UpRequest),
    /// Stop, then up again on the same ports and data.
    Reload(UpRequest),
    /// Rebuild slices of a world from their golden template (or by
    /// provision + migrate + seed), then bring it up again on the same
    /// worktree and ports (streams progress).
    Reset(ResetRequest),
    /// Stop a world's processes.
    Down(WorldRef),
    /// Destroy a world.
    Remove {
        /// Which world.
        world: WorldRef,
        /// Remove despite uncommitted changes.
        force: bool,
        /// The CLI's environment, for `${env.NAME}` in `admin_url`.
        #[serde(default)]
        env: ClientEnv,
    },
    /// Run the project's `[agents] verify` commands in a world (streams output).
    Verify {
        /// Which world.
        world: WorldRef,
        /// Run every command even after a failure.
        keep_going: bool,
        /// Run the world's own `[agents] verify` instead of the checks
        /// committed on the main checkout's branch.
        #[serde(default)]
        from_branch: bool,
        /// The CLI's environment (base environment of the commands).
        env: ClientEnv,
    },
    /// Sweep what a crash left half-made.
    Gc {
        /// List only.
        dry_run: bool,
        /// The CLI's environment, for `${env.NAME}` in `admin_url`.
        #[serde(default)]
        env: ClientEnv,
    },
    /// Where to reach one service of a world (for `binky curl`).
    Locate {
        /// Which world.
        world: WorldRef,
        /// The service.
        service: String,
    },
    /// A world's captured service output: the newest `lines` lines, or
    /// those written since `cursor` (returned by the previous call).
    Logs {
        /// Which world.
        world: WorldRef,
        /// Only this service's log.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        service: Option<String>,
        /// At most this many lines (the newest), up to
        /// [`LogsReport::MAX_LINES`](super::LogsReport::MAX_LINES).
        lines: usize,
        /// Where the previous call ended ([`LogsReport::cursor`](super::LogsReport::cursor)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<String>,
    },
    /// Follow what happens: the daemon sends the last `tail` events as
    /// [`Reply::Event`](super::Reply::Event) frames, then
    /// [`Response::Subscribed`](super::Response::Subscribed), then every
    /// new event as it is emitted, until the client closes the connection
    /// (or sends `cancel`). A client that reads too slowly gets
    /// [`Reply::Lagged`](super::Reply::Lagged) with how many it missed; it
    /// never slows the daemon.
    Subscribe(Subscription),
    /// Cancel the operation in flight on this connection (sent while
    /// reading its progress, e.g. on Ctrl-C during `up`). The operation
    /// stops what it started and fails with a "cancelled" error.
    Cancel,
    /// A world's coordinates.
    Env {
        /// Which world.
        world: WorldRef,
        /// The CLI's environment, for `${env.NAME}` in `admin_url`.
        env: ClientEnv,
        /// Also return the `[env]` values that come from `${env.NAME}`
        /// (withheld by default: they are often credentials).
        #[serde(default)]
        reveal: bool,
        /// For an agent (a world-bound `binky mcp`): every credential that
        /// is not the world's own — an `admin_url`'s password, a secret
        /// from the user's environment — is masked wherever it appears.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        agent: bool,
    },
}

/// Names a world: its project (by folder or name) and its name (branch).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorldRef {
    /// A folder inside the project (where the CLI ran, or `--project PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_dir: Option<String>,
    /// A registered project's name (`--project NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The world's name: its branch.
    pub name: String,
}

impl WorldRef {
    /// Names world `name` of the project given as `--project PATH|NAME`
    /// (a path when it exists or has a `/`, else a registered name), or of
    /// the project around `cwd` when none is given.
    ///
    /// # Errors
    /// A path that does not exist, or that is neither a project folder
    /// (holding `binky.toml`) nor a `binky.toml`: named, never silently
    /// taken for the project around `cwd`.
    pub fn from_arg(
        project: Option<&str>,
        cwd: &std::path::Path,
        name: &str,
    ) -> Result<Self, String> {
        let dir = |p: &std::path::Path| {
            p.canonicalize()
                .unwrap_or_else(|_| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
                .display()
                .to_string()
        };
        match project {
            Some(p) if cwd.join(p).exists() || p.contains('/') => {
                let given = cwd.join(p);
                let real = given
                    .canonicalize()
                    .map_err(|_| format!("`{p}` does not exist"))?;
                let folder = if real.is_file() {
                    if real.file_name() != Some(std::ffi::OsStr::new("binky.toml")) {
                        return Err(format!("`{p}` ({}) is not a binky.toml", real.display()));
                    }
                    real.parent()
                        .map(std::path::Path::to_path_buf)
                        .unwrap_or(real)
                } else if real.join("binky.toml").is_file() {
                    real
                } else {
                    return Err(format!(
                        "`{p}` ({}) holds no binky.toml; pass the project's folder or its binky.toml",
                        real.display()
                    ));
                };
                Ok(WorldRef {
                    project_dir: Some(folder.display().to_string()),
                    project: None,
                    name: name.to_owned(),
                })
            }
            Some(p) => Ok(WorldRef {
                project_dir: None,
                project: Some(p.to_owned()),
                name: name.to_owned(),
            }),
            None => Ok(WorldRef {
                project_dir: Some(dir(cwd)),
                project: None,
                name: name.to_owned(),
            }),
        }
    }
}

/// `up` and `reload`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpRequest {
    /// Which world.
    pub world: WorldRef,
    /// Admission group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Who asks, for fairness across callers: `session <sid>`, the session
    /// the connecting process runs in. Set by the daemon from the socket's
    /// peer (whatever a client sends is replaced), never by an agent's
    /// argument; `None`: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The CLI's environment: the base environment of services, and where
    /// `${env.NAME}` resolves first. Held in daemon memory only.
    pub env: ClientEnv,
    /// Wait while queued by admission (`false`: `--no-wait`, answer at once
    /// with the queued state and position; the daemon brings the world up
    /// when it is admitted).
    #[serde(default = "yes")]
    pub wait: bool,
    /// Answer as soon as the world's worktree exists (made before
    /// admission), and bring the rest up in the background, as a queued
    /// `up` is: what an agent host's worktree hook asks, which must not
    /// wait for services (`binky hook claude worktree-create`). The answer
    /// is the world `starting`, with its worktree's path.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detach: bool,
    /// How long the world may go idle before it sleeps, overriding
    /// `[project] idle_after` (`--idle-after`): a duration such as
    /// `"20m"`, or `"off"`. `None`: the project's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_after: Option<String>,
}

/// Which slices a [`Request::Reset`] rebuilds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResetRequest {
    /// The world, and how it comes back up (as `reload`).
    pub up: UpRequest,
    /// The resource services whose slices to rebuild; empty: the world's
    /// only resource (an error when it has several and `all` is not set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// Every slice of the world.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// End sessions on the slices that Binky did not open; without it, a
    /// session still open after a short wait makes the reset refuse,
    /// naming it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

pub(super) fn yes() -> bool {
    true
}

/// What a [`Request::Subscribe`] follows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Subscription {
    /// Only this world's events (its project found as for every verb); a
    /// `WorldRef` with an empty name: every world of that project; `None`:
    /// every event on the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<WorldRef>,
    /// How many past events (the newest of `events.log`) come first; at
    /// most [`Subscription::MAX_TAIL`].
    #[serde(default)]
    pub tail: usize,
    /// Follow the lines the world's services print instead of events: the
    /// daemon sends [`Reply::Logs`](super::Reply::Logs) frames (the newest
    /// `lines` first, or those since `cursor`), then each batch as it is
    /// written, across a rotation and a service's restart. Needs `world`
    /// with a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<LogFollow>,
}

/// The log lines a [`Subscription`] follows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LogFollow {
    /// Only this service's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// How many of the newest lines come first (0: none).
    #[serde(default)]
    pub lines: usize,
    /// Carry on from here instead ([`LogsReport::cursor`](super::LogsReport::cursor)
    /// of the last frame received): how a follower resumes after the
    /// daemon restarts without a line twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl Subscription {
    /// The most past events a subscription is sent.
    pub const MAX_TAIL: usize = 1_000;
}

/// A caller's environment variables. Its `Debug` prints names only, so a
/// value (often a credential) can never reach a log.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct ClientEnv(pub Vec<(String, String)>);

impl ClientEnv {
    /// The `PATH` to search for programs on the caller's behalf (client
    /// binaries, external adapters, git): the caller's, so what works in
    /// the user's shell works in the daemon, else this process's.
    pub fn search_path(&self) -> Option<std::ffi::OsString> {
        self.get("PATH")
            .map(Into::into)
            .or_else(|| std::env::var_os("PATH"))
    }

    /// This process's environment (UTF-8 variables only).
    pub fn current() -> Self {
        ClientEnv(std::env::vars().collect())
    }
    /// A variable's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl std::fmt::Debug for ClientEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientEnv(<{} variables>)", self.0.len())
    }
}

impl Request {
    /// The verb's name, for logs and errors.
    pub fn verb(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::DaemonStatus => "daemon_status",
            Request::Shutdown => "shutdown",
            Request::Status { .. } => "status",
            Request::Config => "config",
            Request::SetReserve { .. } => "set_reserve",
            Request::SetPorts { .. } => "set_ports",
            Request::Metrics => "metrics",
            Request::Up(_) => "up",
            Request::Reload(_) => "reload",
            Request::Reset(_) => "reset",
            Request::Down(_) => "down",
            Request::Remove { .. } => "remove",
            Request::Env { .. } => "env",
            Request::Locate { .. } => "locate",
            Request::Verify { .. } => "verify",
            Request::Gc { .. } => "gc",
            Request::Subscribe(_) => "subscribe",
            Request::Logs { .. } => "logs",
            Request::Cancel => "cancel",
        }
    }

    /// The world a lifecycle verb acts on (`up`, `reload`, `reset`, `down`,
    /// `remove`, `verify`), for what is said of it; `None` for the others.
    pub fn world_name(&self) -> Option<&str> {
        match self {
            Request::Up(u) | Request::Reload(u) | Request::Reset(ResetRequest { up: u, .. }) => {
                Some(u.world.name.as_str())
            }
            Request::Down(w) => Some(w.name.as_str()),
            Request::Remove { world, .. } | Request::Verify { world, .. } => {
                Some(world.name.as_str())
            }
            _ => None,
        }
    }

    /// Records who asks (the daemon's reading of the socket's peer) on a
    /// request that may queue; any caller the client put there is replaced.
    pub fn set_caller(&mut self, caller: Option<String>) {
        match self {
            Request::Up(r) | Request::Reload(r) => r.caller = caller,
            Request::Reset(r) => r.up.caller = caller,
            _ => {}
        }
    }

    /// Verbs a daemon of another version still serves, so the user can act on
    /// the mismatch message.
    pub fn version_independent(&self) -> bool {
        matches!(
            self,
            Request::DaemonStatus | Request::Shutdown | Request::Ping
        )
    }
}
