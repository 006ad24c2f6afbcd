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
pub mod steady;

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
/// How often memory (and each world's RSS) is sampled while worlds run,
/// where the kernel has no pressure-stall triggers; nothing is sampled
/// while none runs. `BINKY_SAMPLE_INTERVAL` (a duration from 250 ms to 1 h,
/// read when the daemon starts) overrides it and [`SAMPLE_WITH_PSI`].
pub const SAMPLE: Duration = Duration::from_secs(2);
/// The sample interval where the kernel has pressure-stall triggers: a
/// stall wakes the sampler at once, so the plain sample runs less often.
/// It still runs, since a reserve is a policy line the kernel knows
/// nothing of: RAM can sink below it long before any task stalls.
pub const SAMPLE_WITH_PSI: Duration = Duration::from_secs(5);
/// The pressure-stall trigger: some task stalled on memory for this long…
pub const PSI_STALL: Duration = Duration::from_millis(150);
/// …within a window this long (2 s: the shortest an unprivileged user may
/// ask for).
pub const PSI_WINDOW: Duration = Duration::from_secs(2);
/// At most one `memory_pressure` event per this long, however often the
/// kernel reports stalls (each stall still samples).
pub const PRESSURE_EVENT_EVERY: Duration = Duration::from_secs(60);

/// [`SAMPLE`] or [`SAMPLE_WITH_PSI`], or `BINKY_SAMPLE_INTERVAL`.
fn sample_interval(psi: bool) -> Duration {
    static SET: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    // A sample costs about a millisecond: below 250 ms the daemon would
    // spend more watching memory than the worlds it watches.
    let set = *SET.get_or_init(|| {
        env_duration(
            "BINKY_SAMPLE_INTERVAL",
            Duration::from_millis(250),
            Duration::from_secs(3600),
        )
    });
    set.unwrap_or(if psi { SAMPLE_WITH_PSI } else { SAMPLE })
}
/// Whether the sampler may arm a pressure-stall trigger: `BINKY_PSI=off`
/// (read when the daemon starts) makes it sample only, as on a kernel
/// without PSI, for a kernel whose triggers misfire.
fn psi_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| {
        !std::env::var("BINKY_PSI").is_ok_and(|v| matches!(v.trim(), "off" | "0" | "false" | "no"))
    })
}

/// A world admitted or resumed less than this ago is never suspended, so
/// the daemon does not flap; `BINKY_SUSPEND_HOLD` (a duration such as
/// `"10s"`, read when the daemon starts) overrides it.
pub const HOLD: Duration = Duration::from_secs(30);

/// [`HOLD`], or `BINKY_SUSPEND_HOLD` (at most a day).
fn hold() -> Duration {
    static HELD: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *HELD.get_or_init(|| {
        env_duration(
            "BINKY_SUSPEND_HOLD",
            Duration::ZERO,
            Duration::from_secs(86_400),
        )
        .unwrap_or(HOLD)
    })
}

/// A duration from environment variable `name` (humantime: `"10s"`,
/// `"1min"`), kept within `min..=max`. Unset gives `None`; a value that
/// does not parse gives `None` too, with a warning in daemon.log naming
/// the variable, since the daemon has no terminal to say it on.
fn env_duration(name: &str, min: Duration, max: Duration) -> Option<Duration> {
    let raw = std::env::var(name).ok()?;
    match humantime::parse_duration(raw.trim()) {
        Ok(d) if d < min || d > max => {
            let kept = d.clamp(min, max);
            tracing::warn!(
                "{name}={raw:?} is outside {}..={}: using {}",
                humantime::format_duration(min),
                humantime::format_duration(max),
                humantime::format_duration(kept)
            );
            Some(kept)
        }
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!("{name}={raw:?} is not a duration ({e}; write e.g. \"10s\"): ignored");
            None
        }
    }
}
/// How long a settled world's footprint still counts against the room:
/// `MemAvailable` can take seconds to show what a just-started world holds
/// (seen on a VM that moved by a third of a 1 GiB world at first), and an
/// admission in that gap would overrun the reserve.
pub const SETTLE: Duration = Duration::from_secs(5);
/// Extra RAM a resume needs above its footprint, bytes: the hysteresis that
/// keeps a world just suspended from being resumed by the memory its own
/// suspension freed.
pub const RESUME_MARGIN: u64 = 256 << 20;

