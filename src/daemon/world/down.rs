//! `down` and `reload`.

use super::admit::{admit, locked_with_room};
use super::locate::{check_group, find_world, locate};
use super::processes::stop_processes;
use super::up::up_locked;
use super::{outcome, withdrawn, world_event, world_exists};
use crate::daemon::events::EventKind;
use crate::daemon::{Daemon, ProgressTx, WorldKey, admission};
use crate::faults::point as fault_point;
use crate::protocol::{ApiError, Intent, UpRequest, WorldOutcome, WorldRef, WorldState};
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
    d.registry()
        .set_world_state(w.id, w.state, Some(Intent::Down), None)?;
    fault_point("down:intent");
    let left = stop_processes(d, &w).await;
    d.registry()
        .set_world_state(w.id, WorldState::Stopped, None, None)?;
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
    let w = {
        let reg = d.registry();
        let pid = reg
            .project_id(project)?
            .ok_or_else(|| ApiError::new(format!("project {project} is gone")))?;
        reg.find_world(pid, name)?
            .ok_or_else(|| ApiError::new(format!("world {name} is gone")))?
    };
    if w.state != WorldState::Running {
        return Err(ApiError::new(format!("{name} is {}, not running", w.state)));
    }
    d.registry()
        .set_world_state(w.id, w.state, Some(Intent::Suspend), None)?;
    stop_processes(d, &w).await;
    d.registry().set_suspended(w.id, why)?;
    Ok(())
}

/// `binky reload`: stop, then up on the same ports and data. A world that
/// is not running goes through admission first, as `up` does: a reload
/// never starts more worlds than the room holds, and a world is queued or
/// running, never both.
pub(crate) async fn reload(
    d: &Arc<Daemon>,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    reload_with(d, req, progress, None).await
}

/// [`reload`], with the slices of the services in `reset` dropped while
/// the world is stopped, so that `up` makes them afresh (`binky reset`).
pub(super) async fn reload_with(
    d: &Arc<Daemon>,
    req: UpRequest,
    progress: &ProgressTx,
    reset: Option<super::reset::SliceDrop<'_>>,
) -> Result<WorldOutcome, ApiError> {
    check_group(req.group.as_deref())?;
    let loc = locate(d, &req.world)?;
    // Only a world that exists is reloaded (`up` makes one).
    find_world(d, &loc, &req.world.name)
        .map_err(|e| e.hint("`binky up` creates a world; `reload` restarts an existing one"))?;
    // A running world keeps its place: it is reloaded under its lock with
    // no admission, so reloads at once run one after another (each finds
    // it running) instead of queueing behind the one that stopped it (a
    // queued reload then marked a running world `queued`, and cancelling
    // it stopped what the other had started).
    let lock = d
        .worlds
        .lock_for(&WorldKey::new(&loc.name, &req.world.name));
    let guard = lock.lock_owned().await;
    let verb = if reset.is_some() { "reset" } else { "reload" };
    // A world that holds a slot (running, starting, a service restarting)
    // keeps it through the reload; only one that holds none queues.
    let (guard, entry) = match admission::keep_slot(d, &loc.name, &req.world.name)? {
        Some(held) => (guard, admission::Entry::Held { _slot: held }),
        None => {
            drop(guard);
            let entry = match admit(d, &loc, req.clone(), verb, progress).await? {
                Ok(e) => e,
                Err(queued) => return Ok(queued),
            };
            if !matches!(entry, admission::Entry::Held { .. }) {
                admission::ensure_sampler(d);
            }
            match locked_with_room(d, &loc, &req, verb, entry, progress).await? {
                Ok(had) => had,
                Err(queued) => return Ok(queued),
            }
        }
    };
    let w = find_world(d, &loc, &req.world.name)
        .map_err(|e| e.hint("`binky up` creates a world; `reload` restarts an existing one"))?;
    // What the new config asks of its slices is applied (or refused)
    // while the world still runs: a failure stops nothing.
    super::env::preflight(d, &loc, &w, &req.env).await?;
    // Intent first, so a crash mid-reload is reported as such.
    d.registry()
        .set_world_state(w.id, w.state, Some(Intent::Reload), None)?;
    progress.say(
        crate::protocol::ProgressStep::Stop,
        None,
        format!("stopping {}", w.name),
    );
    stop_processes(d, &w).await;
    fault_point("reload:stopped");
    d.registry()
        .set_world_state(w.id, WorldState::Stopped, None, None)?;
    let dropped = match reset {
        Some(dropping) => super::reset::drop_slices(d, &loc, &w, dropping, &req, progress).await?,
        None => Vec::new(),
    };
    let out = up_locked(
        d,
        &loc,
        &req.world.name,
        req.group.as_deref(),
        &req.env,
        progress,
    )
    .await;
    // The room before the lock: a verb that gets the lock next must find
    // this one's count gone, not lean on it (see `Entry::confirm`).
    drop(entry);
    drop(guard);
    out.map(|mut o| {
        o.notes.splice(0..0, dropped);
        o
    })
}
