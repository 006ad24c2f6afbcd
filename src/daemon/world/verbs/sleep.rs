//! Idle sleep: how long a world may idle, putting an idle world to sleep,
//! and waking it (on a request through the proxy, `up`, `verify`).
//!
//! A sleeping world is a world `down` would leave (worktree, ports, slices
//! and files kept, processes stopped), but its routes stay `sleeping`, so
//! the proxy wakes it on the first request instead of showing a page. The
//! wake-up is an `up` through admission like any other: it may queue.

use crate::config::Config;
use crate::daemon::events::EventKind;
use crate::daemon::world::stages::processes::stop_processes;
use crate::daemon::world::world_event;
use crate::daemon::{Daemon, ProgressTx, WorldKey, admission};
use crate::protocol::{ApiError, ClientEnv, Intent, ServiceState, UpRequest, WorldRef, WorldState};
use std::sync::Arc;
use std::time::Duration;

/// Reads `up --idle-after`: `None` when not given (the world keeps what it
/// had); `Some(0)` for `"off"`; `Some(u64::MAX)` for `"default"` (back to
/// the project's `idle_after`); else the duration in ms.
///
/// # Errors
/// Not a duration, or shorter than [`MIN_IDLE_AFTER`](crate::config::MIN_IDLE_AFTER).
pub(crate) fn parse_idle_after(text: Option<&str>) -> Result<Option<u64>, ApiError> {
    let Some(t) = text.map(str::trim) else {
        return Ok(None);
    };
    if t.eq_ignore_ascii_case("off") {
        return Ok(Some(0));
    }
    if t.eq_ignore_ascii_case("default") {
        return Ok(Some(u64::MAX));
    }
    let hint = r#"give a duration such as "20m", "off", or "default" (the project's idle_after)"#;
    // A bare number is seconds, as in binky.toml.
    let d = match t.parse::<u32>() {
        Ok(secs) => Duration::from_secs(secs.into()),
        Err(_) => humantime::parse_duration(t).map_err(|e| {
            ApiError::new(format!("--idle-after `{t}` is not a duration ({e})")).hint(hint)
        })?,
    };
    if d < crate::config::MIN_IDLE_AFTER {
        return Err(ApiError::new(format!(
            "--idle-after `{t}` is shorter than {}",
            humantime::format_duration(crate::config::MIN_IDLE_AFTER)
        ))
        .hint(hint));
    }
    Ok(Some(d.as_millis().min(u64::MAX as u128 - 1) as u64))
}

/// Records, as world `id` comes up with `cfg`, how long it may idle:
/// the `--idle-after` it was given now (see [`parse_idle_after`]) or
/// before, else `[project] idle_after`; never when a process service
/// says `sleep = false` (a worker keeps its world awake). Returns a note
/// when an `--idle-after` given now is moot for that reason.
pub(in crate::daemon::world) fn record_idle(
    d: &Daemon,
    id: i64,
    cfg: &Config,
    given: Option<u64>,
) -> Result<Option<String>, ApiError> {
    let over = match given {
        Some(u64::MAX) => None,
        Some(ms) => Some(ms),
        None => d.registry(|r| r.idle_override(id))?,
    };
    let idle = match over {
        Some(0) => None,
        Some(ms) => Some(ms),
        None => cfg.project.idle_after.map(|t| t.as_millis() as u64),
    };
    let awake: Vec<&str> = cfg
        .services
        .iter()
        .filter(|(_, s)| s.process().is_some_and(|p| !p.sleep))
        .map(|(n, _)| n.as_str())
        .collect();
    let note = (given.is_some_and(|g| g != 0 && g != u64::MAX) && !awake.is_empty()).then(|| {
        format!(
            "this world never sleeps: {} {} `sleep = false`, so --idle-after has no effect",
            awake.join(", "),
            if awake.len() == 1 { "has" } else { "have" }
        )
    });
    let idle = idle.filter(|_| awake.is_empty());
    d.registry(|r| r.set_idle(id, over, idle))?;
    Ok(note)
}

/// `up` of world `id`, already running: an `--idle-after` it was given
/// takes effect at once (the idle check looks again). Returns its note.
pub(in crate::daemon::world) fn idle_of_running(
    d: &Arc<Daemon>,
    id: i64,
    cfg: &Config,
    req: &UpRequest,
) -> Result<Option<String>, ApiError> {
    let Some(given) = parse_idle_after(req.idle_after.as_deref())? else {
        return Ok(None);
    };
    let note = record_idle(d, id, cfg, Some(given))?;
    crate::daemon::idle::ensure_idle_check(d);
    Ok(note)
}

/// A plain `up` (not a request's or `verify`'s wake-up, which say so
/// themselves) of sleeping world `w` is what wakes it: the `woke` event.
pub(in crate::daemon::world) fn woken_by_up(
    d: &Daemon,
    project: &str,
    w: Option<&crate::registry::WorldRow>,
) {
    if let Some(w) = w
        && w.state == WorldState::Sleeping
        && !d.worlds.is_waking(&WorldKey::new(project, &w.name))
    {
        d.event(world_event(EventKind::Woke, project, &w.name).detail("`up`".to_owned()));
    }
}

