//! `gc`: sweep what a crash left half-made.

mod spares;
mod templates;
mod users;

use crate::daemon::Daemon;
use crate::daemon::events::{Event as LogEvent, EventKind};
use crate::daemon::world::stages::locate::user_git;
use crate::daemon::world::stages::plan::{lookup_env, project_env};
use crate::daemon::world::stages::reach::{TornDown, reach, tear_down};
use crate::daemon::world::stages::slices::{SliceAt, adapter_for, slice_for};
use crate::protocol::{ApiError, ClientEnv, ServiceState, SweepItem, SweepKind, SweepResult};
use crate::registry::OrphanSlice;
use crate::{config, worktree};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `binky gc`: sweeps what a crash left half-made — slices an interrupted
/// operation left, worktrees in a project's worktree root that no world
/// owns, git registrations whose folder is gone, golden templates of
/// unknown projects or whose key no world's branch has now, spare clones a
/// crash cut short or whose template is gone. Never touches a slice the registry says is live, a world the
/// registry knows, or a worktree with changes. With `dry_run`, says what it
/// would sweep.
pub(crate) async fn gc(d: &Arc<Daemon>, dry_run: bool, client_env: ClientEnv) -> Vec<SweepItem> {
    let mut out = Vec::new();
    sweep_slices(d, dry_run, &client_env, &mut out).await;
    sweep_worktrees(d, dry_run, &client_env, &mut out);
    templates::sweep_markers(d, dry_run, &client_env, &mut out).await;
    spares::sweep_spares(d, dry_run, &client_env, &mut out).await;
    users::sweep_users(d, dry_run, &client_env, &mut out).await;
    if !dry_run && !out.is_empty() {
        d.event(LogEvent::named(EventKind::Gc).detail(format!("{} item(s)", out.len())));
    }
    out
}

/// What a sweep reports: `would sweep` (dry run), `swept`, or why not.
pub(in crate::daemon::world) fn swept(
    dry_run: bool,
    r: Result<(), String>,
) -> (SweepResult, String) {
    match (dry_run, r) {
        (true, _) => (SweepResult::WouldSweep, "would sweep".to_owned()),
        (false, Ok(())) => (SweepResult::Swept, "swept".to_owned()),
        (false, Err(e)) => (SweepResult::NotSwept, format!("not swept: {e}")),
    }
}

/// One item of the report.
pub(in crate::daemon::world) fn item(
    kind: SweepKind,
    what: String,
    why: String,
    (result, outcome): (SweepResult, String),
) -> SweepItem {
    SweepItem {
        kind,
        what,
        why,
        result,
        outcome,
    }
}

/// 1. Slices stuck in provisioning/teardown whose world is gone or idle,
///    torn down through their adapter on the server they were made on.
async fn sweep_slices(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: &ClientEnv,
    out: &mut Vec<SweepItem>,
) {
    let orphans = d.registry(|r| r.orphan_slices()).unwrap_or_default();
    // The window between reading the list and sweeping it.
    crate::faults::pause("gc:listed").await;
    for o in orphans {
        // Under its world's lock, which a verb holds while it makes the
        // world: a verb that began after the list was read (a queue carried
        // on by a new daemon) has claimed the slice again, and is left to it.
        let world = o
            .world_id
            .and_then(|id| d.registry(|r| r.world_names(id)).ok().flatten());
        let lock = world
            .as_ref()
            .map(|(p, w)| d.worlds.lock_for(&crate::daemon::WorldKey::new(p, w)));
        let _guard = match &lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        if !still_orphan(d, &o) {
            continue;
        }
        let outcome = if dry_run {
            swept(true, Ok(()))
        } else {
            match teardown_orphan(d, &o, client_env).await {
                Ok(TornDown::Deleted) => swept(false, Ok(())),
                Ok(TornDown::NotFound) => (
                    SweepResult::Forgotten,
                    format!(
                        "forgotten: not on {} (nothing deleted there)",
                        o.server
                            .as_ref()
                            .map_or("its server", |s| s.address.as_str())
                    ),
                ),
                Err(e) => swept(false, Err(e)),
            }
        };
        out.push(item(
            SweepKind::Slice,
            format!("{} {}", o.adapter, o.slice),
            format!(
                "left in state `{}` by an operation that did not finish (interrupted or failed)",
                o.state
            ),
            outcome,
        ));
    }
}

/// Whether `o` is still one of the slices `gc` may sweep, read again now.
fn still_orphan(d: &Daemon, o: &OrphanSlice) -> bool {
    d.registry(|r| r.orphan_slices()).is_ok_and(|now| {
        now.iter()
            .any(|n| n.adapter == o.adapter && n.slice == o.slice && n.world_id == o.world_id)
    })
}

