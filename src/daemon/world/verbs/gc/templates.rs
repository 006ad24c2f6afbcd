//! `gc`'s sweep of golden templates: markers a crash left half-written,
//! templates of projects the registry does not know, and templates whose
//! key no world's branch has now.

use super::{item, rendered, swept, with_hint};
use crate::adapters::golden;
use crate::daemon::Daemon;
use crate::daemon::events::{Event as LogEvent, EventKind};
use crate::daemon::world::stages::locate::join_subdir;
use crate::daemon::world::stages::reach::{TornDown, drop_template, reach};
use crate::daemon::world::stages::slices::{adapter_for, slice_for};
use crate::daemon::world::stages::spares;
use crate::protocol::{ClientEnv, SweepItem, SweepKind, SweepResult};
use crate::{config, worktree};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// 3. Golden templates no world needs: those of projects the registry
///    does not know, and those of a known project whose key is no world's
///    current key (for every world, running or not: the key its worktree
///    gives now). Each is dropped on the server its marker names, under
///    the template's locks (a template this daemon or another on the same
///    server is using is left, and said), then its marker.
pub(super) async fn sweep_markers(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: &ClientEnv,
    out: &mut Vec<SweepItem>,
) {
    let Ok(adapters_dir) = std::fs::read_dir(d.paths.home().join("golden")) else {
        return;
    };
    let mut sweep = Sweep {
        d,
        dry_run,
        client_env,
        projects: d.registry(|r| r.projects()).unwrap_or_default(),
        in_use: HashMap::new(),
    };
    for a in adapters_dir.flatten() {
        let Ok(markers) = std::fs::read_dir(a.path()) else {
            continue;
        };
        let adapter_name = a.file_name().to_string_lossy().into_owned();
        for m in markers.flatten() {
            let file = m.file_name().to_string_lossy().into_owned();
            // A template's build log and clone report sit beside its marker.
            if golden::beside_marker(&file) {
                continue;
            }
            if let Some(swept) = sweep.marker(&adapter_name, &file, &m.path()).await {
                out.push(swept);
            }
        }
    }
}

/// One `gc` pass over the golden markers: the projects the registry
/// knows, and each one's templates in use, looked up once.
struct Sweep<'a> {
    d: &'a Arc<Daemon>,
    dry_run: bool,
    client_env: &'a ClientEnv,
    projects: Vec<(i64, String, String)>,
    in_use: HashMap<String, Result<HashSet<String>, String>>,
}

impl Sweep<'_> {
    /// What becomes of the marker `file` of `adapter` at `path`: `None`
    /// when it is left without a word (in use, being written, gone).
    async fn marker(&mut self, adapter: &str, file: &str, path: &Path) -> Option<SweepItem> {
        let (d, dry_run) = (self.d, self.dry_run);
        // A marker being written now (by an `up` of this daemon), or one a
        // crash cut short between its write and its rename.
        if let Some(writer) = crate::platform::replacing_writer(file) {
            if crate::platform::proc_stat(writer).is_some() {
                return None;
            }
            let r = if dry_run {
                Ok(())
            } else {
                remove_if_there(path)
            };
            return Some(item(
                SweepKind::GoldenMarker,
                path.display().to_string(),
                "a marker a crash left half-written".into(),
                swept(dry_run, r),
            ));
        }
        // Gone since the folder was read (another gc, a rebuild).
        let text = std::fs::read_to_string(path).ok()?;
        let marker = golden::Marker::parse(&text);
        let owner = self.projects.iter().find(|(_, p, _)| {
            marker.project.as_deref() == Some(p.as_str())
                || (marker.project.is_none() && file.starts_with(&format!("{p}_golden_")))
        });
        let Some((pid, project, root)) = owner.cloned() else {
            let outcome = if dry_run {
                swept(true, Ok(()))
            } else {
                dropped(drop_unknown_template(d, adapter, file, path).await)
            };
            return Some(item(
                SweepKind::GoldenMarker,
                path.display().to_string(),
                "a golden template of a project this daemon does not know".into(),
                outcome,
            ));
        };
        let used = self
            .in_use
            .entry(project.clone())
            .or_insert_with(|| templates_in_use(d, pid, &project, Path::new(&root)));
        let outcome = match used {
            Ok(names) if names.contains(file) => return None,
            Err(why) => (SweepResult::NotSwept, format!("not swept: {why}")),
            Ok(_) if dry_run => swept(true, Ok(())),
            Ok(_) => {
                let at = UnusedTemplate {
                    adapter,
                    name: file,
                    path,
                    marker: &marker,
                    project: &project,
                };
                dropped(drop_unused_template(d, &at, self.client_env).await)
            }
        };
        Some(item(
            SweepKind::Template,
            path.display().to_string(),
            format!("a golden template of project {project} whose key no world's branch has now"),
            outcome,
        ))
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
    for path in d
        .registry(|r| r.world_paths(pid))
        .map_err(|e| e.to_string())?
    {
        let world_root = join_subdir(Path::new(&path), &loc.subdir);
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
    spares::drop_spares_of(
        d,
        adapter.as_ref(),
        &reached.slice,
        "its template is dropped",
    )
    .await?;
    let found = drop_template(adapter.as_ref(), &reached.slice)
        .await
        .map_err(|e| e.redacted(&reached.slice).message)?;
    // Its role's password goes with it (a template has no slice record).
    let _ = d.registry(|r| r.delete_slice(t.adapter, t.name));
    // What sits beside it first (see `golden::remove_beside`).
    golden::remove_beside(t.path);
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
    let root = d.registry(|r| r.project_root(t.project)).ok().flatten()?;
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
    let key = d
        .registry(|r| r.fingerprint_key())
        .map_err(|e| e.to_string())?;
    let admin_url = match &m.server {
        Some(s) if s.credentials == crate::adapters::server::fingerprint(&key, "", "") => {
            Some(crate::address::AdminUrl::new(s.address.clone()))
        }
        Some(s) => {
            return Err(format!(
                "the template {name} on {} needs the credentials it was built with; drop it there by hand, then delete this marker",
                s.address
            ));
        }
        None if !adapter.facts().serverless => {
            return Err(format!(
                "the marker does not say which server the template {name} is on (written by an older binky); drop it by hand, then delete this marker"
            ));
        }
        None => None,
    };
    let slice = crate::adapters::Slice {
        admin_url,
        ..slice_for(d, adapter.as_ref(), name.to_owned(), "", &no_env)
    };
    spares::drop_spares_of(d, adapter.as_ref(), &slice, "its template is dropped").await?;
    let found = drop_template(adapter.as_ref(), &slice)
        .await
        .map_err(|e| e.redacted(&slice).message)?;
    let _ = d.registry(|r| r.delete_slice(adapter.name(), &slice.name));
    golden::remove_beside(marker);
    remove_if_there(marker)?;
    Ok(found)
}
