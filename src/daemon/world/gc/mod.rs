//! `gc`: sweep what a crash left half-made.

mod users;

use super::locate::user_git;
use super::plan::{lookup_env, project_env};
use super::reach::{TornDown, drop_template, reach, tear_down};
use super::slices::{SliceAt, adapter_for, slice_for};
use crate::adapters::golden;
use crate::daemon::Daemon;
use crate::daemon::events::{Event as LogEvent, EventKind};
use crate::protocol::{ApiError, ClientEnv, ServiceState, SweepItem, SweepKind, SweepResult};
use crate::registry::OrphanSlice;
use crate::{config, worktree};
use indexmap::IndexMap;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `binky gc`: sweeps what a crash left half-made — slices an interrupted
/// operation left, worktrees in a project's worktree root that no world
/// owns, git registrations whose folder is gone, golden templates of
/// unknown projects or whose key no world's branch has now. Never touches a slice the registry says is live, a world the
/// registry knows, or a worktree with changes. With `dry_run`, says what it
/// would sweep.
pub(crate) async fn gc(d: &Arc<Daemon>, dry_run: bool, client_env: ClientEnv) -> Vec<SweepItem> {
    let mut out = Vec::new();
    sweep_slices(d, dry_run, &client_env, &mut out).await;
    sweep_worktrees(d, dry_run, &client_env, &mut out);
    sweep_markers(d, dry_run, &client_env, &mut out).await;
    users::sweep_users(d, dry_run, &client_env, &mut out).await;
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
    // The window between reading the list and sweeping it.
    crate::faults::pause("gc:listed").await;
    for o in orphans {
        // Under its world's lock, which a verb holds while it makes the
        // world: a verb that began after the list was read (a queue carried
        // on by a new daemon) has claimed the slice again, and is left to it.
        let world = o
            .world_id
            .and_then(|id| d.registry().world_names(id).ok().flatten());
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
    d.registry().orphan_slices().is_ok_and(|now| {
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

/// Slice `name` of `service` of `project` as it would be reached: rendered
/// from the project's config (its main checkout's) with `client_env`, then
/// with `built` (the environment a world was built with); with no config,
/// by name alone.
///
/// # Errors
/// The first rendering fails (an unset `${env.NAME}`), as text with its
/// hint.
fn rendered(
    d: &Arc<Daemon>,
    (project, service): (&str, &str),
    adapter: &dyn crate::adapters::Adapter,
    name: &str,
    client_env: &ClientEnv,
    built: Option<&ClientEnv>,
) -> Result<Vec<crate::adapters::Slice>, String> {
    let root = d.registry().project_root(project).ok().flatten();
    let cfg = root.and_then(|r| config::load(&Path::new(&r).join(config::FILE_NAME)).ok());
    let Some(c) = &cfg else {
        return Ok(vec![slice_for(
            d,
            adapter,
            name.to_owned(),
            project,
            None,
            None,
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
fn with_hint(e: ApiError) -> String {
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

/// 3. Golden templates no world needs: those of projects the registry
///    does not know, and those of a known project whose key is no world's
///    current key (for every world, running or not: the key its worktree
///    gives now). Each is dropped on the server its marker names, under
///    the template's locks (a template this daemon or another on the same
///    server is using is left, and said), then its marker.
async fn sweep_markers(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: &ClientEnv,
    out: &mut Vec<SweepItem>,
) {
    let projects = d.registry().projects().unwrap_or_default();
    let Ok(adapters_dir) = std::fs::read_dir(d.paths.home().join("golden")) else {
        return;
    };
    let mut in_use: HashMap<String, Result<HashSet<String>, String>> = HashMap::new();
    for a in adapters_dir.flatten() {
        let Ok(markers) = std::fs::read_dir(a.path()) else {
            continue;
        };
        let adapter_name = a.file_name().to_string_lossy().into_owned();
        for m in markers.flatten() {
            let file = m.file_name().to_string_lossy().into_owned();
            // A template's build log sits beside its marker.
            if file.ends_with(".log") {
                continue;
            }
            // A marker being written now (by an `up` of this daemon), or
            // one a crash cut short between its write and its rename.
            if let Some(writer) = crate::platform::replacing_writer(&file) {
                if crate::platform::proc_stat(writer).is_none() {
                    let r = if dry_run {
                        Ok(())
                    } else {
                        remove_if_there(&m.path())
                    };
                    out.push(item(
                        SweepKind::GoldenMarker,
                        m.path().display().to_string(),
                        "a marker a crash left half-written".into(),
                        swept(dry_run, r),
                    ));
                }
                continue;
            }
            // Gone since the folder was read (another gc, a rebuild).
            let Ok(text) = std::fs::read_to_string(m.path()) else {
                continue;
            };
            let marker = golden::Marker::parse(&text);
            let owner = projects.iter().find(|(_, p, _)| {
                marker.project.as_deref() == Some(p.as_str())
                    || (marker.project.is_none() && file.starts_with(&format!("{p}_golden_")))
            });
            let Some((pid, project, root)) = owner else {
                let outcome = if dry_run {
                    swept(true, Ok(()))
                } else {
                    dropped(drop_unknown_template(d, &adapter_name, &file, &m.path()).await)
                };
                out.push(item(
                    SweepKind::GoldenMarker,
                    m.path().display().to_string(),
                    "a golden template of a project this daemon does not know".into(),
                    outcome,
                ));
                continue;
            };
            let used = in_use
                .entry(project.clone())
                .or_insert_with(|| templates_in_use(d, *pid, project, Path::new(root)));
            let outcome = match used {
                Ok(names) if names.contains(&file) => continue,
                Err(why) => (SweepResult::NotSwept, format!("not swept: {why}")),
                Ok(_) if dry_run => swept(true, Ok(())),
                Ok(_) => {
                    let at = UnusedTemplate {
                        adapter: &adapter_name,
                        name: &file,
                        path: &m.path(),
                        marker: &marker,
                        project,
                    };
                    dropped(drop_unused_template(d, &at, client_env).await)
                }
            };
            out.push(item(
                SweepKind::Template,
                m.path().display().to_string(),
                format!(
                    "a golden template of project {project} whose key no world's branch has now"
                ),
                outcome,
            ));
        }
    }
}

/// Removes file `path`; one already gone is no failure (what was to go is
/// gone).
fn remove_if_there(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
        _ => Ok(()),
    }
}

/// How a template drop reads in the report.
fn dropped(r: Result<TornDown, String>) -> (SweepResult, String) {
    match r {
        Ok(TornDown::Deleted) => (
            SweepResult::Swept,
            "swept: template dropped, marker removed".to_owned(),
        ),
        Ok(TornDown::NotFound) => (
            SweepResult::Forgotten,
            "marker removed: its template was not on its server (nothing deleted)".to_owned(),
        ),
        Err(e) => swept(false, Err(e)),
    }
}

/// The names of the templates project `project`'s worlds would clone from
/// now: for each world, each resource with `clone_from` in its worktree's
/// `binky.toml` (the main checkout's when the worktree is gone), at the key
/// its worktree gives.
///
/// # Errors
/// A world's `binky.toml` cannot be read: its key is unknown, so none of
/// the project's templates may be dropped.
fn templates_in_use(
    d: &Daemon,
    pid: i64,
    project: &str,
    root: &Path,
) -> Result<HashSet<String>, String> {
    let loc = worktree::locate(root).map_err(|e| format!("project {project}: {e}"))?;
    let main = config::load(&root.join(config::FILE_NAME)).ok();
    let mut names = HashSet::new();
    for path in d.registry().world_paths(pid).map_err(|e| e.to_string())? {
        let world_root = super::locate::join_subdir(Path::new(&path), &loc.subdir);
        let file = world_root.join(config::FILE_NAME);
        let cfg = if file.exists() {
            config::load(&file).map_err(|e| {
                format!("{} cannot be read, so the key its world needs is unknown ({e}); fix it and run gc again", file.display())
            })?
        } else {
            main.clone()
                .ok_or_else(|| format!("project {project}'s binky.toml cannot be read"))?
        };
        for (n, s) in &cfg.services {
            if let Some(r) = s.resource()
                && let Some(from) = &r.clone_from
            {
                let key = golden::key(
                    cfg.slice_resource(n),
                    r.migrate.as_deref(),
                    r.seed.as_deref(),
                    &r.clone_inputs,
                    &world_root,
                );
                names.insert(golden::template_name(project, from, &key));
            }
        }
    }
    Ok(names)
}

/// A template of a known project that `gc` drops.
struct UnusedTemplate<'a> {
    adapter: &'a str,
    name: &'a str,
    path: &'a Path,
    marker: &'a golden::Marker,
    project: &'a str,
}

/// Drops template `t` on the server its marker names, rendered from its
/// project's config with the caller's environment, under its locks; then
/// the marker and the template's log.
///
/// # Errors
/// What to do, as text: no such adapter, no service of the project builds
/// such a template, its server cannot be reached, an `up` here or another
/// daemon on that server is using it now, or the adapter failed. The
/// marker is kept.
async fn drop_unused_template(
    d: &Arc<Daemon>,
    t: &UnusedTemplate<'_>,
    client_env: &ClientEnv,
) -> Result<TornDown, String> {
    let adapter = adapter_for(d, t.adapter, client_env)
        .ok_or_else(|| format!("no adapter named {} in this build", t.adapter))?;
    let service = match &t.marker.service {
        Some(s) => s.clone(),
        None => builder_of(d, t, client_env).ok_or_else(|| {
            format!(
                "no service of project {} builds the template {}; drop it by hand, then delete this marker",
                t.project, t.name
            )
        })?,
    };
    let candidates = rendered(
        d,
        (t.project, &service),
        adapter.as_ref(),
        t.name,
        client_env,
        None,
    )?;
    let reached = reach(
        d,
        adapter.as_ref(),
        &service,
        candidates,
        t.marker.server.as_ref(),
    )
    .map_err(with_hint)?;
    let glock = d.worlds.golden_lock(&format!("{}/{}", t.adapter, t.name));
    let Ok(_local) = glock.try_lock() else {
        return Err("an `up` of this daemon is using it now; run gc again later".into());
    };
    let _server = adapter
        .lock_template(&reached.slice, false)
        .await
        .map_err(|e| e.redacted(&reached.slice).message)?;
    let found = drop_template(adapter.as_ref(), &reached.slice)
        .await
        .map_err(|e| e.redacted(&reached.slice).message)?;
    // Its role's password goes with it (a template has no slice record).
    let _ = d.registry().delete_slice(t.adapter, t.name);
    // The log first: the marker is what a later gc finds, so one killed
    // between the two leaves it to that gc, never a log no marker names.
    let _ = std::fs::remove_file(format!("{}.log", t.path.display()));
    remove_if_there(t.path)?;
    let mut ev = LogEvent::named(EventKind::TemplateDropped).detail(t.name.to_owned());
    ev.project = Some(t.project.to_owned());
    ev.service = Some(service);
    ev.adapter = Some(t.adapter.to_owned());
    d.event(ev);
    Ok(found)
}

/// For a marker written before markers named their service: the resource
/// of the project (main checkout's config) on this adapter whose
/// `clone_from` names such a template.
fn builder_of(d: &Daemon, t: &UnusedTemplate<'_>, client_env: &ClientEnv) -> Option<String> {
    let root = d.registry().project_root(t.project).ok().flatten()?;
    let cfg = config::load(&Path::new(&root).join(config::FILE_NAME)).ok()?;
    cfg.services.iter().find_map(|(n, s)| {
        let r = s.resource()?;
        let from = r.clone_from.as_ref()?;
        let same = adapter_for(d, &r.adapter, client_env).is_some_and(|a| a.name() == t.adapter);
        (same && t.name.starts_with(&format!("{}_golden_{from}", t.project))).then(|| n.clone())
    })
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
    let found = drop_template(adapter.as_ref(), &slice)
        .await
        .map_err(|e| e.redacted(&slice).message)?;
    let _ = d.registry().delete_slice(adapter.name(), &slice.name);
    // The log first, as in `drop_unused_template`.
    let _ = std::fs::remove_file(format!("{}.log", marker.display()));
    remove_if_there(marker)?;
    Ok(found)
}
