//! `gc`: sweep what a crash left half-made.

use super::locate::user_git;
use super::plan::{lookup_env, project_env};
use super::reach::{TornDown, reach, tear_down};
use super::slices::{SliceAt, adapter_for, slice_for};
use crate::adapters::golden;
use crate::daemon::Daemon;
use crate::daemon::events::{Event as LogEvent, EventKind};
use crate::protocol::{ApiError, ClientEnv, ServiceState, SweepItem, SweepKind, SweepResult};
use crate::registry::OrphanSlice;
use crate::{config, worktree};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `binky gc`: sweeps what a crash left half-made — slices an interrupted
/// operation left, worktrees in a project's worktree root that no world
/// owns, git registrations whose folder is gone, golden markers of unknown
/// projects. Never touches a slice the registry says is live, a world the
/// registry knows, or a worktree with changes. With `dry_run`, says what it
/// would sweep.
pub(crate) async fn gc(d: &Arc<Daemon>, dry_run: bool, client_env: ClientEnv) -> Vec<SweepItem> {
    let mut out = Vec::new();
    sweep_slices(d, dry_run, &client_env, &mut out).await;
    sweep_worktrees(d, dry_run, &client_env, &mut out);
    sweep_markers(d, dry_run, &mut out).await;
    if !dry_run && !out.is_empty() {
        d.event(LogEvent::named(EventKind::Gc).detail(format!("{} item(s)", out.len())));
    }
    out
}

/// What a sweep reports: `would sweep` (dry run), `swept`, or why not.
fn swept(dry_run: bool, r: Result<(), String>) -> (SweepResult, String) {
    match (dry_run, r) {
        (true, _) => (SweepResult::WouldSweep, "would sweep".to_owned()),
        (false, Ok(())) => (SweepResult::Swept, "swept".to_owned()),
        (false, Err(e)) => (SweepResult::NotSwept, format!("not swept: {e}")),
    }
}

