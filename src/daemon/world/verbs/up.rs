//! `up`: locate → worktree → ports → slices → processes by dependency level →
//! routes, recording intent before each act.

use super::prepare::{make_worktree, register_project, world_config};
use crate::config::{Config, ServiceKind};
use crate::daemon::admission;
use crate::daemon::events::EventKind;
use crate::daemon::world::stages::admit::{admit, locked_with_room};
use crate::daemon::world::stages::data::moved_migrations;
use crate::daemon::world::stages::locate::{
    Located, check_group, check_name, check_path, join_subdir, locate,
};
use crate::daemon::world::stages::plan::{
    Plan, build_facts, config_differs, preflight, project_env,
};
use crate::daemon::world::stages::processes::stop_processes;
use crate::daemon::world::stages::provision::provision;
use crate::daemon::world::stages::routes::ensure_https;
use crate::daemon::world::stages::slices::{adapter_for, no_adapter};
use crate::daemon::world::stages::start::start_processes;
use crate::daemon::world::{WorldCtx, first_line, outcome, world_event};
use crate::daemon::world::{cancelled_error, check_cancelled};
use crate::daemon::{Daemon, ProgressTx};
use crate::faults::point as fault_point;
use crate::ports::PortNote;
use crate::protocol::{ApiError, ServiceState, UpRequest, WorldOutcome, WorldState};
use crate::registry::{NewWorld, WorldRow};
use crate::slug::WorldName;
use crate::supervisor::State;
use crate::{config, ports};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `binky up`: admission first (nothing is made while queued), then the
/// world. A world already running takes no new room and skips the queue.
pub(crate) async fn up(
    d: &Arc<Daemon>,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let name = check_name(&req.world.name)?;
    // Before admission: a name git refuses would be admitted (and logged)
    // only to fail at the worktree.
    crate::worktree::check_branch(&req.world.name)?;
    check_group(req.group.as_deref())?;
    super::sleep::parse_idle_after(req.idle_after.as_deref())?;
    let loc = locate(d, &req.world)?;
    if req.detach {
        return super::detached::up_detached(d, loc, name, req, progress).await;
    }
    admit_and_up(d, &loc, &name, req, progress).await
}

/// Admission (which may queue), then the world.
pub(super) async fn admit_and_up(
    d: &Arc<Daemon>,
    loc: &Located,
    name: &WorldName,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    match admit(d, loc, req.clone(), "up", progress).await? {
        Ok(entry) => up_with(d, loc, name, &req, entry, progress).await,
        Err(queued) => Ok(queued),
    }
}

/// The `up` of a ticket admitted from the queue with nobody waiting on it
/// (`--no-wait`, or a queue carried over a daemon restart).
pub(crate) async fn up_admitted(
    d: &Arc<Daemon>,
    req: UpRequest,
    entry: admission::Entry,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    // Checked when it was queued, and again here: the queue may be one a
    // daemon of another version left.
    let name = check_name(&req.world.name)?;
    let loc = locate(d, &req.world)?;
    up_with(d, &loc, &name, &req, entry, progress).await
}

/// `up` under the world's lock; `entry` counts against the room until
/// this returns. A ticket withdrawn before the lock was had makes nothing.
pub(in crate::daemon::world) async fn up_with(
    d: &Arc<Daemon>,
    loc: &Located,
    name: &WorldName,
    req: &UpRequest,
    entry: admission::Entry,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    if !matches!(entry, admission::Entry::Held { .. }) {
        admission::ensure_sampler(d);
    }
    // The window between an admission and the world's lock, where a
    // `down` or `remove` may withdraw the ticket.
    crate::faults::pause("up:admitted").await;
    let (_guard, entry) = match locked_with_room(d, loc, req, "up", entry, progress).await? {
        Ok(had) => had,
        Err(queued) => return Ok(queued),
    };
    let out = up_locked(d, loc, name, req, progress).await;
    drop(entry);
    out
}