/// Puts running world `name` of `project` to sleep after `idle_for`
/// without a request or CPU use: its processes stopped as `down` stops
/// them, its routes and process services `sleeping`, its slot freed.
/// Nothing happens when a verb holds the world (it is not idle then).
///
/// # Errors
/// The world is gone or no longer running.
pub(crate) async fn sleep(
    d: &Arc<Daemon>,
    project: &str,
    name: &str,
    idle_for: Duration,
) -> Result<bool, ApiError> {
    let lock = d.worlds.lock_for(&WorldKey::new(project, name));
    let Ok(_guard) = lock.try_lock() else {
        return Ok(false);
    };
    let w = crate::daemon::world::stages::locate::world_row(d, project, name)?;
    if w.state != WorldState::Running || w.intent.is_some() {
        return Ok(false);
    }
    // A request since the check decided (every idle world's last one is at
    // least the shortest idle time ago): not idle after all.
    if let Some(seen) = d.routes.seen(project, name) {
        let (ago, open) = seen.quiet();
        if open > 0 || ago.is_some_and(|a| a < crate::config::MIN_IDLE_AFTER) {
            return Ok(false);
        }
    }
    d.registry(|r| r.set_world_state(w.id, w.state, Some(Intent::Sleep), None))?;
    // Sleeping before its processes stop, so a request meanwhile waits and
    // wakes it (once asleep) rather than meeting a stopped service.
    d.routes
        .set_world_state(project, name, ServiceState::Sleeping);
    stop_processes(d, &w).await;
    d.routes
        .set_world_state(project, name, ServiceState::Sleeping);
    d.registry(|r| r.set_sleeping(w.id))?;
    admission::learned(d, w.id, project);
    d.event(world_event(EventKind::Slept, project, name).detail(format!(
        "idle for {}",
        humantime::format_duration(Duration::from_secs(idle_for.as_secs()))
    )));
    // Its slot and memory are free: a queued `up` may go now.
    d.admission.wake();
    d.admission.resample();
    Ok(true)
}

/// What `env` and `logs` of world `w` say when it sleeps.
pub(in crate::daemon::world) fn sleeping_note(w: &crate::registry::WorldRow) -> Option<String> {
    (w.state == WorldState::Sleeping).then(|| {
        format!(
            "{} is sleeping after its idle time: its processes are stopped until a request to one of its URLs, `binky up {}` or `binky verify {}` wakes it",
            w.name, w.name, w.name
        )
    })
}

/// The `up` that wakes world `name` of `project`: as its last `up` asked
/// (caller, group, environment), waiting in the queue if it must.
fn wake_request(d: &Daemon, id: i64, project: &str, name: &str) -> UpRequest {
    let (caller, group) = d.registry(|r| r.world_caller(id)).unwrap_or_default();
    UpRequest {
        world: WorldRef {
            project_dir: None,
            project: Some(project.to_owned()),
            name: name.to_owned(),
        },
        group: (!group.is_empty()).then_some(group),
        caller: (!caller.is_empty()).then_some(caller),
        env: d.worlds.env_for(id, &ClientEnv::current()),
        wait: true,
        detach: false,
        idle_after: None,
    }
}

/// Starts waking world `name` of `project` if it sleeps and is not waking
/// already; `by` says what woke it (the `woke` event's detail). Returns at
/// once; the `up` runs in the background.
pub(crate) fn wake(d: &Arc<Daemon>, project: &str, name: &str, by: &str) {
    let Ok(w) = crate::daemon::world::stages::locate::world_row(d, project, name) else {
        return;
    };
    if w.state != WorldState::Sleeping || !d.worlds.start_waking(project, name) {
        return;
    }
    d.event(world_event(EventKind::Woke, project, name).detail(by.to_owned()));
    let req = wake_request(d, w.id, project, name);
    let d = Arc::clone(d);
    let key = WorldKey::new(project, name);
    tokio::spawn(async move {
        let (progress, _keep) = admission::unwatched();
        let t0 = std::time::Instant::now();
        match crate::daemon::world::up(&d, req, &progress).await {
            Ok(out) if out.world.state == WorldState::Running => {
                d.idle.woke(key.clone(), t0.elapsed());
            }
            Ok(_) => {}
            Err(e) => {
                tracing::info!(world = %key.name, "waking failed: {}", e.message);
                wake_failed(&d, &key, &e);
            }
        }
        d.worlds.done_waking(&key);
    });
}

/// A wake-up that failed before it recorded anything (its branch's
/// binky.toml no longer loads, its worktree is gone) leaves the world
/// `failed` with the reason, as a failed `up` does, so its page and
/// `status` say why instead of waking it again on every request.
fn wake_failed(d: &Daemon, key: &WorldKey, e: &ApiError) {
    let Ok(w) = crate::daemon::world::stages::locate::world_row(d, &key.project, &key.name) else {
        return;
    };
    if w.state != WorldState::Sleeping {
        return;
    }
    let why = format!("waking failed: {}", e.message);
    let _ = d.registry(|r| r.set_world_state(w.id, WorldState::Failed, None, Some(&why)));
    let first = why.lines().next().unwrap_or("").to_owned();
    d.routes.fail_world(&key.project, &key.name, &first);
    d.event(world_event(EventKind::UpFailed, &key.project, &key.name).detail(first));
}

/// Wakes sleeping world `w` for a verb that needs it running (`verify`),
/// reporting through the verb's `progress`; returns once it is up.
///
/// # Errors
/// Its `up` failed.
pub(in crate::daemon::world) async fn wake_for(
    d: &Arc<Daemon>,
    project: &str,
    w: &crate::registry::WorldRow,
    verb: &str,
    progress: &ProgressTx,
) -> Result<(), ApiError> {
    d.event(world_event(EventKind::Woke, project, &w.name).detail(format!("`{verb}`")));
    progress.say(
        crate::protocol::ProgressStep::Worktree,
        None,
        format!("{} was sleeping; waking it for `{verb}`", w.name),
    );
    let req = wake_request(d, w.id, project, &w.name);
    let key = WorldKey::new(project, &w.name);
    let ours = d.worlds.start_waking(project, &w.name);
    let out = crate::daemon::world::up(d, req, progress).await.map(|_| ());
    if ours {
        d.worlds.done_waking(&key);
    }
    out
}