/// One item of the report.
fn item(
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
    let orphans = d.registry().orphan_slices().unwrap_or_default();
    for o in orphans {
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
    let with_hint = |e: ApiError| match e.hint {
        Some(h) => format!("{}; {h}", e.message),
        None => e.message,
    };
    let Some(adapter) = adapter_for(d, &o.adapter, client_env) else {
        return Err(format!("no adapter named {} in this build", o.adapter));
    };
    let root = d.registry().project_root(&o.project).ok().flatten();
    let cfg = root.and_then(|r| config::load(&Path::new(&r).join(config::FILE_NAME)).ok());
    let built = o.world_id.and_then(|w| d.worlds.built_env(w));
    let mut candidates = Vec::new();
    match &cfg {
        Some(c) => {
            let penv = project_env(c, &c.root, &c.root).unwrap_or_default();
            for env in std::iter::once(client_env).chain(built.as_ref()) {
                let env_fn = lookup_env(&penv, env);
                let at = SliceAt {
                    cfg: c,
                    project: &o.project,
                    world: "",
                    world_root: &c.root,
                    facts: &IndexMap::new(),
                    env: &env_fn,
                    client_env: env,
                };
                match at.slice(d, &o.service, adapter.as_ref(), o.slice.clone()) {
                    Ok(s) => candidates.push(s),
                    Err(e) if candidates.is_empty() => return Err(with_hint(e)),
                    Err(_) => {}
                }
            }
        }
        None => candidates.push(slice_for(
            d,
            adapter.as_ref(),
            o.slice.clone(),
            &o.project,
            None,
            None,
            client_env,
        )),
    }
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
    let reg = d.registry();
    // A world still recorded no longer has this slice: its service must
    // not go on saying `provisioned` (`up` makes it again).
    if let Some(wid) = o.world_id {
        let _ = reg.service_state(wid, &o.service, ServiceState::Stopped, None, false);
    }
    reg.delete_slice(&o.adapter, &o.slice)
        .map_err(|e| e.to_string())?;
    Ok(found)
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
    let projects = d.registry().projects().unwrap_or_default();
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
        let Ok(owned) = d.registry().world_paths(pid) else {
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

/// 3. Golden templates of projects the registry does not know: each is
///    dropped on the server its marker names, then the marker. With no
///    config to render an `admin_url` from, only a server reached without
///    credentials (or a template of no server, sqlite's) can be; the others
///    are named for the user to drop by hand, marker kept.
async fn sweep_markers(d: &Arc<Daemon>, dry_run: bool, out: &mut Vec<SweepItem>) {
    let known: Vec<String> = d
        .registry()
        .projects()
        .unwrap_or_default()
        .into_iter()
        .map(|(_, name, _)| name)
        .collect();
    let Ok(adapters_dir) = std::fs::read_dir(d.paths.home().join("golden")) else {
        return;
    };
    for a in adapters_dir.flatten() {
        let Ok(markers) = std::fs::read_dir(a.path()) else {
            continue;
        };
        let adapter_name = a.file_name().to_string_lossy().into_owned();
        for m in markers.flatten() {
            let file = m.file_name().to_string_lossy().into_owned();
            let owner_known = known
                .iter()
                .any(|p| file.starts_with(&format!("{p}_golden_")));
            // A template's build log sits beside its marker.
            if owner_known || file.ends_with(".log") {
                continue;
            }
            let outcome = if dry_run {
                swept(true, Ok(()))
            } else {
                match drop_unknown_template(d, &adapter_name, &file, &m.path()).await {
                    Ok(TornDown::Deleted) => (
                        SweepResult::Swept,
                        "swept: template dropped, marker removed".to_owned(),
                    ),
                    Ok(TornDown::NotFound) => (
                        SweepResult::Forgotten,
                        "marker removed: its template was not on its server (nothing deleted)"
                            .to_owned(),
                    ),
                    Err(e) => swept(false, Err(e)),
                }
            };
            out.push(item(
                SweepKind::GoldenMarker,
                m.path().display().to_string(),
                "a golden template of a project this daemon does not know".into(),
                outcome,
            ));
        }
    }
}

/// Drops the template `name` of adapter `adapter_name` on the server its
/// marker at `marker` names, then the marker and the template's log.
///
/// # Errors
/// What to do, as text: no such adapter, the server needs credentials, or
/// the adapter failed. The marker is kept.
async fn drop_unknown_template(
    d: &Arc<Daemon>,
    adapter_name: &str,
    name: &str,
    marker: &Path,
) -> Result<TornDown, String> {
    let no_env = ClientEnv::default();
    let adapter = adapter_for(d, adapter_name, &no_env)
        .ok_or_else(|| format!("no adapter named {adapter_name} in this build"))?;
    let m = golden::Marker::parse(&std::fs::read_to_string(marker).map_err(|e| e.to_string())?);
    let key = d.registry().fingerprint_key().map_err(|e| e.to_string())?;
    let admin_url = match &m.server {
        Some(s) if s.credentials == crate::adapters::server::fingerprint(&key, "", "") => {
            Some(s.address.clone())
        }
        Some(s) => {
            return Err(format!(
                "the template {name} on {} needs the credentials it was built with; drop it there by hand, then delete this marker",
                s.address
            ));
        }
        None if !adapter.serverless() => {
            return Err(format!(
                "the marker does not say which server the template {name} is on (written by an older binky); drop it by hand, then delete this marker"
            ));
        }
        None => None,
    };
    let slice = slice_for(
        d,
        adapter.as_ref(),
        name.to_owned(),
        "",
        None,
        admin_url,
        &no_env,
    );
    let found = tear_down(adapter.as_ref(), &slice)
        .await
        .map_err(|e| e.redacted(&slice).message)?;
    std::fs::remove_file(marker).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(format!("{}.log", marker.display()));
    Ok(found)
}