/// `req`'s world made or brought up, under its lock and with its room:
/// the worktree, the intent recorded, then [`bring_up`].
pub(in crate::daemon::world) async fn up_locked(
    d: &Arc<Daemon>,
    loc: &Located,
    name: &WorldName,
    req: &UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let (group, client_env) = (req.group.as_deref(), &req.env);
    let project = loc.name.as_str();
    let project_id = register_project(d, loc)?;
    let existing = d.registry(|r| r.find_world(project_id, name))?;
    if let Some(w) = &existing
        && fully_running(d, w, &loc.config)
    {
        let mut notes = moved_migrations(d, loc, w);
        notes.extend(super::sleep::idle_of_running(d, w.id, &loc.config, req)?);
        return outcome(d, project, w.id, true, notes);
    }
    preflight(d, loc, existing.as_ref(), client_env)?;
    let mut notes = Vec::new();
    super::sleep::woken_by_up(d, project, existing.as_ref());
    if let Some(w) = &existing
        && w.state != WorldState::Sleeping
    {
        // Not (fully) running: stop whatever is left of it first, so nothing
        // runs twice and its ports are free to keep. A sleeping world has
        // nothing left (sleep stopped it all), and its routes must stay
        // `sleeping` for the requests waiting on this wake-up.
        stop_processes(d, w).await;
    }

    check_cancelled(progress, name)?;
    let ensured = make_worktree(d, loc, project_id, name, client_env, progress).await?;
    fault_point("up:worktree");
    // Cancelled now, the worktree stays (the next `up` reuses it), and no
    // world has been recorded yet.
    check_cancelled(progress, name)?;
    if ensured.recreated {
        let msg = format!(
            "the worktree folder {} was missing and has been re-created",
            ensured.path.display()
        );
        progress.say(crate::protocol::ProgressStep::Worktree, None, msg.clone());
        notes.push(msg);
        d.event(world_event(EventKind::WorktreeRecreated, project, name));
    }
    let world_root = join_subdir(&ensured.path, &loc.subdir);
    check_path(&world_root)?;
    let cfg = world_config(loc, &world_root, name, &mut notes)?;

    // Record the intent before acting, so a crash can be reconciled.
    let path = ensured.path.display().to_string();
    let new = NewWorld {
        project_id,
        name,
        path: &path,
        group,
    };
    let world_id = record_world(d, &new, &cfg)?;
    let idle = super::sleep::parse_idle_after(req.idle_after.as_deref())?;
    notes.extend(super::sleep::record_idle(d, world_id, &cfg, idle)?);
    if ensured.created || ensured.recreated {
        crate::daemon::world::stages::bootstrap::forget(d, project, name.slug());
    }
    d.worlds.remember_env(world_id, client_env);
    d.event(world_event(EventKind::UpStarted, project, name));

    let cx = WorldCtx {
        d,
        cfg: &cfg,
        project,
        world: name,
        world_id,
        client_env,
    };
    let result = bring_up(&cx, loc, world_root, progress, &mut notes).await;
    settle_up(&cx, project_id, result, progress, notes).await
}

/// Whether `up` has nothing to do: recorded running, every supervised
/// process running, its worktree in place. A process with no port that
/// finished with status 0 on its own (a one-shot job: a build, a seed
/// script) counts as done: starting the world again for it would restart
/// every healthy service. One with a port is meant to serve, so `up`
/// starts it again.
pub(in crate::daemon::world) fn fully_running(
    d: &Daemon,
    w: &WorldRow,
    cfg: &config::Config,
) -> bool {
    w.state == WorldState::Running
        && d.worlds.runtime(w.id).is_some_and(|rt| {
            rt.handles.iter().all(|(name, h)| {
                let s = h.state.borrow();
                matches!(*s, State::Running { .. })
                    || s.exited_cleanly()
                        && cfg.services.get(name).is_some_and(|svc| !svc.has_port())
            })
        })
        && Path::new(&w.path).exists()
}

/// Records the world as `starting` with `up` in flight, and its services as
/// the config lists them (counters reset), returning its id.
fn record_world(d: &Daemon, world: &NewWorld<'_>, cfg: &Config) -> Result<i64, ApiError> {
    use crate::protocol::ServiceKind as Kind;
    let services: Vec<(String, Kind)> = cfg
        .services
        .iter()
        .map(|(n, s)| {
            let kind = if s.process().is_some() {
                Kind::Process
            } else {
                Kind::Resource
            };
            (n.clone(), kind)
        })
        .collect();
    Ok(d.registry(|reg| {
        let id = reg.upsert_world(world)?;
        reg.sync_services(id, &services)?;
        reg.reset_restarts(id)?;
        // Admitted now: the newest world is the first suspended.
        reg.set_admitted(id)?;
        Ok::<_, crate::registry::RegistryError>(id)
    })?)
}

