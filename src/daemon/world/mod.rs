//! Worlds: every verb that acts on one, and the stages they compose.
//!
//! `up` runs the pipeline in order — locate → worktree → ports → slices →
//! processes by dependency level → routes — recording its intent in the
//! registry before it acts. One async lock per world serialises verbs on the
//! same world, so the same name upped twice at once yields one world.
//!
//! | module | holds |
//! |---|---|
//! | [`locate`] | the project a request names, a world's row, allowed names and paths |
//! | [`plan`] | dependency levels, facts for tokens, every process's environment, process specs |
//! | [`slices`] | what slices render from: names, addresses, the adapter for each |
//! | [`provision`] | one slice made or kept: the intent row, the ownership check, build or clone |
//! | [`data`] | migrate and seed, catching up with the branch |
//! | [`reach`] | a recorded slice on the server it was made on; teardown that says what it found |
//! | [`templates`] | golden templates: build once, clone per world, fall back |
//! | [`bootstrap`] | a new worktree made ready: `[project] copy`, then `setup`, once |
//! | [`start`] | starting processes by dependency level behind their probes |
//! | [`processes`] | stopping a world's processes, recording the supervisor's reports |
//! | [`routes`] | URLs, the HTTPS front (Caddy) |
//! | [`reconcile`](mod@reconcile) | after a daemon restart: adopt, stop what no world owns |
//! | [`strays`] | a world's processes that left its process groups (daemonized), by the token in their environment |
//! | [`admit`] | `up` through admission: ticket, wait, `--no-wait`, resumes |
//! | [`up`](mod@up), [`down`](mod@down) (and `reload`), [`remove`](mod@remove), [`reset`](mod@reset), [`env`](mod@env), [`verify`](mod@verify), [`gc`](mod@gc) | one verb each |
//!
//! Here: the daemon's live [`Worlds`], and what every verb's reply is made
//! of (a world's status and ports).

use self::locate::Located;
use super::events::{Event as LogEvent, EventKind};
use super::{Daemon, WorldKey, admission};
use crate::config::{self, Config};
use crate::ports;
use crate::protocol::{ApiError, ClientEnv, WorldOutcome, WorldState, WorldStatus};
use crate::supervisor::Handle;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod admit;
mod bootstrap;
mod data;
mod down;
mod env;
mod flood;
mod gc;
mod locate;
mod logs;
mod plan;
mod processes;
mod provision;
mod reach;
mod reconcile;
mod remove;
mod reset;
mod routes;
mod slices;
mod start;
pub(crate) mod strays;
mod templates;
mod trusted;
mod up;
mod verify;

pub(crate) use admit::up_admitted;
pub(crate) use data::fill_stale_clones;
pub(crate) use down::{down, reload, suspend};
pub(crate) use env::{env, locate_service};
pub(crate) use flood::fill_log_floods;
pub(crate) use gc::gc;
pub(crate) use logs::{log_dir, logs};
pub(crate) use processes::fill_usage;
pub(crate) use reconcile::reconcile;
pub(crate) use remove::remove;
pub(crate) use reset::reset;
pub(crate) use routes::fill_urls;
pub(crate) use up::up;
pub(crate) use verify::verify;

/// Whom a stage of a verb works for: the daemon, the world's config (as on
/// its branch), its names and registry id, and the environment it renders
/// with (the caller's; see [`Worlds::env_for`]). Copied freely: references
/// and an id.
#[derive(Clone, Copy)]
pub(super) struct WorldCtx<'a> {
    pub(super) d: &'a Arc<Daemon>,
    pub(super) cfg: &'a Config,
    pub(super) project: &'a str,
    /// The world's name (its branch).
    pub(super) world: &'a str,
    pub(super) slug: &'a str,
    pub(super) world_id: i64,
    pub(super) client_env: &'a ClientEnv,
}

/// One piece of a resource's slice work: the service, its config, and the
/// log its `migrate` and `seed` write to (the world's, or the golden
/// template's own).
#[derive(Clone, Copy)]
pub(super) struct SliceJob<'a> {
    pub(super) service: &'a str,
    pub(super) r: &'a config::Resource,
    pub(super) log: &'a Path,
}

/// Lines of a failing service's log quoted in the error.
const FAILURE_LOG_LINES: usize = 20;
/// First lines of a run quoted under a failure, before its tail.
const FAILURE_HEAD_LINES: usize = 8;

/// The daemon's live worlds.
#[derive(Default)]
pub(crate) struct Worlds {
    runtimes: Mutex<HashMap<i64, Arc<Runtime>>>,
    locks: Mutex<HashMap<WorldKey, Arc<tokio::sync::Mutex<()>>>>,
    golden: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// libgit2 is not safe for concurrent changes to one repository (refs,
    /// `.git/worktrees`), so worktree changes are serialised per repository.
    repos: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// The environment each world's last `up` was given (daemon memory
    /// only: it may hold credentials), so every later verb renders with
    /// the same `${env.NAME}` values even from a shell that lacks them.
    last_env: Mutex<HashMap<i64, ClientEnv>>,
}

