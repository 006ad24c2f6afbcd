//! A ticket's life: taken ([`enqueue`], within the queue's caps), waited
//! on ([`wait`], watching the board), claimed once a pass admitted it
//! ([`Admitted`], counted against the room until its `up` settles) or
//! withdrawn; the admitter that runs the passes; and the queue a restarted
//! daemon carries on with.

use super::room::{Standing, pass, standing, worth_a_pass};
use super::sampler::{ensure_sampler, psi_allowed, sample_interval};
use super::{SETTLE, TICK, hold};
use crate::daemon::events::EventKind;
use crate::daemon::{Daemon, ProgressTx, WorldKey};
use crate::protocol::{ApiError, ClientEnv, UpRequest, WorldRef};
use std::sync::Arc;

/// An admitted `up`: it counts against the room until dropped (when the
/// `up` settled, whichever way).
pub(crate) struct Admitted {
    pub(super) d: Arc<Daemon>,
    pub(super) key: WorldKey,
    pub(super) ticket: i64,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        // The request is served (or failed, recorded as such): only now
        // does its row go, so a crash before this loses nothing.
        let _ = self.d.registry().dequeue(self.ticket);
        let pending = {
            let mut st = self.d.admission.lock();
            let p = st.pending.remove(&self.key);
            if let Some((_, f)) = &p {
                st.settling.insert(self.key.clone(), (self.ticket, *f));
            }
            p
        };
        // Who brought it up, for fairness while it runs.
        if let Some(((caller, _), _)) = &pending {
            let _ = self
                .d
                .registry()
                .set_world_caller(&self.key.project, &self.key.name, caller);
        }
        self.d.admission.wake();
        // Its footprint stops counting once MemAvailable has had time to
        // show it (a VM can lag by seconds).
        if let (Some(_), Ok(rt)) = (pending, tokio::runtime::Handle::try_current()) {
            let (d, key, ticket) = (Arc::clone(&self.d), self.key.clone(), self.ticket);
            rt.spawn(async move {
                tokio::time::sleep(SETTLE).await;
                let mut st = d.admission.lock();
                if st.settling.get(&key).is_some_and(|(t, _)| *t == ticket) {
                    st.settling.remove(&key);
                }
                drop(st);
                d.admission.wake();
            });
        }
    }
}

/// Queues an `up` of `world` in `project` (whose main checkout is
/// `disk_path`), returning its ticket.
///
/// Also whether this request made the ticket: `false` when the world was
/// queued already (another caller's `up`, or its own resume), whose place
/// this `up` then shares but does not own.
///
/// # Errors
/// The queue is at a cap ([`Settings::queue_max`](crate::protocol::Settings::queue_max),
/// [`Settings::queue_per_group`](crate::protocol::Settings::queue_per_group)):
/// refused, nothing stored. A caller never holds more than `queue_max -
/// queue_per_group` places, so one caller filling the queue still leaves
/// room for another's. Or the registry cannot be written.
pub(crate) fn enqueue(
    d: &Daemon,
    project: &str,
    req: &UpRequest,
    disk_path: &str,
) -> Result<(i64, bool), ApiError> {
    let caller = req.caller.as_deref().unwrap_or("");
    let group = req.group.as_deref().unwrap_or("");
    let mut reg = d.registry();
    // Already queued: this `up` shares the place, whatever the caps say.
    if let Some(t) = reg.ticket_of(project, &req.world.name)? {
        return Ok((t, false));
    }
    let s = reg.settings()?;
    let n = reg.queue_counts(caller, group)?;
    let shown = if group.is_empty() {
        "the default group".to_owned()
    } else {
        format!("group `{group}`")
    };
    if n.total >= s.queue_max {
        return Err(ApiError::new(format!(
            "the admission queue is full: {} worlds wait (queue_max {}); `up` of {} was refused, nothing was made",
            n.total, s.queue_max, req.world.name
        ))
        .hint("wait for queued worlds to start, take some out with `binky down <name>`, or raise the cap: `binky reserve --queue-max N`"));
    }
    if n.group >= s.queue_per_group {
        return Err(ApiError::new(format!(
            "{shown} already has {} worlds queued (queue_per_group {}); `up` of {} was refused, nothing was made",
            n.group, s.queue_per_group, req.world.name
        ))
        .hint("wait for its queued worlds to start, take some out with `binky down <name>`, or raise the cap: `binky reserve --queue-per-group N`"));
    }
    // At least a full group: settings keep queue_per_group within half of
    // queue_max, but a registry edited by hand may not.
    let share = s
        .queue_max
        .saturating_sub(s.queue_per_group)
        .max(s.queue_per_group);
    if n.caller >= share {
        return Err(ApiError::new(format!(
            "this caller already has {} worlds queued, the most one caller may hold (queue_max {} less queue_per_group {}, kept for other callers); `up` of {} was refused, nothing was made",
            n.caller, s.queue_max, s.queue_per_group, req.world.name
        ))
        .hint("wait for its queued worlds to start, or raise the cap: `binky reserve --queue-max N`"));
    }
    // Strings and options of strings: serialising cannot fail.
    let request = serde_json::to_string(&req.world).expect("a WorldRef serialises");
    let t = reg.enqueue(&crate::registry::NewTicket {
        project,
        world: &req.world.name,
        caller,
        group,
        request: &request,
        disk_path,
    })?;
    Ok(t)
}