/// Records how `bring_up` ended: `running`; `stopped` when the caller
/// cancelled (what it started is stopped, what it made is kept, as `down`
/// would: nothing is left half-made); else `failed` with the reason.
pub(in crate::daemon::world) async fn settle_up(
    cx: &WorldCtx<'_>,
    project_id: i64,
    result: Result<(), ApiError>,
    progress: &ProgressTx,
    notes: Vec<String>,
) -> Result<WorldOutcome, ApiError> {
    let WorldCtx {
        d,
        project,
        world: name,
        world_id,
        ..
    } = *cx;
    match result {
        Ok(()) => {
            d.registry(|r| r.set_world_state(world_id, WorldState::Running, None, None))?;
            d.event(world_event(EventKind::Up, project, name));
            // Its idle time, if it has one, starts now.
            d.idle.ready(world_id);
            crate::daemon::idle::ensure_idle_check(d);
            outcome(d, project, world_id, false, notes)
        }
        Err(_) if progress.cancelled() => {
            let row = d.registry(|r| r.find_world(project_id, name))?;
            if let Some(w) = row {
                stop_processes(d, &w).await;
            }
            let _ = d.registry(|r| {
                r.set_world_state(
                    world_id,
                    WorldState::Stopped,
                    None,
                    Some("`up` was cancelled by its caller"),
                )
            });
            d.event(world_event(EventKind::UpCancelled, project, name));
            Err(cancelled_error(name))
        }
        Err(e) => {
            let _ = d.registry(|r| {
                r.set_world_state(world_id, WorldState::Failed, None, Some(&e.message))
            });
            d.routes.fail_world(project, name, &first_line(&e.message));
            d.event(world_event(EventKind::UpFailed, project, name).detail(first_line(&e.message)));
            Err(e)
        }
    }
}

/// The stages of `up` after its worktree exists: ports, the plan, slices,
/// processes by level. Each stage leaves what it made recorded, so a failure
/// or a crash between them leaves nothing `gc` cannot find.
pub(in crate::daemon::world) async fn bring_up(
    cx: &WorldCtx<'_>,
    loc: &Located,
    world_root: PathBuf,
    progress: &ProgressTx,
    notes: &mut Vec<String>,
) -> Result<(), ApiError> {
    let allocated = reserve_ports(cx, progress, notes)?;
    fault_point("up:ports");
    check_cancelled(progress, cx.world)?;
    let mut plan = make_plan(cx, loc, world_root, &allocated, notes).await?;
    crate::daemon::world::stages::bootstrap::prepare(cx, loc, &plan, progress).await?;
    check_cancelled(progress, cx.world)?;
    provision_slices(cx, &mut plan, progress, None).await?;
    fault_point("up:provisioned");
    start_processes(cx, &plan, progress, None).await
}

/// Ports: the world's whole map, reserved before anything starts (so every
/// service can name every other's port). A port held outside Binky is
/// skipped or moved, and said.
fn reserve_ports(
    cx: &WorldCtx<'_>,
    progress: &ProgressTx,
    notes: &mut Vec<String>,
) -> Result<IndexMap<ports::PortKey, u16>, ApiError> {
    let WorldCtx {
        d,
        cfg,
        project,
        world: name,
        world_id,
        ..
    } = *cx;
    let mut needs: Vec<ports::PortKey> = Vec::new();
    for (n, s) in &cfg.services {
        if s.has_port() {
            needs.push((n.clone(), String::new()));
            for p in s.port_names() {
                needs.push((n.clone(), p.clone()));
            }
        }
    }
    let mut port_notes = Vec::new();
    // Nothing of this world runs now (`up` stopped what was left).
    let allocated = d.registry(|reg| {
        ports::allocate(
            reg,
            project,
            world_id,
            cfg.project.port_range,
            &needs,
            &mut port_notes,
        )
    })?;
    for n in port_notes {
        let mut ev = world_event(EventKind::PortSkipped, project, name);
        match n {
            PortNote::Skipped(p) => {
                ev = ev.detail(format!("port {p} is held outside binky"));
                ev.port = Some(p);
            }
            PortNote::Moved { service, from, to } => {
                ev = world_event(EventKind::PortMoved, project, name).detail(format!(
                    "port {from} was taken outside binky; moved to {to}"
                ));
                ev.service = Some(service.clone());
                (ev.port, ev.moved_to) = (Some(from), Some(to));
                notes.push(format!(
                    "{service}: port {from} was taken outside binky; now {to}"
                ));
            }
        }
        d.event(ev);
    }
    progress.say(
        crate::protocol::ProgressStep::Ports,
        None,
        format!("{} port(s) reserved", allocated.len()),
    );
    Ok(allocated)
}

