//! A world's processes that left its process groups.
//!
//! The supervisor starts each service as the leader of its own process
//! group and stops the group. A child that calls `setsid()` — a server that
//! daemonizes itself (`pg_ctl start`, `redis-server --daemonize yes`), a
//! double fork — leaves the group and the session, and a group signal no
//! longer reaches it. Every process a world starts carries the world's
//! random token in `BINKY_WORLD_TOKEN` (and this daemon's `BINKY_HOME`),
//! which it passes on to whatever it starts: by that mark such a process is
//! still the world's, counted in its footprint and stopped with it, even
//! after a daemon restart. A process without both marks is never touched;
//! `binky env` never hands the token out, and a token in the caller's shell
//! is dropped before a process starts.

use crate::daemon::Daemon;
use crate::daemon::events::{Event as LogEvent, EventKind};
use crate::protocol::WorldState;
use crate::registry::WorldRow;
use crate::supervisor;
use std::collections::HashMap;
use std::sync::Arc;

/// The variable that marks a process as a world's.
pub(crate) const TOKEN_VAR: &str = "BINKY_WORLD_TOKEN";

/// Every live process this daemon's worlds started, by world token, with
/// its pid, process group and resident memory (bytes).
pub(crate) fn by_token(d: &Daemon) -> HashMap<String, Vec<(u32, u32, u64)>> {
    let home = d.paths.home().display().to_string();
    grouped(crate::platform::marked_processes(
        crate::paths::HOME_ENV,
        &home,
        TOKEN_VAR,
    ))
}

/// As [`by_token`], for a caller about to stop them: a process caught
/// inside `execve` is waited for, not missed
/// ([`crate::platform::marked_processes_settled`]).
async fn by_token_settled(d: &Daemon) -> HashMap<String, Vec<(u32, u32, u64)>> {
    let home = d.paths.home().display().to_string();
    grouped(
        crate::platform::marked_processes_settled(crate::paths::HOME_ENV, &home, TOKEN_VAR).await,
    )
}

/// Marked processes by token, with pid, group and resident bytes; never
/// this daemon.
fn grouped(marked: Vec<crate::platform::Marked>) -> HashMap<String, Vec<(u32, u32, u64)>> {
    let page = crate::platform::page_size();
    let mut out: HashMap<String, Vec<(u32, u32, u64)>> = HashMap::new();
    for m in marked {
        if m.stat.pid == crate::platform::pid() {
            continue;
        }
        out.entry(m.mark)
            .or_default()
            .push((m.stat.pid, m.stat.pgrp, m.stat.rss_pages * page));
    }
    out
}

/// Stops world `w`'s processes that its groups' stop did not reach: SIGTERM,
/// then SIGKILL after the default stop timeout. Returns what outlived that,
/// for the verb to report.
pub(in crate::daemon::world) async fn stop(d: &Daemon, w: &WorldRow) -> Vec<String> {
    let Ok(Some(token)) = d.registry(|r| r.world_token(w.id)) else {
        return Vec::new();
    };
    let pids: Vec<u32> = by_token_settled(d)
        .await
        .remove(&token)
        .unwrap_or_default()
        .into_iter()
        .map(|(pid, _, _)| pid)
        .collect();
    if pids.is_empty() {
        return Vec::new();
    }
    tracing::info!(world = %w.name, ?pids, "stopping processes that left the world's groups");
    let mut set = tokio::task::JoinSet::new();
    for pid in pids {
        set.spawn(terminate(pid));
    }
    let mut left = Vec::new();
    while let Some(r) = set.join_next().await {
        left.extend(r.ok().flatten());
    }
    left
}

/// After a daemon restart: stops the marked processes of worlds that should
/// have none — stopped and suspended worlds (a daemon that died mid-stop
/// left them). Processes of running, starting and failed worlds are kept (a
/// failed world's processes are left up for inspection), and a token no
/// world of this registry has is never acted on: it is not known to be
/// Binky's.
pub(in crate::daemon::world) async fn stop_orphans(d: &Arc<Daemon>) {
    let Ok(known) = d.registry(|r| r.world_tokens()) else {
        return;
    };
    let mut set = tokio::task::JoinSet::new();
    for (token, procs) in by_token_settled(d).await {
        let Some(state) = known
            .iter()
            .find(|(_, t, _)| *t == token)
            .map(|(_, _, s)| *s)
        else {
            continue;
        };
        if !matches!(
            state,
            WorldState::Stopped | WorldState::Suspended | WorldState::Sleeping
        ) {
            continue;
        }
        for (pid, _, _) in procs {
            let what = format!("pid {pid}, of a {state} world, outside its process groups");
            tracing::warn!("stopping {what}");
            d.event(LogEvent::named(EventKind::OrphanStopped).detail(what));
            set.spawn(terminate(pid));
        }
    }
    while set.join_next().await.is_some() {}
}

/// Stops one process that is in no group Binky signals: SIGTERM, SIGKILL
/// after the default stop timeout. `Some` says it outlived both.
pub(in crate::daemon::world) async fn terminate(pid: u32) -> Option<String> {
    supervisor::terminate(
        pid,
        crate::platform::Signal::Term,
        crate::config::DEFAULT_STOP_TIMEOUT,
    )
    .await
}
