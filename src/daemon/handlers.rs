//! One function per request verb.

use super::{Daemon, ProgressTx, settings, world};
use crate::daemon::events::EventKind;
use crate::platform;
use crate::protocol::{ApiError, DaemonInfo, Metrics, Request, Response, VERSION};
use std::sync::Arc;
use std::time::Instant;

/// Dispatches one request.
pub(super) async fn handle(
    d: &Arc<Daemon>,
    req: Request,
    progress: ProgressTx,
) -> Result<Response, ApiError> {
    tracing::debug!(verb = req.verb(), "request");
    let verb = req.verb();
    let world = match &req {
        Request::Up(r) | Request::Reload(r) => Some(r.world.name.clone()),
        Request::Reset(r) => Some(r.up.world.name.clone()),
        Request::Down(w) | Request::Remove { world: w, .. } | Request::Verify { world: w, .. } => {
            Some(w.name.clone())
        }
        _ => None,
    };
    let out = dispatch(d, req, progress).await;
    match world {
        Some(world) => out.map_err(|e| named(e, verb, &world)),
        None => out,
    }
}

/// A lifecycle verb's failure names the verb and its world, so a line
/// read alone (a script's log, a swarm of agents' output) says which
/// request failed: prefixed unless the message says both already.
fn named(mut e: ApiError, verb: &str, world: &str) -> ApiError {
    let says_verb = e.message.contains(&format!("`{verb}`"));
    if !(says_verb && e.message.contains(world)) {
        e.message = format!("`{verb}` of {}: {}", crate::slug::shown(world), e.message);
    }
    e
}

async fn dispatch(
    d: &Arc<Daemon>,
    req: Request,
    progress: ProgressTx,
) -> Result<Response, ApiError> {
    match req {
        Request::Ping => Ok(Response::Done),
        Request::DaemonStatus => Ok(Response::DaemonStatus(daemon_info(d))),
        Request::Shutdown => {
            let _ = d.shutdown.send(true);
            Ok(Response::Done)
        }
        Request::Status { project, usage } => {
            status_report(d, project.as_deref(), usage).map(Response::Status)
        }
        Request::Config => d
            .read_registry(|r| r.settings())
            .map(Response::Settings)
            .map_err(ApiError::from),
        Request::SetReserve {
            ram_pct,
            disk_gb,
            max_parallel,
            queue_max,
            queue_per_group,
        } => set_reserve(
            d,
            super::settings::ReserveChange {
                ram: ram_pct,
                disk: disk_gb,
                max_parallel,
                queue_max,
                queue_per_group,
            },
        ),
        Request::SetPorts { proxy, https } => set_ports(d, proxy, https).await,
        Request::Metrics => metrics(d).map(Response::Metrics),
        Request::Up(r) => world::up(d, r, &progress).await.map(Response::World),
        Request::Reload(r) => world::reload(d, r, &progress).await.map(Response::World),
        Request::Reset(r) => world::reset(d, r, &progress).await.map(Response::World),
        Request::Down(w) => world::down(d, w).await.map(Response::World),
        Request::Remove {
            world: w,
            force,
            env,
        } => world::remove(d, w, force, env).await.map(Response::World),
        Request::Env {
            world: w,
            env,
            reveal,
            agent,
        } => world::env(d, w, env, reveal, agent)
            .await
            .map(Response::Env),
        Request::Verify {
            world: w,
            keep_going,
            from_branch,
            env,
        } => world::verify(d, w, keep_going, from_branch, env, &progress)
            .await
            .map(Response::Verified),
        Request::Gc { dry_run, env } => Ok(Response::Swept(world::gc(d, dry_run, env).await)),
        // Only meaningful while another request runs (see `serve`).
        Request::Cancel => Ok(Response::Done),
        // `serve` gives a subscription the connection; never dispatched.
        Request::Subscribe(_) => Err(ApiError::new("subscribe is served by the connection")),
        Request::Logs {
            world: w,
            service,
            lines,
            cursor,
        } => super::blocking(|| world::logs(d, w, service, lines, cursor)).map(Response::Logs),
        Request::Locate { world: w, service } => {
            world::locate_service(d, w, &service).map(Response::Located)
        }
    }
}

/// `binky daemon status`: who the daemon is and where it listens.
fn daemon_info(d: &Daemon) -> DaemonInfo {
    DaemonInfo {
        pid: platform::pid(),
        version: VERSION.to_owned(),
        uptime_secs: d.started.elapsed().as_secs(),
        socket: d.paths.socket().display().to_string(),
        home: d.paths.home().display().to_string(),
        followers: d.events.followers(),
    }
}

