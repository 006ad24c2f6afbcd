//! `up` through admission: a world not yet running takes a ticket and waits
//! for room (or, with `--no-wait`, is queued and answered at once); a
//! resumed or queued-over-a-restart `up` runs when admitted.

use super::locate::{Located, locate};
use super::up::{fully_running, up_locked};
use super::world_status;
use crate::daemon::{Daemon, ProgressTx, WorldKey, admission};
use crate::protocol::{ApiError, UpRequest, WorldOutcome, WorldState};
use std::sync::Arc;

/// Admission for a verb that starts a world's processes (`up`, and
/// `reload` of a world that is not running): `Ok(None)` when the world runs
/// already (it holds its room) or another waiter on its ticket was
/// admitted; `Ok(Some)` once admitted, counting against the room until
/// dropped; `Err(outcome)` for a `--no-wait` request that is queued, which
/// the daemon brings up when admitted.
///
/// # Errors
/// Cancelled while queued, or taken out of the queue.
pub(super) async fn admit(
    d: &Arc<Daemon>,
    loc: &Located,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<Result<Option<admission::Admitted>, WorldOutcome>, ApiError> {
    let known = {
        let reg = d.registry();
        match reg.project_id(&loc.name)? {
            Some(pid) => reg.find_world(pid, &req.world.name)?,
            None => None,
        }
    };
    if known.is_some_and(|w| fully_running(d, &w, &loc.config)) {
        return Ok(Ok(None));
    }
    let disk_path = loc.main_root().display().to_string();
    let (ticket, owns) = admission::enqueue(d, &loc.name, &req, &disk_path)?;
    match admission::try_admit(d, ticket, &loc.name, &req.world.name)? {
        Ok(a) => Ok(Ok(a)),
        Err(standing) if !req.wait => {
            let out = queued_outcome(d, loc, &req, &standing);
            admission::run_unwatched(d, ticket, req);
            Ok(Err(out))
        }
        // `None`: another waiter on the same ticket (a resume) was admitted;
        // under the world's lock the verb then finds it running.
        Err(_) => Ok(Ok(admission::wait(
            d,
            ticket,
            &loc.name,
            &req.world.name,
            owns,
            progress,
        )
        .await?)),
    }
}

/// The `up` of a ticket admitted from the queue with nobody waiting on it
/// (`--no-wait`, or a queue carried over a daemon restart).
pub(crate) async fn up_admitted(
    d: &Arc<Daemon>,
    req: UpRequest,
    admitted: admission::Admitted,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let loc = locate(d, &req.world)?;
    up_with(d, &loc, &req, Some(admitted), progress).await
}

/// `up` under the world's lock; `admitted` counts against the room until
/// this returns.
pub(super) async fn up_with(
    d: &Arc<Daemon>,
    loc: &Located,
    req: &UpRequest,
    admitted: Option<admission::Admitted>,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    if admitted.is_some() {
        admission::ensure_sampler(d);
    }
    let name = req.world.name.clone();
    let key = WorldKey::new(&loc.name, &name);
    let lock = d.worlds.lock_for(&key);
    let _guard = lock.lock().await;
    let out = up_locked(d, loc, &name, req.group.as_deref(), &req.env, progress).await;
    drop(admitted);
    out
}

/// What a `--no-wait` `up` answers while queued.
pub(super) fn queued_outcome(
    d: &Daemon,
    loc: &Located,
    req: &UpRequest,
    standing: &admission::Standing,
) -> WorldOutcome {
    let name = &req.world.name;
    let row = {
        let reg = d.registry();
        reg.project_id(&loc.name)
            .ok()
            .flatten()
            .and_then(|pid| reg.find_world(pid, name).ok().flatten())
    };
    let known = row.and_then(|w| world_status(d, &loc.name, w.id).ok());
    let mut world = known.unwrap_or_else(|| admission::unmade(name, req.group.clone()));
    // A suspended world waits on its resume, in its own place: it stays
    // `suspended` (as `status` shows it), never a second, queued entry.
    if world.state != WorldState::Suspended {
        world.state = WorldState::Queued;
    }
    world.queue = Some(standing.place());
    WorldOutcome {
        project: loc.name.clone(),
        world,
        noop: false,
        notes: vec![standing.message()],
        torn_down: Vec::new(),
        left_for_gc: Vec::new(),
        left_queue: false,
    }
}
