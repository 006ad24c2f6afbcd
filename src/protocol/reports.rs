//! What the verbs report: a world's outcome and environment, status,
//! `gc` sweeps, `verify` results, settings and metrics.

use super::{ServiceKind, ServiceState, SweepKind, SweepResult, WorldState};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// One thing `gc` found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SweepItem {
    /// What it is a kind of.
    pub kind: SweepKind,
    /// What it is (slice name, path).
    pub what: String,
    /// Why it is garbage.
    pub why: String,
    /// What was done with it.
    pub result: SweepResult,
    /// The same in words: swept, or why it was not and what to do.
    pub outcome: String,
}

/// The result of `binky verify`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VerifyReport {
    /// Every command passed.
    pub passed: bool,
    /// Each command that ran, in order.
    pub checks: Vec<VerifyCheck>,
    /// The commit HEAD pointed at in the worktree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// What the worktree held beyond that commit when the checks ran
    /// (`git status --short` lines, at most 20): the result is for the
    /// commit plus these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncommitted: Vec<String>,
    /// Total wall time, milliseconds.
    pub duration_ms: u64,
    /// The checks were the world's own (`--from-branch`), not those
    /// committed on the main checkout's branch.
    #[serde(default)]
    pub from_branch: bool,
    /// Which file the checks came from, as a person reads it (`the main
    /// checkout's binky.toml (as committed on main)`).
    #[serde(default)]
    pub checks_from: String,
    /// The world's own `[agents] verify` differs from the checks that ran
    /// (only when they came from the main checkout).
    #[serde(default)]
    pub branch_checks_differ: bool,
}

/// One verify command's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VerifyCheck {
    /// The command as written.
    pub command: String,
    /// Exit code (`None` when killed by a signal or not startable).
    pub exit_code: Option<i32>,
    /// It exited 0.
    pub passed: bool,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
}

/// Lines a world's services printed (`logs`), oldest first, interleaved
/// by the time each was written.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LogsReport {
    /// The lines.
    pub lines: Vec<LogLine>,
    /// Pass it back to get only the lines written after these. Opaque; it
    /// survives a log's rotation.
    pub cursor: String,
    /// Lines were left out: more were written since the cursor than one
    /// answer holds, or a log rotated twice since.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// What the caller should know: the world sleeps, so nothing new is
    /// written until it wakes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl LogsReport {
    /// The most lines one answer holds.
    pub const MAX_LINES: usize = 1000;
}

/// One line of a service's output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LogLine {
    /// The service that printed it.
    pub service: String,
    /// When it was written (RFC 3339), as the log writer stamped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    /// What it printed (secrets the daemon knows masked).
    pub text: String,
}

/// How to reach one service.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServiceTarget {
    /// Connect here (loopback).
    pub port: u16,
    /// Send this Host header.
    pub host: String,
    /// Whether `port` is the proxy's (else the service's own).
    pub via_proxy: bool,
}

/// A world after a lifecycle verb.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorldOutcome {
    /// Project name.
    pub project: String,
    /// The world.
    pub world: WorldStatus,
    /// Nothing had to be done (already running / already stopped).
    #[serde(default)]
    pub noop: bool,
    /// Things worth telling the user (a re-created worktree, a moved port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Slices `remove` deleted on the server each was made on, in teardown
    /// order (one found missing there is in `notes`, not here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub torn_down: Vec<String>,
    /// The same slices with their resource, adapter and server: a project
    /// with two resources on one adapter (two PostgreSQL databases) sees
    /// which is which, and where each was deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub torn_down_on: Vec<TornDownSlice>,
    /// Slices `remove --force` could not tear down: still recorded, for
    /// `binky gc` to sweep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_for_gc: Vec<String>,
    /// `down`/`remove` took a queued `up` of the world out of the queue.
    /// With `world.path` empty the world was never made, and nothing else
    /// was done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub left_queue: bool,
}

