//! Stopping a world's processes, and recording what the supervisor reports.

use crate::daemon::Daemon;
use crate::daemon::events::EventKind;
use crate::daemon::world::world_event;
use crate::protocol::{ServiceState, WorldState};
use crate::registry::WorldRow;
use crate::supervisor;
use crate::supervisor::State;
use std::sync::Arc;

/// Records one service's supervisor events in the registry and event log.
pub(in crate::daemon::world) fn recorder(
    d: Arc<Daemon>,
    world_id: i64,
    project: String,
    world: String,
    service: String,
) -> supervisor::Recorder {
    Arc::new(move |e: supervisor::Event| {
        let ev = |name: crate::daemon::events::EventKind| {
            let mut e = world_event(name, &project, &world);
            e.service = Some(service.clone());
            e
        };
        match e {
            supervisor::Event::Started { pid, start_time } => {
                let _ = d.registry(|r| r.service_started(world_id, &service, pid, start_time));
                d.event(ev(EventKind::Started).detail(format!("pid {pid}")));
            }
            supervisor::Event::State(s) => {
                d.routes.set_state(&project, &world, &service, s.label());
                let exit = match &s {
                    State::Stopped { exit } => exit.clone(),
                    State::Failed { reason } | State::Unhealthy { reason, .. } => {
                        Some(reason.clone())
                    }
                    _ => None,
                };
                let _ = d.registry(|r| {
                    r.service_state(
                        world_id,
                        &service,
                        s.label(),
                        exit.as_deref(),
                        s.pid().is_some(),
                    )
                });
                match &s {
                    State::Running { pid } => {
                        d.event(ev(EventKind::Ready).detail(format!("pid {pid}")))
                    }
                    State::Unhealthy { reason, .. } => {
                        d.event(ev(EventKind::Unhealthy).detail(reason.clone()))
                    }
                    State::Failed { reason } => {
                        d.event(ev(EventKind::Failed).detail(reason.clone()))
                    }
                    State::Stopped { exit: Some(x) } => {
                        d.event(ev(EventKind::Exited).detail(x.clone()))
                    }
                    _ => {}
                }
            }
            supervisor::Event::Restarting { exit, delay } => {
                let _ = d.registry(|r| r.service_restarted(world_id, &service));
                d.event(
                    ev(EventKind::Restarting).detail(format!("{exit}; restarting in {delay:?}")),
                );
            }
            supervisor::Event::GaveUp { reason } => {
                let _ = d.registry(|r| {
                    r.set_world_state(
                        world_id,
                        WorldState::Failed,
                        None,
                        Some(&format!("{service}: {reason}")),
                    )
                });
                d.event(ev(EventKind::GaveUp).detail(reason));
            }
            supervisor::Event::WatchRestart { changed } => {
                let mut e =
                    ev(EventKind::WatchRestart).detail(format!("changed: {}", changed.join(", ")));
                e.changed = changed;
                d.event(e);
            }
        }
    })
}

/// Stops a world's processes in reverse dependency order, then any that
/// left their groups ([`super::strays`]), and returns once every process of
/// every group is gone (bounded per group by
/// `KILL_WAIT` (the supervisor's) after SIGKILL); what outlived that is returned,
/// for the verb to report.
pub(in crate::daemon::world) async fn stop_processes(d: &Daemon, w: &WorldRow) -> Vec<String> {
    let mut left = Vec::new();
    match d.worlds.take_runtime(w.id) {
        Some(rt) => left = stop_handles(&rt.levels, &rt.handles, &|_| true).await,
        None => {
            // No live supervisor (the daemon restarted): stop what the
            // registry recorded, if it is still that very process.
            let Ok(rows) = d.registry(|r| r.world_processes(w.id)) else {
                return left;
            };
            // Not our children any more: stop each recorded group that is
            // still that very process, waiting on its exit through a pidfd.
            let mut set = tokio::task::JoinSet::new();
            for p in rows {
                if let Some(pid) = p.live_pid() {
                    let n = p.name;
                    set.spawn(async move {
                        supervisor::stop_pgid(
                            pid,
                            "SIGTERM",
                            crate::config::DEFAULT_STOP_TIMEOUT,
                            crate::platform::wait_exit(pid),
                        )
                        .await
                        .map(|p| format!("{n}: {p}"))
                    });
                }
            }
            while let Some(r) = set.join_next().await {
                left.extend(r.ok().flatten());
            }
        }
    }
    // What left its groups (a server that daemonized itself) goes too.
    left.extend(super::strays::stop(d, w).await);
    let names = d.registry(|reg| {
        let _ = reg.processes_stopped(w.id);
        reg.world_names(w.id)
    });
    if let Ok(Some((project, _))) = names {
        d.routes
            .set_world_state(&project, &w.name, ServiceState::Stopped);
    }
    left
}

/// Stops the processes of `services` of a running world (dependents
/// first) and keeps the rest of its runtime; what outlived its stop is
/// returned, as [`stop_processes`] does. A process one of them started
/// that left its group goes too: it carries the service's name beside the
/// world's token (see [`supervisor::Mark`]), and [`supervisor::Handle::stop`]
/// sweeps by both.
pub(in crate::daemon::world) async fn stop_services(
    d: &Daemon,
    w: &WorldRow,
    services: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let Some(rt) = d.worlds.take_runtime(w.id) else {
        return Vec::new();
    };
    let left = stop_handles(&rt.levels, &rt.handles, &|n| services.contains(n)).await;
    let mut kept = (*rt).clone();
    kept.handles.retain(|n, _| !services.contains(n));
    d.worlds.put_runtime(w.id, kept);
    left
}

/// Stops each handle `chosen` picks, level by level from the last (so a
/// service stops before what it depends on), those of one level together.
async fn stop_handles(
    levels: &[Vec<String>],
    handles: &indexmap::IndexMap<String, Arc<supervisor::Handle>>,
    chosen: &(dyn Fn(&str) -> bool + Sync),
) -> Vec<String> {
    let mut left = Vec::new();
    for level in levels.iter().rev() {
        let mut set = tokio::task::JoinSet::new();
        for n in level.iter().filter(|n| chosen(n)) {
            if let Some(h) = handles.get(n) {
                let (h, n) = (h.clone(), n.clone());
                set.spawn(async move { h.stop().await.map(|p| format!("{n}: {p}")) });
            }
        }
        while let Some(r) = set.join_next().await {
            left.extend(r.ok().flatten());
        }
    }
    left
}

/// Fills in each world's [`WorldStatus::usage`](crate::protocol::WorldStatus::usage):
/// its running services' process groups (a service is its group's leader)
/// measured in one pass over the process table.
pub(crate) fn fill_usage(report: &mut crate::protocol::StatusReport) {
    let worlds = report.projects.iter_mut().flat_map(|p| p.worlds.iter_mut());
    let mut groups: Vec<(usize, u32)> = Vec::new();
    let mut all: Vec<&mut crate::protocol::WorldStatus> = worlds.collect();
    for (i, w) in all.iter().enumerate() {
        groups.extend(w.services.iter().filter_map(|s| s.pid).map(|g| (i, g)));
    }
    let pgids: Vec<u32> = groups.iter().map(|(_, g)| *g).collect();
    for ((i, _), u) in groups.iter().zip(crate::platform::groups_usage(&pgids)) {
        let sum = all[*i].usage.get_or_insert_with(Default::default);
        sum.rss_bytes += u.rss_bytes;
        sum.cpu_ms += u.cpu_ms;
    }
}
