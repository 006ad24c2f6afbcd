//! The idle check: a running world with an idle time (`[project]
//! idle_after`, `up --idle-after`) whose URLs got no request, with no
//! request in flight or WebSocket open through the proxy, whose processes
//! used no more than a trace of CPU ([`TRACE_CPU_PERMILLE`]) and which ran
//! no `verify` for that long since it became running is put to sleep (see
//! `world::sleep`).
//!
//! It runs only while such a world runs: with none it waits to be told
//! one came up ([`Idle::poke`]). Each look reads the registry, the proxy's
//! [`Seen`](crate::proxy::Seen) of each world and its process groups' CPU
//! time, and sleeps until the earliest world could next be idle long
//! enough (at most a quarter of the shortest idle time, so CPU use is
//! sampled often enough to be seen).

use super::{Daemon, WorldKey};
use crate::registry::{SleeperRow, now_ms};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// CPU use that counts as activity: more than this many thousandths of one
/// core between two looks. An idle dev server (a timer, a file watcher's
/// poll) stays below it; a worker draining a queue or a build does not.
pub(crate) const TRACE_CPU_PERMILLE: u64 = 20;

/// The shortest and longest wait between two looks.
const LOOK_MIN: Duration = Duration::from_millis(250);
const LOOK_MAX: Duration = Duration::from_secs(30);

/// How long a request to a sleeping world waits for it to wake when its
/// startup time was never measured, and at most.
const HOLD_DEFAULT: Duration = Duration::from_secs(60);
const HOLD_MAX: Duration = Duration::from_secs(300);

/// The idle check's state.
#[derive(Default)]
pub(crate) struct Idle {
    state: Mutex<State>,
    /// A world came up (or its idle time changed): look again.
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    /// The check runs.
    running: bool,
    /// Per world id: its CPU time at the last look (ms), when that look
    /// was (unix ms) and when it was last busy (unix ms).
    cpu: HashMap<i64, Reading>,
    /// How long each world's last wake-up took, from the request to
    /// running: what a request to it waits for next time.
    woke_in: HashMap<WorldKey, Duration>,
    /// When each world last became running (unix ms): its idle time counts
    /// from then, however long it took to start.
    ready_at: HashMap<i64, i64>,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    cpu_ms: u64,
    at_ms: i64,
    busy_at_ms: i64,
}

impl Idle {
    /// World `id` is running now (its `up` settled): its idle time starts
    /// here, and the check looks again.
    pub(crate) fn ready(&self, id: i64) {
        self.lock().ready_at.insert(id, now_ms());
        self.changed.notify_one();
    }

    /// Asks for a look now: a world's idle time changed.
    pub(crate) fn poke(&self) {
        self.changed.notify_one();
    }

    /// Records that waking `key` took `took`.
    pub(crate) fn woke(&self, key: WorldKey, took: Duration) {
        self.lock().woke_in.insert(key, took);
    }

    /// How long a request holds for `key` to wake: twice its last wake-up
    /// (at least 10 s, at most [`HOLD_MAX`]), or [`HOLD_DEFAULT`].
    pub(crate) fn hold(&self, key: &WorldKey) -> Duration {
        self.lock().woke_in.get(key).map_or(HOLD_DEFAULT, |t| {
            t.saturating_mul(2).clamp(Duration::from_secs(10), HOLD_MAX)
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts the idle check if it does not run, else asks it to look again.
pub(crate) fn ensure_idle_check(d: &Arc<Daemon>) {
    {
        let mut st = d.idle.lock();
        if st.running {
            drop(st);
            d.idle.poke();
            return;
        }
        st.running = true;
    }
    let d = Arc::clone(d);
    tokio::spawn(async move {
        loop {
            let sleepers = d.registry(|r| r.sleepers()).unwrap_or_default();
            if sleepers.is_empty() {
                d.idle.lock().cpu.clear();
                d.idle.changed.notified().await;
                continue;
            }
            let next = look(&d, &sleepers);
            tokio::select! {
                () = tokio::time::sleep(next) => {}
                () = d.idle.changed.notified() => {}
            }
        }
    });
}

/// One look at every world that may sleep: those idle long enough are put
/// to sleep; returns how long to wait before the next look.
fn look(d: &Arc<Daemon>, sleepers: &[SleeperRow]) -> Duration {
    let now = now_ms();
    // Nothing is known of the time before this daemon started.
    let started = now - d.started.elapsed().as_millis() as i64;
    let verifying: Vec<i64> = d
        .registry(|r| r.verifies_running())
        .unwrap_or_default()
        .into_iter()
        .map(|(id, ..)| id)
        .collect();
    let mut next = LOOK_MAX;
    let mut st = d.idle.lock();
    st.cpu.retain(|id, _| sleepers.iter().any(|s| s.id == *id));
    st.ready_at
        .retain(|id, _| sleepers.iter().any(|s| s.id == *id));
    for s in sleepers {
        let ready = st.ready_at.get(&s.id).copied().unwrap_or(0);
        let cpu_ms = cpu_of(d, s.id);
        let r = st.cpu.entry(s.id).or_insert(Reading {
            cpu_ms,
            at_ms: now,
            busy_at_ms: 0,
        });
        let elapsed = (now - r.at_ms).max(0) as u64;
        // A process that restarted shows less CPU than before: it was busy.
        if cpu_ms < r.cpu_ms || cpu_ms - r.cpu_ms > elapsed * TRACE_CPU_PERMILLE / 1000 {
            r.busy_at_ms = now;
        }
        r.cpu_ms = cpu_ms;
        r.at_ms = now;
        let (ago, open) = d
            .routes
            .seen(&s.project, &s.world)
            .map_or((None, 0), |seen| seen.quiet());
        if open > 0 || verifying.contains(&s.id) {
            r.busy_at_ms = now;
        }
        let asked = ago.map_or(0, |a| now - a.as_millis() as i64);
        let since = [
            started,
            s.admitted_at.unwrap_or(0),
            ready,
            r.busy_at_ms,
            asked,
        ]
        .into_iter()
        .max()
        .unwrap_or(now);
        let idle_for = Duration::from_millis((now - since).max(0) as u64);
        let idle_after = Duration::from_millis(s.idle_after_ms);
        next = next.min(idle_after / 4);
        if idle_for >= idle_after {
            let (d, project, world) = (Arc::clone(d), s.project.clone(), s.world.clone());
            tokio::spawn(async move {
                if let Err(e) = super::world::sleep(&d, &project, &world, idle_for).await {
                    tracing::info!(world, "could not put to sleep: {}", e.message);
                }
            });
        } else {
            next = next.min(idle_after - idle_for);
        }
    }
    next.clamp(LOOK_MIN, LOOK_MAX)
}

/// The CPU time world `id`'s live process groups have used, ms.
fn cpu_of(d: &Daemon, id: i64) -> u64 {
    let procs = d.registry(|r| r.world_processes(id)).unwrap_or_default();
    let pgids: Vec<u32> = procs.iter().filter_map(|p| p.live_pid()).collect();
    crate::platform::groups_usage(&pgids)
        .iter()
        .map(|u| u.cpu_ms)
        .sum()
}
