//! Admission: whether an `up` may start now, or waits in the queue.
//!
//! Every `up` of a world that is not already running takes a ticket in the
//! registry's queue before anything is made (no worktree, no port, no
//! slice). A ticket is admitted when [`decide::decide`] picks it with the
//! room the daemon measures now ([`room`]): it leaves the queue and, until
//! its `up` settles, counts against the room with its project's expected
//! footprint, so twenty concurrent `up`s never all see the same free RAM.
//! The decision and that bookkeeping happen under one lock.
//!
//! A queued `up` re-reads the room when woken (a world settled, went down or
//! was removed, a reserve changed) and every [`TICK`] while it waits, since
//! memory frees by itself. With nothing queued nothing is sampled. The
//! queue is durable: a daemon that restarts carries on with the same order
//! ([`resume_queue`]).

pub mod decide;

use super::{Daemon, ProgressTx};
use crate::protocol::{ApiError, ClientEnv, UpRequest, WorldRef};
use crate::registry::QueueRow;
use decide::{Decision, Room, Waiting};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A project's expected footprint before one of its worlds was measured,
/// bytes: conservative, so the first worlds of a project do not overrun.
pub const DEFAULT_FOOTPRINT: u64 = 512 << 20;
/// How often a queued `up` looks at the room again unprompted.
pub const TICK: Duration = Duration::from_secs(1);

/// Admission's in-memory state; the queue itself is in the registry.
#[derive(Default)]
pub(crate) struct Admission {
    state: Mutex<State>,
    /// Woken when the room may have grown.
    changed: tokio::sync::Notify,
    /// `up`s admitted since the daemon started.
    admissions: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Admitted, not yet settled: (project, world) → (group, footprint).
    pending: HashMap<(String, String), (String, u64)>,
}

impl Admission {
    /// Wakes every queued `up` to look at the room again.
    pub(crate) fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// `up`s admitted since the daemon started.
    pub(crate) fn admissions(&self) -> u64 {
        self.admissions.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An admitted `up`: it counts against the room until dropped (when the
/// `up` settled, whichever way).
pub(crate) struct Admitted {
    d: Arc<Daemon>,
    key: (String, String),
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.d.admission.lock().pending.remove(&self.key);
        self.d.admission.wake();
    }
}

/// Where a queued ticket stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    /// 1-based place in admission order.
    pub position: usize,
    /// How many are queued.
    pub of: usize,
    /// Why the next one waits.
    pub reason: String,
}

impl Standing {
    /// As the wire carries it.
    pub(crate) fn place(&self) -> Box<crate::protocol::QueuePlace> {
        Box::new(crate::protocol::QueuePlace {
            position: self.position as u32,
            of: self.of as u32,
            reason: self.reason.clone(),
        })
    }

