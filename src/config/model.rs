//! The validated model of `binky.toml`: what the rest of Binky reads.
//!
//! Built only by [`super::validate`], so every value here has passed `check`:
//! names are valid, durations parsed, exactly one of `cmd`/`adapter` set,
//! dependencies known and acyclic.

use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default `[project] port_range`: below Linux's ephemeral range (32768+) so
/// outgoing connections rarely sit on a port Binky wants, and clear of the
/// well-known ports of common dev servers (3000, 5173, 8080…).
pub const DEFAULT_PORT_RANGE: PortRange = PortRange {
    lo: 20000,
    hi: 24999,
};

/// Default health-probe timeout: a service must pass within this long.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Default pause between health-probe attempts.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_millis(250);
/// Default grace between `stop_signal` and SIGKILL.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed, validated `binky.toml`.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file this was read from.
    pub path: PathBuf,
    /// The folder holding the file; relative paths in the file are relative to it.
    pub root: PathBuf,
    /// `[project]`.
    pub project: Project,
    /// `[services.*]`, in file order.
    pub services: IndexMap<String, Service>,
    /// `[agents]`.
    pub agents: Agents,
    /// `[env]`: variables (tokens allowed) every process of a world, its
    /// `migrate`, `seed` and `verify` commands get, and `binky env` prints;
    /// a service's own `env` wins over it.
    pub env: IndexMap<String, String>,
}

/// The shortest `idle_after`: below a second, the idle check's own
/// granularity, a world would sleep between a page and its assets.
pub const MIN_IDLE_AFTER: Duration = Duration::from_secs(1);

/// `[project]`.
#[derive(Debug, Clone)]
pub struct Project {
    /// Lowercase DNS label.
    pub name: String,
    /// Hostname suffix for proxied URLs; default `<name>.localhost`.
    pub domain: String,
    /// Front the proxy with Caddy for TLS when Caddy is on PATH.
    pub https: bool,
    /// Inclusive range the allocator hands this project's ports from.
    pub port_range: PortRange,
    /// Where worktrees are created, as written (relative to [`Config::root`]).
    pub worktree_root: Option<String>,
    /// A dotenv file whose values every service and `${env.*}` see.
    pub env_file: Option<String>,
    /// Paths (globs, relative to [`Config::root`]) copied from the main
    /// checkout into a new worktree when it is made, each only where the
    /// worktree lacks it (`crate::worktree::copy`).
    pub copy: Vec<String>,
    /// Commands run once in a new worktree, before its slices and services,
    /// with the world's environment (tokens render; slices are not made
    /// yet); a failed one runs again on the next `up`.
    pub setup: Vec<String>,
    /// How long a world may go without a request to its URLs or CPU use by
    /// its processes before it sleeps (stops, keeping ports, slices and
    /// files; the next request wakes it). `None`: worlds never sleep.
    pub idle_after: Option<Duration>,
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port (inclusive).
    pub lo: u16,
    /// Last port (inclusive).
    pub hi: u16,
}

impl PortRange {
    /// Whether `port` lies inside the range.
    pub fn contains(&self, port: u32) -> bool {
        (self.lo as u32..=self.hi as u32).contains(&port)
    }
}

/// One `[services.<name>]`.
#[derive(Debug, Clone)]
pub struct Service {
    /// The table name.
    pub name: String,
    /// A process Binky runs, or a resource an adapter carves.
    pub kind: ServiceKind,
}

/// A service is a process or a resource, never both.
#[derive(Debug, Clone)]
pub enum ServiceKind {
    /// `cmd`: a supervised process.
    Process(Process),
    /// `adapter`: a slice of a server the user runs.
    Resource(Resource),
}

impl Service {
    /// The process spec, if this is a process.
    pub fn process(&self) -> Option<&Process> {
        match &self.kind {
            ServiceKind::Process(p) => Some(p),
            ServiceKind::Resource(_) => None,
        }
    }
    /// The resource spec, if this is a resource.
    pub fn resource(&self) -> Option<&Resource> {
        match &self.kind {
            ServiceKind::Resource(r) => Some(r),
            ServiceKind::Process(_) => None,
        }
    }
    /// Whether the allocator gives this service a primary port: only a
    /// process that declares `url` or `ports` asks for one.
    pub fn has_port(&self) -> bool {
        self.process()
            .is_some_and(|p| p.url.is_some() || !p.ports.is_empty())
    }
    /// Names of the extra ports declared in `ports` (the primary port is
    /// separate and unnamed).
    pub fn port_names(&self) -> &[String] {
        self.process().map_or(&[], |p| p.ports.as_slice())
    }
    /// Services this one starts after.
    pub fn depends_on(&self) -> &[String] {
        self.process().map_or(&[], |p| p.depends_on.as_slice())
    }
}

/// A supervised process.
#[derive(Debug, Clone)]
pub struct Process {
    /// Shell command line, with tokens.
    pub cmd: String,
    /// Working directory, relative to the worktree's project folder.
    pub cwd: Option<String>,
    /// Hostname label: `<url>.<world>.<domain>`.
    pub url: Option<String>,
    /// Extra named ports, beyond the primary one.
    pub ports: Vec<String>,
    /// Services that must be up (healthy) first.
    pub depends_on: Vec<String>,
    /// Environment, values with tokens.
    pub env: IndexMap<String, String>,
    /// A dotenv file for this service.
    pub env_file: Option<String>,
    /// When the service counts as up.
    pub health: Option<Health>,
    /// What to do when it exits.
    pub restart: Restart,
    /// Globs (relative to the project folder) that restart it on change.
    pub watch: Vec<String>,
    /// Signal sent to the process group to stop it, e.g. `SIGTERM`.
    pub stop_signal: StopSignal,
    /// Grace after `stop_signal` before SIGKILL.
    pub stop_timeout: Duration,
    /// Whether its world may sleep when idle (`sleep = false`: a worker
    /// that consumes a queue keeps its world awake).
    pub sleep: bool,
}

