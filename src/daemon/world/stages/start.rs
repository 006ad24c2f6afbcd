//! Starting a world's processes: level by level behind their health
//! probes, and the error for one that did not come up.

use super::plan::{Plan, levels, process_spec, with_config_note};
use super::processes::recorder;
use crate::daemon::ProgressTx;
use crate::daemon::world::cancelled_error;
use crate::daemon::world::{FAILURE_HEAD_LINES, FAILURE_LOG_LINES, Runtime, WorldCtx};
use crate::faults::point as fault_point;
use crate::protocol::{ApiError, ServiceState};
use crate::supervisor;
use crate::supervisor::{Handle, State};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A process just started at its level: its name, its supervisor, its log.
type Started = (String, Arc<Handle>, PathBuf);

/// Processes, level by level; independent ones start together, and a level
/// starts once the one before is ready. The first failure (or a cancel)
/// stops the climb; services already started stay up for inspection.
/// `only`: start just these (a reset's users of a slice), added to the
/// world's runtime beside the processes that run on; `None` starts every
/// process of a world that runs none.
pub(in crate::daemon::world) async fn start_processes(
    cx: &WorldCtx<'_>,
    plan: &Plan,
    progress: &ProgressTx,
    only: Option<&std::collections::BTreeSet<String>>,
) -> Result<(), ApiError> {
    let lv = levels(cx.cfg);
    let wanted = |n: &String| only.is_none_or(|o| o.contains(n));
    let mut handles: IndexMap<String, Arc<Handle>> = IndexMap::new();
    let mut failure: Option<ApiError> = None;
    for level in &lv {
        let level: Vec<String> = level.iter().filter(|n| wanted(n)).cloned().collect();
        if level.is_empty() {
            continue;
        }
        let started = start_level(cx, &level, plan, progress)?;
        for (sname, h, _) in &started {
            handles.insert(sname.clone(), h.clone());
        }
        fault_point("up:started");
        failure = await_level(cx, started, plan, progress).await;
        if failure.is_some() {
            break;
        }
    }
    if failure.is_some() {
        // Services a failure kept from starting are stopped, not starting:
        // their proxy page must not promise a retry that never comes.
        for (sname, svc) in &cx.cfg.services {
            if svc.process().is_some() && wanted(sname) && !handles.contains_key(sname) {
                cx.d.routes
                    .set_state(cx.project, cx.world, sname, ServiceState::Stopped);
            }
        }
    }
    // Beside what runs on when only some start (a reset); the whole
    // world starts with nothing else running (`up` stopped it first).
    let kept = only.and_then(|_| cx.d.worlds.take_runtime(cx.world_id));
    let mut rt = kept.map(|rt| (*rt).clone()).unwrap_or_else(|| Runtime {
        handles: IndexMap::new(),
        levels: Vec::new(),
    });
    rt.handles.extend(handles);
    rt.levels = lv;
    cx.d.worlds.put_runtime(cx.world_id, rt);
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Starts every process of one dependency level, each recorded `starting`
/// before its process exists.
fn start_level(
    cx: &WorldCtx<'_>,
    level: &[String],
    plan: &Plan,
    progress: &ProgressTx,
) -> Result<Vec<Started>, ApiError> {
    let log_dir = cx.d.paths.world_logs(cx.project, cx.world.slug());
    let mut started = Vec::new();
    for sname in level {
        let Some(p) = cx.cfg.services[sname].process() else {
            continue;
        };
        let spec = process_spec(cx, sname, p, plan, &log_dir)?;
        progress.say(
            crate::protocol::ProgressStep::Start,
            Some(sname),
            format!("starting {sname}"),
        );
        cx.d.registry(|r| {
            r.service_state(cx.world_id, sname, ServiceState::Starting, None, false)
        })?;
        let recorder = recorder(
            cx.d.clone(),
            cx.world_id,
            cx.project.to_owned(),
            cx.world.to_string(),
            sname.clone(),
        );
        let log = spec.log.clone();
        let h = Arc::new(supervisor::spawn(spec, recorder));
        started.push((sname.clone(), h, log));
    }
    Ok(started)
}

/// Waits for each process of a level to settle, reporting it ready; the
/// first failure (or the caller's cancel, which does not wait for a slow
/// health probe) is returned.
async fn await_level(
    cx: &WorldCtx<'_>,
    started: Vec<Started>,
    plan: &Plan,
    progress: &ProgressTx,
) -> Option<ApiError> {
    let WorldCtx {
        d,
        project,
        world: name,
        ..
    } = *cx;
    let mut failure = None;
    for (sname, h, log) in started {
        let settled = tokio::select! {
            s = settled(&h) => s,
            _ = progress.until_cancelled() => return Some(failure.unwrap_or_else(|| cancelled_error(name))),
        };
        match settled {
            State::Running { pid } => {
                let port = plan.facts[&sname]
                    .port
                    .map(|p| format!("  :{p}"))
                    .unwrap_or_default();
                progress.say(
                    crate::protocol::ProgressStep::Ready,
                    Some(&sname),
                    format!("{sname}  pid {pid}{port}"),
                );
            }
            // A probe-less one-shot that did its work inside the grace
            // period (see supervisor::NO_PROBE_GRACE).
            s if s.exited_cleanly() => {
                progress.say(
                    crate::protocol::ProgressStep::Ready,
                    Some(&sname),
                    format!("{sname}  finished (exit 0)"),
                );
            }
            other => {
                failure.get_or_insert(start_failure(name, &sname, &other, &log, plan));
                // One whose probe never passed stays up for inspection (its
                // own port still answers), but not at its URL: the proxy
                // must not serve a failed world as if it were up.
                if matches!(other, State::Unhealthy { .. }) {
                    d.routes
                        .set_state(project, name, &sname, ServiceState::Failed);
                }
            }
        }
    }
    failure
}

/// The supervisor's first settled state for a service just started
/// (running, or given up on).
async fn settled(h: &Handle) -> State {
    let mut watch = h.state.clone();
    loop {
        let s = watch.borrow_and_update().clone();
        if s.is_settled() {
            return s;
        }
        if watch.changed().await.is_err() {
            return watch.borrow().clone();
        }
    }
}

/// The error for a service that did not start: why, then this run's output
/// only (its first lines often say the cause, its last where it stopped).
fn start_failure(world: &str, service: &str, state: &State, log: &Path, plan: &Plan) -> ApiError {
    let reason = match state {
        State::Unhealthy { reason, .. } => format!("not healthy: {reason}"),
        State::Failed { reason } => reason.clone(),
        State::Stopped { exit } => exit.clone().unwrap_or_else(|| "stopped".into()),
        s => s.label().to_string(),
    };
    let run = supervisor::logs::current_run(log);
    let mut msg = format!("service `{service}` failed to start: {reason}");
    if !run.is_empty() {
        msg.push_str(&format!(
            "\noutput of this run ({} line(s), in {}):\n{}",
            run.len(),
            log.display(),
            supervisor::logs::quote_head_tail(&run, FAILURE_HEAD_LINES, FAILURE_LOG_LINES)
        ));
    }
    ApiError::new(msg.trim_end().to_owned()).hint(with_config_note(
        format!(
            "`binky logs {world} {service}` shows its output; services already started stay up for inspection"
        ),
        plan,
    ))
}
