//! After a daemon restart: re-adopting the worlds still running, stopping what
//! no world owns, settling interrupted verifies.

use super::locate::{Located, find_world, join_subdir, locate};
use super::plan::{Plan, build_facts, levels, lookup_env, process_spec, project_env};
use super::processes::recorder;
use super::reach::pinned;
use super::routes::ensure_https;
use super::slices::{Resolved, SliceAt, adapter_for, slice_for, slice_name};
use crate::config::ServiceKind;
use crate::daemon::Daemon;
use crate::daemon::events::{Event as LogEvent, EventKind};
use crate::daemon::world::{Runtime, WorldCtx, first_line, world_event, world_ports};
use crate::protocol::{ApiError, ClientEnv, ServiceState, WorldRef, WorldState};
use crate::registry::RecordedProcess;
use crate::supervisor::Handle;
use crate::{config, supervisor};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Start-up reconciliation: re-adopts the service processes of worlds that
/// were up when the previous daemon stopped or died.
///
/// A recorded process is ours only if its pid *and* start time match (a
/// recycled pid is never mistaken for it). Adopted processes are watched for
/// exit through a pidfd, not polled; ones that died meanwhile are started
/// again per their restart policy. An `up` the crash interrupted is marked
/// failed with the reason.
pub(crate) async fn reconcile(d: &Arc<Daemon>) {
    let worlds = match d.registry(|r| r.worlds()) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the worlds to re-adopt");
            return;
        }
    };
    reap_interrupted_verifies(d).await;
    stop_unknown(d).await;
    super::strays::stop_orphans(d).await;
    for crate::registry::WorldBrief {
        id,
        project,
        name,
        state,
        intent,
    } in worlds
    {
        // A sleep the restart cut short: the world is taken back as
        // running (what is left of it adopted, what died restarted), and
        // the idle check puts it to sleep again.
        let intent = match intent {
            Some(crate::protocol::Intent::Sleep) => {
                let _ = d.registry(|r| r.set_world_state(id, WorldState::Running, None, None));
                None
            }
            other => other,
        };
        if let Some(op) = intent {
            let reason = format!(
                "`{op}` was interrupted by a daemon restart; run `{}` again",
                op.retry(&name)
            );
            let _ = d.registry(|r| r.set_world_state(id, WorldState::Failed, None, Some(&reason)));
            d.event(
                world_event(EventKind::Interrupted, &project, &name)
                    .detail(format!("{op} interrupted")),
            );
        }
        if !matches!(
            state,
            WorldState::Running | WorldState::Failed | WorldState::Starting
        ) {
            continue;
        }
        if let Err(e) = adopt_world(
            d,
            id,
            &project,
            &name,
            intent.is_none() && state == WorldState::Running,
        )
        .await
        {
            tracing::warn!(project, world = name, error = %e.message, "could not re-adopt world");
            d.event(
                world_event(EventKind::AdoptFailed, &project, &name).detail(first_line(&e.message)),
            );
        }
    }
}

/// Stops every process an earlier daemon of this `BINKY_HOME` started that
/// the registry does not list — as when that daemon died between starting a
/// service and recording its pid. Such a process is found by what a crash
/// cannot lose: it runs in a recorded daemon session (every process a daemon
/// starts shares its session) and carries this `BINKY_HOME` with
/// `BINKY_WORLD` (or `BINKY_CADDY`) in its environment. Processes of
/// recorded groups are left to adoption; nothing else is ever signalled.
pub(in crate::daemon::world) async fn stop_unknown(d: &Arc<Daemon>) {
    use crate::platform;
    let ours = platform::session_id();
    let sessions: Vec<u32> = d
        .registry(|r| r.sessions())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| *s != ours)
        .collect();
    if sessions.is_empty() {
        return;
    }
    let listed: std::collections::HashSet<u32> = d
        .registry(|r| r.recorded_processes())
        .unwrap_or_default()
        .into_iter()
        .filter(|(pid, start)| platform::process_start_time(*pid) == Some(*start))
        .map(|(pid, _)| pid)
        .collect();
    let home = d.paths.home().display().to_string();
    let procs = platform::all_processes();
    for sid in &sessions {
        if !procs.iter().any(|p| p.session == *sid && !p.is_zombie()) {
            let _ = d.registry(|r| r.forget_session(*sid));
        }
    }
    let mut set = tokio::task::JoinSet::new();
    for p in procs
        .iter()
        .filter(|p| sessions.contains(&p.session) && !p.is_zombie() && !listed.contains(&p.pgrp))
    {
        let Some(env) = platform::process_env_settled(p.pid).await else {
            continue;
        };
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        if get(crate::paths::HOME_ENV).as_deref() != Some(home.as_str()) {
            continue;
        }
        let world = get("BINKY_WORLD");
        if world.is_none() && get("BINKY_CADDY").is_none() {
            continue;
        }
        let service = get("BINKY_SERVICE");
        let what = format!(
            "pid {} ({})",
            p.pid,
            match (&world, &service) {
                (Some(w), Some(s)) => format!("world {w}, service {s}"),
                (Some(w), None) => format!("world {w}"),
                _ => "caddy".into(),
            }
        );
        tracing::warn!("stopping {what}: an earlier daemon started it and did not record it");
        let mut ev = LogEvent::named(EventKind::OrphanStopped).detail(what);
        ev.project = get("BINKY_PROJECT");
        ev.worktree = world;
        ev.service = service;
        d.event(ev);
        let pid = p.pid;
        if p.pid == p.pgrp {
            set.spawn(async move {
                supervisor::stop_pgid(
                    pid,
                    "SIGTERM",
                    crate::config::DEFAULT_STOP_TIMEOUT,
                    platform::wait_exit(pid),
                )
                .await;
            });
        } else {
            set.spawn(async move {
                super::strays::terminate(pid).await;
            });
        }
    }
    while set.join_next().await.is_some() {}
}