/// The default disk reserve on a filesystem is at most its size divided by
/// this (a tenth); one the user set is not capped.
pub const DISK_RESERVE_SHARE: u64 = 10;

/// Admission's in-memory state; the queue itself is in the registry.
#[derive(Default)]
pub(crate) struct Admission {
    state: Mutex<State>,
    /// Woken when the room may have grown.
    changed: tokio::sync::Notify,
    /// `up`s admitted since the daemon started.
    admissions: AtomicU64,
    /// Looks at the room (a queued ticket's, or `status`'s) since the daemon
    /// started: a test's proof that admission looked again.
    looks: AtomicU64,
    /// Asks the sampler for a sample now (a reserve changed); a permit is
    /// kept when it is busy, so none is lost.
    resample: tokio::sync::Notify,
    /// Samples taken since the daemon started.
    samples: AtomicU64,
    /// Pressure-stall triggers fired since the daemon started.
    stalls: AtomicU64,
    /// [`WATCH_IDLE`], [`WATCH_SAMPLING`] or [`WATCH_PSI`].
    watch: std::sync::atomic::AtomicU8,
}

const WATCH_IDLE: u8 = 0;
const WATCH_SAMPLING: u8 = 1;
const WATCH_PSI: u8 = 2;

#[derive(Default)]
struct State {
    /// Admitted, not yet settled: (project, world) → (group, footprint).
    pending: HashMap<(String, String), (String, u64)>,
    /// Settled within [`SETTLE`]: (project, world) → (ticket, footprint).
    /// Their memory still counts against the room, since `MemAvailable`
    /// can take seconds to show what a world just started holds.
    settling: HashMap<(String, String), (i64, u64)>,
    /// The sampler runs (while any world is active).
    sampling: bool,
    /// Peak RSS seen per running world, bytes.
    peaks: HashMap<i64, u64>,
    /// Recent `MemAvailable` readings, judged by [`steady`].
    trend: steady::Trend,
    /// Per world, its suspend hold (doubled each time it is suspended again
    /// soon after a resume) and when it last resumed.
    backoff: HashMap<(String, String), Backoff>,
}

/// One world's suspend hold and last resume.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    hold: Duration,
    resumed: Option<std::time::Instant>,
}

/// The longest a world's doubled hold grows.
pub const MAX_HOLD: Duration = Duration::from_secs(3600);
/// How often the sampler reads memory while a verdict is pending (a
/// reading below the reserve, or a resume waiting for its headroom to
/// last), so a lasting shortfall or headroom is judged in seconds.
pub const CONFIRM: Duration = Duration::from_secs(1);

