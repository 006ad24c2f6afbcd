//! `up`: locate → worktree → ports → slices → processes by dependency level →
//! routes, recording intent before each act.

use super::*;

/// `binky up`.
pub(crate) async fn up(
    d: &Arc<Daemon>,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    check_name(&req.world.name)?;
    let loc = locate(d, &req.world)?;
    let name = req.world.name.clone();
    let key = format!("{}/{}", loc.name, name);
    let lock = d.worlds.lock_for(&key);
    let _guard = lock.lock().await;
    up_locked(d, &loc, &name, req.group.as_deref(), &req.env, progress).await
}

pub(super) async fn up_locked(
    d: &Arc<Daemon>,
    loc: &Located,
    name: &str,
    group: Option<&str>,
    client_env: &ClientEnv,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let project = loc.name.as_str();
    let slug = world_slug(name);
    let root = loc.main_root().display().to_string();
    if let Some(known) = d.registry().project_root(project).map_err(internal)?
        && known != root
        && Path::new(&known).join(config::FILE_NAME).is_file()
    {
        // Two checkouts claiming one project name would share worlds,
        // hostnames and slices.
        return Err(ApiError::new(format!(
            "project `{project}` is already registered at {known}, and {root} uses the same name"
        ))
        .hint(
            "give this project its own [project] name, or remove the other project's worlds first",
        ));
    }
    let project_id = d
        .registry()
        .upsert_project(project, &root)
        .map_err(internal)?;
    let existing = d
        .registry()
        .find_world(project_id, name)
        .map_err(internal)?;
    if let Some(w) = &existing
        && w.state == WorldState::Running
        && let Some(rt) = d.worlds.runtime(w.id)
        && rt
            .handles
            .values()
            .all(|h| matches!(*h.state.borrow(), State::Running { .. }))
        && Path::new(&w.path).exists()
    {
        return outcome(d, project, w.id, true, moved_migrations(d, loc, w));
    }
    // An unset `${env.NAME}` fails here too, before anything is made.
    preflight_env(d, loc, existing.as_ref(), client_env)?;
    // Unknown adapters fail here, before a worktree or a port is made.
    for (n, s) in &loc.config.services {
        if let Some(r) = s.resource()
            && adapter_for(&r.adapter, client_env).is_none()
        {
            return Err(no_adapter(n, &r.adapter));
        }
    }
    let mut notes = Vec::new();
    if let Some(w) = &existing {
        // Not (fully) running: stop whatever is left of it first, so nothing
        // runs twice and its ports are free to keep.
        stop_processes(d, w).await;
    }

    check_cancelled(progress, name)?;
    progress.say("worktree", None, format!("worktree for {name}"));
    let root = match &loc.config.project.worktree_root {
        Some(r) => config::resolve_against(&loc.main_root(), r),
        None => worktree::default_root(&loc.main),
    };
    let git = user_git(client_env)?;
    check_path(&root.join(&loc.subdir))?;
    let (main, branch, slug2) = (loc.main.clone(), name.to_owned(), slug.clone());
    let repo_lock = d.worlds.repo_lock(&loc.main);
    let repo_guard = repo_lock.lock().await;
    let ensured = tokio::task::spawn_blocking(move || {
        worktree::ensure(&git, &main, &branch, &slug2, &root)
    })
    .await
    .map_err(internal)?
    .map_err(|e| {
        // A folder another world of this project uses: say whose it is
        // (two names can share a slug-shaped folder name).
        if let worktree::WorktreeError::PathTaken(p) = &e
            && let Some(other) = d
                .registry()
                .world_with_path(project_id, &p.display().to_string())
                .ok()
                .flatten()
        {
            return ApiError::new(format!(
                "{} is the worktree of world `{other}`, whose folder name `{name}` would take",
                p.display()
            ))
            .hint(format!(
                "pick another name; `binky status .` lists this project's worlds (`{other}` is one)"
            ));
        }
        let hint = match &e {
            worktree::WorktreeError::CheckedOutElsewhere { .. } => {
                "switch that checkout to another branch, or run `binky up` with a different name"
            }
            worktree::WorktreeError::InvalidBranch(_) => "use a valid git branch name",
            _ => "check the repository with `git worktree list` and `git status`",
        };
        ApiError::new(e.to_string()).hint(hint)
    })?;
    drop(repo_guard);
    fault_point("up:worktree");
    // Cancelled now, the worktree stays (the next `up` reuses it), and no
    // world has been recorded yet.
    check_cancelled(progress, name)?;
    if ensured.recreated {
        let msg = format!(
            "the worktree folder {} was missing and has been re-created",
            ensured.path.display()
        );
        progress.say("worktree", None, msg.clone());
        notes.push(msg);
        d.event(world_event("worktree_recreated", project, name));
    }
    let world_root = join_subdir(&ensured.path, &loc.subdir);
    check_path(&world_root)?;
    let cfg_path = world_root.join(config::FILE_NAME);
    let cfg = config::load(&cfg_path).map_err(invalid_config)?;
    // The world runs its own branch's binky.toml; edits the user has not
    // committed in the checkout they ran `up` from are not in it.
    let here = loc.config.root.join(config::FILE_NAME);
    if here != cfg_path
        && std::fs::read(&here).ok() != std::fs::read(&cfg_path).ok()
        && worktree::has_uncommitted_changes(&here)
    {
        let msg = format!(
            "{} has uncommitted changes this world does not see: it runs {} as on branch `{name}`; commit them there (or edit the world's copy), then `binky reload {name}`",
            here.display(),
            cfg_path.display()
        );
        notes.push(msg);
    }
    if cfg.project.name != project {
        return Err(ApiError::new(format!(
            "{} names project `{}`, but this project is `{project}`",
            cfg_path.display(),
            cfg.project.name
        ))
        .hint("a branch must keep the project's name"));
    }

    // Record the intent before acting, so a crash can be reconciled.
    let world_id = {
        let mut reg = d.registry();
        let id = reg
            .upsert_world(
                project_id,
                name,
                &slug,
                &ensured.path.display().to_string(),
                WorldState::Starting,
                Some("up"),
                group,
            )
            .map_err(internal)?;
        let services: Vec<(String, crate::protocol::ServiceKind)> = cfg
            .services
            .iter()
            .map(|(n, s)| {
                (
                    n.clone(),
                    if s.process().is_some() {
                        crate::protocol::ServiceKind::Process
                    } else {
                        crate::protocol::ServiceKind::Resource
                    },
                )
            })
            .collect();
        reg.sync_services(id, &services).map_err(internal)?;
        reg.reset_restarts(id).map_err(internal)?;
        id
    };
    d.worlds.remember_env(world_id, client_env);
    d.event(world_event("up_started", project, name));

    let cx = WorldCtx {
        d,
        cfg: &cfg,
        project,
        world: name,
        slug: &slug,
        world_id,
        client_env,
    };
    let result = bring_up(&cx, loc, world_root, progress, &mut notes).await;
    match result {
        Ok(()) => {
            d.registry()
                .set_world_state(world_id, WorldState::Running, None, None)
                .map_err(internal)?;
            d.event(world_event("up", project, name));
            outcome(d, project, world_id, false, notes)
        }
        Err(_) if progress.cancelled() => {
            // Stop what it started; keep what it made (worktree, ports,
            // complete slices), as `down` would: nothing is left half-made.
            let row = d
                .registry()
                .find_world(project_id, name)
                .map_err(internal)?;
            if let Some(w) = row {
                stop_processes(d, &w).await;
            }
            let _ = d.registry().set_world_state(
                world_id,
                WorldState::Stopped,
                None,
                Some("`up` was cancelled by its caller"),
            );
            d.event(world_event("up_cancelled", project, name));
            Err(cancelled_error(name))
        }
        Err(e) => {
            let _ =
                d.registry()
                    .set_world_state(world_id, WorldState::Failed, None, Some(&e.message));
            d.event(world_event("up_failed", project, name).detail(first_line(&e.message)));
            Err(e)
        }
    }
}

