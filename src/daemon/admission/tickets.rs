//! A ticket's life: taken ([`enqueue`], within the queue's caps), waited
//! on ([`wait`], watching the board), claimed once a pass admitted it
//! ([`Admitted`], counted against the room until its `up` settles) or
//! withdrawn; the admitter that runs the passes; and the queue a restarted
//! daemon carries on with.

use super::entry::Entry;
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
        let _ = self.d.registry(|r| r.dequeue(self.ticket));
        let pending = {
            let mut st = self.d.admission.lock();
            st.claimed.remove(&self.ticket);
            self.d.admission.released.notify_waiters();
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
                .registry(|r| r.set_world_caller(&self.key.project, &self.key.name, caller));
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

/// Waits until the verb that claimed `ticket`'s admission is done with it
/// (or the caller cancels): a verb that shared the ticket
/// ([`Entry::Shared`]) runs after the claimer, never on its room before it.
/// Which of them reaches the world's lock first is otherwise a matter of
/// scheduling: a sharer that ran first and failed left the claimer to start
/// the world after all, while the next world in line kept waiting.
pub(crate) async fn after_claimer(d: &Daemon, ticket: i64, progress: &ProgressTx) {
    loop {
        let released = d.admission.released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        if !d.admission.lock().claimed.contains(&ticket) {
            return;
        }
        tokio::select! {
            () = &mut released => {}
            () = progress.until_cancelled() => return,
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
    d.registry(|reg| enqueue_in(reg, project, req, disk_path))
}

/// [`enqueue`] within one hold of the registry, so the caps read and the
/// ticket written agree.
fn enqueue_in(
    reg: &mut crate::registry::Registry,
    project: &str,
    req: &UpRequest,
    disk_path: &str,
) -> Result<(i64, bool), ApiError> {
    let caller = req.caller.as_deref().unwrap_or("");
    let group = req.group.as_deref().unwrap_or("");
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
/// else where it stands. [`Entry::Shared`]: another waiter on the same
/// ticket was admitted.
///
/// # Errors
/// The registry cannot be read, or the ticket was taken out of the queue.
pub(crate) fn try_admit(
    d: &Arc<Daemon>,
    ticket: i64,
    verb: &str,
    world: &str,
) -> Result<Result<Entry, Standing>, ApiError> {
    ensure_admitter(d);
    pass(d)?;
    if let Some(a) = claim(d, ticket) {
        return Ok(Ok(Entry::Admitted(a)));
    }
    match standing(d, ticket) {
        Some(s) => Ok(Err(s)),
        None if withdrawn(d, ticket) => Err(taken_out(verb, world, ticket)),
        None => Ok(Ok(Entry::Shared(ticket))),
    }
}

/// Takes `ticket` if a pass admitted it and no other waiter claimed it.
fn claim(d: &Arc<Daemon>, ticket: i64) -> Option<Admitted> {
    let key = {
        let mut st = d.admission.lock();
        let key = st.unclaimed.remove(&ticket)?;
        st.claimed.insert(ticket);
        key
    };
    Some(Admitted {
        d: Arc::clone(d),
        key,
        ticket,
    })
}

/// Whether `ticket` was taken out of the queue.
pub(super) fn withdrawn(d: &Daemon, ticket: i64) -> bool {
    d.admission.lock().withdrawn.contains(&ticket)
}

/// Remembers that `ticket` was withdrawn (under the admission lock `st`),
/// and gives back its admission if a pass made one nobody claimed yet: it
/// stops counting against the room.
fn mark_withdrawn(st: &mut super::State, ticket: i64) {
    if let Some(key) = st.unclaimed.remove(&ticket) {
        st.pending.remove(&key);
    }
    st.withdrawn.insert(ticket);
    while st.withdrawn.len() > super::WITHDRAWN_KEPT {
        st.withdrawn.pop_first();
    }
}

/// What a verb whose ticket was taken out of the queue answers.
pub(crate) fn taken_out(verb: &str, world: &str, ticket: i64) -> ApiError {
    ApiError::new(format!(
        "the queued `{verb}` of {world} (ticket {ticket}) was taken out of the queue by `binky down` or `binky remove`: it made nothing"
    ))
    .hint(format!("`binky {verb} {world}` queues it again"))
}

/// Waits until `ticket` is admitted, saying where it stands whenever that
/// changes. It only watches the board the passes publish, so a thousand
/// waiters cost no more looks at the room than one. The caller's cancel
/// (Ctrl-C) gives up its place. `verb` (`up`, `reload`, `reset`) names the
/// request in what it says.
///
/// [`Entry::Shared`]: another waiter on the same ticket was admitted.
///
/// # Errors
/// Cancelled, or taken out of the queue by `down`/`remove` — whatever
/// state the world is in meanwhile.
///
/// `owns`: this request made the ticket. Cancelled, a request gives up a
/// place it made; one that only shares a place (a suspended world's
/// resume, another caller's `--no-wait`) stops waiting and leaves it.
pub(crate) async fn wait(
    d: &Arc<Daemon>,
    ticket: i64,
    (project, world): (&str, &str),
    verb: &str,
    owns: bool,
    progress: &ProgressTx,
) -> Result<Entry, ApiError> {
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
            return Ok(Entry::Admitted(a));
        }
        if withdrawn(d, ticket) {
            return Err(taken_out(verb, world, ticket));
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
            // Not on the board and not withdrawn: claimed by another
            // waiter, or queued after the last pass (the next one shows
            // it).
            None => {
                // Under the admission lock, which a pass holds from marking
                // a ticket admitted to leaving it unclaimed: a ticket no
                // longer queued is then either ours to claim or another's.
                let st = d.admission.lock();
                if d.registry(|r| r.queued(ticket))? {
                    drop(st);
                    d.admission.wake();
                } else {
                    drop(st);
                    return Ok(match claim(d, ticket) {
                        Some(a) => Entry::Admitted(a),
                        None => Entry::Shared(ticket),
                    });
                }
            }
        }
        tokio::select! {
            _ = board.changed() => {}
            _ = progress.until_cancelled() => {
                return Err(cancelled(d, ticket, (project, world), verb, owns));
            }
        }
    }
}

/// What a waiting verb answers when its caller cancels (Ctrl-C): a place
/// it made (`owns`) is given up; one it only shared stays queued.
fn cancelled(
    d: &Daemon,
    ticket: i64,
    (project, world): (&str, &str),
    verb: &str,
    owns: bool,
) -> ApiError {
    if !owns {
        return ApiError::new(format!(
            "`{verb}` of {world} stopped waiting; {world} stays queued, in the place it had before this `{verb}`"
        ))
        .hint(format!("`binky down {world}` takes it out of the queue"));
    }
    let gone = {
        let mut st = d.admission.lock();
        let gone = d.registry(|r| r.dequeue(ticket)).unwrap_or(false);
        mark_withdrawn(&mut st, ticket);
        gone
    };
    if gone {
        let _ = pass(d);
        d.event(crate::daemon::world::world_event(
            EventKind::AdmissionCancelled,
            project,
            world,
        ));
        d.admission.wake();
    }
    ApiError::new(format!(
        "`{verb}` of {world} was cancelled while queued: nothing was made and its place is given up"
    ))
    .hint(format!("`binky {verb} {world}` queues it again"))
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

/// What taking a world out of the queue found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Withdrawal {
    /// It was not queued.
    NotQueued,
    /// It was queued (or admitted, unclaimed): its verb ends and makes
    /// nothing.
    Withdrawn,
    /// Its verb had claimed the admission already and may be making the
    /// world now: the caller takes the world's lock, which that verb
    /// holds while it works, and then finds whatever it made (or, if the
    /// caller gets the lock first, the verb sees the withdrawal and makes
    /// nothing).
    UnderWay,
}

impl Withdrawal {
    /// It was in the queue, admitted or not.
    pub(crate) fn was_queued(self) -> bool {
        self != Withdrawal::NotQueued
    }
}

/// Takes `project`/`world` out of the queue (`down`, `remove`). One
/// decision under the admission lock, which every pass holds while it
/// admits: the ticket is either withdrawn before any verb claims it, or
/// found claimed ([`Withdrawal::UnderWay`]).
///
/// # Errors
/// The registry cannot be written.
pub(crate) fn withdraw(d: &Daemon, project: &str, world: &str) -> Result<Withdrawal, ApiError> {
    let found = {
        let mut st = d.admission.lock();
        let ticket = d.registry(|r| r.dequeue_world(project, world))?;
        ticket.map(|t| {
            let under_way = st.claimed.contains(&t);
            mark_withdrawn(&mut st, t);
            under_way
        })
    };
    let Some(under_way) = found else {
        return Ok(Withdrawal::NotQueued);
    };
    // At once, so a `status` right after no longer lists it.
    let _ = pass(d);
    d.event(crate::daemon::world::world_event(
        EventKind::AdmissionWithdrawn,
        project,
        world,
    ));
    d.admission.wake();
    Ok(if under_way {
        Withdrawal::UnderWay
    } else {
        Withdrawal::Withdrawn
    })
}

/// A progress sink for an `up` nobody watches (`--no-wait`, or a queue
/// carried over a restart): its cancel never fires while the task runs.
pub(crate) fn unwatched() -> (ProgressTx, tokio::sync::watch::Sender<bool>) {
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
            .registry(|r| r.queue())
            .ok()
            .and_then(|q| q.into_iter().find(|r| r.ticket == ticket))
            .map(|r| r.project)
            .unwrap_or_default();
        let name = req.world.name.clone();
        let admitted = match wait(&d, ticket, (&project, &name), "up", true, &progress).await {
            Ok(e @ Entry::Admitted(_)) => e,
            // Someone else's `up` of the world was admitted: nothing to do.
            Ok(_) => return,
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
    let _ = d.registry(|r| r.readmit_all());
    let Ok(rows) = d.registry(|r| r.queue()) else {
        return;
    };
    for r in rows {
        let Ok(world) = serde_json::from_str::<WorldRef>(&r.request) else {
            tracing::warn!(ticket = r.ticket, "unreadable queued request dropped");
            let _ = d.registry(|reg| reg.dequeue(r.ticket));
            continue;
        };
        let req = UpRequest {
            detach: false,
            idle_after: None,
            world,
            group: (!r.group.is_empty()).then(|| r.group.clone()),
            caller: (!r.caller.is_empty()).then(|| r.caller.clone()),
            env: ClientEnv::current(),
            wait: true,
        };
        run_unwatched(d, r.ticket, req);
    }
    // One pass before the daemon serves: the queue's standings (which
    // `status` shows) are known from its first answer, not from whenever
    // the admitter first runs.
    if let Err(e) = pass(d) {
        tracing::warn!("admission pass failed: {}", e.message);
    }
    ensure_admitter(d);
    ensure_sampler(d);
}