/// Stops the process groups of `verify` commands a dead daemon left running
/// (identified by pid and start time, so a recycled pid is left alone) and
/// records those runs as interrupted.
pub(in crate::daemon::world) async fn reap_interrupted_verifies(d: &Arc<Daemon>) {
    let running = d.registry(|r| r.verifies_running()).unwrap_or_default();
    for (world_id, pid, start) in running {
        if crate::platform::process_start_time(pid) == Some(start) {
            supervisor::stop_pgid(
                pid,
                "SIGTERM",
                crate::config::DEFAULT_STOP_TIMEOUT,
                crate::platform::wait_exit(pid),
            )
            .await;
        }
        let names = d.registry(|reg| {
            let _ = reg.set_verify_running(world_id, None);
            let _ = reg.record_verify(
                world_id,
                &crate::registry::VerifyRun {
                    outcome: crate::protocol::VerifyOutcome::Interrupted,
                    dirty: false,
                    duration_ms: 0,
                    commit: None,
                    detail: "interrupted by a daemon restart; run `binky verify` again",
                    from_branch: false,
                },
            );
            reg.world_names(world_id).ok().flatten()
        });
        if let Some((project, world)) = names {
            d.event(world_event(EventKind::VerifyInterrupted, &project, &world));
        }
    }
}

pub(in crate::daemon::world) async fn adopt_world(
    d: &Arc<Daemon>,
    world_id: i64,
    project: &str,
    name: &str,
    restart_dead: bool,
) -> Result<(), ApiError> {
    let loc = locate(
        d,
        &WorldRef {
            project_dir: None,
            project: Some(project.to_owned()),
            name: name.to_owned(),
        },
    )?;
    let w = find_world(d, &loc, name)?;
    let world_root = join_subdir(Path::new(&w.path), &loc.subdir);
    let cfg = config::load(&world_root.join(config::FILE_NAME))?;
    if cfg.project.https {
        let _ = ensure_https(d, project, name).await;
    }
    let no_env = ClientEnv::default();
    let cx = WorldCtx {
        d,
        cfg: &cfg,
        project,
        world: &w.world_name(),
        world_id,
        client_env: &no_env,
    };
    let mut plan = adoption_plan(&cx, &loc, world_root).await?;
    let recorded: HashMap<String, RecordedProcess> = d
        .registry(|r| r.world_processes(world_id))?
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect();
    let lv = levels(&cfg);
    let mut handles = IndexMap::new();
    for sname in lv.iter().flatten() {
        let Some(p) = cfg.services[sname].process() else {
            continue;
        };
        let Some(rec) = recorded.get(sname) else {
            continue;
        };
        if let Some(h) = adopt_service(&cx, sname, p, &mut plan, rec, restart_dead)? {
            handles.insert(sname.clone(), Arc::new(h));
        }
    }
    d.worlds.put_runtime(
        world_id,
        Runtime {
            handles,
            levels: lv,
        },
    );
    Ok(())
}

/// The plan a re-adopted world's processes are (re)specified from: its
/// reserved ports, its project `env_file`, and each slice's address
/// resolved with the daemon's environment (the caller's is gone with the
/// old daemon). An `admin_url` that cannot render so leaves the address
/// without its credentials rather than the world unadopted.
async fn adoption_plan(
    cx: &WorldCtx<'_>,
    loc: &Located,
    world_root: PathBuf,
) -> Result<Plan, ApiError> {
    let WorldCtx {
        d,
        cfg,
        project,
        world: name,
        world_id,
        client_env: no_env,
    } = *cx;
    let slug = name.slug();
    let allocated = world_ports(d, world_id)?;
    let facts = build_facts(cx, &allocated)?;
    let project_env = project_env(cfg, &world_root, &loc.main_root()).unwrap_or_default();
    let mut plan = Plan {
        facts,
        world_root,
        project_env,
        home: d.paths.home().to_path_buf(),
        strict: true,
        slices_ready: false,
        config_note: None,
        token: d.registry(|r| r.world_token(world_id))?,
    };
    let env_fn = lookup_env(&plan.project_env, no_env);
    for (n, s) in &cfg.services {
        let ServiceKind::Resource(r) = &s.kind else {
            continue;
        };
        let Some(adapter) = adapter_for(d, &r.adapter, no_env) else {
            continue;
        };
        let Ok(slice_name) = slice_name(adapter.as_ref(), project, cfg.slice_resource(n), slug)
        else {
            continue;
        };
        let at = SliceAt {
            cfg,
            project,
            world: name,
            world_root: &plan.world_root,
            facts: &plan.facts,
            env: &env_fn,
            client_env: no_env,
        };
        let slice = at
            .slice(d, n, adapter.as_ref(), slice_name.clone())
            .unwrap_or_else(|_| crate::adapters::Slice {
                options: r.options.clone(),
                ..slice_for(d, adapter.as_ref(), slice_name, project, no_env)
            });
        // Where it was made; a slice whose server cannot be reached now
        // gets no address (never one on another server). Only resolved:
        // nothing is made on a server here, whatever the registry says of
        // the slice (a `remove` cut short may have dropped it).
        let Ok(slice) = pinned(d, adapter.as_ref(), n, world_id, slice) else {
            continue;
        };
        if let Ok(address) = adapter.resolve(&slice).await {
            Resolved::new(address, adapter.as_ref(), &slice)
                .apply(plan.facts.get_mut(n).expect("fact per service"));
        }
    }
    drop(env_fn);
    plan.slices_ready = true;
    Ok(plan)
}