    /// `queued: 3rd of 5 — waiting for RAM: …`.
    pub(crate) fn message(&self) -> String {
        format!(
            "queued: {} of {} — {}",
            ordinal(self.position),
            self.of,
            self.reason
        )
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What one look at the room says about a ticket.
enum Step {
    Admitted(Admitted),
    Waiting(Standing),
    /// No longer queued (`down` or `remove` took it out).
    Gone,
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(e.to_string())
}

/// The queue as [`decide`] sees it, row for row.
fn waiting(d: &Daemon, rows: &[QueueRow]) -> Vec<Waiting> {
    let reg = d.registry();
    rows.iter()
        .map(|r| Waiting {
            ticket: r.ticket,
            group: r.group.clone(),
            footprint: reg
                .footprint(&r.project)
                .ok()
                .flatten()
                .unwrap_or(DEFAULT_FOOTPRINT),
            resume: false,
        })
        .collect()
}

/// The room now: settings, active worlds (recorded plus admitted), RAM and
/// the disks under `BINKY_HOME` and each queued project.
fn room(d: &Daemon, st: &State, rows: &[QueueRow]) -> Result<Room, ApiError> {
    let reg = d.registry();
    let s = reg.settings().map_err(internal)?;
    let mut active: std::collections::BTreeMap<String, u32> = Default::default();
    for w in reg.active_worlds().map_err(internal)? {
        if w.state != crate::protocol::WorldState::Suspended
            && !st.pending.contains_key(&(w.project, w.world))
        {
            *active.entry(w.group).or_default() += 1;
        }
    }
    drop(reg);
    for (group, _) in st.pending.values() {
        *active.entry(group.clone()).or_default() += 1;
    }
    let ram = crate::platform::memory().map(|m| decide::Ram {
        available: m.available,
        reserve: (m.total as f64 * s.ram_reserve_pct / 100.0) as u64,
        reserve_pct: s.ram_reserve_pct.round() as u32,
        pending: st.pending.values().map(|(_, f)| f).sum(),
    });
    let reserve = (s.disk_reserve_gb * 1e9) as u64;
    let mut paths: Vec<String> = vec![d.paths.home().display().to_string()];
    for r in rows {
        if !paths.contains(&r.disk_path) {
            paths.push(r.disk_path.clone());
        }
    }
    let disks = paths
        .into_iter()
        .filter_map(|path| {
            let free = crate::platform::disk_free(std::path::Path::new(&path))?;
            Some(decide::Disk {
                path,
                free,
                reserve,
            })
        })
        .collect();
    Ok(Room {
        max_parallel: s.max_parallel,
        active,
        ram,
        disks,
        resume_margin: 0,
    })
}

/// One look at the room for `ticket`, admitting it when it is next and
/// fits (under the lock, so two tickets never take the same room).
fn look(d: &Arc<Daemon>, ticket: i64) -> Result<Step, ApiError> {
    let mut st = d.admission.lock();
    let rows = d.registry().queue().map_err(internal)?;
    let Some(me) = rows.iter().position(|r| r.ticket == ticket) else {
        return Ok(Step::Gone);
    };
    let queue = waiting(d, &rows);
    let room = room(d, &st, &rows)?;
    let decision = decide::decide(&queue, &room);
    if decision == Decision::Admit(me) {
        let row = &rows[me];
        d.registry().dequeue(ticket).map_err(internal)?;
        let key = (row.project.clone(), row.world.clone());
        st.pending
            .insert(key.clone(), (row.group.clone(), queue[me].footprint));
        d.admission.admissions.fetch_add(1, Ordering::Relaxed);
        let mut ev = super::world::world_event("admitted", &row.project, &row.world);
        ev.detail = Some(figures(&room, queue[me].footprint));
        d.event(ev);
        return Ok(Step::Admitted(Admitted {
            d: Arc::clone(d),
            key,
        }));
    }
    let order = decide::order(&queue, &room);
    let position = order.iter().position(|&i| i == me).unwrap_or(0) + 1;
    let reason = match decision {
        Decision::Wait(b) => b.to_string(),
        // Another ticket is next and fits: it is being admitted.
        _ => "waiting for its turn".to_owned(),
    };
    Ok(Step::Waiting(Standing {
        position,
        of: rows.len(),
        reason,
    }))
}

/// The figures an admission event carries.
fn figures(room: &Room, footprint: u64) -> String {
    let active: u32 = room.active.values().sum();
    let mut out = format!("active {active}");
    if room.max_parallel > 0 {
        out.push_str(&format!(" of max_parallel {}", room.max_parallel));
    }
    if let Some(r) = room.ram {
        out.push_str(&format!(
            ", available {}, reserve {}, pending {}",
            decide::gib(r.available),
            decide::gib(r.reserve),
            decide::gib(r.pending)
        ));
    }
    out.push_str(&format!(", footprint {}", decide::gib(footprint)));
    out
}

/// Queues an `up` of `world` in `project` (whose main checkout is
/// `disk_path`), returning its ticket.
pub(crate) fn enqueue(
    d: &Daemon,
    project: &str,
    req: &UpRequest,
    disk_path: &str,
) -> Result<i64, ApiError> {
    let request = serde_json::to_string(&req.world).map_err(internal)?;
    let t = d
        .registry()
        .enqueue(
            project,
            &req.world.name,
            req.group.as_deref().unwrap_or(""),
            &request,
            disk_path,
        )
        .map_err(internal)?;
    Ok(t)
}

/// Admits `ticket` now if it is next and fits; else where it stands.
pub(crate) fn try_admit(
    d: &Arc<Daemon>,
    ticket: i64,
) -> Result<Result<Admitted, Standing>, ApiError> {
    match look(d, ticket)? {
        Step::Admitted(a) => Ok(Ok(a)),
        Step::Waiting(s) => Ok(Err(s)),
        Step::Gone => Err(taken_out(ticket)),
    }
}

fn taken_out(ticket: i64) -> ApiError {
    ApiError::new(format!(
        "the queued `up` (ticket {ticket}) was taken out of the queue by `binky down` or `binky remove`"
    ))
}

/// Waits until `ticket` is admitted, saying where it stands whenever that
/// changes. The caller's cancel (Ctrl-C) gives up its place.
///
/// # Errors
/// Cancelled, or taken out of the queue by `down`/`remove`.
pub(crate) async fn wait(
    d: &Arc<Daemon>,
    ticket: i64,
    project: &str,
    world: &str,
    progress: &ProgressTx,
) -> Result<Admitted, ApiError> {
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
                    progress.say("admission", None, format!("admitted: {world}"));
                }
                return Ok(a);
            }
            Step::Gone => return Err(taken_out(ticket)),
            Step::Waiting(s) => {
                let msg = s.message();
                if msg != last {
                    if last.is_empty() {
                        let mut ev = super::world::world_event("admission_queued", project, world);
                        ev.detail =
                            Some(format!("position {} of {}: {}", s.position, s.of, s.reason));
                        d.event(ev);
                    }
                    progress.say("admission", None, msg.clone());
                    last = msg;
                }
            }
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = progress.until_cancelled() => {
                if d.registry().dequeue(ticket).unwrap_or(false) {
                    d.event(super::world::world_event("admission_cancelled", project, world));
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
    let gone = d
        .registry()
        .dequeue_world(project, world)
        .map_err(internal)?
        .is_some();
    if gone {
        d.event(super::world::world_event(
            "admission_withdrawn",
            project,
            world,
        ));
        d.admission.wake();
    }
    Ok(gone)
}

/// Where each queued ticket stands now, for `status`.
pub(crate) fn standings(d: &Daemon) -> HashMap<(String, String), Standing> {
    let st = d.admission.lock();
    let Ok(rows) = d.registry().queue() else {
        return HashMap::new();
    };
    if rows.is_empty() {
        return HashMap::new();
    }
    let queue = waiting(d, &rows);
    let Ok(room) = room(d, &st, &rows) else {
        return HashMap::new();
    };
    let reason = match decide::decide(&queue, &room) {
        Decision::Wait(b) => b.to_string(),
        _ => "being admitted".to_owned(),
    };
    decide::order(&queue, &room)
        .into_iter()
        .enumerate()
        .map(|(pos, i)| {
            (
                (rows[i].project.clone(), rows[i].world.clone()),
                Standing {
                    position: pos + 1,
                    of: rows.len(),
                    reason: reason.clone(),
                },
            )
        })
        .collect()
}

/// A queued world that was never made: no worktree, no services yet.
pub(crate) fn unmade(name: &str, group: Option<String>) -> crate::protocol::WorldStatus {
    crate::protocol::WorldStatus {
        name: name.to_owned(),
        slug: crate::slug::world_slug(name),
        state: crate::protocol::WorldState::Queued,
        path: String::new(),
        group: group.filter(|g| !g.is_empty()),
        error: None,
        verify: None,
        services: Vec::new(),
        queue: None,
        suspended_since: None,
    }
}

/// Puts the queue into `report`: a queued world that exists shows as
/// `queued` with its place; one never made is listed with no worktree.
pub(crate) fn fill_queue(
    d: &Daemon,
    report: &mut crate::protocol::StatusReport,
    project: Option<&str>,
) {
    let places = standings(d);
    let Ok(rows) = d.registry().queue() else {
        return;
    };
    for r in rows {
        if project.is_some_and(|p| p != r.project) {
            continue;
        }
        let place = places
            .get(&(r.project.clone(), r.world.clone()))
            .map(Standing::place);
        let at = match report.projects.iter().position(|p| p.name == r.project) {
            Some(i) => i,
            None => {
                report.projects.push(crate::protocol::ProjectStatus {
                    name: r.project.clone(),
                    root: r.disk_path.clone(),
                    worlds: Vec::new(),
                });
                report.projects.sort_by(|a, b| a.name.cmp(&b.name));
                report
                    .projects
                    .iter()
                    .position(|p| p.name == r.project)
                    .expect("just added")
            }
        };
        let worlds = &mut report.projects[at].worlds;
        let w = match worlds.iter_mut().find(|w| w.name == r.world) {
            Some(w) => w,
            None => {
                let group = Some(r.group.clone());
                worlds.push(unmade(&r.world, group));
                worlds.sort_by(|a, b| a.name.cmp(&b.name));
                worlds
                    .iter_mut()
                    .find(|w| w.name == r.world)
                    .expect("just added")
            }
        };
        w.state = crate::protocol::WorldState::Queued;
        w.queue = place;
    }
}

/// A progress sink for an `up` nobody watches (`--no-wait`, or a queue
/// carried over a restart): its cancel never fires while the task runs.
fn unwatched() -> (ProgressTx, tokio::sync::watch::Sender<bool>) {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let (cancel_tx, cancel) = tokio::sync::watch::channel(false);
    (ProgressTx { tx, cancel }, cancel_tx)
}

/// Runs a queued `up` in the background: waits for `ticket`'s admission,
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
        let admitted = match wait(&d, ticket, &project, &name, &progress).await {
            Ok(a) => a,
            Err(e) => {
                tracing::info!(world = %name, "queued up ended: {}", e.message);
                return;
            }
        };
        if let Err(e) = super::world::up_admitted(&d, req, admitted, &progress).await {
            tracing::info!(world = %name, "queued up failed: {}", e.message);
        }
    });
}

/// Carries on with the queue a previous daemon left: each ticket waits for
/// admission again, in the same order. The callers' environments were never
/// stored (they may hold secrets), so these `up`s run with the daemon's.
pub(crate) fn resume_queue(d: &Arc<Daemon>) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standings_read_as_the_issue_writes_them() {
        let s = Standing {
            position: 3,
            of: 5,
            reason: "max_parallel 4 reached".into(),
        };
        assert_eq!(s.message(), "queued: 3rd of 5 — max_parallel 4 reached");
        let o: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            o,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"
            ]
        );
    }
}