/// What a cancelled `up` answers.
pub(super) fn cancelled_error(name: &str) -> ApiError {
    ApiError::new(format!(
        "`up` of {name} was cancelled: what it had started is stopped; its worktree, ports and finished slices are kept"
    ))
    .hint(format!(
        "`binky up {name}` brings it up, `binky remove {name}` removes it"
    ))
}

/// Fails with [`cancelled_error`] once the caller has cancelled: checked
/// between the stages of `up`, where stopping leaves nothing half-made.
pub(super) fn check_cancelled(progress: &ProgressTx, name: &str) -> Result<(), ApiError> {
    if progress.cancelled() {
        return Err(cancelled_error(name));
    }
    Ok(())
}

/// The stages of `up` after its worktree exists: ports, the plan, slices,
/// processes by level. Each stage leaves what it made recorded, so a failure
/// or a crash between them leaves nothing `gc` cannot find.
pub(super) async fn bring_up(
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
    provision_slices(cx, &mut plan, progress).await?;
    fault_point("up:provisioned");
    start_processes(cx, &plan, progress).await
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
    let allocated = {
        let mut reg = d.registry();
        // Nothing of this world runs now (`up` stopped what was left).
        ports::allocate(
            reg.conn(),
            project,
            world_id,
            cfg.project.port_range,
            &needs,
            &|_| false,
            &mut port_notes,
        )
        .map_err(|e| {
            ApiError::new(e.to_string())
                .hint("widen [project] port_range, or remove worlds you no longer need")
        })?
    };
    for n in port_notes {
        let mut ev = world_event("port_skipped", project, name);
        match n {
            PortNote::Skipped(p) => ev = ev.detail(format!("port {p} is held outside binky")),
            PortNote::Moved { service, from, to } => {
                ev = world_event("port_moved", project, name).detail(format!(
                    "port {from} was taken outside binky; moved to {to}"
                ));
                ev.service = Some(service.clone());
                notes.push(format!(
                    "{service}: port {from} was taken outside binky; now {to}"
                ));
            }
        }
        d.event(ev);
    }
    progress.say(
        "ports",
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
    let WorldCtx {
        d,
        cfg,
        project,
        world: name,
        slug,
        world_id,
        ..
    } = *cx;
    let main_root = loc.main_root();
    let project_env = project_env(cfg, &world_root, &main_root)?;
    if cfg.project.https
        && let Some(note) = ensure_https(d, project, name).await
    {
        notes.push(note);
    }
    let facts = build_facts(d, cfg, project, name, slug, world_id, allocated)?;
    Ok(Plan {
        facts,
        config_note: config_differs(&world_root, &main_root, name),
        world_root,
        project_env,
        home: d.paths.home().to_path_buf(),
        strict: true,
        slices_ready: false,
    })
}

/// Slices, before any process that may use them; each address joins the
/// plan's facts as it is made.
async fn provision_slices(
    cx: &WorldCtx<'_>,
    plan: &mut Plan,
    progress: &ProgressTx,
) -> Result<(), ApiError> {
    for (n, s) in &cx.cfg.services {
        if let ServiceKind::Resource(r) = &s.kind {
            check_cancelled(progress, cx.world)?;
            progress.say("provision", Some(n), format!("{} slice for {n}", r.adapter));
            let address = provision(cx, n, r, plan, progress).await?;
            let f = plan.facts.get_mut(n).expect("fact per service");
            f.host = host_of(&address);
            f.url = Some(address);
            cx.d.registry()
                .service_state(cx.world_id, n, ServiceState::Provisioned, None, false)
                .map_err(internal)?;
        }
    }
    plan.slices_ready = true;
    Ok(())
}

/// Processes, level by level; independent ones start together, and a level
/// starts once the one before is ready. The first failure (or a cancel)
/// stops the climb; services already started stay up for inspection.
async fn start_processes(
    cx: &WorldCtx<'_>,
    plan: &Plan,
    progress: &ProgressTx,
) -> Result<(), ApiError> {
    let WorldCtx {
        d,
        cfg,
        project,
        world: name,
        slug,
        world_id,
        ..
    } = *cx;
    let lv = levels(cfg);
    let mut handles: IndexMap<String, Arc<Handle>> = IndexMap::new();
    let log_dir = d.paths.world_logs(project, slug);
    let mut failure: Option<ApiError> = None;
    'levels: for level in &lv {
        let mut started = Vec::new();
        for sname in level {
            let svc = &cfg.services[sname];
            let Some(p) = svc.process() else { continue };
            let spec = process_spec(cx, sname, p, plan, &log_dir)?;
            progress.say("start", Some(sname), format!("starting {sname}"));
            // Intent first: the row says `starting` before a process exists.
            d.registry()
                .service_state(world_id, sname, ServiceState::Starting, None, false)
                .map_err(internal)?;
            let recorder = recorder(
                d.clone(),
                world_id,
                project.to_owned(),
                name.to_owned(),
                sname.clone(),
            );
            let log = spec.log.clone();
            let h = Arc::new(supervisor::spawn(spec, recorder));
            handles.insert(sname.clone(), h.clone());
            started.push((sname.clone(), h, log));
        }
        fault_point("up:started");
        for (sname, h, log) in started {
            // A cancel does not wait for a slow health probe.
            let settled = tokio::select! {
                s = settled(&h) => s,
                _ = progress.until_cancelled() => {
                    failure.get_or_insert(cancelled_error(name));
                    break 'levels;
                }
            };
            match settled {
                State::Running { pid } => {
                    let port = plan.facts[&sname]
                        .port
                        .map(|p| format!("  :{p}"))
                        .unwrap_or_default();
                    progress.say("ready", Some(&sname), format!("{sname}  pid {pid}{port}"));
                }
                // A probe-less one-shot that did its work inside the grace
                // period (see supervisor::NO_PROBE_GRACE).
                s if s.exited_cleanly() => {
                    progress.say("ready", Some(&sname), format!("{sname}  finished (exit 0)"));
                }
                other => {
                    failure.get_or_insert(start_failure(name, &sname, &other, &log, plan));
                    // One whose probe never passed stays up for inspection
                    // (its own port still answers), but not at its URL: the
                    // proxy must not serve a failed world as if it were up.
                    if matches!(other, State::Unhealthy { .. }) {
                        d.routes
                            .set_state(project, name, &sname, ServiceState::Failed);
                    }
                }
            }
        }
        if failure.is_some() {
            break 'levels;
        }
    }
    if failure.is_some() {
        // Services a failure kept from starting are stopped, not starting:
        // their proxy page must not promise a retry that never comes.
        for (sname, svc) in &cfg.services {
            if svc.process().is_some() && !handles.contains_key(sname) {
                d.routes
                    .set_state(project, name, sname, ServiceState::Stopped);
            }
        }
    }
    d.worlds.put_runtime(
        world_id,
        Runtime {
            handles,
            levels: lv,
        },
    );
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The supervisor's first settled state for a service just started
/// (running, or given up on).
async fn settled(h: &Handle) -> State {
    let mut watch = h.state.clone();
    loop {
        let s = watch.borrow_and_update().clone();
        if s.is_settled() {
            return s;
        }
        if watch.changed().await.is_err() {
            return watch.borrow().clone();
        }
    }
}

/// The error for a service that did not start: why, then this run's output
/// only (its first lines often say the cause, its last where it stopped).
fn start_failure(world: &str, service: &str, state: &State, log: &Path, plan: &Plan) -> ApiError {
    let reason = match state {
        State::Unhealthy { reason, .. } => format!("not healthy: {reason}"),
        State::Failed { reason } => reason.clone(),
        State::Stopped { exit } => exit.clone().unwrap_or_else(|| "stopped".into()),
        s => s.label().to_string(),
    };
    let run = supervisor::logs::current_run(log);
    let mut msg = format!("service `{service}` failed to start: {reason}");
    if !run.is_empty() {
        msg.push_str(&format!(
            "\noutput of this run ({} line(s), in {}):\n{}",
            run.len(),
            log.display(),
            supervisor::logs::quote_head_tail(&run, FAILURE_HEAD_LINES, FAILURE_LOG_LINES)
        ));
    }
    ApiError::new(msg.trim_end().to_owned()).hint(with_config_note(
        format!(
            "`binky logs {world} {service}` shows its output; services already started stay up for inspection"
        ),
        plan,
    ))
}