/// Tears down one orphaned slice on the server it was made on and forgets
/// it, saying whether anything was there to delete.
///
/// # Errors
/// What to do, as text: its `admin_url` cannot be rendered (an unset
/// `${env.NAME}`) or no longer reaches its server with the credentials it
/// was made with, or the adapter or the registry failed. The record stays.
async fn teardown_orphan(
    d: &Arc<Daemon>,
    o: &OrphanSlice,
    client_env: &ClientEnv,
) -> Result<TornDown, String> {
    let Some(adapter) = adapter_for(d, &o.adapter, client_env) else {
        return Err(format!("no adapter named {} in this build", o.adapter));
    };
    let built = o.world_id.and_then(|w| d.worlds.built_env(w));
    let candidates = rendered(
        d,
        (&o.project, &o.service),
        adapter.as_ref(),
        &o.slice,
        client_env,
        built.as_ref(),
    )?;
    let reached = reach(
        d,
        adapter.as_ref(),
        &o.service,
        candidates,
        o.server.as_ref(),
    )
    .map_err(with_hint)?;
    let found = tear_down(adapter.as_ref(), &reached.slice)
        .await
        .map_err(|e| e.redacted(&reached.slice).message)?;
    d.registry(|reg| {
        // A world still recorded no longer has this slice: its service
        // must not go on saying `provisioned` (`up` makes it again).
        if let Some(wid) = o.world_id {
            let _ = reg.service_state(wid, &o.service, ServiceState::Stopped, None, false);
        }
        reg.delete_slice(&o.adapter, &o.slice)
    })
    .map_err(|e| e.to_string())?;
    Ok(found)
}

/// Slice `name` of `service` of `project` as it would be reached: rendered
/// from the project's config (its main checkout's) with `client_env`, then
/// with `built` (the environment a world was built with); with no config,
/// by name alone.
///
/// # Errors
/// The first rendering fails (an unset `${env.NAME}`), as text with its
/// hint.
pub(in crate::daemon::world) fn rendered(
    d: &Arc<Daemon>,
    (project, service): (&str, &str),
    adapter: &dyn crate::adapters::Adapter,
    name: &str,
    client_env: &ClientEnv,
    built: Option<&ClientEnv>,
) -> Result<Vec<crate::adapters::Slice>, String> {
    let root = d.registry(|r| r.project_root(project)).ok().flatten();
    let cfg = root.and_then(|r| config::load(&Path::new(&r).join(config::FILE_NAME)).ok());
    let Some(c) = &cfg else {
        return Ok(vec![slice_for(
            d,
            adapter,
            name.to_owned(),
            project,
            client_env,
        )]);
    };
    let penv = project_env(c, &c.root, &c.root).unwrap_or_default();
    let mut candidates = Vec::new();
    for env in std::iter::once(client_env).chain(built) {
        let env_fn = lookup_env(&penv, env);
        let at = SliceAt {
            cfg: c,
            project,
            world: "",
            world_root: &c.root,
            facts: &IndexMap::new(),
            env: &env_fn,
            client_env: env,
        };
        match at.slice(d, service, adapter, name.to_owned()) {
            Ok(s) => candidates.push(s),
            Err(e) if candidates.is_empty() => return Err(with_hint(e)),
            Err(_) => {}
        }
    }
    Ok(candidates)
}

/// An error as one line of text, with its hint.
pub(in crate::daemon::world) fn with_hint(e: ApiError) -> String {
    match e.hint {
        Some(h) => format!("{}; {h}", e.message),
        None => e.message,
    }
}

/// 2. Worktree folders in a project's worktree root that no world owns
///    (clean ones only, removed with the user's git), and git registrations
///    whose folder is gone.
fn sweep_worktrees(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: &ClientEnv,
    out: &mut Vec<SweepItem>,
) {
    let projects = d.registry(|r| r.projects()).unwrap_or_default();
    for (pid, name, root) in projects {
        let Ok(cfg) = config::load(&Path::new(&root).join(config::FILE_NAME)) else {
            continue;
        };
        let Ok(loc) = worktree::locate(Path::new(&root)) else {
            continue;
        };
        let wt_root = match &cfg.project.worktree_root {
            Some(r) => config::resolve_against(Path::new(&root), r),
            None => worktree::default_root(&loc.main_workdir),
        };
        let Ok(owned) = d.registry(|r| r.world_paths(pid)) else {
            continue;
        };
        let owned: Vec<PathBuf> = owned.into_iter().map(PathBuf::from).collect();
        for p in std::fs::read_dir(&wt_root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
        {
            if !p.is_dir() || owned.contains(&p) || !p.join(".git").is_file() {
                continue;
            }
            let dirty = user_git(client_env)
                .ok()
                .and_then(|g| worktree::changes(&g, &p).ok())
                .is_none_or(|c| !c.is_empty());
            let outcome = if dirty {
                (
                    SweepResult::NotSwept,
                    "not swept: it has uncommitted or untracked changes; remove it by hand"
                        .to_owned(),
                )
            } else {
                let r = if dry_run {
                    Ok(())
                } else {
                    user_git(client_env).map_err(|e| e.message).and_then(|g| {
                        worktree::remove(&g, &loc.main_workdir, &p).map_err(|e| e.to_string())
                    })
                };
                swept(dry_run, r)
            };
            out.push(item(
                SweepKind::Worktree,
                p.display().to_string(),
                format!("a worktree of project {name} that no world owns"),
                outcome,
            ));
        }
        for (n, path) in worktree::stale_registrations(&loc.main_workdir) {
            let r = if dry_run {
                Ok(())
            } else {
                user_git(client_env).map_err(|e| e.message).and_then(|g| {
                    worktree::prune_registration(&g, &loc.main_workdir, &path)
                        .map_err(|e| e.to_string())
                })
            };
            out.push(item(
                SweepKind::Registration,
                format!("{} ({})", n, path.display()),
                "a git worktree registration whose folder is gone".into(),
                swept(dry_run, r),
            ));
        }
    }
}
