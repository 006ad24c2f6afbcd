//! Suspending a world under memory pressure, the hold that keeps it from
//! flapping, and the footprint a stopped world leaves its project.

use super::sampler::measure;
use super::tickets::run_unwatched;
use super::{Backoff, MAX_HOLD, hold};
use crate::daemon::events::EventKind;
use crate::daemon::{Daemon, WorldKey};
use crate::protocol::{ClientEnv, UpRequest, WorldRef};
use std::sync::Arc;
use std::time::Duration;

/// Suspends world `w`: its processes stopped as `down` stops them (a
/// stopped process frees its memory; SIGSTOP would free nothing without
/// swap), its ports, slices and files kept, state `suspended`, and a resume
/// queued in its original place.
pub(super) async fn suspend(d: &Arc<Daemon>, w: &crate::registry::ActiveRow, why: &str) {
    let request = WorldRef {
        project_dir: None,
        project: Some(w.project.clone()),
        name: w.world.clone(),
    };
    // What it holds right before it goes is what its resume must find.
    measure(d, &[(w.id, &w.project)]);
    if let Err(e) = crate::daemon::world::suspend(d, &w.project, &w.world, why).await {
        tracing::warn!(world = %w.world, "could not suspend: {}", e.message);
        return;
    }
    learned(d, w.id, &w.project);
    let disk_path = d
        .registry(|r| r.project_root(&w.project))
        .ok()
        .flatten()
        .unwrap_or_default();
    let json = serde_json::to_string(&request).unwrap_or_default();
    let since = w.admitted_at.unwrap_or_else(crate::registry::now_ms);
    let ticket = match d.registry(|r| {
        r.enqueue_resume(
            &crate::registry::NewTicket {
                project: &w.project,
                world: &w.world,
                caller: &w.caller,
                group: &w.group,
                request: &json,
                disk_path: &disk_path,
            },
            since,
        )
    }) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(world = %w.world, "could not queue the resume: {e}");
            return;
        }
    };
    let held = back_off(d, &w.project, &w.world);
    let mut ev = crate::daemon::world::world_event(EventKind::Suspended, &w.project, &w.world);
    ev.detail = Some(format!(
        "{why}; not suspended again for {} after it resumes",
        humantime::format_duration(held)
    ));
    d.event(ev);
    let env = d.worlds.env_for(w.id, &ClientEnv::current());
    let req = UpRequest {
        detach: false,
        idle_after: None,
        world: request,
        group: (!w.group.is_empty()).then(|| w.group.clone()),
        caller: (!w.caller.is_empty()).then(|| w.caller.clone()),
        env,
        wait: true,
    };
    run_unwatched(d, ticket, req);
}

/// World `project`/`world` was just suspended: when that came soon after its
/// last resume (within twice its hold), its hold doubles (up to
/// [`MAX_HOLD`]), else it is the base [`hold`] again. Returns the hold.
pub(super) fn back_off(d: &Daemon, project: &str, world: &str) -> Duration {
    let mut st = d.admission.lock();
    let b = st
        .backoff
        .entry(WorldKey::new(project, world))
        .or_insert(Backoff {
            hold: hold(),
            resumed: None,
        });
    let soon = b
        .resumed
        .is_some_and(|r| r.elapsed() < b.hold.saturating_mul(2));
    b.hold = if soon {
        b.hold
            .saturating_mul(2)
            .clamp(Duration::from_secs(1), MAX_HOLD)
    } else {
        hold()
    };
    b.hold
}

/// A world stopped running: its peak RSS becomes its project's footprint
/// (the project's last running world, as measured).
pub(crate) fn learned(d: &Daemon, world_id: i64, project: &str) {
    let peak = d.admission.lock().peaks.remove(&world_id);
    if let Some(p) = peak.filter(|p| *p > 0) {
        let _ = d.registry(|r| r.set_footprint(project, p));
    }
}
