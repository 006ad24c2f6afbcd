//! `down`, and a world suspended to make room.

use crate::daemon::events::EventKind;
use crate::daemon::world::stages::locate::{find_world, locate};
use crate::daemon::world::stages::processes::stop_processes;
use crate::daemon::world::{outcome, withdrawn, world_event, world_exists};
use crate::daemon::{Daemon, WorldKey, admission};
use crate::faults::point as fault_point;
use crate::protocol::{ApiError, Intent, WorldOutcome, WorldRef, WorldState};
use std::sync::Arc;

/// `binky down`.
pub(crate) async fn down(d: &Arc<Daemon>, wref: WorldRef) -> Result<WorldOutcome, ApiError> {
    let loc = locate(d, &wref)?;
    // A queued `up` leaves the queue; a world never made has nothing more
    // to stop.
    let was_queued = admission::withdraw(d, &loc.name, &wref.name)?.was_queued();
    let lock = d.worlds.lock_for(&WorldKey::new(&loc.name, &wref.name));
    // After the lock: a verb admitted a moment ago holds it while it
    // makes the world, and is stopped here once it has.
    let _guard = lock.lock().await;
    if was_queued && !world_exists(d, &loc, &wref.name)? {
        return Ok(withdrawn(&loc, &wref.name, WorldState::Stopped));
    }
    let w = find_world(d, &loc, &wref.name)?;
    let noop = w.state == WorldState::Stopped;
    d.registry(|r| r.set_world_state(w.id, w.state, Some(Intent::Down), None))?;
    fault_point("down:intent");
    let left = stop_processes(d, &w).await;
    d.registry(|r| r.set_world_state(w.id, WorldState::Stopped, None, None))?;
    admission::learned(d, w.id, &loc.name);
    d.event(world_event(EventKind::Down, &loc.name, &w.name));
    // After the event: the log then reads down, then the admission it let
    // in. The sampler looks again too, and stops if nothing else runs.
    d.admission.wake();
    d.admission.resample();
    let mut out = outcome(d, &loc.name, w.id, noop && !was_queued, left)?;
    out.left_queue = was_queued;
    Ok(out)
}

/// Suspends running world `name` of `project` for admission: its
/// processes stopped as `down` stops them (so their memory is freed), its
/// state `suspended` with `why`; its ports, slices and files are kept and
/// `up` brings it back on them.
///
/// # Errors
/// The world is gone or no longer running.
pub(crate) async fn suspend(
    d: &Arc<Daemon>,
    project: &str,
    name: &str,
    why: &str,
) -> Result<(), ApiError> {
    let lock = d.worlds.lock_for(&WorldKey::new(project, name));
    let _guard = lock.lock().await;
    let w = crate::daemon::world::stages::locate::world_row(d, project, name)?;
    if w.state != WorldState::Running {
        return Err(ApiError::new(format!("{name} is {}, not running", w.state)));
    }
    d.registry(|r| r.set_world_state(w.id, w.state, Some(Intent::Suspend), None))?;
    stop_processes(d, &w).await;
    d.registry(|r| r.set_suspended(w.id, why))?;
    Ok(())
}
