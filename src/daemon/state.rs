//! What every verb holds: the [`Daemon`] and the caller's [`ProgressTx`].
//! Holds no verb.

use super::events::{Event, EventLog};
use super::world;
use crate::adapters;
use crate::paths::Paths;
use crate::protocol::{Progress, ProgressStep};
use crate::proxy::ProxyCounters;
use crate::registry::Registry;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Shared daemon state.
pub(crate) struct Daemon {
    pub(crate) paths: Paths,
    /// The registry's connection for writes (and reads that must see
    /// them); reached through [`Daemon::registry`] only.
    registry: Mutex<Registry>,
    /// A second connection for reports (`status`, the proxy's pages):
    /// SQLite's WAL lets it read while a write is held, so a slow disk
    /// under one write stalls no report. Opened once, on first use;
    /// `None` when it could not be (reports then share the writer's).
    reader: std::sync::OnceLock<Option<Mutex<Registry>>>,
    pub(crate) events: EventLog,
    pub(crate) started: Instant,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) proxy: Arc<ProxyCounters>,
    pub(crate) routes: Arc<crate::proxy::Routes>,
    pub(crate) proxy_port: watch::Sender<u16>,
    /// The proxy's last bind: its port, whether it listens there, and
    /// when not, why and when it tries again (`status`, `doctor`).
    pub(crate) proxy_bound: watch::Sender<Option<crate::proxy::Binding>>,
    pub(crate) caddy: crate::proxy::caddy::Caddy,
    /// Caddy runs, so https projects get https URLs.
    pub(crate) https_live: std::sync::atomic::AtomicBool,
    pub(crate) cpu_sample: Mutex<Option<(Instant, u64)>>,
    pub(crate) worlds: world::Worlds,
    pub(crate) admission: super::admission::Admission,
    /// The idle check: which worlds may sleep, and how long each took to
    /// wake.
    pub(crate) idle: super::idle::Idle,
    /// Where an adapter name leads (see [`Adapters`]).
    pub(crate) adapters: Adapters,
}

/// How the daemon finds an adapter by name: adapters added to this daemon
/// first (an in-memory one in handler tests), then the built-in ones and
/// external `binky-adapter-<name>` executables ([`adapters::by_name`]).
/// A daemon run by `binky` adds none.
#[derive(Default)]
pub(crate) struct Adapters {
    added: Vec<Arc<dyn adapters::Adapter>>,
}

impl Adapters {
    /// The adapter registered as `name`, searching `search_path` (the
    /// daemon's `PATH` when `None`) for an external one.
    pub(crate) fn find(
        &self,
        name: &str,
        search_path: Option<&std::ffi::OsStr>,
    ) -> Option<Arc<dyn adapters::Adapter>> {
        self.added
            .iter()
            .find(|a| a.name() == name)
            .cloned()
            .or_else(|| adapters::by_name(name, search_path))
    }
}

/// Where a long operation reports what it is doing (frames go to the caller
/// as they happen) and learns whether its caller cancelled it. A caller
/// that merely went away does not stop the operation; one that sends
/// `cancel` does.
#[derive(Clone)]
pub(crate) struct ProgressTx {
    pub(super) tx: tokio::sync::mpsc::UnboundedSender<Progress>,
    pub(super) cancel: watch::Receiver<bool>,
}

impl ProgressTx {
    /// Reports one step.
    pub(crate) fn say(&self, step: ProgressStep, service: Option<&str>, message: String) {
        let _ = self.tx.send(Progress {
            step,
            service: service.map(str::to_owned),
            message,
        });
    }

    /// Whether the caller asked to cancel.
    pub(crate) fn cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves when the caller asks to cancel (never, if it does not).
    pub(crate) async fn until_cancelled(&self) {
        let mut rx = self.cancel.clone();
        if rx.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Runs `f`, which may block its thread (SQLite, the file system), without
/// taking a worker from the async runtime: on the daemon's multi-thread
/// runtime through [`tokio::task::block_in_place`], which hands the worker's
/// other tasks to another thread first; directly anywhere else (a
/// current-thread runtime in tests, a blocking thread, no runtime).
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Waits (at most 2 s) until the proxy has tried to bind `port`.
pub(crate) async fn wait_proxy_bound(d: &Daemon, port: u16) {
    let mut rx = d.proxy_bound.subscribe();
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        rx.wait_for(|b| b.as_ref().is_some_and(|b| b.port == port)),
    )
    .await;
}

impl Daemon {
    /// A daemon over `registry` with the state of a fresh start: no routes,
    /// no worlds in memory, an empty admission queue, the proxy not yet
    /// bound. [`super::server::run`] builds it after taking the lock; tests build
    /// one over a temporary home.
    pub(crate) fn new(paths: Paths, registry: Registry) -> Daemon {
        let (shutdown, _) = watch::channel(false);
        let (proxy_port, _) = watch::channel(0u16);
        let (proxy_bound, _) = watch::channel(None);
        Daemon {
            events: EventLog::new(paths.events_log()),
            paths,
            registry: Mutex::new(registry),
            reader: std::sync::OnceLock::new(),
            started: Instant::now(),
            shutdown,
            proxy: Arc::new(ProxyCounters::default()),
            routes: Arc::new(crate::proxy::Routes::default()),
            proxy_port,
            proxy_bound,
            caddy: Default::default(),
            https_live: Default::default(),
            cpu_sample: Mutex::new(None),
            worlds: world::Worlds::default(),
            admission: Default::default(),
            idle: Default::default(),
            adapters: Adapters::default(),
        }
    }

    /// Adds `adapter`, found by its name before any built-in or external
    /// one of that name.
    #[cfg(test)]
    pub(crate) fn with_adapter(mut self, adapter: Arc<dyn adapters::Adapter>) -> Daemon {
        self.adapters.added.push(adapter);
        self
    }

    /// Runs `f` with the registry, as a [`blocking`] section: a write that
    /// waits on the disk (or on another write) holds up neither the
    /// runtime's workers nor, through them, the proxy and other requests.
    /// A poisoned lock is recovered: the registry's own transactions keep
    /// it consistent. Calls do not nest (the lock is not re-entrant).
    pub(crate) fn registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        blocking(|| f(&mut self.registry.lock().unwrap_or_else(|p| p.into_inner())))
    }

    /// Runs `f` with the registry's reading connection ([`Daemon::registry`]'s
    /// when a second one cannot be opened): what it sees is the last
    /// committed state, never a write in progress, and it never waits for
    /// one. For reports only; whatever then writes uses
    /// [`Daemon::registry`].
    pub(crate) fn read_registry<T>(&self, f: impl FnOnce(&Registry) -> T) -> T {
        blocking(|| {
            let reader = self.reader.get_or_init(|| {
                Registry::open_reader(&self.paths.registry())
                    .inspect_err(|e| {
                        tracing::warn!(error = %e, "no second registry connection; reports share the writer's");
                    })
                    .ok()
                    .map(Mutex::new)
            });
            let conn = reader.as_ref().unwrap_or(&self.registry);
            f(&conn.lock().unwrap_or_else(|p| p.into_inner()))
        })
    }

    /// Appends to the event log.
    pub(crate) fn event(&self, ev: Event) {
        self.events.emit(ev);
    }
}

/// A world by name: its project and its own name (the branch). The key of
/// every per-world map and lock in the daemon; shown as `project/world`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WorldKey {
    pub(crate) project: String,
    pub(crate) name: String,
}

impl WorldKey {
    pub(crate) fn new(project: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            project: project.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for WorldKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.project, self.name)
    }
}
