//! `gc`: sweep what a crash left half-made.

use super::*;

/// `binky gc`: sweeps what a crash left half-made. Never touches a slice the
/// registry says is live, a world the registry knows, or a worktree with
/// changes.
pub(crate) async fn gc(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: ClientEnv,
) -> Vec<crate::protocol::SweepItem> {
    use crate::protocol::SweepItem;
    let mut out = Vec::new();
    let outcome = |r: Result<(), String>| match (dry_run, r) {
        (true, _) => "would sweep".to_owned(),
        (false, Ok(())) => "swept".to_owned(),
        (false, Err(e)) => format!("not swept: {e}"),
    };
    // 1. Slices stuck in provisioning/teardown whose world is gone.
    let orphans: Vec<(String, String, String, String, String)> = {
        let reg = d.registry();
        let Ok(mut stmt) = reg.conn_ref().prepare(
            "SELECT s.project, s.service, s.adapter, s.slice, s.state FROM slices s
             WHERE s.state <> 'live' AND (s.world_id IS NULL OR NOT EXISTS (SELECT 1 FROM worlds w WHERE w.id = s.world_id)
                   OR EXISTS (SELECT 1 FROM worlds w WHERE w.id = s.world_id AND w.intent IS NULL AND w.state <> 'starting'))",
        ) else {
            return out;
        };
        stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .and_then(|rows| rows.collect())
        .unwrap_or_default()
    };
    for (project, service, adapter_name, slice_name, state) in orphans {
        let mut r: Result<(), String> = Ok(());
        if !dry_run {
            r = match adapter_for(&adapter_name, &client_env) {
                None => Err(format!("no adapter named {adapter_name} in this build")),
                Some(adapter) => {
                    let root = d.registry().project_root(&project).ok().flatten();
                    let cfg = root
                        .and_then(|r| config::load(&Path::new(&r).join(config::FILE_NAME)).ok());
                    let resource = cfg
                        .as_ref()
                        .and_then(|c| c.services.get(&service))
                        .and_then(|s| s.resource());
                    let admin_url = match (resource, &cfg) {
                        (Some(r), Some(c)) => {
                            let penv = project_env(c, &c.root, &c.root).unwrap_or_default();
                            let env_fn = lookup_env(&penv, &client_env);
                            render_admin_url(c, "", &c.root, &service, r, &IndexMap::new(), &env_fn)
                        }
                        _ => Ok(None),
                    };
                    let admin_url = match admin_url {
                        Ok(u) => u,
                        Err(e) => {
                            out.push(SweepItem {
                                kind: "slice".into(),
                                what: format!("{adapter_name} {slice_name}"),
                                why: format!("left in state `{state}` by an interrupted operation"),
                                outcome: format!(
                                    "not swept: {}; {}",
                                    e.message,
                                    e.hint.unwrap_or_default()
                                ),
                            });
                            continue;
                        }
                    };
                    let slice = slice_for(
                        d,
                        adapter.as_ref(),
                        slice_name.clone(),
                        &project,
                        resource.map(|r| &r.options),
                        admin_url,
                        &client_env,
                    );
                    match adapter.teardown(&slice).await {
                        Ok(()) => d
                            .registry()
                            .delete_slice(&adapter_name, &slice_name)
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e.redacted(&slice).message),
                    }
                }
            };
        }
        out.push(SweepItem {
            kind: "slice".into(),
            what: format!("{adapter_name} {slice_name}"),
            why: format!("left in state `{state}` by an interrupted operation"),
            outcome: outcome(r),
        });
    }
    // 2. Worktree folders in a project's worktree root that no world owns,
    //    and git registrations whose folder is gone.
    let projects: Vec<(i64, String, String)> = {
        let reg = d.registry();
        let Ok(mut stmt) = reg
            .conn_ref()
            .prepare("SELECT id, name, root FROM projects")
        else {
            return out;
        };
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .unwrap_or_default()
    };
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
        let owned: Vec<PathBuf> = {
            let reg = d.registry();
            let Ok(mut stmt) = reg
                .conn_ref()
                .prepare("SELECT path FROM worlds WHERE project_id = ?1")
            else {
                continue;
            };
            stmt.query_map([pid], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .unwrap_or_default()
                .into_iter()
                .map(PathBuf::from)
                .collect()
        };
        if let Ok(rd) = std::fs::read_dir(&wt_root) {
            for e in rd.flatten() {
                let p = e.path();
                if !p.is_dir() || owned.contains(&p) || !p.join(".git").is_file() {
                    continue;
                }
                let dirty = user_git(&client_env)
                    .ok()
                    .and_then(|g| worktree::changes(&g, &p).ok())
                    .is_none_or(|c| !c.is_empty());
                let r = if dirty {
                    Err("it has uncommitted or untracked changes; remove it by hand".to_owned())
                } else if dry_run {
                    Ok(())
                } else {
                    user_git(&client_env).map_err(|e| e.message).and_then(|g| {
                        worktree::remove(&g, &loc.main_workdir, &p).map_err(|e| e.to_string())
                    })
                };
                out.push(SweepItem {
                    kind: "worktree".into(),
                    what: p.display().to_string(),
                    why: format!("a worktree of project {name} that no world owns"),
                    outcome: if dirty {
                        format!("not swept: {}", r.err().unwrap_or_default())
                    } else {
                        outcome(r)
                    },
                });
            }
        }
        for (n, path) in worktree::stale_registrations(&loc.main_workdir) {
            let r = if dry_run {
                Ok(())
            } else {
                user_git(&client_env).map_err(|e| e.message).and_then(|g| {
                    worktree::prune_registration(&g, &loc.main_workdir, &path)
                        .map_err(|e| e.to_string())
                })
            };
            out.push(SweepItem {
                kind: "registration".into(),
                what: format!("{} ({})", n, path.display()),
                why: "a git worktree registration whose folder is gone".into(),
                outcome: outcome(r),
            });
        }
    }
    // 3. Golden markers of projects the registry does not know.
    let known: Vec<String> = d
        .registry()
        .conn_ref()
        .prepare("SELECT name FROM projects")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect())
        })
        .unwrap_or_default();
    if let Ok(adapters_dir) = std::fs::read_dir(d.paths.home().join("golden")) {
        for a in adapters_dir.flatten() {
            let Ok(markers) = std::fs::read_dir(a.path()) else {
                continue;
            };
            for m in markers.flatten() {
                let file = m.file_name().to_string_lossy().into_owned();
                let owner_known = known
                    .iter()
                    .any(|p| file.starts_with(&format!("{p}_golden_")));
                if !owner_known {
                    let r = if dry_run {
                        Ok(())
                    } else {
                        std::fs::remove_file(m.path()).map_err(|e| e.to_string())
                    };
                    out.push(SweepItem {
                        kind: "golden_marker".into(),
                        what: m.path().display().to_string(),
                        why: "a golden template marker of a project this daemon does not know"
                            .into(),
                        outcome: outcome(r),
                    });
                }
            }
        }
    }
    if !dry_run && !out.is_empty() {
        d.event(LogEvent::named("gc").detail(format!("{} item(s)", out.len())));
    }
    out
}