/// Admits `ticket` now if it is next and fits (a pass runs at once);
/// else where it stands. `Ok(None)`: another waiter on the same ticket was
/// admitted.
///
/// # Errors
/// The registry cannot be read, or the ticket was taken out of the queue.
pub(crate) fn try_admit(
    d: &Arc<Daemon>,
    ticket: i64,
    project: &str,
    world: &str,
) -> Result<Result<Option<Admitted>, Standing>, ApiError> {
    ensure_admitter(d);
    pass(d)?;
    if let Some(a) = claim(d, ticket) {
        return Ok(Ok(Some(a)));
    }
    match standing(d, ticket) {
        Some(s) => Ok(Err(s)),
        None if admitted_elsewhere(d, project, world) => Ok(Ok(None)),
        None => Err(taken_out(ticket)),
    }
}

/// Takes `ticket` if a pass admitted it and no other waiter claimed it.
fn claim(d: &Arc<Daemon>, ticket: i64) -> Option<Admitted> {
    let key = d.admission.lock().unclaimed.remove(&ticket)?;
    Some(Admitted {
        d: Arc::clone(d),
        key,
        ticket,
    })
}

/// Gives back `ticket`'s admission when nobody will claim it (its `up`
/// was cancelled, or `down` took the world out): it stops counting
/// against the room.
fn unclaim(d: &Daemon, ticket: i64) {
    let mut st = d.admission.lock();
    if let Some(key) = st.unclaimed.remove(&ticket) {
        st.pending.remove(&key);
    }
}

/// Whether the world left the queue by being admitted (it is starting or
/// running, or another `up` of it holds the room), not withdrawn.
pub(super) fn admitted_elsewhere(d: &Daemon, project: &str, world: &str) -> bool {
    let key = WorldKey::new(project, world);
    if d.admission.lock().pending.contains_key(&key) {
        return true;
    }
    d.registry().active_worlds().is_ok_and(|a| {
        a.iter().any(|w| {
            w.project == project
                && w.world == world
                && w.state != crate::protocol::WorldState::Suspended
        })
    })
}

pub(super) fn taken_out(ticket: i64) -> ApiError {
    ApiError::new(format!(
        "the queued `up` (ticket {ticket}) was taken out of the queue by `binky down` or `binky remove`"
    ))
}