/// `every` moved by up to a quarter either way, at random: readings at a
/// fixed interval alias with memory that other programs move periodically
/// (a load cycling at twice the interval is read at the same two points of
/// its cycle every time, which may both lie in its trough); spread, they
/// sample the whole cycle.
fn jittered(every: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A fresh random seed each call (std's hasher keys), no crate needed.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let quarter = every.as_millis() as u64 / 4;
    if quarter == 0 {
        return every;
    }
    let shift = r % (2 * quarter + 1);
    every + Duration::from_millis(shift) - Duration::from_millis(quarter)
}

/// Milliseconds on one monotonic clock, for [`steady::Trend`].
fn mono_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

impl State {
    /// World `key`'s hold now: [`hold`], or more after repeated suspends.
    fn hold_of(&self, key: &(String, String)) -> Duration {
        self.backoff.get(key).map_or_else(hold, |b| b.hold)
    }
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

    /// Looks at the room since the daemon started.
    pub(crate) fn looks(&self) -> u64 {
        self.looks.load(Ordering::Relaxed)
    }

    /// Takes a memory sample now, if the sampler runs (any world does).
    pub(crate) fn resample(&self) {
        self.resample.notify_one();
    }

    /// Memory samples taken since the daemon started.
    pub(crate) fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// Pressure-stall triggers fired since the daemon started.
    pub(crate) fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    /// How memory is watched now: `"idle"`, `"sampling"` or `"psi"`.
    pub(crate) fn watch(&self) -> &'static str {
        match self.watch.load(Ordering::Relaxed) {
            WATCH_PSI => "psi",
            WATCH_SAMPLING => "sampling",
            _ => "idle",
        }
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
    ticket: i64,
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

use super::errors::internal;

/// The queue as [`decide`] sees it, row for row.
fn waiting(d: &Daemon, rows: &[QueueRow]) -> Vec<Waiting> {
    let reg = d.registry();
    // One read per project, not per queued world: a swarm is one project.
    let mut footprints: HashMap<&str, u64> = HashMap::new();
    rows.iter()
        .map(|r| Waiting {
            ticket: r.ticket,
            since: r.since,
            group: r.group.clone(),
            footprint: *footprints.entry(&r.project).or_insert_with(|| {
                reg.footprint(&r.project)
                    .ok()
                    .flatten()
                    .unwrap_or(DEFAULT_FOOTPRINT)
            }),
            resume: r.resume,
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
        steady: st.trend.steady(),
        pending: st.pending.values().map(|(_, f)| f).sum::<u64>()
            + st.settling
                .iter()
                .filter(|(k, _)| !st.pending.contains_key(*k))
                .map(|(_, (_, f))| f)
                .sum::<u64>(),
    });
    let reserve = (s.disk_reserve_gb * 1e9) as u64;
    // The default reserve (5 GB) is a guess made for a large disk: on a
    // small filesystem (a 1 GB /tmp) it would keep every `up` queued for
    // good, so it is at most a tenth of each. A reserve the user set is
    // kept as set.
    let chosen = d
        .registry()
        .setting_is_set("disk_reserve_gb")
        .map_err(internal)?;
    let mut paths: Vec<String> = vec![d.paths.home().display().to_string()];
    for r in rows {
        if !paths.contains(&r.disk_path) {
            paths.push(r.disk_path.clone());
        }
    }
    let disks = paths
        .into_iter()
        .filter_map(|path| {
            let (free, size) = crate::platform::disk_space(std::path::Path::new(&path))?;
            Some(decide::Disk {
                path,
                free,
                reserve: if chosen {
                    reserve
                } else {
                    reserve.min(size / DISK_RESERVE_SHARE)
                },
            })
        })
        .collect();
    Ok(Room {
        max_parallel: s.max_parallel,
        active,
        ram,
        disks,
        // Above the noise, so a resume is not undone by the next dip.
        resume_margin: RESUME_MARGIN.max(st.trend.band()),
    })
}

/// One look at the room for `ticket`, admitting it when it is next and
/// fits (under the lock, so two tickets never take the same room).
fn look(d: &Arc<Daemon>, ticket: i64) -> Result<Step, ApiError> {
    let started = std::time::Instant::now();
    d.admission.looks.fetch_add(1, Ordering::Relaxed);
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
        d.registry().mark_admitted(ticket).map_err(internal)?;
        crate::faults::point("admission:admitted");
        let key = (row.project.clone(), row.world.clone());
        st.pending
            .insert(key.clone(), (row.group.clone(), queue[me].footprint));
        if row.resume {
            let b = st.backoff.entry(key.clone()).or_insert(Backoff {
                hold: hold(),
                resumed: None,
            });
            b.resumed = Some(std::time::Instant::now());
        }
        d.admission.admissions.fetch_add(1, Ordering::Relaxed);
        let name = if row.resume {
            crate::daemon::events::EventKind::Resumed
        } else {
            crate::daemon::events::EventKind::Admitted
        };
        let mut ev = super::world::world_event(name, &row.project, &row.world);
        ev.detail = Some(format!(
            "ticket {ticket}, {}; decided in {:.2} ms",
            figures(&room, queue[me].footprint),
            started.elapsed().as_secs_f64() * 1000.0
        ));
        d.event(ev);
        return Ok(Step::Admitted(Admitted {
            d: Arc::clone(d),
            key,
            ticket,
        }));
    }
    let reasons = decide::reasons(&queue, &room);
    let position = reasons.iter().position(|(i, _)| *i == me).unwrap_or(0);
    let reason = match (position, decision) {
        // Another ticket is next and fits: it is being admitted.
        (0, Decision::Wait(b)) => b.to_string(),
        (_, _) => reasons
            .get(position)
            .map(|(_, r)| r.clone())
            .unwrap_or_default(),
    };
    Ok(Step::Waiting(Standing {
        position: position + 1,
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
fn admitted_elsewhere(d: &Daemon, project: &str, world: &str) -> bool {
    let key = (project.to_owned(), world.to_owned());
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

fn taken_out(ticket: i64) -> ApiError {
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
                        let mut ev = super::world::world_event(
                            crate::daemon::events::EventKind::AdmissionQueued,
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
                    d.event(super::world::world_event(crate::daemon::events::EventKind::AdmissionCancelled, project, world));
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
            crate::daemon::events::EventKind::AdmissionWithdrawn,
            project,
            world,
        ));
        d.admission.wake();
    }
    Ok(gone)
}

/// Where each queued ticket stands now, for `status`.
fn standings(d: &Daemon, rows: &[QueueRow]) -> HashMap<(String, String), Standing> {
    let st = d.admission.lock();
    if rows.is_empty() {
        return HashMap::new();
    }
    let queue = waiting(d, rows);
    let Ok(room) = room(d, &st, rows) else {
        return HashMap::new();
    };
    decide::reasons(&queue, &room)
        .into_iter()
        .enumerate()
        .map(|(pos, (i, reason))| {
            (
                (rows[i].project.clone(), rows[i].world.clone()),
                Standing {
                    position: pos + 1,
                    of: rows.len(),
                    reason,
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
    let Ok(rows) = d.registry().queue() else {
        return;
    };
    let places = standings(d, &rows);
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
        // A resume keeps its world's own state, `suspended`, with the place
        // and reason it waits for now.
        if !r.resume {
            w.state = crate::protocol::WorldState::Queued;
        }
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
        if let Err(e) = super::world::up_admitted(&d, req, admitted, &progress).await {
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

/// Starts the sampler unless it runs. While any world is running or
/// starting it samples every [`sample_interval`], at once when a reserve
/// changes, and — where the kernel has pressure-stall triggers — at once
/// when tasks stall on memory. It stops when no world runs: an idle daemon
/// reads no memory at all, and holds no trigger.
pub(crate) fn ensure_sampler(d: &Arc<Daemon>) {
    {
        let mut st = d.admission.lock();
        if st.sampling {
            return;
        }
        st.sampling = true;
    }
    let d = Arc::clone(d);
    tokio::spawn(async move {
        let mut trigger = if psi_allowed() {
            crate::platform::PressureTrigger::memory(PSI_STALL, PSI_WINDOW)
                .inspect_err(|e| tracing::debug!("no memory pressure trigger ({e}): sampling"))
                .ok()
        } else {
            None
        };
        let mut last_event: Option<std::time::Instant> = None;
        let mut confirming = false;
        loop {
            let psi = trigger.is_some();
            d.admission.watch.store(
                if psi { WATCH_PSI } else { WATCH_SAMPLING },
                Ordering::Relaxed,
            );
            let every = jittered(if confirming {
                sample_interval(psi).min(CONFIRM)
            } else {
                sample_interval(psi)
            });
            let stalled = tokio::select! {
                () = tokio::time::sleep(every) => false,
                () = d.admission.resample.notified() => false,
                r = stalled(trigger.as_ref()) => match r {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!("memory pressure trigger failed ({e}): sampling");
                        trigger = None;
                        false
                    }
                },
            };
            if stalled {
                d.admission.stalls.fetch_add(1, Ordering::Relaxed);
                if last_event.is_none_or(|t| t.elapsed() >= PRESSURE_EVENT_EVERY) {
                    last_event = Some(std::time::Instant::now());
                    pressure_event(&d);
                }
            }
            d.admission.samples.fetch_add(1, Ordering::Relaxed);
            let (busy, confirm) = sample(&d, stalled).await;
            confirming = confirm;
            let mut st = d.admission.lock();
            if !busy && st.pending.is_empty() {
                st.sampling = false;
                st.peaks.clear();
                st.trend.clear();
                d.admission.watch.store(WATCH_IDLE, Ordering::Relaxed);
                return;
            }
        }
    });
}

/// The trigger firing, or never without one.
async fn stalled(trigger: Option<&crate::platform::PressureTrigger>) -> std::io::Result<()> {
    match trigger {
        Some(t) => t.stalled().await,
        None => std::future::pending().await,
    }
}

/// `memory_pressure` in events.log: the kernel reported tasks stalled on
/// memory, with the stall share and the RAM figures as sampled now.
fn pressure_event(d: &Daemon) {
    let avg10 = crate::platform::memory_pressure_avg10().unwrap_or(0.0);
    let mut detail = format!("tasks stalled on memory {avg10:.2} % of the last 10 s");
    if let (Some(mem), Ok(s)) = (crate::platform::memory(), d.registry().settings()) {
        let reserve = (mem.total as f64 * s.ram_reserve_pct / 100.0) as u64;
        detail.push_str(&format!(
            "; available {}, reserve {}",
            decide::gib(mem.available),
            decide::gib(reserve)
        ));
    }
    d.event(
        super::events::Event::named(crate::daemon::events::EventKind::MemoryPressure)
            .detail(detail),
    );
}

/// One sample: each running world's RSS (its peak learned as its project's
/// footprint), and a `MemAvailable` reading into the trend; when the trend
/// shows a real shortfall below the reserve ([`steady`]), the newest world
/// past its hold is suspended. The last running world is suspended only
/// when the pressure is beyond doubt (a stall, or a drop far below the
/// line): suspending every world leaves nothing done, and a shortfall other
/// programs cause is not ended by it.
///
/// Returns whether anything is running or waiting to resume (the sampler
/// goes on), and whether a verdict is pending (sample again soon).
async fn sample(d: &Arc<Daemon>, stalled: bool) -> (bool, bool) {
    let Ok(active) = d.registry().active_worlds() else {
        return (true, false);
    };
    let resuming = d
        .registry()
        .queue()
        .is_ok_and(|q| q.iter().any(|r| r.resume));
    let running: Vec<_> = active
        .iter()
        .filter(|w| w.state != crate::protocol::WorldState::Suspended)
        .collect();
    let (Some(mem), Ok(s)) = (crate::platform::memory(), d.registry().settings()) else {
        return (!running.is_empty() || resuming, false);
    };
    let reserve = (mem.total as f64 * s.ram_reserve_pct / 100.0) as u64;
    let pct = s.ram_reserve_pct.round() as u32;
    let shortfall = {
        let mut st = d.admission.lock();
        st.trend.push(mono_ms(), mem.available);
        st.trend.shortfall(reserve, stalled)
    };
    // A resume waits on lasting headroom: wake it as readings come in.
    if resuming {
        d.admission.wake();
    }
    let confirm = resuming || mem.available < reserve;
    if running.is_empty() {
        return (resuming, confirm);
    }
    let worlds: Vec<(i64, &str)> = running.iter().map(|w| (w.id, w.project.as_str())).collect();
    measure(d, &worlds);
    let Some(shortfall) = shortfall else {
        return (true, confirm);
    };
    let beyond_doubt = !matches!(shortfall, steady::Shortfall::Lasting { .. });
    let now = crate::registry::now_ms();
    let candidates: Vec<decide::Active> = {
        let st = d.admission.lock();
        running
            .iter()
            .filter(|w| w.state == crate::protocol::WorldState::Running)
            .map(|w| decide::Active {
                world: w.id,
                since: w.admitted_at.unwrap_or(0).max(0) as u64,
                suspendable: now - w.admitted_at.unwrap_or(0)
                    >= st
                        .hold_of(&(w.project.clone(), w.world.clone()))
                        .as_millis() as i64,
            })
            .collect()
    };
    if running.len() <= 1 && !beyond_doubt {
        return (true, confirm);
    }
    if let Some(id) = decide::newest_suspendable(&candidates)
        && let Some(w) = running.iter().find(|w| w.id == id)
    {
        let why = format!("suspended: {}", shortfall.describe(reserve, pct));
        suspend(d, w, &why).await;
    }
    (true, confirm)
}

/// Measures each world's RSS now (`(world id, project)`; the sum over its
/// process groups), keeps its peak, and raises its project's footprint to
/// it at once (conservative; [`learned`] lowers it when the world stops).
fn measure(d: &Daemon, worlds: &[(i64, &str)]) {
    // Every world's process groups, then one pass over /proc for all.
    let mut groups: Vec<(usize, u32)> = Vec::new();
    for (i, (id, _)) in worlds.iter().enumerate() {
        let procs = d.registry().world_processes(*id).unwrap_or_default();
        groups.extend(procs.iter().filter_map(|p| p.live_pid()).map(|g| (i, g)));
    }
    let pgids: Vec<u32> = groups.iter().map(|(_, g)| *g).collect();
    let mut rss = vec![0u64; worlds.len()];
    for ((i, _), bytes) in groups.iter().zip(crate::platform::groups_rss(&pgids)) {
        rss[*i] += bytes;
    }
    // And what each world started that left its groups (a daemonized
    // server): found by the world's token, counted once.
    let strays = super::world::strays::by_token(d);
    for (i, (id, _)) in worlds.iter().enumerate() {
        let Ok(Some(token)) = d.registry().world_token(*id) else {
            continue;
        };
        for (_, pgrp, bytes) in strays.get(&token).into_iter().flatten() {
            if !pgids.contains(pgrp) {
                rss[i] += bytes;
            }
        }
    }
    // Each project's footprint raised once, to its largest world's peak.
    let mut largest: HashMap<&str, u64> = HashMap::new();
    {
        let mut st = d.admission.lock();
        for ((id, project), rss) in worlds.iter().zip(rss) {
            let peak = st.peaks.entry(*id).or_default();
            *peak = (*peak).max(rss);
            let most = largest.entry(project).or_default();
            *most = (*most).max(*peak);
        }
    }
    for (project, peak) in largest {
        let known = d.registry().footprint(project).ok().flatten();
        if peak > 0 && known.is_none_or(|f| peak > f) {
            let _ = d.registry().set_footprint(project, peak);
        }
    }
}

/// Suspends world `w`: its processes stopped as `down` stops them (a
/// stopped process frees its memory; SIGSTOP would free nothing without
/// swap), its ports, slices and files kept, state `suspended`, and a resume
/// queued in its original place.
async fn suspend(d: &Arc<Daemon>, w: &crate::registry::ActiveRow, why: &str) {
    let request = WorldRef {
        project_dir: None,
        project: Some(w.project.clone()),
        name: w.world.clone(),
    };
    // What it holds right before it goes is what its resume must find.
    measure(d, &[(w.id, &w.project)]);
    if let Err(e) = super::world::suspend(d, &w.project, &w.world, why).await {
        tracing::warn!(world = %w.world, "could not suspend: {}", e.message);
        return;
    }
    learned(d, w.id, &w.project);
    let disk_path = d
        .registry()
        .project_root(&w.project)
        .ok()
        .flatten()
        .unwrap_or_default();
    let json = serde_json::to_string(&request).unwrap_or_default();
    let since = w.admitted_at.unwrap_or_else(crate::registry::now_ms);
    let ticket = match d
        .registry()
        .enqueue_resume(&w.project, &w.world, &w.group, &json, &disk_path, since)
    {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(world = %w.world, "could not queue the resume: {e}");
            return;
        }
    };
    let held = back_off(d, &w.project, &w.world);
    let mut ev = super::world::world_event(
        crate::daemon::events::EventKind::Suspended,
        &w.project,
        &w.world,
    );
    ev.detail = Some(format!(
        "{why}; not suspended again for {} after it resumes",
        humantime::format_duration(held)
    ));
    d.event(ev);
    let env = d.worlds.env_for(w.id, &ClientEnv::current());
    let req = UpRequest {
        world: request,
        group: (!w.group.is_empty()).then(|| w.group.clone()),
        env,
        wait: true,
    };
    run_unwatched(d, ticket, req);
}

/// World `project`/`world` was just suspended: when that came soon after its
/// last resume (within twice its hold), its hold doubles (up to
/// [`MAX_HOLD`]), else it is the base [`hold`] again. Returns the hold.
fn back_off(d: &Daemon, project: &str, world: &str) -> Duration {
    let mut st = d.admission.lock();
    let b = st
        .backoff
        .entry((project.to_owned(), world.to_owned()))
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
        let _ = d.registry().set_footprint(project, p);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sample_intervals_are_spread_within_a_quarter() {
        let every = std::time::Duration::from_secs(1);
        let seen: std::collections::HashSet<u128> = (0..200)
            .map(|_| super::jittered(every).as_millis())
            .collect();
        assert!(seen.iter().all(|ms| (750..=1250).contains(ms)), "{seen:?}");
        assert!(seen.len() > 50, "not spread: {seen:?}");
    }

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
