//! The memory sampler: runs while worlds run, samples on a timer and on
//! pressure-stall triggers, measures each world's RSS, and suspends the
//! newest world when a shortfall below the reserve is real ([`steady`](super::steady)).

use super::suspend::suspend;
use super::{
    CONFIRM, PRESSURE_EVENT_EVERY, PSI_STALL, PSI_WINDOW, SAMPLE, SAMPLE_WITH_PSI, WATCH_IDLE,
    WATCH_PSI, WATCH_SAMPLING, jittered, mono_ms,
};
use crate::daemon::events::EventKind;
use crate::daemon::{Daemon, WorldKey};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// [`SAMPLE`] or [`SAMPLE_WITH_PSI`], or `BINKY_SAMPLE_INTERVAL`.
pub(super) fn sample_interval(psi: bool) -> Duration {
    static SET: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    // A sample costs about a millisecond: below 250 ms the daemon would
    // spend more watching memory than the worlds it watches.
    let set = *SET.get_or_init(|| {
        crate::tunables::duration(
            "BINKY_SAMPLE_INTERVAL",
            Duration::from_millis(250)..=Duration::from_secs(3600),
        )
    });
    set.unwrap_or(if psi { SAMPLE_WITH_PSI } else { SAMPLE })
}
/// Whether the sampler may arm a pressure-stall trigger: `BINKY_PSI=off`
/// (read when the daemon starts) makes it sample only, as on a kernel
/// without PSI, for a kernel whose triggers misfire.
pub(super) fn psi_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| {
        !std::env::var("BINKY_PSI").is_ok_and(|v| matches!(v.trim(), "off" | "0" | "false" | "no"))
    })
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
            // What share of the last 10 s tasks stalled: one reading for
            // the event and the verdict both.
            let stalled = stalled.then(|| crate::platform::memory_pressure_avg10().unwrap_or(0.0));
            if let Some(share) = stalled {
                d.admission.stalls.fetch_add(1, Ordering::Relaxed);
                if last_event.is_none_or(|t| t.elapsed() >= PRESSURE_EVENT_EVERY) {
                    last_event = Some(std::time::Instant::now());
                    pressure_event(&d, share);
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
pub(super) async fn stalled(
    trigger: Option<&crate::platform::PressureTrigger>,
) -> std::io::Result<()> {
    match trigger {
        Some(t) => t.stalled().await,
        None => std::future::pending().await,
    }
}

/// `memory_pressure` in events.log: the kernel reported tasks stalled on
/// memory, with the stall share (`some avg10`, percent) and the RAM figures
/// as sampled now.
pub(super) fn pressure_event(d: &Daemon, avg10: f64) {
    let mut detail = format!("tasks stalled on memory {avg10:.2} % of the last 10 s");
    if let (Some(mem), Ok(s)) = (crate::platform::memory(), d.registry(|r| r.settings())) {
        let reserve = (mem.total as f64 * s.ram_reserve_pct / 100.0) as u64;
        detail.push_str(&format!(
            "; available {}, reserve {}",
            super::decide::gib(mem.available),
            super::decide::gib(reserve)
        ));
    }
    d.event(crate::daemon::events::Event::named(EventKind::MemoryPressure).detail(detail));
}

/// One sample: each running world's RSS (its peak learned as its project's
/// footprint), and a `MemAvailable` reading into the trend; when the trend
/// shows a real shortfall below the reserve ([`steady`](super::steady)), the newest world
/// past its hold is suspended. The last running world is suspended only
/// when the pressure is beyond doubt ([`Shortfall::takes_the_last_world`](super::steady::Shortfall::takes_the_last_world)):
/// suspending every world leaves nothing done, and a shortfall other
/// programs cause is not ended by it. `stalled`: the stall trigger fired,
/// with the share of the last 10 s tasks stalled, percent.
///
/// Returns whether anything is running or waiting to resume (the sampler
/// goes on), and whether a verdict is pending (sample again soon).
pub(super) async fn sample(d: &Arc<Daemon>, stalled: Option<f64>) -> (bool, bool) {
    let Ok(active) = d.registry(|r| r.active_worlds()) else {
        return (true, false);
    };
    let resuming = d
        .registry(|r| r.queue())
        .is_ok_and(|q| q.iter().any(|r| r.resume));
    let running: Vec<_> = active
        .iter()
        .filter(|w| w.state != crate::protocol::WorldState::Suspended)
        .collect();
    let (Some(mem), Ok(s)) = (crate::platform::memory(), d.registry(|r| r.settings())) else {
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
    let beyond_doubt = shortfall.takes_the_last_world();
    let now = crate::registry::now_ms();
    let candidates: Vec<super::decide::Active> = {
        let st = d.admission.lock();
        running
            .iter()
            .filter(|w| w.state == crate::protocol::WorldState::Running)
            .map(|w| super::decide::Active {
                world: w.id,
                since: w.admitted_at.unwrap_or(0).max(0) as u64,
                suspendable: now - w.admitted_at.unwrap_or(0)
                    >= st.hold_of(&WorldKey::new(&w.project, &w.world)).as_millis() as i64,
            })
            .collect()
    };
    if running.len() <= 1 && !beyond_doubt {
        return (true, confirm);
    }
    if let Some(id) = super::decide::newest_suspendable(&candidates)
        && let Some(w) = running.iter().find(|w| w.id == id)
    {
        let why = format!("suspended: {}", shortfall.describe(reserve, pct));
        suspend(d, w, &why).await;
    }
    (true, confirm)
}

/// Measures each world's RSS now (`(world id, project)`; the sum over its
/// process groups), keeps its peak, and raises its project's footprint to
/// it at once (conservative; [`learned`](super::suspend::learned) lowers it when the world stops).
pub(super) fn measure(d: &Daemon, worlds: &[(i64, &str)]) {
    // Every world's process groups, then one pass over /proc for all.
    let mut groups: Vec<(usize, u32)> = Vec::new();
    for (i, (id, _)) in worlds.iter().enumerate() {
        let procs = d.registry(|r| r.world_processes(*id)).unwrap_or_default();
        groups.extend(procs.iter().filter_map(|p| p.live_pid()).map(|g| (i, g)));
    }
    let pgids: Vec<u32> = groups.iter().map(|(_, g)| *g).collect();
    let mut rss = vec![0u64; worlds.len()];
    for ((i, _), bytes) in groups.iter().zip(crate::platform::groups_rss(&pgids)) {
        rss[*i] += bytes;
    }
    // And what each world started that left its groups (a daemonized
    // server): found by the world's token, counted once.
    let strays = crate::daemon::world::strays::by_token(d);
    for (i, (id, _)) in worlds.iter().enumerate() {
        let Ok(Some(token)) = d.registry(|r| r.world_token(*id)) else {
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
        let known = d.registry(|r| r.footprint(project)).ok().flatten();
        if peak > 0 && known.is_none_or(|f| peak > f) {
            let _ = d.registry(|r| r.set_footprint(project, peak));
        }
    }
}
