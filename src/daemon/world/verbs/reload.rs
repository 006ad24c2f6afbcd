//! `reload`: stop, then up on the same ports and data; and `reset`'s way
//! through it, which drops the slices it names while the world is stopped.

use super::remove::Removal;
use super::up::up_locked;
use crate::daemon::events::EventKind;
use crate::daemon::world::stages::admit::{admit, locked_with_room};
use crate::daemon::world::stages::locate::{Located, check_group, find_world, locate};
use crate::daemon::world::stages::processes::stop_processes;
use crate::daemon::world::world_event;
use crate::daemon::{Daemon, ProgressTx, WorldKey, admission};
use crate::faults::point as fault_point;
use crate::protocol::{ApiError, Intent, UpRequest, WorldOutcome, WorldState};
use crate::registry::WorldRow;
use std::sync::Arc;

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
pub(in crate::daemon::world) async fn reload_with(
    d: &Arc<Daemon>,
    req: UpRequest,
    progress: &ProgressTx,
    reset: Option<SliceDrop<'_>>,
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
    d.registry(|r| r.set_world_state(w.id, w.state, Some(Intent::Reload), None))?;
    progress.say(
        crate::protocol::ProgressStep::Stop,
        None,
        format!("stopping {}", w.name),
    );
    stop_processes(d, &w).await;
    fault_point("reload:stopped");
    d.registry(|r| r.set_world_state(w.id, WorldState::Stopped, None, None))?;
    let dropped = match reset {
        Some(dropping) => drop_slices(d, &loc, &w, dropping, &req, progress).await?,
        None => Vec::new(),
    };
    let out = up_locked(d, &loc, &w.world_name(), &req, progress).await;
    // The room before the lock: a verb that gets the lock next must find
    // this one's count gone, not lean on it (see `Entry::confirm`).
    drop(entry);
    drop(guard);
    out.map(|mut o| {
        o.notes.splice(0..0, dropped);
        o
    })
}

/// The slices a reset drops, and whether sessions Binky did not open on
/// them are ended (`--force`) or waited for.
#[derive(Clone, Copy)]
pub(in crate::daemon::world) struct SliceDrop<'a> {
    pub(in crate::daemon::world) services: &'a [String],
    pub(in crate::daemon::world) end_sessions: bool,
}

/// Drops the slices of `services` of world `w` on the servers they were
/// made on, returning what was done as notes. Called under the world's
/// lock once the processes using them stopped (`reset`'s in place, or
/// [`reload_with`] with the whole world stopped).
///
/// # Errors
/// A slice cannot be rendered or reached, or its teardown failed (the
/// world is then `failed`, its other slices kept).
pub(in crate::daemon::world) async fn drop_slices(
    d: &Arc<Daemon>,
    loc: &Located,
    w: &WorldRow,
    dropping: SliceDrop<'_>,
    req: &UpRequest,
    progress: &ProgressTx,
) -> Result<Vec<String>, ApiError> {
    let services = dropping.services;
    let retry = || {
        format!(
            "fix the cause and run `binky reset {} {}` again",
            w.name,
            services.join(" ")
        )
    };
    let env = d.worlds.env_for(w.id, &req.env);
    let rm = Removal::new(d, loc, w, false).ending_sessions(dropping.end_sessions);
    let teardowns = rm
        .teardowns(&env, Some(services))
        .map_err(|e| e.hint(retry()))?;
    progress.say(
        crate::protocol::ProgressStep::Stop,
        None,
        format!("dropping the slice(s) of {}", services.join(", ")),
    );
    let mut notes = Vec::new();
    let (torn, _) = rm
        .tear_down(teardowns, &mut notes)
        .await
        .map_err(|e| ApiError::new(e.message).hint(retry()))?;
    for t in &torn {
        notes.push(format!("dropped {}: it is made afresh below", t.describe()));
    }
    d.event(world_event(EventKind::Reset, &loc.name, &w.name).detail(services.join(", ")));
    Ok(notes)
}
