//! A slice's data: `migrate` and `seed` run with the world's environment,
//! and catching a world up when its branch moved past the migrations its
//! slice was last migrated at.

use super::locate::{Located, join_subdir};
use super::plan::{Plan, base_env, facts_for, lookup_env, render_strict, with_config_note};
use super::slices::{Resolved, adapter_error};
use crate::adapters::{Slice, golden};
use crate::daemon::Daemon;
use crate::daemon::errors::file_error;
use crate::daemon::world::{FAILURE_HEAD_LINES, FAILURE_LOG_LINES, SliceJob, WorldCtx};
use crate::faults::point as fault_point;
use crate::protocol::ApiError;
use crate::registry::WorldRow;
use crate::slug::env_key;
use crate::{adapters, config, supervisor, worktree};
use std::path::Path;

/// The key resource `r`'s schema should be migrated at in the worktree at
/// `root` (see [`golden::migrate_key`]); `None` without a `migrate`.
pub(in crate::daemon::world) fn world_migrate_key(
    r: &config::Resource,
    root: &Path,
) -> Option<String> {
    let m = r.migrate.as_deref()?;
    Some(golden::migrate_key(
        m,
        &r.clone_inputs,
        root,
        worktree::head_commit(root).as_deref(),
    ))
}

/// For `up` of a world that is already running (which changes nothing): a
/// note per slice whose branch moved since its last `migrate`, saying that
/// `reload` runs it — a running app is not migrated under it unasked.
pub(in crate::daemon::world) fn moved_migrations(
    d: &Daemon,
    loc: &Located,
    w: &WorldRow,
) -> Vec<String> {
    let root = join_subdir(Path::new(&w.path), &loc.subdir);
    let Ok(cfg) = config::load(&root.join(config::FILE_NAME)) else {
        return Vec::new();
    };
    let slices = d.registry(|r| r.slices_of(w.id)).unwrap_or_default();
    let mut notes = Vec::new();
    for (n, s) in &cfg.services {
        let Some(key) = s.resource().and_then(|r| world_migrate_key(r, &root)) else {
            continue;
        };
        if slices
            .iter()
            .any(|sl| &sl.service == n && sl.migrated_key.as_deref().is_some_and(|k| k != key))
        {
            notes.push(format!(
                "{n}: the branch moved since its last migrate; `binky reload {}` runs it",
                w.name
            ));
        }
    }
    notes
}

/// Adds a note to each world in `report` with a slice cloned from a
/// template whose key is no longer its branch's (the migrations, seed or
/// `clone_inputs` changed since) and not migrated since: its data predates
/// them; `binky reset` re-clones it from the template of the current key,
/// `binky reload` runs its `migrate` on the data it has. Reads only
/// worlds with cloned slices (one registry query finds them), and only the
/// `clone_inputs` files of each.
pub(crate) fn fill_stale_clones(d: &Daemon, report: &mut crate::protocol::StatusReport) {
    let Ok(cloned) = d.read_registry(|r| r.cloned_slices()) else {
        return;
    };
    for p in &mut report.projects {
        let mine: Vec<_> = cloned.iter().filter(|c| c.project == p.name).collect();
        if mine.is_empty() {
            continue;
        }
        let wref = crate::protocol::WorldRef {
            project_dir: None,
            project: Some(p.name.clone()),
            name: String::new(),
        };
        let Ok(loc) = super::locate::locate(d, &wref) else {
            continue;
        };
        for w in &mut p.worlds {
            let root = join_subdir(Path::new(&w.path), &loc.subdir);
            let mut cfg = None;
            for c in mine.iter().filter(|c| c.world == w.name) {
                let cfg = cfg.get_or_insert_with(|| config::load(&root.join(config::FILE_NAME)));
                let Some(r) = cfg
                    .as_ref()
                    .ok()
                    .and_then(|cfg| cfg.services.get(&c.service))
                    .and_then(|s| s.resource())
                    .filter(|r| r.clone_from.is_some())
                else {
                    continue;
                };
                let now = golden::key(
                    cfg.as_ref()
                        .ok()
                        .and_then(|cfg| cfg.slice_resource(&c.service)),
                    r.migrate.as_deref(),
                    r.seed.as_deref(),
                    &r.clone_inputs,
                    &root,
                );
                // Its own `migrate` may have caught it up since (a reload):
                // then its schema is the branch's, and a reset would only
                // cost the world its data.
                let caught_up = world_migrate_key(r, &root)
                    .is_some_and(|k| c.migrated_key.as_deref() == Some(k.as_str()));
                if now != c.template_key && !caught_up {
                    w.notes.push(format!(
                        "{svc} cloned before migrations changed: `binky reset {w} {svc}` (or `binky reload {w}` to migrate the data it has)",
                        w = w.name,
                        svc = c.service
                    ));
                }
            }
        }
    }
}

/// Provisions `slice`, then runs `migrate` and `seed` against it.
pub(in crate::daemon::world) async fn provision_and_seed(
    adapter: &dyn adapters::Adapter,
    slice: &Slice,
    cx: &WorldCtx<'_>,
    job: &SliceJob<'_>,
    plan: &Plan,
    stage: &str,
) -> Result<(), ApiError> {
    let named = |e| adapter_error(job.service, slice, e);
    adapter.provision(slice).await.map_err(named)?;
    fault_point(&format!("{stage}:provisioned"));
    let addr = adapter.resolve(slice).await.map_err(named)?;
    let resolved = Resolved::new(addr, adapter, slice);
    run_data_commands(cx, job, plan, &resolved, true, true).await
}

