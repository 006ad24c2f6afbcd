//! Admission: whether an `up` may start now, or waits in the queue.
//!
//! Every `up` of a world that is not already running takes a ticket in the
//! registry's queue before anything is made (no worktree, no port, no
//! slice). One *pass* looks at the room the daemon measures now (`room`),
//! orders the queue ([`decide::order`]) and admits, in that order, every
//! ticket that fits: it leaves the queue and, until its `up` settles,
//! counts against the room with its project's expected footprint, so twenty
//! concurrent `up`s never all see the same free RAM. The pass then
//! publishes where every other ticket stands (the *board*). Each waiting
//! `up` only reads the board and claims its ticket once admitted, so the
//! work of a look does not grow with the number of waiters: one pass serves
//! them all, whether 1 or 5,000 are queued.
//!
//! A pass runs when a ticket is taken or given up and when the room may
//! have grown (a world settled, went down or was removed, a reserve
//! changed). Every [`TICK`] while anything is queued, since memory and disk
//! free by themselves, a quick look at the room (never the queue) runs a
//! pass only when some need the queue holds would now be judged otherwise.
//! With nothing queued nothing is looked at. The queue is
//! durable: a daemon that restarts carries on with the same order
//! ([`resume_queue`]), and it is capped (`queue_max`, `queue_per_group`:
//! a request past a cap is refused, not queued).
//!
//! | module | holds |
//! |---|---|
//! | `entry` | how a verb came by its room (a slot held, an admission claimed or shared), withdrawn or lapsed before its world's lock |
//! | `tickets` | a ticket's life: enqueue (within the caps), wait on the board, claimed once admitted (counted until its `up` settles), withdraw; the queue a restart carries on |
//! | `room` | the room now, the pass that admits and publishes the board, where each ticket stands |
//! | [`decide`] | the pure decision: which ticket is next and whether it fits |
//! | `sampler` | memory sampling while worlds run, on a timer and on pressure stalls; each world's RSS |
//! | [`steady`] | the pure verdict on noisy readings: a real shortfall, lasting headroom |
//! | `suspend` | suspending the newest world, the hold against flapping, footprints learned |
//! | here | the shared state under one lock, and the figures every part reads |

pub(super) mod decide;
pub(super) mod steady;

use super::WorldKey;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod entry;
mod room;
mod sampler;
mod suspend;
mod tickets;
pub(crate) use entry::{Entry, keep_slot};
pub(crate) use room::{Standing, disk_reserve, fill_queue, queued_why, room_for_spare, unmade};
pub(crate) use sampler::ensure_sampler;
pub(crate) use suspend::learned;
pub(crate) use tickets::{
    after_claimer, enqueue, resume_queue, run_unwatched, taken_out, try_admit, unwatched, wait,
    withdraw,
};

/// A project's expected footprint before one of its worlds was measured,
/// bytes: conservative, so the first worlds of a project do not overrun.
pub(super) const DEFAULT_FOOTPRINT: u64 = 512 << 20;
/// How often the room is looked at again unprompted while anything is
/// queued.
pub(super) const TICK: Duration = Duration::from_secs(1);
/// How often memory (and each world's RSS) is sampled while worlds run,
/// where the kernel has no pressure-stall triggers; nothing is sampled
/// while none runs. `BINKY_SAMPLE_INTERVAL` (a duration from 250 ms to 1 h,
/// read when the daemon starts) overrides it and [`SAMPLE_WITH_PSI`].
pub(super) const SAMPLE: Duration = Duration::from_secs(2);
/// The sample interval where the kernel has pressure-stall triggers: a
/// stall wakes the sampler at once, so the plain sample runs less often.
/// It still runs, since a reserve is a policy line the kernel knows
/// nothing of: RAM can sink below it long before any task stalls.
pub(super) const SAMPLE_WITH_PSI: Duration = Duration::from_secs(5);
/// The pressure-stall trigger: some task stalled on memory for this long…
pub(super) const PSI_STALL: Duration = Duration::from_millis(150);
/// …within a window this long (2 s: the shortest an unprivileged user may
/// ask for).
pub(super) const PSI_WINDOW: Duration = Duration::from_secs(2);
/// At most one `memory_pressure` event per this long, however often the
/// kernel reports stalls (each stall still samples).
pub(super) const PRESSURE_EVENT_EVERY: Duration = Duration::from_secs(60);

/// A world admitted or resumed less than this ago is never suspended, so
/// the daemon does not flap; `BINKY_SUSPEND_HOLD` (a duration such as
/// `"10s"`, read when the daemon starts) overrides it.
pub(super) const HOLD: Duration = Duration::from_secs(30);

/// [`HOLD`], or `BINKY_SUSPEND_HOLD` (at most a day).
fn hold() -> Duration {
    static HELD: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *HELD.get_or_init(|| {
        crate::tunables::duration(
            "BINKY_SUSPEND_HOLD",
            Duration::ZERO..=Duration::from_secs(86_400),
        )
        .unwrap_or(HOLD)
    })
}

/// How long a settled world's footprint still counts against the room:
/// `MemAvailable` can take seconds to show what a just-started world holds
/// (seen on a VM that moved by a third of a 1 GiB world at first), and an
/// admission in that gap would overrun the reserve.
pub(super) const SETTLE: Duration = Duration::from_secs(5);
/// Extra RAM a resume needs above its footprint, bytes: the hysteresis that
/// keeps a world just suspended from being resumed by the memory its own
/// suspension freed.
pub(super) const RESUME_MARGIN: u64 = 256 << 20;

/// The default disk reserve on a filesystem is at most its size divided by
/// this (a tenth); one the user set is not capped.
pub(super) const DISK_RESERVE_SHARE: u64 = 10;

