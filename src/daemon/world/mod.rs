//! Worlds: every verb that acts on one, and the stages they compose.
//!
//! `up` runs the pipeline in order — locate → worktree → ports → slices →
//! processes by dependency level → routes — recording its intent in the
//! registry before it acts. One async lock per world serialises verbs on the
//! same world, so the same name upped twice at once yields one world.
//!
//! [`verbs`] holds one file per verb (`up`, `down`, `reload`, `remove`,
//! `reset`, `env`, `verify`, `gc`, `logs`), each the whole story of one
//! request; [`stages`] the steps they compose, which know no verb. Arrows
//! run verbs → stages → this module, never back.
//!
//! Here: the daemon's live [`Worlds`], and what every verb's reply is made
//! of (a world's status and ports).

use self::stages::locate::Located;
use super::events::{Event as LogEvent, EventKind};
use super::{Daemon, WorldKey, admission};
use crate::config::{self, Config};
use crate::ports;
use crate::protocol::{ApiError, ClientEnv, WorldOutcome, WorldState, WorldStatus};
use crate::slug::WorldName;
use crate::supervisor::Handle;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod stages;
mod verbs;

pub(crate) use stages::data::fill_stale_clones;
pub(crate) use stages::flood::fill_log_floods;
pub(crate) use stages::processes::fill_usage;
pub(crate) use stages::reconcile::reconcile;
pub(crate) use stages::routes::fill_urls;
pub(crate) use stages::spares::fill_spares;
pub(crate) use stages::strays;
pub(crate) use verbs::down::{down, suspend};
pub(crate) use verbs::env::{env, locate_service};
pub(crate) use verbs::gc::gc;
pub(crate) use verbs::logs::{log_dir, logs};
pub(crate) use verbs::reload::reload;
pub(crate) use verbs::remove::remove;
pub(crate) use verbs::reset::reset;
pub(crate) use verbs::sleep::{sleep, wake};
pub(crate) use verbs::up::{up, up_admitted};
pub(crate) use verbs::verify::verify;

/// Whom a stage of a verb works for: the daemon, the world's config (as on
/// its branch), its names and registry id, and the environment it renders
/// with (the caller's; see [`Worlds::env_for`]). Copied freely: references
/// and an id.
#[derive(Clone, Copy)]
pub(super) struct WorldCtx<'a> {
    pub(super) d: &'a Arc<Daemon>,
    pub(super) cfg: &'a Config,
    pub(super) project: &'a str,
    /// The world's name (its branch) and slug.
    pub(super) world: &'a WorldName,
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
    /// Sleeping worlds whose wake-up `up` runs now, so a burst of requests
    /// starts one.
    waking: Mutex<std::collections::HashSet<WorldKey>>,
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
    /// Marks world `name` of `project` as waking; `false` when it already is.
    fn start_waking(&self, project: &str, name: &str) -> bool {
        self.waking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(WorldKey::new(project, name))
    }
    /// Whether a wake-up of world `key` (by a request, or `verify`) runs.
    fn is_waking(&self, key: &WorldKey) -> bool {
        self.waking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }
    fn done_waking(&self, key: &WorldKey) {
        self.waking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
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
    /// own come last, in [`lookup_env`](stages::plan::lookup_env)).
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
    d.registry(|reg| {
        let Some(pid) = reg.project_id(&loc.name)? else {
            return Ok(false);
        };
        Ok(reg.find_world(pid, name)?.is_some())
    })
}

/// What `down`/`remove` of a queued world that was never made answers.
fn withdrawn(loc: &Located, name: &str, state: WorldState) -> WorldOutcome {
    let mut world = admission::unmade(name, None);
    world.state = state;
    WorldOutcome {
        left_queue: true,
        ..WorldOutcome::of(loc.name.clone(), world)
    }
}

/// The name of the project `wref` names, found as every verb finds it.
///
/// # Errors
/// No such project, or its binky.toml is invalid (as for every verb).
pub(crate) fn project_of(d: &Daemon, wref: &crate::protocol::WorldRef) -> Result<String, ApiError> {
    Ok(stages::locate::locate(d, wref)?.name)
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
    let (row_name, mut report) = d.registry(|reg| {
        let (_, row_name) = reg
            .world_names(world_id)?
            .ok_or_else(|| ApiError::new("world vanished from the registry"))?;
        Ok::<_, ApiError>((row_name, reg.status(Some(project))?))
    })?;
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
    let ports = d.registry(|r| r.world_ports(world_id))?;
    Ok(ports.into_iter().collect())
}

/// Fails with [`cancelled_error`] once the caller has cancelled: checked
/// between the stages of `up`, where stopping leaves nothing half-made.
pub(in crate::daemon::world) fn check_cancelled(
    progress: &crate::daemon::ProgressTx,
    name: &str,
) -> Result<(), ApiError> {
    if progress.cancelled() {
        return Err(cancelled_error(name));
    }
    Ok(())
}

/// What a cancelled `up` answers.
fn cancelled_error(name: &str) -> ApiError {
    ApiError::new(format!(
        "`up` of {name} was cancelled: what it had started is stopped; its worktree, ports and finished slices are kept"
    ))
    .hint(format!(
        "`binky up {name}` brings it up, `binky remove {name}` removes it"
    ))
    .with_kind(crate::protocol::ErrorKind::Cancelled)
}