impl WorldOutcome {
    /// `world` of `project` as a verb left it, with nothing else to say.
    pub fn of(project: String, world: WorldStatus) -> Self {
        WorldOutcome {
            project,
            world,
            noop: false,
            notes: Vec::new(),
            torn_down: Vec::new(),
            torn_down_on: Vec::new(),
            left_for_gc: Vec::new(),
            left_queue: false,
        }
    }
}

/// One slice a teardown deleted, and where.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TornDownSlice {
    /// The slice's name (a database, key prefix, bucket, vhost).
    pub slice: String,
    /// The resource service it was the world's slice of.
    pub service: String,
    /// The adapter, as binky.toml names it.
    pub adapter: String,
    /// The server it was deleted on, as `scheme://host:port` with no
    /// credentials; `None` for a slice of no server (sqlite's file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl TornDownSlice {
    /// `shop_w (postgres on postgres://127.0.0.1:5432)`, for a summary.
    pub fn describe(&self) -> String {
        match &self.server {
            Some(s) => format!("{} ({} on {s})", self.slice, self.adapter),
            None => format!("{} ({})", self.slice, self.adapter),
        }
    }
}

/// `binky env`: one shape for `binky env --json` and the MCP `env` tool
/// (docs/src/reference/environment.md). Every key is always present, so a
/// script reads `.env.NAME` or `.services.web` without guarding for absence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorldEnv {
    /// Project name.
    pub project: String,
    /// World name.
    pub world: String,
    /// Worktree path.
    pub worktree: String,
    /// Exposed service → address.
    pub services: IndexMap<String, String>,
    /// Exposed resource → its adapter's token fields (`prefix`, `bucket`):
    /// what `${SVC.prefix}` renders to, which a client needs besides the
    /// address.
    #[serde(default)]
    pub fields: IndexMap<String, IndexMap<String, String>>,
    /// The project's `[env]`, rendered for this world; `None` for a value
    /// withheld because it comes from `${env.NAME}` and `reveal` was not
    /// asked for. Written `env` (the verb's word); `vars` is read too, from
    /// a daemon older than the rename.
    #[serde(default, rename = "env", alias = "vars")]
    pub vars: IndexMap<String, Option<String>>,
    /// What the caller should know: the world sleeps (its addresses work
    /// once a request or `up` wakes it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// `binky daemon status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DaemonInfo {
    /// The daemon's pid.
    pub pid: u32,
    /// Its package version.
    pub version: String,
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Its socket.
    pub socket: String,
    /// Its state folder.
    pub home: String,
    /// Open subscriptions (event and log followers) at the moment of asking;
    /// 0 from a daemon older than the field.
    #[serde(default)]
    pub followers: usize,
}

/// Machine-global settings, persisted in the registry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// Percent of RAM admission keeps free.
    pub ram_reserve_pct: f64,
    /// Gigabytes of disk admission keeps free.
    pub disk_reserve_gb: f64,
    /// Most worlds running at once.
    pub max_parallel: u32,
    /// The HTTP proxy's port.
    pub proxy_port: u16,
    /// The HTTPS (Caddy) port.
    pub https_port: u16,
    /// Most `up`s queued at once, in all: one more is refused, not queued.
    #[serde(default = "default_queue_max")]
    pub queue_max: u32,
    /// Most `up`s one caller's group may have queued; one caller may hold
    /// at most `queue_max - queue_per_group` places in all, so the last
    /// ones are always left for another caller.
    #[serde(default = "default_queue_per_group")]
    pub queue_per_group: u32,
}

/// [`Settings::queue_max`] unless set: far above any swarm a machine runs,
/// far below what slows admission (benchmarks/admission.py).
pub const DEFAULT_QUEUE_MAX: u32 = 1_000;
/// [`Settings::queue_per_group`] unless set.
pub const DEFAULT_QUEUE_PER_GROUP: u32 = 100;