/// `binky config reserve`: stored, then in effect at once (a lowered
/// reserve admits, a raised one may suspend).
fn set_reserve(d: &Daemon, change: settings::ReserveChange) -> Result<Response, ApiError> {
    let s = settings::set_reserve(d, change)?;
    d.event(super::events::Event::named(EventKind::SettingsChanged).detail("reserve"));
    d.admission.wake();
    d.admission.resample();
    Ok(Response::Settings(s))
}

/// `binky config port`: the proxy moves now, no restart; the answer comes
/// once it listens there, so the next request finds it.
async fn set_ports(
    d: &Daemon,
    proxy: Option<u32>,
    https: Option<u32>,
) -> Result<Response, ApiError> {
    let s = settings::set_ports(d, proxy, https)?;
    let _ = d.proxy_port.send(s.proxy_port);
    super::wait_proxy_bound(d, s.proxy_port).await;
    d.event(super::events::Event::named(EventKind::SettingsChanged).detail("ports"));
    Ok(Response::Settings(s))
}

/// Every world (of `project` alone when given) with its URLs and queue
/// place, and with `usage` what each holds now; in natural order.
///
/// # Errors
/// The registry cannot be read.
pub(crate) fn status_report(
    d: &Daemon,
    project: Option<&str>,
    usage: bool,
) -> Result<crate::protocol::StatusReport, ApiError> {
    let mut r = d.read_registry(|r| r.status(project))?;
    world::fill_urls(d, &mut r);
    world::fill_stale_clones(d, &mut r);
    world::fill_spares(d, &mut r);
    world::fill_log_floods(d, &mut r);
    if usage {
        world::fill_usage(&mut r);
    }
    super::admission::fill_queue(
        d,
        &mut r,
        project,
        crate::protocol::ProjectStatus::QUEUE_LISTED,
    );
    r.sort_naturally();
    r.proxy = proxy_status(d);
    Ok(r)
}

/// The proxy's listener as the last bind left it; `None` before the first.
fn proxy_status(d: &Daemon) -> Option<crate::protocol::ProxyStatus> {
    let b = d.proxy_bound.borrow().clone()?;
    let now = tokio::time::Instant::now();
    Some(crate::protocol::ProxyStatus {
        port: b.port,
        listening: b.listening,
        error: b.error,
        failed_binds: b.failures,
        retry_in_ms: b
            .next_try
            .map(|t| t.saturating_duration_since(now).as_millis() as u64),
    })
}

fn metrics(d: &Daemon) -> Result<Metrics, ApiError> {
    let (worlds, (services_running, restarts, port_reservations), registry_bytes) = d
        .read_registry(|reg| {
            Ok::<_, crate::registry::RegistryError>((
                reg.world_counts()?,
                reg.counters()?,
                reg.size_bytes(),
            ))
        })?;
    let count = |s: crate::protocol::WorldState| worlds.get(s.as_str()).copied().unwrap_or(0);
    let (suspended, sleeping) = (
        count(crate::protocol::WorldState::Suspended),
        count(crate::protocol::WorldState::Sleeping),
    );
    let footprints = d.read_registry(|r| r.footprints())?.into_iter().collect();
    let queue_length = d.read_registry(|r| r.queue())?.len() as u64;
    let platform::SelfUsage {
        rss_bytes,
        cpu_time_ms,
    } = platform::self_usage();
    let memory = crate::platform::memory();
    let settings = d.read_registry(|r| r.settings())?;
    let reserve_of = super::admission::disk_reserve(d, &settings)?;
    let disk =
        crate::platform::disk_space(d.paths.home()).map(|(free, size)| (free, reserve_of(size)));
    let now = Instant::now();
    let cpu_percent = {
        let mut last = d.cpu_sample.lock().unwrap_or_else(|p| p.into_inner());
        let (t0, c0) = last.unwrap_or((d.started, 0));
        *last = Some((now, cpu_time_ms));
        let wall = now.duration_since(t0).as_secs_f64() * 1000.0;
        if wall > 0.0 {
            ((cpu_time_ms.saturating_sub(c0)) as f64 / wall * 100.0) as f32
        } else {
            0.0
        }
    };
    Ok(Metrics {
        version: VERSION.to_owned(),
        uptime_secs: d.started.elapsed().as_secs(),
        worlds,
        services_running,
        restarts,
        queue_length,
        suspended,
        sleeping,
        admissions: d.admission.admissions(),
        admission_looks: d.admission.looks(),
        admission_passes: d.admission.passes(),
        memory_watch: d.admission.watch().to_owned(),
        memory_samples: d.admission.samples(),
        memory_total: memory.map(|m| m.total),
        memory_available: memory.map(|m| m.available),
        memory_stalls: d.admission.stalls(),
        disk_free: disk.map(|(free, _)| free),
        disk_reserve: disk.map(|(_, reserve)| reserve),
        footprints,
        port_reservations,
        proxy: d.proxy.snapshot(),
        registry_bytes,
        rss_bytes,
        cpu_time_ms,
        cpu_percent,
    })
}
