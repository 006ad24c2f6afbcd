//! A service's process group: spawned with its log as stdout and stderr,
//! its exit described, and stopped by its stop signal, then SIGKILL after
//! its timeout.

use super::{
    CLEAN_EXIT, Control, Event, LOG_GENERATIONS, LOG_ROLL_BYTES, Mark, Recorder, ServiceSpec, State,
};
use crate::platform;
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::oneshot;

/// Starts the service; with it, a receiver that completes when its log
/// writer (if any) has written everything and exited.
pub(super) fn spawn_process(
    spec: &ServiceSpec,
) -> std::io::Result<(tokio::process::Child, Option<oneshot::Receiver<()>>)> {
    super::logs::roll(&spec.log, LOG_ROLL_BYTES, LOG_GENERATIONS);
    // Before its first byte: where this run's output begins.
    super::logs::mark_run(&spec.log, &format!("{} starting", spec.name));
    let mut drained = None;
    let (out, err): (Stdio, Stdio) = match &spec.log_writer {
        Some(exe) => {
            let (writer, mut stamper) = super::logs::spawn_writer(exe, &spec.log)?;
            let (done, rx) = oneshot::channel();
            drained = Some(rx);
            tokio::spawn(async move {
                let _ = stamper.wait().await;
                let _ = done.send(());
            });
            let w2 = writer.try_clone()?;
            (Stdio::from(writer), Stdio::from(w2))
        }
        None => {
            let out = super::logs::open_append(&spec.log)?;
            let err = out.try_clone()?;
            (Stdio::from(out), Stdio::from(err))
        }
    };
    let mut c = crate::platform::command("/bin/sh");
    c.arg("-c")
        .arg(&spec.cmd)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own group, so a stop reaches every descendant.
        .process_group(0)
        // The daemon may exit or restart; the service must not die with it.
        .kill_on_drop(false);
    let child = c.spawn()?;
    // Drop our copies of the pipe's write end now, so the log writer sees
    // the end of the stream when the service and its descendants are gone.
    drop(c);
    Ok((child, drained))
}

pub(super) fn describe(status: std::io::Result<std::process::ExitStatus>) -> (bool, String) {
    match status {
        Ok(s) if s.success() => (true, CLEAN_EXIT.into()),
        Ok(s) => match (s.code(), platform::exit_signal(&s)) {
            (Some(c), _) => (false, format!("exited with code {c}")),
            (_, Some(sig)) => (false, format!("killed by signal {sig}")),
            _ => (false, format!("exited ({s})")),
        },
        Err(e) => (false, format!("wait failed: {e}")),
    }
}

/// Stops a process group: `signal`, up to `grace` for the whole group to go,
/// then SIGKILL, and waits until every member has exited (see
/// [`stop_pgid`]). Waits for the leader so it is reaped.
pub(super) async fn stop_group(
    child: &mut tokio::process::Child,
    pgid: u32,
    signal: &str,
    grace: Duration,
) -> Option<String> {
    let left = stop_pgid(pgid, signal, grace, async {
        let _ = child.wait().await;
    })
    .await;
    let _ = child.wait().await;
    left
}

/// Carries out a control message for a running process. Stop: the group is
/// stopped and the task should end (`false`). Restart (a watched file
/// changed): the group is stopped and the caller starts it again (`true`).
/// A closed channel (the daemon dropped the handle) ends the task.
pub(super) async fn obey(
    c: Option<Control>,
    child: &mut tokio::process::Child,
    pid: u32,
    spec: &ServiceSpec,
    events: &Recorder,
    set: &(dyn Fn(State) + Sync),
) -> bool {
    match c {
        Some(Control::Stop(done)) => {
            let left = stop_group(child, pid, &spec.stop_signal, spec.stop_timeout).await;
            set(State::Stopped { exit: None });
            let _ = done.send(left);
            false
        }
        Some(Control::Restart(changed)) => {
            events(Event::WatchRestart { changed });
            // Restarting from now on, not once it has stopped: the proxy
            // holds requests for a restarting service (see proxy
            // ride_through) instead of dialling a port that is closing.
            set(State::Backoff {
                delay: Duration::ZERO,
            });
            if let Some(left) = stop_group(child, pid, &spec.stop_signal, spec.stop_timeout).await {
                tracing::warn!(service = spec.name, "{left}");
            }
            true
        }
        None => false,
    }
}

/// How long, at most, a stop waits after SIGKILL for the last member of a
/// process group to be gone. SIGKILL cannot be caught; only a process stuck
/// in the kernel (uninterruptible I/O) or one of another user takes longer.
pub(crate) const KILL_WAIT: Duration = Duration::from_secs(5);