/// Waits until `ticket` is admitted, saying where it stands whenever that
/// changes. It only watches the board the passes publish, so a thousand
/// waiters cost no more looks at the room than one. The caller's cancel
/// (Ctrl-C) gives up its place.
///
/// `Ok(None)`: another waiter on the same ticket was admitted.
///
/// # Errors
/// Cancelled, or taken out of the queue by `down`/`remove`.
///
/// `owns`: this request made the ticket. Cancelled, a request gives up a
/// place it made; one that only shares a place (a suspended world's
/// resume, another caller's `--no-wait`) stops waiting and leaves it.
pub(crate) async fn wait(
    d: &Arc<Daemon>,
    ticket: i64,
    project: &str,
    world: &str,
    owns: bool,
    progress: &ProgressTx,
) -> Result<Option<Admitted>, ApiError> {
    let mut board = d.admission.board.subscribe();
    let mut last = String::new();
    loop {
        // Marked seen before looking, so a pass between the look and the
        // wait is not missed.
        board.borrow_and_update();
        if let Some(a) = claim(d, ticket) {
            if !last.is_empty() {
                progress.say(
                    crate::protocol::ProgressStep::Admitted,
                    None,
                    format!("admitted: {world}"),
                );
            }
            return Ok(Some(a));
        }
        match standing(d, ticket) {
            Some(s) => {
                let msg = s.message();
                if msg != last {
                    if last.is_empty() && owns {
                        let mut ev = crate::daemon::world::world_event(
                            EventKind::AdmissionQueued,
                            project,
                            world,
                        );
                        ev.detail =
                            Some(format!("position {} of {}: {}", s.position, s.of, s.reason));
                        d.event(ev);
                    }
                    progress.say(crate::protocol::ProgressStep::Queued, None, msg.clone());
                    last = msg;
                }
            }
            // Not on the board: claimed by another waiter, withdrawn, or
            // queued after the last pass (the next one shows it).
            None => {
                // Bound first: the registry's guard must not live through
                // the match, which reads the registry again.
                let now = d.registry().ticket_of(project, world)?;
                match now {
                    Some(t) if t == ticket && !admitted_elsewhere(d, project, world) => {
                        d.admission.wake();
                    }
                    _ if admitted_elsewhere(d, project, world) => return Ok(None),
                    _ => return Err(taken_out(ticket)),
                }
            }
        }
        tokio::select! {
            _ = board.changed() => {}
            _ = progress.until_cancelled() => {
                if !owns {
                    return Err(ApiError::new(format!(
                        "`up` of {world} stopped waiting; {world} stays queued, in the place it had before this `up`"
                    ))
                    .hint(format!("`binky down {world}` takes it out of the queue")));
                }
                let gone = d.registry().dequeue(ticket).unwrap_or(false);
                unclaim(d, ticket);
                if gone {
                    let _ = pass(d);
                    d.event(crate::daemon::world::world_event(EventKind::AdmissionCancelled, project, world));
                    d.admission.wake();
                }
                return Err(ApiError::new(format!(
                    "`up` of {world} was cancelled while queued: nothing was made and its place is given up"
                ))
                .hint(format!("`binky up {world}` queues it again")));
            }
        }
    }
}

/// Starts the admitter unless it runs: the one task that runs passes —
/// when woken (a ticket taken or given up, the room may have grown) and
/// every [`TICK`] while anything is queued, since memory frees by itself.
/// With nothing queued it sleeps until woken.
pub(crate) fn ensure_admitter(d: &Arc<Daemon>) {
    {
        let mut st = d.admission.lock();
        if st.admitting {
            return;
        }
        st.admitting = true;
    }
    let d = Arc::clone(d);
    tokio::spawn(async move {
        let mut look = true;
        loop {
            let woken = d.admission.changed.notified();
            tokio::pin!(woken);
            let queued = if look {
                match pass(&d) {
                    Ok(n) => n > 0,
                    Err(e) => {
                        tracing::warn!("admission pass failed: {}", e.message);
                        true
                    }
                }
            } else {
                true
            };
            if queued {
                look = tokio::select! {
                    _ = &mut woken => true,
                    // Memory and disk move by themselves: a quick look
                    // first, a pass only when it could change something.
                    _ = tokio::time::sleep(TICK) => worth_a_pass(&d),
                };
            } else {
                woken.await;
                look = true;
            }
        }
    });
}