/// A health probe with its timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// What to probe.
    pub probe: Probe,
    /// The whole budget: the service fails `up` if no attempt passes by then.
    pub timeout: Duration,
    /// Pause between attempts.
    pub interval: Duration,
}

/// One kind of probe. Strings carry tokens, rendered at `up`.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    /// GET returns 2xx/3xx. A value starting with `/` is a path on the
    /// service's own primary port.
    Http(String),
    /// A TCP connect succeeds (`host:port`).
    Tcp(String),
    /// A shell command exits 0.
    Cmd(String),
}

/// Restart policy with backoff and give-up settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Restart {
    /// When to restart.
    pub policy: RestartPolicy,
    /// First backoff delay; doubles after each failure.
    pub backoff: Duration,
    /// Backoff ceiling.
    pub max_backoff: Duration,
    /// Failures within [`Restart::failure_window`] that make Binky give up.
    pub max_failures: u32,
    /// Sliding window for counting failures.
    pub failure_window: Duration,
}

impl Default for Restart {
    fn default() -> Self {
        Restart {
            policy: RestartPolicy::OnFailure,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            max_failures: 5,
            failure_window: Duration::from_secs(60),
        }
    }
}

/// When a process is restarted after it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Never.
    No,
    /// After a non-zero exit or a signal.
    OnFailure,
    /// After any exit.
    Always,
}

impl RestartPolicy {
    /// Parses the config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "no" | "never" => Some(RestartPolicy::No),
            "on-failure" => Some(RestartPolicy::OnFailure),
            "always" => Some(RestartPolicy::Always),
            _ => None,
        }
    }
    /// The config spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            RestartPolicy::No => "no",
            RestartPolicy::OnFailure => "on-failure",
            RestartPolicy::Always => "always",
        }
    }
}

/// A stop signal by portable name (`SIGTERM`, `SIGINT`, …). The supervisor's
/// platform module maps it to a native signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopSignal(pub &'static str);

impl StopSignal {
    /// Signals a service may ask to be stopped with.
    pub const KNOWN: &'static [&'static str] = &[
        "SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGWINCH",
    ];
    /// Accepts `SIGTERM`, `TERM`, `sigterm`.
    pub fn parse(s: &str) -> Option<Self> {
        let up = s.trim().to_ascii_uppercase();
        let full = if up.starts_with("SIG") {
            up
        } else {
            format!("SIG{up}")
        };
        Self::KNOWN
            .iter()
            .find(|k| **k == full)
            .map(|k| StopSignal(k))
    }
}

impl Default for StopSignal {
    fn default() -> Self {
        StopSignal("SIGTERM")
    }
}

/// A slice an adapter provisions.
#[derive(Debug, Clone)]
pub struct Resource {
    /// Adapter name (`postgres`, `sqlite`, or an external `binky-adapter-<name>`).
    pub adapter: String,
    /// Admin connection the adapter uses; tokens like `${env.PG_ADMIN_URL}`.
    pub admin_url: Option<String>,
    /// Command run in the worktree after provisioning.
    pub migrate: Option<String>,
    /// Command run after `migrate`.
    pub seed: Option<String>,
    /// Golden template name; enables cloning.
    pub clone_from: Option<String>,
    /// Globs whose file contents join the golden template's key.
    pub clone_inputs: Vec<String>,
    /// Adapter-specific options, validated by the adapter.
    pub options: toml::Table,
}

/// `[agents]`.
#[derive(Debug, Clone, Default)]
pub struct Agents {
    /// Service names whose coordinates `binky env` prints; `None` = every url
    /// service and every resource.
    pub expose: Option<Vec<String>>,
    /// Commands `binky verify` runs, in order.
    pub verify: Vec<String>,
}

impl Config {
    /// Resolves a path written in the file against the folder holding it.
    pub fn resolve_path(&self, p: &str) -> PathBuf {
        resolve_against(&self.root, p)
    }

    /// The resource's name where resource `service`'s slices carry it: a
    /// project with several resources on one adapter (two PostgreSQL
    /// databases; `mariadb` and `mysql` are one adapter) names every one
    /// but the first in this file's order, whose slices keep the plain
    /// `<project>_<world>` name, so adding a second resource never renames
    /// the first's. `None` for the first, a lone resource, or a service
    /// that is not a resource.
    pub fn slice_resource<'a>(&self, service: &'a str) -> Option<&'a str> {
        use crate::adapters::catalog::implementation;
        let mine = implementation(&self.services.get(service)?.resource()?.adapter);
        let first = self.services.iter().find(|(_, s)| {
            s.resource()
                .is_some_and(|r| implementation(&r.adapter) == mine)
        })?;
        (first.0 != service).then_some(service)
    }
}

/// Joins `p` onto `base` unless it is absolute; expands a leading `~/`.
pub fn resolve_against(base: &Path, p: &str) -> PathBuf {
    if let Some(rest) = p.strip_prefix("~/")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    let path = Path::new(p);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}
