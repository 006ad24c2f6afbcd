//! A service's task: run a spawned process (spawn, wait for ready, obey
//! control messages, decide after each exit), or carry on with one a
//! previous daemon started until it exits.

use super::group::{describe, obey, spawn_process};
use super::ready::{ready, unhealthy_reason};
use super::{Control, Event, Recorder, ServiceSpec, State, Strays};
use super::{restart, stop_pgid};
use crate::platform;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

pub(super) async fn run_adopted(
    spec: ServiceSpec,
    now: State,
    pid: u32,
    state: watch::Sender<State>,
    mut ctl: mpsc::UnboundedReceiver<Control>,
    events: Recorder,
) {
    let set = |s: State| {
        events(Event::State(s.clone()));
        let _ = state.send(s);
    };
    set(now);
    let exited = platform::wait_exit(pid);
    tokio::pin!(exited);
    tokio::select! {
        _ = &mut exited => {}
        c = ctl.recv() => {
            let left = stop_pgid(pid, &spec.stop_signal, spec.stop_timeout, &mut exited).await;
            match c {
                Some(Control::Restart(changed)) => {
                    events(Event::WatchRestart { changed });
                    sweep(&spec).await;
                    run(spec, state, ctl, events, true).await;
                }
                Some(Control::Stop(done)) => {
                    set(State::Stopped { exit: None });
                    let _ = done.send(left);
                }
                None => {}
            }
            return;
        }
    }
    let _ = platform::signal_group(pid, platform::Signal::Kill);
    let mut history = VecDeque::new();
    match restart::decide(&spec.restart, false, &mut history, Instant::now()) {
        restart::Decision::Restart(delay) => {
            events(Event::Restarting {
                exit: "the adopted process exited".into(),
                delay,
            });
            set(State::Backoff { delay });
            sweep(&spec).await;
            tokio::select! {
                _ = tokio::time::sleep(delay) => run(spec, state, ctl, events, true).await,
                c = ctl.recv() => if let Some(Control::Stop(done)) = c {
                    set(State::Stopped { exit: None });
                    let _ = done.send(None);
                },
            }
        }
        _ => set(State::Stopped {
            exit: Some("the adopted process exited".into()),
        }),
    }
}

/// Before a service starts again: stops what its old instance left outside
/// its process group (see [`super::Mark`]), so the new one never runs beside it.
/// What outlived SIGKILL is logged; the restart goes on.
async fn sweep(spec: &ServiceSpec) {
    if let Some(s) = Strays::of(spec)
        && let Some(left) = s.stop().await
    {
        tracing::warn!(service = spec.name, "{left}");
    }
}

/// How long, at most, a service's exit waits for its log writer to write
/// the last lines, so an error quoting the log tail has them.
const LOG_DRAIN_WAIT: Duration = Duration::from_millis(500);

pub(super) async fn run(
    spec: ServiceSpec,
    state: watch::Sender<State>,
    ctl: mpsc::UnboundedReceiver<Control>,
    events: Recorder,
    was_healthy: bool,
) {
    Runner {
        spec,
        state,
        ctl,
        events,
        history: VecDeque::new(),
        ever_healthy: was_healthy,
    }
    .run()
    .await
}

/// How one spawned process's life ended.
enum Life {
    /// Stopped on request, or its handle went away: supervision ends.
    Ended,
    /// Restarted on request (a watched file changed): spawn again now.
    Restart,
    /// It exited on its own, with this status.
    Exited(std::io::Result<std::process::ExitStatus>),
}

/// One service's supervision: spawn, wait for ready, watch, and decide
/// after each exit whether to restart (see [`restart::decide`]).
struct Runner {
    spec: ServiceSpec,
    state: watch::Sender<State>,
    ctl: mpsc::UnboundedReceiver<Control>,
    events: Recorder,
    /// When recent exits happened, for the failure window.
    history: VecDeque<Instant>,
    /// It passed its probe once (a re-adopted process had).
    ever_healthy: bool,
}

impl Runner {
    fn set(&self, s: State) {
        (self.events)(Event::State(s.clone()));
        let _ = self.state.send(s);
    }

