//! `up` through admission: a world not yet running takes a ticket and waits
//! for room (or, with `--no-wait`, is queued and answered at once); a
//! resumed or queued-over-a-restart `up` runs when admitted.

use super::locate::Located;
use crate::daemon::world::world_status;
use crate::daemon::{Daemon, ProgressTx, WorldKey, admission};
use crate::protocol::{ApiError, UpRequest, WorldOutcome, WorldState};
use std::sync::Arc;
use tokio::sync::OwnedMutexGuard;

/// Admission for a verb that starts a world's processes (`up`, and
/// `reload` or `reset` of a world that is not running): `Ok(entry)` once
/// it may go on — at once when the world holds a slot already (it never
/// queues behind itself), else when admitted, counting against the room
/// until the entry is dropped; `Err(outcome)` for a `--no-wait` request
/// that is queued, which the daemon brings up when admitted. `verb` names
/// the request in what it says.
///
/// # Errors
/// Cancelled while queued, or taken out of the queue.
pub(in crate::daemon::world) async fn admit(
    d: &Arc<Daemon>,
    loc: &Located,
    req: UpRequest,
    verb: &str,
    progress: &ProgressTx,
) -> Result<Result<admission::Entry, WorldOutcome>, ApiError> {
    if let Some(held) = admission::keep_slot(d, &loc.name, &req.world.name)? {
        return Ok(Ok(admission::Entry::Held { _slot: held }));
    }
    let disk_path = loc.main_root().display().to_string();
    let (ticket, owns) = admission::enqueue(d, &loc.name, &req, &disk_path)?;
    match admission::try_admit(d, ticket, verb, &req.world.name)? {
        Ok(entry) => Ok(Ok(entry)),
        Err(standing) if !req.wait => {
            let out = queued_outcome(d, loc, &req, &standing);
            admission::run_unwatched(d, ticket, req);
            Ok(Err(out))
        }
        Err(_) => Ok(Ok(admission::wait(
            d,
            ticket,
            (&loc.name, &req.world.name),
            verb,
            owns,
            progress,
        )
        .await?)),
    }
}

/// Takes the world's lock for a verb (`up`, `reload`, `reset`) that came
/// in on `entry`, and returns it with the room the verb may use under it
/// ([`admission::Entry::confirm`]): where that room went while the verb
/// waited for the lock, the verb is admitted anew (and may queue:
/// `Err(outcome)` for a `--no-wait` one), never started above
/// `max_parallel`.
///
/// # Errors
/// The ticket was taken out of the queue (`down`, `remove`) before the
/// lock was had: the verb makes nothing. Or cancelled while queued anew.
pub(in crate::daemon::world) async fn locked_with_room(
    d: &Arc<Daemon>,
    loc: &Located,
    req: &UpRequest,
    verb: &str,
    mut entry: admission::Entry,
    progress: &ProgressTx,
) -> Result<Result<(OwnedMutexGuard<()>, admission::Entry), WorldOutcome>, ApiError> {
    let name = &req.world.name;
    let lock = d.worlds.lock_for(&WorldKey::new(&loc.name, name));
    loop {
        if let admission::Entry::Shared(ticket) = &entry {
            admission::after_claimer(d, *ticket, progress).await;
        }
        let guard = Arc::clone(&lock).lock_owned().await;
        if let Some(ticket) = entry.withdrawn(d) {
            return Err(admission::taken_out(verb, name, ticket));
        }
        if let Some(confirmed) = entry.confirm(d, &loc.name, name)? {
            return Ok(Ok((guard, confirmed)));
        }
        drop(guard);
        entry = match admit(d, loc, req.clone(), verb, progress).await? {
            Ok(e) => e,
            Err(queued) => return Ok(Err(queued)),
        };
        if !matches!(entry, admission::Entry::Held { .. }) {
            admission::ensure_sampler(d);
        }
    }
}

/// What a `--no-wait` `up` answers while queued.
pub(in crate::daemon::world) fn queued_outcome(
    d: &Daemon,
    loc: &Located,
    req: &UpRequest,
    standing: &admission::Standing,
) -> WorldOutcome {
    let name = &req.world.name;
    let row = d.registry(|reg| {
        reg.project_id(&loc.name)
            .ok()
            .flatten()
            .and_then(|pid| reg.find_world(pid, name).ok().flatten())
    });
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
        torn_down_on: Vec::new(),
        left_for_gc: Vec::new(),
        left_queue: false,
    }
}
