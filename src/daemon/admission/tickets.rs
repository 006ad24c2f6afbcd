//! A ticket's life: taken ([`enqueue`]), waited on ([`wait`]), admitted
//! ([`Admitted`], counted against the room until its `up` settles) or
//! withdrawn; and the queue a restarted daemon carries on with.

use super::room::{Standing, look};
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
        let footprint = {
            let mut st = self.d.admission.lock();
            let f = st.pending.remove(&self.key).map(|(_, f)| f);
            if let Some(f) = f {
                st.settling.insert(self.key.clone(), (self.ticket, f));
            }
            f
        };
        self.d.admission.wake();
        // Its footprint stops counting once MemAvailable has had time to
        // show it (a VM can lag by seconds).
        if let (Some(_), Ok(rt)) = (footprint, tokio::runtime::Handle::try_current()) {
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

/// What one look at the room says about a ticket.
pub(super) enum Step {
    Admitted(Admitted),
    Waiting(Standing),
    /// No longer queued (`down` or `remove` took it out).
    Gone,
}

/// Queues an `up` of `world` in `project` (whose main checkout is
/// `disk_path`), returning its ticket.
///
/// Also whether this request made the ticket: `false` when the world was
/// queued already (another caller's `up`, or its own resume), whose place
/// this `up` then shares but does not own.
pub(crate) fn enqueue(
    d: &Daemon,
    project: &str,
    req: &UpRequest,
    disk_path: &str,
) -> Result<(i64, bool), ApiError> {
    // Strings and options of strings: serialising cannot fail.
    let request = serde_json::to_string(&req.world).expect("a WorldRef serialises");
    let t = d.registry().enqueue(
        project,
        &req.world.name,
        req.group.as_deref().unwrap_or(""),
        &request,
        disk_path,
    )?;
    Ok(t)
}

/// Admits `ticket` now if it is next and fits; else where it stands.
/// `Ok(None)`: another waiter on the same ticket was admitted.
pub(crate) fn try_admit(
    d: &Arc<Daemon>,
    ticket: i64,
    project: &str,
    world: &str,
) -> Result<Result<Option<Admitted>, Standing>, ApiError> {
    match look(d, ticket)? {
        Step::Admitted(a) => Ok(Ok(Some(a))),
        Step::Waiting(s) => Ok(Err(s)),
        Step::Gone if admitted_elsewhere(d, project, world) => Ok(Ok(None)),
        Step::Gone => Err(taken_out(ticket)),
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
/// changes. The caller's cancel (Ctrl-C) gives up its place.
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
    let mut last = String::new();
    loop {
        // Registered before looking, so a wake between the look and the
        // wait is not lost.
        let woken = d.admission.changed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        match look(d, ticket)? {
            Step::Admitted(a) => {
                if !last.is_empty() {
                    progress.say(
                        crate::protocol::ProgressStep::Admitted,
                        None,
                        format!("admitted: {world}"),
                    );
                }
                return Ok(Some(a));
            }
            Step::Gone if admitted_elsewhere(d, project, world) => return Ok(None),
            Step::Gone => return Err(taken_out(ticket)),
            Step::Waiting(s) => {
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
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = progress.until_cancelled() => {
                if !owns {
                    return Err(ApiError::new(format!(
                        "`up` of {world} stopped waiting; {world} stays queued, in the place it had before this `up`"
                    ))
                    .hint(format!("`binky down {world}` takes it out of the queue")));
                }
                if d.registry().dequeue(ticket).unwrap_or(false) {
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

/// Takes `project`/`world` out of the queue (`down`, `remove`); whether it
/// was queued.
pub(crate) fn withdraw(d: &Daemon, project: &str, world: &str) -> Result<bool, ApiError> {
    let gone = d.registry().dequeue_world(project, world)?.is_some();
    if gone {
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
            env: ClientEnv::current(),
            wait: true,
        };
        run_unwatched(d, r.ticket, req);
    }
    ensure_sampler(d);
}