fn default_queue_max() -> u32 {
    DEFAULT_QUEUE_MAX
}

fn default_queue_per_group() -> u32 {
    DEFAULT_QUEUE_PER_GROUP
}

/// Every world, grouped by project.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StatusReport {
    /// Projects in name order (natural: `w2` before `w10`).
    pub projects: Vec<ProjectStatus>,
    /// The daemon's HTTP proxy: whether it listens, and why not. Absent
    /// before its first bind (and from a daemon older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyStatus>,
}

/// The daemon's HTTP proxy, as `status` and `doctor` show it. While it does
/// not listen, no world's URL is served; the daemon tries again with
/// backoff until it can.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProxyStatus {
    /// The port it listens on, or tries to.
    pub port: u16,
    /// It listens there now.
    pub listening: bool,
    /// Why not, while not listening: the last bind's error (`Address
    /// already in use`: another process holds the port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Binds on this port that failed in a row (0 while listening).
    #[serde(default)]
    pub failed_binds: u32,
    /// Milliseconds until the next try, while not listening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
}

impl ProxyStatus {
    /// One line saying that the proxy is down, why, and when it tries
    /// again; `None` while it listens.
    pub fn why_down(&self) -> Option<String> {
        if self.listening {
            return None;
        }
        let next = self.retry_in_ms.map_or(String::new(), |ms| {
            format!("; next try in {:.1} s", ms as f64 / 1000.0)
        });
        Some(format!(
            "the proxy is down: it cannot bind 127.0.0.1:{}: {} ({} failed bind(s){next}); no world's URL is served until it does",
            self.port,
            self.error.as_deref().unwrap_or("unknown error"),
            self.failed_binds,
        ))
    }
}

impl StatusReport {
    /// Orders projects, and each project's worlds, by name as a person
    /// reads them: runs of digits compare as numbers (`w2` < `w10`).
    pub fn sort_naturally(&mut self) {
        self.projects.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        for p in &mut self.projects {
            p.worlds.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        }
    }
}

/// `a` against `b` with runs of ASCII digits compared as numbers (by
/// length once leading zeros are dropped, then digit by digit, so no run is
/// too long), everything else byte by byte; ties by plain order, so the
/// order is total.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < x.len() && j < y.len() {
        if x[i].is_ascii_digit() && y[j].is_ascii_digit() {
            let run = |s: &[u8], mut k: usize| {
                while k < s.len() && s[k] == b'0' {
                    k += 1;
                }
                let start = k;
                while k < s.len() && s[k].is_ascii_digit() {
                    k += 1;
                }
                (start, k)
            };
            let ((xs, xe), (ys, ye)) = (run(x, i), run(y, j));
            let by_value = (xe - xs)
                .cmp(&(ye - ys))
                .then_with(|| x[xs..xe].cmp(&y[ys..ye]));
            if by_value != Ordering::Equal {
                return by_value;
            }
            i = xe;
            j = ye;
        } else {
            match x[i].cmp(&y[j]) {
                Ordering::Equal => {
                    i += 1;
                    j += 1;
                }
                other => return other,
            }
        }
    }
    (x.len() - i).cmp(&(y.len() - j)).then_with(|| a.cmp(b))
}

/// One project's worlds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProjectStatus {
    /// Project name.
    pub name: String,
    /// Folder holding its binky.toml (in the main worktree).
    pub root: String,
    /// Worlds in name order.
    pub worlds: Vec<WorldStatus>,
    /// Queued worlds never made that are not listed in `worlds`: past the
    /// first [`ProjectStatus::QUEUE_LISTED`] in admission order, so a report
    /// stays small and quick with thousands queued (`binky metrics` has
    /// `queue_length`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queued_unlisted: u32,
    /// Spare clones of its golden templates kept ready (issue 51), never
    /// worlds: how many, and the disk they took where it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spares: Option<SparesStatus>,
}