/// Admission's in-memory state; the queue itself is in the registry.
pub(crate) struct Admission {
    state: Mutex<State>,
    /// Wakes the admitter: the room may have grown.
    changed: tokio::sync::Notify,
    /// Wakes every verb waiting for the verb that claimed its shared
    /// ticket to finish with it ([`tickets::after_claimer`]).
    released: tokio::sync::Notify,
    /// Where each waiting ticket stands, as the last pass left it; every
    /// waiting `up` watches it.
    board: tokio::sync::watch::Sender<std::sync::Arc<Board>>,
    /// `up`s admitted since the daemon started.
    admissions: AtomicU64,
    /// Looks at the room since the daemon started (passes and the quick
    /// look of each tick): a test's proof that admission looked again.
    looks: AtomicU64,
    /// Passes over the whole queue since the daemon started.
    passes: AtomicU64,
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

impl Default for Admission {
    fn default() -> Self {
        Admission {
            state: Mutex::default(),
            changed: tokio::sync::Notify::new(),
            released: tokio::sync::Notify::new(),
            board: tokio::sync::watch::Sender::new(std::sync::Arc::default()),
            admissions: AtomicU64::default(),
            looks: AtomicU64::default(),
            passes: AtomicU64::default(),
            resample: tokio::sync::Notify::new(),
            samples: AtomicU64::default(),
            stalls: AtomicU64::default(),
            watch: std::sync::atomic::AtomicU8::default(),
        }
    }
}

/// What the last pass published: where each waiting ticket stands.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Board {
    /// By ticket.
    standings: HashMap<i64, Standing>,
    /// Admissions so far: a pass that admits changes the board even when
    /// the ticket it admitted was never on it (queued and admitted between
    /// two passes), so its waiter wakes to claim it.
    admitted: u64,
    /// The waiting tickets in admission order, as the pass read them:
    /// what `status` lists, without reading the queue again.
    rows: Vec<crate::registry::QueueRow>,
}

/// What a tick's quick look compares with the last pass, to skip a pass
/// that would change nothing: the disks the queue needs, each distinct
/// (footprint, resume) in it, and whether each fitted (and why not).
#[derive(Debug, Default)]
struct Glance {
    disks: Vec<String>,
    needs: Vec<(u64, bool)>,
    seen: Vec<Option<String>>,
}

const WATCH_IDLE: u8 = 0;
const WATCH_SAMPLING: u8 = 1;
const WATCH_PSI: u8 = 2;

#[derive(Default)]
struct State {
    /// Admitted, not yet settled: (project, world) → ((caller, group),
    /// footprint).
    pending: HashMap<WorldKey, (decide::Slot, u64)>,
    /// Admitted by a pass, not yet claimed by a waiting `up`: ticket →
    /// (project, world).
    unclaimed: HashMap<i64, WorldKey>,
    /// Claimed by a verb whose run has not settled yet.
    claimed: std::collections::HashSet<i64>,
    /// Tickets taken out of the queue (`down`, `remove`, a cancel), the
    /// newest [`WITHDRAWN_KEPT`]: a verb waiting on one, or holding its
    /// admission but not yet its world's lock, ends instead of making
    /// anything.
    withdrawn: std::collections::BTreeSet<i64>,
    /// Settled within [`SETTLE`]: (project, world) → (ticket, footprint).
    /// Their memory still counts against the room, since `MemAvailable`
    /// can take seconds to show what a world just started holds.
    settling: HashMap<WorldKey, (i64, u64)>,
    /// The sampler runs (while any world is active).
    sampling: bool,
    /// The admitter runs (from the first ticket or the daemon's start on).
    admitting: bool,
    /// The last pass's [`Glance`]; `None` when the queue changed since.
    glance: Option<Glance>,
    /// Peak RSS seen per running world, bytes.
    peaks: HashMap<i64, u64>,
    /// Recent `MemAvailable` readings, judged by [`steady`].
    trend: steady::Trend,
    /// Per world, its suspend hold (doubled each time it is suspended again
    /// soon after a resume) and when it last resumed.
    backoff: HashMap<WorldKey, Backoff>,
}

/// One world's suspend hold and last resume.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    hold: Duration,
    resumed: Option<std::time::Instant>,
}

/// How many withdrawn tickets admission remembers. A verb checks its
/// ticket within moments of the withdrawal (it waits on the board or on its
/// world's lock); tickets only grow, so the oldest are dropped first.
pub(super) const WITHDRAWN_KEPT: usize = 4096;

/// The longest a world's doubled hold grows.
pub(super) const MAX_HOLD: Duration = Duration::from_secs(3600);
/// How often the sampler reads memory while a verdict is pending (a
/// reading below the reserve, or a resume waiting for its headroom to
/// last), so a lasting shortfall or headroom is judged in seconds.
pub(super) const CONFIRM: Duration = Duration::from_secs(1);

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

// One monotonic clock, for `steady::Trend`.
use crate::clock::mono_ms;

impl State {
    /// World `key`'s hold now: [`hold`], or more after repeated suspends.
    fn hold_of(&self, key: &WorldKey) -> Duration {
        self.backoff.get(key).map_or_else(hold, |b| b.hold)
    }
}

impl Admission {
    /// Asks for a pass soon: the room may have grown. A wake while a pass
    /// runs is kept, so none is lost.
    pub(crate) fn wake(&self) {
        self.changed.notify_one();
    }

    /// `up`s admitted since the daemon started.
    pub(crate) fn admissions(&self) -> u64 {
        self.admissions.load(Ordering::Relaxed)
    }

    /// Looks at the room since the daemon started.
    pub(crate) fn looks(&self) -> u64 {
        self.looks.load(Ordering::Relaxed)
    }

    /// Passes over the whole queue since the daemon started.
    pub(crate) fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
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
}