/// Supervised processes of one world.
#[derive(Clone)]
pub(crate) struct Runtime {
    handles: IndexMap<String, Arc<Handle>>,
    /// Start order by dependency level.
    levels: Vec<Vec<String>>,
}

impl Worlds {
    fn lock_for(&self, key: &WorldKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(key.clone()).or_default().clone()
    }
    fn golden_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.golden.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(key.to_owned()).or_default().clone()
    }
    fn repo_lock(&self, main: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.repos.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(main.to_path_buf()).or_default().clone()
    }
    fn remember_env(&self, id: i64, env: &ClientEnv) {
        self.last_env
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, env.clone());
    }
    /// The environment world `id`'s last `up` was given, if this daemon
    /// saw it.
    pub(crate) fn built_env(&self, id: i64) -> Option<ClientEnv> {
        self.last_env
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }
    /// The environment a verb on world `id` renders with: the caller's
    /// variables, then those the world's last `up` was given (the daemon's
    /// own come last, in [`lookup_env`](plan::lookup_env)).
    pub(crate) fn env_for(&self, id: i64, caller: &ClientEnv) -> ClientEnv {
        let last = self.last_env.lock().unwrap_or_else(|p| p.into_inner());
        let mut merged = caller.clone();
        if let Some(up) = last.get(&id) {
            for (k, v) in &up.0 {
                if caller.get(k).is_none() {
                    merged.0.push((k.clone(), v.clone()));
                }
            }
        }
        merged
    }
    fn runtime(&self, id: i64) -> Option<Arc<Runtime>> {
        self.runtimes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }
    fn take_runtime(&self, id: i64) -> Option<Arc<Runtime>> {
        self.runtimes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
    }
    fn put_runtime(&self, id: i64, rt: Runtime) {
        self.runtimes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::new(rt));
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_owned()
}

/// Whether `name` has a world row in `loc`'s project.
fn world_exists(d: &Daemon, loc: &Located, name: &str) -> Result<bool, ApiError> {
    let reg = d.registry();
    let Some(pid) = reg.project_id(&loc.name)? else {
        return Ok(false);
    };
    Ok(reg.find_world(pid, name)?.is_some())
}

/// What `down`/`remove` of a queued world that was never made answers.
fn withdrawn(loc: &Located, name: &str, state: WorldState) -> WorldOutcome {
    let mut world = admission::unmade(name, None);
    world.state = state;
    WorldOutcome {
        project: loc.name.clone(),
        world,
        noop: false,
        notes: Vec::new(),
        torn_down: Vec::new(),
        torn_down_on: Vec::new(),
        left_for_gc: Vec::new(),
        left_queue: true,
    }
}

/// The name of the project `wref` names, found as every verb finds it.
///
/// # Errors
/// No such project, or its binky.toml is invalid (as for every verb).
pub(crate) fn project_of(d: &Daemon, wref: &crate::protocol::WorldRef) -> Result<String, ApiError> {
    Ok(locate::locate(d, wref)?.name)
}

pub(crate) fn world_event(ev: EventKind, project: &str, world: &str) -> LogEvent {
    let mut e = LogEvent::named(ev);
    e.project = Some(project.to_owned());
    e.worktree = Some(world.to_owned());
    e
}

fn outcome(
    d: &Daemon,
    project: &str,
    world_id: i64,
    noop: bool,
    notes: Vec<String>,
) -> Result<WorldOutcome, ApiError> {
    let world = world_status(d, project, world_id)?;
    Ok(WorldOutcome {
        project: project.to_owned(),
        world,
        noop,
        notes,
        torn_down: Vec::new(),
        torn_down_on: Vec::new(),
        left_for_gc: Vec::new(),
        left_queue: false,
    })
}

fn world_status(d: &Daemon, project: &str, world_id: i64) -> Result<WorldStatus, ApiError> {
    let reg = d.registry();
    let (_, row_name) = reg
        .world_names(world_id)?
        .ok_or_else(|| ApiError::new("world vanished from the registry"))?;
    let mut report = reg.status(Some(project))?;
    drop(reg);
    fill_urls(d, &mut report);
    report
        .projects
        .into_iter()
        .flat_map(|p| p.worlds)
        .find(|w| w.name == row_name)
        .ok_or_else(|| ApiError::new("world vanished from the registry"))
}

/// A world's reserved ports by `(service, name)`.
fn world_ports(d: &Daemon, world_id: i64) -> Result<IndexMap<ports::PortKey, u16>, ApiError> {
    let ports = d.registry().world_ports(world_id)?;
    Ok(ports.into_iter().collect())
}