    async fn run(mut self) {
        // What an earlier instance left (a world whose `up` failed keeps its
        // processes for inspection; a daemon that died mid-stop) never runs
        // beside this one. Later spawns sweep as the old instance ends.
        sweep(&self.spec).await;
        loop {
            let (mut child, drained) = match spawn_process(&self.spec) {
                Ok(c) => c,
                Err(e) => {
                    self.set(State::Failed {
                        reason: format!("cannot start `{}`: {e}", self.spec.name),
                    });
                    return;
                }
            };
            let pid = child.id().unwrap_or(0);
            // A crash here leaves a process nobody recorded; the next daemon
            // finds it by its session and environment (see daemon reconcile).
            crate::faults::point("spawn:unrecorded");
            (self.events)(Event::Started {
                pid,
                start_time: platform::process_start_time(pid),
            });
            self.set(State::Starting { pid });
            let exit = match self.live(&mut child, pid).await {
                Life::Ended => return,
                Life::Restart => {
                    // The group is stopped; what left it goes too.
                    sweep(&self.spec).await;
                    continue;
                }
                Life::Exited(exit) => exit,
            };
            // It exited on its own. Leave no stray descendants holding its port.
            let _ = platform::signal_group(pid, platform::Signal::Kill);
            // Its last lines may still be on their way through the log writer;
            // the state set next makes `up` quote the log's tail.
            if let Some(rx) = drained {
                let _ = tokio::time::timeout(LOG_DRAIN_WAIT, rx).await;
            }
            if !self.after_exit(exit).await {
                return;
            }
        }
    }

    /// Watches the process `pid` until it exits or a control arrives:
    /// first until its probe passes (or fails, which is said), then while
    /// it runs.
    async fn live(&mut self, child: &mut tokio::process::Child, pid: u32) -> Life {
        let healthy = ready(&self.spec, pid);
        tokio::pin!(healthy);
        tokio::select! {
            r = &mut healthy => match r {
                Ok(()) => {
                    self.ever_healthy = true;
                    self.set(State::Running { pid });
                }
                Err(reason) => {
                    self.set(State::Unhealthy { pid, reason: unhealthy_reason(&self.spec, pid, reason) });
                }
            },
            st = child.wait() => return Life::Exited(st),
            c = self.ctl.recv() => return self.obeyed(c, child, pid).await,
        }
        tokio::select! {
            st = child.wait() => Life::Exited(st),
            c = self.ctl.recv() => self.obeyed(c, child, pid).await,
        }
    }

    async fn obeyed(
        &self,
        c: Option<Control>,
        child: &mut tokio::process::Child,
        pid: u32,
    ) -> Life {
        let set = |s: State| self.set(s);
        if obey(c, child, pid, &self.spec, &self.events, &set).await {
            Life::Restart
        } else {
            Life::Ended
        }
    }

    /// After an exit of its own: whether to spawn again, by the restart
    /// policy, having waited out the backoff (a stop during it ends
    /// supervision).
    async fn after_exit(&mut self, exit: std::io::Result<std::process::ExitStatus>) -> bool {
        let (success, how) = describe(exit);
        // A probe-less service that finished its work cleanly inside the
        // grace period did not fail: its restart policy decides.
        if self.spec.health.is_none() && success {
            self.ever_healthy = true;
        }
        if !self.ever_healthy {
            // It never came up: restarting would only repeat the failure, and
            // `up` should report it now.
            self.set(State::Failed {
                reason: format!("{how} before it became ready"),
            });
            return false;
        }
        let delay = match restart::decide(
            &self.spec.restart,
            success,
            &mut self.history,
            Instant::now(),
        ) {
            restart::Decision::Stop => {
                self.set(State::Stopped { exit: Some(how) });
                return false;
            }
            restart::Decision::GiveUp => {
                let reason = format!(
                    "gave up: {} exits within {:?} (last: {how})",
                    self.spec.restart.max_failures, self.spec.restart.failure_window
                );
                (self.events)(Event::GaveUp {
                    reason: reason.clone(),
                });
                self.set(State::Failed { reason });
                return false;
            }
            restart::Decision::Restart(delay) => delay,
        };
        (self.events)(Event::Restarting { exit: how, delay });
        self.set(State::Backoff { delay });
        // The old instance is over: what it started outside its group
        // (a child that called `setsid()`) must not run on beside the next.
        sweep(&self.spec).await;
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            c = self.ctl.recv() => match c {
                Some(Control::Stop(done)) => {
                    self.set(State::Stopped { exit: None });
                    let _ = done.send(None);
                    false
                }
                Some(Control::Restart(_)) => true,
                None => false,
            },
        }
    }
}