/// A failed `migrate` or `seed` as its error: a first line that stands
/// alone (status shows only it): the step, how it ended and its first
/// words, often the cause; then the head and tail of its output in `log`.
fn step_failed(label: &str, status: std::process::ExitStatus, log: &Path) -> ApiError {
    let run = supervisor::logs::current_run(log);
    let first = run
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .map(|l| format!(": {}", l.chars().take(200).collect::<String>()))
        .unwrap_or_else(|| " with no output".to_owned());
    let mut msg = format!("{label} failed ({status}){first}");
    if !run.is_empty() {
        msg.push_str(&format!(
            "\noutput ({} line(s), in {}):\n{}",
            run.len(),
            log.display(),
            supervisor::logs::quote_head_tail(&run, FAILURE_HEAD_LINES, FAILURE_LOG_LINES)
        ));
    }
    ApiError::new(msg)
}

/// Runs `migrate` (and, `with_seed`, `seed`) against the slice at
/// `address`, output to the job's log. `dropped`: the slice is dropped if
/// this fails, as the error's hint says.
pub(in crate::daemon::world) async fn run_data_commands(
    cx: &WorldCtx<'_>,
    job: &SliceJob<'_>,
    plan: &Plan,
    resolved: &Resolved,
    with_seed: bool,
    dropped: bool,
) -> Result<(), ApiError> {
    let WorldCtx {
        cfg,
        world,
        client_env,
        ..
    } = *cx;
    let SliceJob { service, r, log } = *job;
    let address = resolved.address.as_str();
    let mut facts = plan.facts.clone();
    if let Some(f) = facts.get_mut(service) {
        resolved.clone().apply(f);
    }
    let env_fn = lookup_env(&plan.project_env, client_env);
    let fx = facts_for(cfg, world, &plan.world_root, &facts, &env_fn);
    let mut env = base_env(cx, service, plan, &plan.project_env, &facts)?;
    env.push(("BINKY_SLICE_URL".into(), address.to_owned()));
    env.push((format!("{}_URL", env_key(service)), address.to_owned()));
    let seed = if with_seed { &r.seed } else { &None };
    for (step, cmd) in [("migrate", &r.migrate), ("seed", seed)] {
        let Some(cmd) = cmd else { continue };
        let rendered = render_strict(
            cmd,
            &format!("services.{service}.{step}"),
            Some(service),
            &fx,
        )?;
        let label = format!("services.{service}.{step}");
        if let Err(e) = run_logged(&label, &rendered, &plan.world_root, &env, log, None).await {
            let kept = if dropped {
                "the slice was dropped"
            } else {
                "its data is kept"
            };
            let fix = match needs_admin(&e.message) {
                Some(why) => format!(
                    "{why}: the {step} runs as the world's own role, which may not do that; list the extension in the resource's options.extensions (Binky creates it as the admin first), or set options.acl = false; {kept}; then run `binky up {world}` again"
                ),
                None => format!("{kept}; fix the {step} command and run `binky up {world}` again"),
            };
            return Err(e.hint(with_config_note(fix, plan)));
        }
    }
    Ok(())
}

/// Whether a failed step's output says it needed the admin's power: a
/// world's own role (PostgreSQL, `options.acl`) may not create an untrusted
/// extension. Says what was refused.
fn needs_admin(output: &str) -> Option<&'static str> {
    let o = output.to_ascii_lowercase();
    if o.contains("permission denied to create extension")
        || (o.contains("create extension") && o.contains("must be superuser"))
    {
        Some("it creates an extension only a superuser may create")
    } else if o.contains("must be superuser") {
        Some("it does something only a superuser may do")
    } else {
        None
    }
}

/// Runs the rendered command `label` (`services.db.migrate`,
/// `project.setup[0]`) through the shell in `cwd` with exactly `env`, its
/// output appended to `log` under a run mark. With `cancel`, a caller's
/// cancel stops its whole process group (an install may take minutes);
/// without, it runs to its end (a `migrate` cut short could leave a
/// schema half-changed).
///
/// # Errors
/// It could not be started, or it failed: the error quotes the head and
/// tail of this run's output ([`step_failed`]); the caller adds the hint.
/// Cancelled: [`crate::daemon::world::cancelled_error`] for `world`.
pub(in crate::daemon::world) async fn run_logged(
    label: &str,
    rendered: &str,
    cwd: &Path,
    env: &[(String, String)],
    log: &Path,
    cancel: Option<(&crate::daemon::ProgressTx, &str)>,
) -> Result<(), ApiError> {
    supervisor::logs::mark_run(log, label);
    let (err, out) = supervisor::logs::open_append(log)
        .and_then(|out| Ok((out.try_clone()?, out)))
        .map_err(|e| file_error("open", log, e))?;
    let mut child = crate::platform::command("/bin/sh")
        .arg("-c")
        .arg(rendered)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own group, so a cancel stops what it started too.
        .process_group(0)
        .kill_on_drop(cancel.is_some())
        .spawn()
        .map_err(|e| ApiError::new(format!("{label}: cannot run: {e}")))?;
    let waited = match cancel {
        None => child.wait().await,
        Some((progress, world)) => tokio::select! {
            st = child.wait() => st,
            _ = progress.until_cancelled() => {
                supervisor::stop_child_group(&mut child).await;
                return Err(crate::daemon::world::cancelled_error(world));
            }
        },
    };
    let status = waited.map_err(|e| ApiError::new(format!("{label}: cannot run: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(step_failed(label, status, log))
    }
}