/// The spec to adopt service `sname` with: rendered as `up` would, else
/// (a `${env.NAME}` only the old daemon's shell had) rendered leniently
/// with restarts off, beside the error that says why it cannot restart.
fn adoptable_spec(
    cx: &WorldCtx<'_>,
    sname: &str,
    p: &config::Process,
    plan: &mut Plan,
    log_dir: &Path,
) -> Result<(supervisor::ServiceSpec, Option<ApiError>), ApiError> {
    match process_spec(cx, sname, p, plan, log_dir) {
        Ok(spec) => Ok((spec, None)),
        Err(e) => {
            plan.strict = false;
            let spec = process_spec(cx, sname, p, plan, log_dir);
            plan.strict = true;
            let mut spec = spec?;
            spec.restart.policy = config::RestartPolicy::No;
            Ok((spec, Some(e)))
        }
    }
}

/// Takes one process service back under supervision: the process itself
/// when its recorded pid is still that very process (in the state it was
/// recorded in: one that never passed its probe stays unhealthy); else, if
/// it had been running, it is restarted per its restart policy when
/// `restart_dead`, or recorded as stopped (or failed, when its command
/// cannot be rendered now). A service that never started (its world's `up`
/// failed before it) keeps the state it has. `None`: nothing is supervised
/// for it.
///
/// The shell the world was built from is gone with the old daemon: a
/// `${env.NAME}` only it had cannot be rendered now. A process that runs
/// keeps running, but is not restarted with a half-rendered command.
fn adopt_service(
    cx: &WorldCtx<'_>,
    sname: &str,
    p: &config::Process,
    plan: &mut Plan,
    recorded: &RecordedProcess,
    restart_dead: bool,
) -> Result<Option<Handle>, ApiError> {
    let alive = recorded.live_pid();
    if alive.is_none() && recorded.pid.is_none() {
        // Never started, or stopped and recorded so: nothing died while the
        // daemon was away, and its state stays as recorded.
        return Ok(None);
    }
    let WorldCtx {
        d,
        project,
        world: name,
        world_id,
        ..
    } = *cx;
    let slug = name.slug();
    let log_dir = d.paths.world_logs(project, slug);
    let (spec, unrenderable) = adoptable_spec(cx, sname, p, plan, &log_dir)?;
    let rec = recorder(
        d.clone(),
        world_id,
        project.to_owned(),
        name.to_string(),
        sname.to_owned(),
    );
    let event = |what: crate::daemon::events::EventKind, detail: String| {
        let mut e = world_event(what, project, name).detail(detail);
        e.service = Some(sname.to_owned());
        d.event(e);
    };
    let gone = |state: ServiceState, why: &str| {
        let _ = d.registry(|r| r.service_state(world_id, sname, state, Some(why), false));
        d.routes
            .set_state(project, name, sname, ServiceState::Stopped);
    };
    Ok(match alive {
        Some(pid) => {
            event(EventKind::Adopted, format!("pid {pid}"));
            let unhealthy = (recorded.state == ServiceState::Unhealthy).then(|| {
                recorded
                    .last_exit
                    .clone()
                    .unwrap_or_else(|| "it never passed its health probe".into())
            });
            Some(supervisor::adopt(spec, pid, unhealthy, rec))
        }
        None if let Some(e) = &unrenderable => {
            gone(
                ServiceState::Failed,
                &format!(
                    "died while the daemon was away, and cannot be restarted: {}; run `binky up {name}` from a shell that has it",
                    e.message
                ),
            );
            None
        }
        None if restart_dead && p.restart.policy != config::RestartPolicy::No => {
            event(
                EventKind::Restarting,
                "its process died while the daemon was away".into(),
            );
            let _ = d.registry(|r| r.service_restarted(world_id, sname));
            Some(supervisor::spawn(spec, rec))
        }
        None => {
            gone(ServiceState::Stopped, "died while the daemon was away");
            None
        }
    })
}
