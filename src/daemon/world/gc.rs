//! `gc`: sweep what a crash left half-made.

use super::*;
use crate::protocol::SweepItem;
use crate::registry::OrphanSlice;

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
    sweep_markers(d, dry_run, &mut out);
    if !dry_run && !out.is_empty() {
        d.event(LogEvent::named("gc").detail(format!("{} item(s)", out.len())));
    }
    out
}

/// What a sweep reports: `would sweep` (dry run), `swept`, or why not.
fn outcome(dry_run: bool, r: Result<(), String>) -> String {
    match (dry_run, r) {
        (true, _) => "would sweep".to_owned(),
        (false, Ok(())) => "swept".to_owned(),
        (false, Err(e)) => format!("not swept: {e}"),
    }
}

/// 1. Slices stuck in provisioning/teardown whose world is gone or idle,
///    torn down through their adapter with the project's `admin_url`.
async fn sweep_slices(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: &ClientEnv,
    out: &mut Vec<SweepItem>,
) {
    let orphans = d.registry().orphan_slices().unwrap_or_default();
    for o in orphans {
        let item = |outcome: String| SweepItem {
            kind: "slice".into(),
            what: format!("{} {}", o.adapter, o.slice),
            why: format!(
                "left in state `{}` by an operation that did not finish (interrupted or failed)",
                o.state
            ),
            outcome,
        };
        let r = if dry_run {
            Ok(())
        } else {
            match teardown_orphan(d, &o, client_env).await {
                Ok(r) => r,
                Err(e) => {
                    // The admin_url cannot be rendered: say what to do.
                    out.push(item(format!(
                        "not swept: {}; {}",
                        e.message,
                        e.hint.unwrap_or_default()
                    )));
                    continue;
                }
            }
        };
        out.push(item(outcome(dry_run, r)));
    }
}

/// Tears down one orphaned slice and forgets it. The outer error: its
/// `admin_url` cannot be rendered (an unset `${env.NAME}`); the inner one:
/// the adapter or the registry failed.
async fn teardown_orphan(
    d: &Arc<Daemon>,
    o: &OrphanSlice,
    client_env: &ClientEnv,
) -> Result<Result<(), String>, ApiError> {
    let Some(adapter) = adapter_for(&o.adapter, client_env) else {
        return Ok(Err(format!("no adapter named {} in this build", o.adapter)));
    };
    let root = d.registry().project_root(&o.project).ok().flatten();
    let cfg = root.and_then(|r| config::load(&Path::new(&r).join(config::FILE_NAME)).ok());
    let slice = match &cfg {
        Some(c) => {
            let penv = project_env(c, &c.root, &c.root).unwrap_or_default();
            let env_fn = lookup_env(&penv, client_env);
            SliceAt {
                cfg: c,
                project: &o.project,
                world: "",
                world_root: &c.root,
                facts: &IndexMap::new(),
                env: &env_fn,
                client_env,
            }
            .slice(d, &o.service, adapter.as_ref(), o.slice.clone())?
        }
        None => slice_for(
            d,
            adapter.as_ref(),
            o.slice.clone(),
            &o.project,
            None,
            None,
            client_env,
        ),
    };
    Ok(match adapter.teardown(&slice).await {
        Ok(()) => {
            let reg = d.registry();
            // A world still recorded no longer has this slice: its service
            // must not go on saying `provisioned` (`up` makes it again).
            if let Some(wid) = o.world_id {
                let _ = reg.service_state(wid, &o.service, ServiceState::Stopped, None, false);
            }
            reg.delete_slice(&o.adapter, &o.slice)
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.redacted(&slice).message),
    })
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
                "not swept: it has uncommitted or untracked changes; remove it by hand".to_owned()
            } else {
                let r = if dry_run {
                    Ok(())
                } else {
                    user_git(client_env).map_err(|e| e.message).and_then(|g| {
                        worktree::remove(&g, &loc.main_workdir, &p).map_err(|e| e.to_string())
                    })
                };
                outcome(dry_run, r)
            };
            out.push(SweepItem {
                kind: "worktree".into(),
                what: p.display().to_string(),
                why: format!("a worktree of project {name} that no world owns"),
                outcome,
            });
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
            out.push(SweepItem {
                kind: "registration".into(),
                what: format!("{} ({})", n, path.display()),
                why: "a git worktree registration whose folder is gone".into(),
                outcome: outcome(dry_run, r),
            });
        }
    }
}

/// 3. Golden template markers of projects the registry does not know.
fn sweep_markers(d: &Arc<Daemon>, dry_run: bool, out: &mut Vec<SweepItem>) {
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
        for m in markers.flatten() {
            let file = m.file_name().to_string_lossy().into_owned();
            let owner_known = known
                .iter()
                .any(|p| file.starts_with(&format!("{p}_golden_")));
            if owner_known {
                continue;
            }
            let r = if dry_run {
                Ok(())
            } else {
                std::fs::remove_file(m.path()).map_err(|e| e.to_string())
            };
            out.push(SweepItem {
                kind: "golden_marker".into(),
                what: m.path().display().to_string(),
                why: "a golden template marker of a project this daemon does not know".into(),
                outcome: outcome(dry_run, r),
            });
        }
    }
}