/// Takes `project`/`world` out of the queue (`down`, `remove`); whether it
/// was queued.
pub(crate) fn withdraw(d: &Daemon, project: &str, world: &str) -> Result<bool, ApiError> {
    let ticket = d.registry().dequeue_world(project, world)?;
    if let Some(t) = ticket {
        // Admitted but not yet claimed: its waiter now finds it gone.
        unclaim(d, t);
    }
    let gone = ticket.is_some();
    if gone {
        // At once, so a `status` right after no longer lists it.
        let _ = pass(d);
        d.event(crate::daemon::world::world_event(
            EventKind::AdmissionWithdrawn,
            project,
            world,
        ));
        d.admission.wake();
    }
    Ok(gone)
}

/// A progress sink for an `up` nobody watches (`--no-wait`, or a queue
/// carried over a restart): its cancel never fires while the task runs.
pub(super) fn unwatched() -> (ProgressTx, tokio::sync::watch::Sender<bool>) {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let (cancel_tx, cancel) = tokio::sync::watch::channel(false);
    (ProgressTx { tx, cancel }, cancel_tx)
}

/// Runs a queued `up` (or a resume) in the background: waits for `ticket`'s admission,
/// then brings the world up as `binky up` would. Its outcome is recorded
/// (status shows it), not returned.
pub(crate) fn run_unwatched(d: &Arc<Daemon>, ticket: i64, req: UpRequest) {
    let d = Arc::clone(d);
    tokio::spawn(async move {
        let (progress, _keep) = unwatched();
        let project = d
            .registry()
            .queue()
            .ok()
            .and_then(|q| q.into_iter().find(|r| r.ticket == ticket))
            .map(|r| r.project)
            .unwrap_or_default();
        let name = req.world.name.clone();
        let admitted = match wait(&d, ticket, &project, &name, true, &progress).await {
            Ok(Some(a)) => a,
            // Someone else's `up` of the world was admitted: nothing to do.
            Ok(None) => return,
            Err(e) => {
                tracing::info!(world = %name, "queued up ended: {}", e.message);
                return;
            }
        };
        if let Err(e) = crate::daemon::world::up_admitted(&d, req, admitted, &progress).await {
            tracing::info!(world = %name, "queued up failed: {}", e.message);
        }
    });
}

/// Carries on with the queue a previous daemon left: each ticket waits for
/// admission again, in the same order. The callers' environments were never
/// stored (they may hold secrets), so these `up`s run with the daemon's.
pub(crate) fn resume_queue(d: &Arc<Daemon>) {
    // Read the environment now, so a bad value is reported as the daemon
    // starts, not at its first sample.
    tracing::info!(
        "admission: suspend hold {}, sample every {} ({} without PSI){}",
        humantime::format_duration(hold()),
        humantime::format_duration(sample_interval(true)),
        humantime::format_duration(sample_interval(false)),
        if psi_allowed() {
            ""
        } else {
            ", PSI off (BINKY_PSI)"
        }
    );
    // A ticket admitted when the last daemon died never finished its `up`.
    let _ = d.registry().readmit_all();
    let Ok(rows) = d.registry().queue() else {
        return;
    };
    for r in rows {
        let Ok(world) = serde_json::from_str::<WorldRef>(&r.request) else {
            tracing::warn!(ticket = r.ticket, "unreadable queued request dropped");
            let _ = d.registry().dequeue(r.ticket);
            continue;
        };
        let req = UpRequest {
            world,
            group: (!r.group.is_empty()).then(|| r.group.clone()),
            caller: (!r.caller.is_empty()).then(|| r.caller.clone()),
            env: ClientEnv::current(),
            wait: true,
        };
        run_unwatched(d, r.ticket, req);
    }
    ensure_admitter(d);
    ensure_sampler(d);
}