/// The plan every later stage renders with: the project's `env_file`, the
/// facts tokens read (ports, URLs; slice addresses come as slices are
/// made), and the HTTPS front when the project asks for it.
async fn make_plan(
    cx: &WorldCtx<'_>,
    loc: &Located,
    world_root: PathBuf,
    allocated: &IndexMap<ports::PortKey, u16>,
    notes: &mut Vec<String>,
) -> Result<Plan, ApiError> {
    if cx.cfg.project.https
        && let Some(note) = ensure_https(cx.d, cx.project, cx.world).await
    {
        notes.push(note);
    }
    let facts = build_facts(cx, allocated)?;
    plan_with(cx, loc, world_root, facts)
}

/// The plan for a world whose `facts` (ports, URLs) are known: its
/// `env_file`, token and config note, no slice made yet.
///
/// # Errors
/// The `env_file` cannot be read; a registry error.
pub(in crate::daemon::world) fn plan_with(
    cx: &WorldCtx<'_>,
    loc: &Located,
    world_root: PathBuf,
    facts: IndexMap<String, crate::config::render::ServiceFacts>,
) -> Result<Plan, ApiError> {
    let main_root = loc.main_root();
    Ok(Plan {
        facts,
        config_note: config_differs(&world_root, &main_root, cx.world),
        project_env: project_env(cx.cfg, &world_root, &main_root)?,
        world_root,
        home: cx.d.paths.home().to_path_buf(),
        strict: true,
        slices_ready: false,
        token: cx.d.registry(|r| r.world_token(cx.world_id))?,
    })
}

/// Slices, before any process that may use them; each address joins the
/// plan's facts as it is made. `only`: make just these (a reset's, dropped
/// just before) and take the others' addresses as they are, untouched;
/// `None` makes (or keeps and catches up) every one.
pub(in crate::daemon::world) async fn provision_slices(
    cx: &WorldCtx<'_>,
    plan: &mut Plan,
    progress: &ProgressTx,
    only: Option<&[String]>,
) -> Result<(), ApiError> {
    crate::daemon::world::stages::provision::refuse_reordered_slices(cx)?;
    for (n, s) in &cx.cfg.services {
        if let ServiceKind::Resource(r) = &s.kind {
            check_cancelled(progress, cx.world)?;
            if only.is_some_and(|o| !o.contains(n)) {
                let adapter = adapter_for(cx.d, &r.adapter, cx.client_env)
                    .ok_or_else(|| no_adapter(n, &r.adapter))?;
                let env_fn = crate::daemon::world::stages::plan::lookup_env(
                    &plan.project_env,
                    cx.client_env,
                );
                let resolved = crate::daemon::world::stages::slices::SliceAt {
                    cfg: cx.cfg,
                    project: cx.project,
                    world: cx.world,
                    world_root: &plan.world_root,
                    facts: &plan.facts,
                    env: &env_fn,
                    client_env: cx.client_env,
                }
                .resolved(cx.d, n, adapter.as_ref(), cx.world.slug(), cx.world_id)
                .await?;
                resolved.apply(plan.facts.get_mut(n).expect("fact per service"));
                continue;
            }
            progress.say(
                crate::protocol::ProgressStep::Provision,
                Some(n),
                format!("{} slice for {n}", r.adapter),
            );
            let resolved = provision(cx, n, r, plan, progress).await?;
            resolved.apply(plan.facts.get_mut(n).expect("fact per service"));
            cx.d.registry(|r| {
                r.service_state(cx.world_id, n, ServiceState::Provisioned, None, false)
            })?;
        }
    }
    plan.slices_ready = true;
    Ok(())
}