/// Stops one-shot command `child` (the leader of its own process group:
/// a `verify` check, a `setup` command) and its whole group — SIGTERM, 2 s,
/// then SIGKILL — and reaps it.
pub(crate) async fn stop_child_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        stop_pgid(
            pid,
            "SIGTERM",
            Duration::from_secs(2),
            platform::wait_exit(pid),
        )
        .await;
    }
    let _ = child.wait().await;
}

/// Sends `signal` to group `pgid`, waits for the leader to exit (through
/// `leader_exit`) and for the rest of the group, up to `grace`, then SIGKILLs
/// whatever is left and waits — bounded by [`KILL_WAIT`] — until no member
/// of the group is alive. A grandchild still holding a port after its
/// leader died would otherwise make an immediate `up` meet `EADDRINUSE`.
/// Returns what is left when the group outlived that wait.
pub(crate) async fn stop_pgid(
    pgid: u32,
    signal: &str,
    grace: Duration,
    leader_exit: impl std::future::Future<Output = ()>,
) -> Option<String> {
    // An unknown name sends nothing (config checks names before they get
    // here); the group still gets SIGKILL after the grace.
    if let Some(sig) = platform::Signal::from_name(signal) {
        let _ = platform::signal_group(pgid, sig);
    }
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, leader_exit).await;
    // The leader may be gone while grandchildren linger; check the group
    // until the grace ends (bounded: only while stopping).
    let mut pause = Duration::from_millis(5);
    while platform::group_alive(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
    if !platform::group_alive(pgid) {
        return None;
    }
    let _ = platform::signal_group(pgid, platform::Signal::Kill);
    let gone_by = tokio::time::Instant::now() + KILL_WAIT;
    let mut pause = Duration::from_millis(1);
    while platform::group_alive(pgid) {
        if tokio::time::Instant::now() >= gone_by {
            let left = platform::group_members(pgid);
            tracing::warn!(pgid, ?left, "processes outlived SIGKILL");
            return Some(format!(
                "process group {pgid} still has live processes {left:?} {} s after SIGKILL",
                KILL_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
    None
}

/// The live processes `mark` names, but this daemon: what instances of one
/// service started, wherever they moved (see [`Mark`]). Members of the
/// service's group are among them while it runs; a caller sweeps after the
/// group's stop, when only those that left it remain.
async fn marked(mark: &Mark) -> Vec<u32> {
    let me = platform::pid();
    platform::marked_processes_settled(&mark.home.0, &mark.home.1, &mark.token.0)
        .await
        .into_iter()
        .filter(|m| m.mark == mark.token.1 && m.stat.pid != me)
        .map(|m| m.stat.pid)
        // Only the world's own processes are read again, for the service.
        .filter(|pid| {
            platform::process_env(*pid).is_some_and(|env| {
                env.iter()
                    .any(|(k, v)| *k == mark.service.0 && *v == mark.service.1)
            })
        })
        .collect()
}

/// Stops what an instance of the service started that left its process
/// group (a child that called `setsid()`, a server that daemonized itself),
/// found by its [`Mark`] — the tracking `down` uses for a whole world — so
/// a restart or a `reset` never leaves the old instance's processes running
/// beside the new one. Each gets `signal`, then SIGKILL after `grace`; the
/// call returns once all are gone, or says what outlived SIGKILL by
/// [`KILL_WAIT`].
pub(super) async fn stop_strays(
    spec_name: &str,
    mark: &Mark,
    signal: &str,
    grace: Duration,
) -> Option<String> {
    let pids = marked(mark).await;
    if pids.is_empty() {
        return None;
    }
    tracing::info!(
        service = spec_name,
        ?pids,
        "stopping processes the service started outside its process group"
    );
    let sig = platform::Signal::from_name(signal).unwrap_or(platform::Signal::Term);
    let mut set = tokio::task::JoinSet::new();
    for pid in pids {
        set.spawn(terminate(pid, sig, grace));
    }
    let mut left = Vec::new();
    while let Some(r) = set.join_next().await {
        left.extend(r.ok().flatten());
    }
    (!left.is_empty()).then(|| left.join("; "))
}

/// Stops one process that is in no group Binky signals: `signal`, then
/// SIGKILL after `grace`, waiting on its exit (a pidfd where there is
/// one). `Some` says it outlived both by [`KILL_WAIT`].
pub(crate) async fn terminate(
    pid: u32,
    signal: platform::Signal,
    grace: Duration,
) -> Option<String> {
    let _ = platform::signal_process(pid, signal);
    let exited = |limit| tokio::time::timeout(limit, platform::wait_exit(pid));
    if exited(grace).await.is_ok() {
        return None;
    }
    let _ = platform::signal_process(pid, platform::Signal::Kill);
    let dead = exited(KILL_WAIT).await.is_ok();
    (!dead).then(|| format!("pid {pid} (outside its process group) outlived SIGKILL"))
}