/// A project's spare clones, as `status` shows them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SparesStatus {
    /// Ready to be taken.
    pub ready: u32,
    /// Being made now (or cut short: `gc` sweeps those).
    pub making: u32,
    /// The disk the ready ones took, bytes, summed over those measured.
    pub bytes: u64,
}

impl ProjectStatus {
    /// How many queued worlds never made a report lists per project, the
    /// first in admission order.
    pub const QUEUE_LISTED: usize = 200;
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One world.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorldStatus {
    /// Its name (the branch).
    pub name: String,
    /// DNS-safe slug used in hostnames and paths.
    pub slug: String,
    /// Where it is in its lifecycle.
    pub state: WorldState,
    /// The worktree's path.
    pub path: String,
    /// Admission group, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last `binky verify`: `passed`, `failed` or `interrupted` (by a
    /// daemon restart), with its commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    /// Its services in start order.
    pub services: Vec<ServiceStatus>,
    /// Where it stands while `queued`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Box<QueuePlace>>,
    /// Since when it is `suspended` (RFC 3339); `error` says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_since: Option<String>,
    /// Since when it is `sleeping` (RFC 3339): the first request to one of
    /// its URLs, or `up`, wakes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleeping_since: Option<String>,
    /// How long it may go without a request or CPU use before it sleeps
    /// (`[project] idle_after`, or `up --idle-after`), seconds; `None`:
    /// it never sleeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_after_s: Option<u64>,
    /// When the world was first made (RFC 3339, seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// What its processes hold now, when asked for (`status` with
    /// `usage`) and it has any running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What the user should act on, each with the command that does it (a
    /// slice cloned from a template older than its branch's migrations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What a world's processes hold: summed over the process groups of its
/// running services (a process that left its group is not counted).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    /// Resident memory, bytes.
    pub rss_bytes: u64,
    /// CPU time its live processes have used since each started (user plus
    /// system), milliseconds: a rate is the difference of two readings.
    pub cpu_ms: u64,
}

/// A queued world's place in admission order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueuePlace {
    /// 1-based place in admission order as it stands at this moment: a
    /// snapshot, since fairness across groups moves a place as groups'
    /// worlds start and stop.
    pub position: u32,
    /// How many are queued.
    pub of: u32,
    /// Why this world waits, its own reason (`max_parallel 4 reached`,
    /// `waiting for RAM: …` with its own footprint, `disk: …`, or its turn
    /// behind the ones ahead).
    pub reason: String,
}

/// One service of a world.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServiceStatus {
    /// Service name.
    pub name: String,
    /// A process or a resource.
    pub kind: ServiceKind,
    /// Where it is.
    pub state: ServiceState,
    /// Process id while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Primary port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Named extra ports.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub ports: IndexMap<String, u16>,
    /// Restarts since the world came up.
    #[serde(default)]
    pub restarts: u32,
    /// The proxied hostname of a url service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The URL to open for a url service, as the daemon serves it now:
    /// `https://` when the project asks for HTTPS and Caddy runs, else
    /// `http://` through the proxy, with the port unless it is the
    /// scheme's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Lines its log received in the last 10 s, when that is a flood (50 a
    /// second or more: a retry loop, most often); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_flood: Option<u32>,
}

/// `binky metrics`: one JSON object.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Metrics {
    /// Daemon package version.
    pub version: String,
    /// Seconds since the daemon started.
    pub uptime_secs: u64,
    /// World count by state.
    pub worlds: IndexMap<String, u64>,
    /// Service processes running.
    pub services_running: u64,
    /// Restarts performed, all worlds.
    pub restarts: u64,
    /// Worlds waiting for admission.
    pub queue_length: u64,
    /// Worlds suspended by admission.
    #[serde(default)]
    pub suspended: u64,
    /// Worlds asleep after their idle time.
    #[serde(default)]
    pub sleeping: u64,
    /// `up`s admitted since the daemon started.
    #[serde(default)]
    pub admissions: u64,
    /// Times admission looked at the room since the daemon started: each
    /// pass, and the quick look of every second while anything is queued.
    #[serde(default)]
    pub admission_looks: u64,
    /// Of those, the passes over the whole queue (on each change, and on a
    /// second whose look found the room changed): flat however many wait.
    #[serde(default)]
    pub admission_passes: u64,
    /// How the daemon watches memory now: `"psi"` (kernel pressure-stall
    /// triggers plus a slow sample), `"sampling"` (a sample every 2 s, where
    /// the kernel has no PSI) or `"idle"` (no world runs: nothing is read).
    #[serde(default)]
    pub memory_watch: String,
    /// Memory samples taken since the daemon started.
    #[serde(default)]
    pub memory_samples: u64,
    /// RAM as admission reads it now, bytes: `MemTotal` and `MemAvailable`,
    /// each bounded by the daemon's memory cgroup limit where it has one
    /// (what a reserve's percentage is taken of); `None` where the machine
    /// does not say.
    #[serde(default)]
    pub memory_total: Option<u64>,
    /// See [`Metrics::memory_total`].
    #[serde(default)]
    pub memory_available: Option<u64>,
    /// Pressure-stall triggers the kernel fired since the daemon started.
    #[serde(default)]
    pub memory_stalls: u64,
    /// Bytes free (for an unprivileged user) on the filesystem holding
    /// `BINKY_HOME`; `None` where it cannot be read.
    #[serde(default)]
    pub disk_free: Option<u64>,
    /// The disk reserve admission keeps there now, bytes (the setting, at
    /// most a tenth of the filesystem unless set explicitly).
    #[serde(default)]
    pub disk_reserve: Option<u64>,
    /// Each project's learned footprint (peak RSS of its last running
    /// world), bytes; a project not yet measured is absent and counts as
    /// the default, 512 MiB.
    #[serde(default)]
    pub footprints: IndexMap<String, u64>,
    /// Ports reserved, all projects.
    pub port_reservations: u64,
    /// Proxy counters.
    pub proxy: ProxyMetrics,
    /// Registry size on disk (database plus WAL), bytes.
    pub registry_bytes: u64,
    /// Daemon resident set size, bytes.
    pub rss_bytes: u64,
    /// Daemon CPU time used since start, milliseconds.
    pub cpu_time_ms: u64,
    /// Daemon CPU use since the previous sample, percent of one core.
    pub cpu_percent: f32,
}

/// Proxy counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProxyMetrics {
    /// Requests handled.
    pub requests: u64,
    /// Response bytes sent.
    pub bytes: u64,
    /// Requests that ended in a proxy error (no route, upstream refused).
    pub errors: u64,
}

#[cfg(test)]
mod tests {
    use super::natural_cmp;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    #[test]
    fn names_sort_as_people_read_them() {
        let mut v = vec![
            "w10", "w2", "w1", "feat-b", "w02", "feat-a10", "feat-a9", "w",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            [
                "feat-a9", "feat-a10", "feat-b", "w", "w1", "w02", "w2", "w10"
            ]
        );
        // A run too long for any integer type still compares.
        let long = format!("w{}", "9".repeat(60));
        assert_eq!(natural_cmp(&long, "w10"), Ordering::Greater);
    }

    proptest! {
        #[test]
        fn the_order_is_total(a in "[a-c0-9]{0,6}", b in "[a-c0-9]{0,6}", c in "[a-c0-9]{0,6}") {
            prop_assert_eq!(natural_cmp(&a, &b), natural_cmp(&b, &a).reverse());
            prop_assert_eq!(natural_cmp(&a, &b) == Ordering::Equal, a == b);
            if natural_cmp(&a, &b) != Ordering::Greater && natural_cmp(&b, &c) != Ordering::Greater {
                prop_assert_ne!(natural_cmp(&a, &c), Ordering::Greater);
            }
        }
    }
}
