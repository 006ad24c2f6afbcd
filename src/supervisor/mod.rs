//! The supervisor: one task per service process.
//!
//! Each service runs in its own process group (so stopping it reaches npm/pnpm
//! trees), with stdout and stderr appended straight to its log file — not
//! through the daemon, so a restarting daemon loses no output. Exits are
//! reaped as they happen (tokio waits on the child through SIGCHLD, no
//! polling). What to do after an exit is [`restart::decide`].

pub mod health;
pub mod logs;
pub mod restart;

use crate::config::Restart;
use crate::platform;
use crate::protocol::ServiceState;
use health::ProbeSpec;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Log files roll at this size, while they are written (see
/// [`logs::LogFile`]).
pub const LOG_ROLL_BYTES: u64 = 5 * 1024 * 1024;
/// Rolled generations kept.
pub const LOG_GENERATIONS: u32 = 3;
/// How a service that exited with status 0 is described (in
/// [`State::Stopped`]).
const CLEAN_EXIT: &str = "exited with code 0";
/// How long a service without a health probe must stay up to count as
/// ready. Long enough for a missing program, a syntax error or a bad
/// import to show (each exits within tens of milliseconds); short enough
/// not to slow `up` noticeably.
pub const NO_PROBE_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// A fully rendered service, ready to run.
#[derive(Clone)]
pub struct ServiceSpec {
    /// Service name.
    pub name: String,
    /// Shell command line (rendered).
    pub cmd: String,
    /// Working directory.
    pub cwd: PathBuf,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// Log file.
    pub log: PathBuf,
    /// Primary port, if any.
    pub port: Option<u16>,
    /// The service is proxied on `port` (a url service): with no probe, it
    /// is ready only once its own processes listen there.
    pub must_listen: bool,
    /// Health probe and its timing.
    pub health: Option<(ProbeSpec, Duration, Duration)>,
    /// Restart policy.
    pub restart: Restart,
    /// Stop signal name (`SIGTERM`…).
    pub stop_signal: String,
    /// Grace before SIGKILL.
    pub stop_timeout: Duration,
    /// Globs (relative to `watch_root`) that restart the service on change.
    pub watch: Vec<String>,
    /// Folder the watch globs are relative to.
    pub watch_root: PathBuf,
    /// The `binky` executable, run as `binky log-writer <log>` to timestamp
    /// each output line. `None` writes output to the log file directly.
    pub log_writer: Option<PathBuf>,
}

// Hand-written so environment values (which may hold credentials) never
// reach a log through `{:?}`.
impl std::fmt::Debug for ServiceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceSpec")
            .field("name", &self.name)
            .field("cwd", &self.cwd)
            .field("env", &format_args!("<{} variables>", self.env.len()))
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// A service's state, as the supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Process started; health probe pending.
    Starting {
        /// Its pid (and process group).
        pid: u32,
    },
    /// Running (and healthy, if it has a probe).
    Running {
        /// Its pid.
        pid: u32,
    },
    /// Running, but its probe did not pass within the timeout.
    Unhealthy {
        /// Its pid.
        pid: u32,
        /// Why.
        reason: String,
    },
    /// Exited; will start again after a delay.
    Backoff {
        /// The delay.
        delay: Duration,
    },
    /// Stopped for good: by request, or the policy says not to restart.
    Stopped {
        /// Exit description, when it exited on its own.
        exit: Option<String>,
    },
    /// Gave up, or could not start at all.
    Failed {
        /// Why.
        reason: String,
    },
}

impl State {
    /// Stopped because it exited with status 0 on its own.
    pub fn exited_cleanly(&self) -> bool {
        matches!(self, State::Stopped { exit: Some(e) } if e == CLEAN_EXIT)
    }
    /// The service state `status`, the registry and the proxy record.
    pub fn label(&self) -> ServiceState {
        match self {
            State::Starting { .. } => ServiceState::Starting,
            State::Running { .. } => ServiceState::Running,
            State::Unhealthy { .. } => ServiceState::Unhealthy,
            State::Backoff { .. } => ServiceState::Restarting,
            State::Stopped { .. } => ServiceState::Stopped,
            State::Failed { .. } => ServiceState::Failed,
        }
    }
    /// The pid while a process exists.
    pub fn pid(&self) -> Option<u32> {
        match self {
            State::Starting { pid } | State::Running { pid } | State::Unhealthy { pid, .. } => {
                Some(*pid)
            }
            _ => None,
        }
    }
    /// Whether the state will not change without a request.
    pub fn is_settled(&self) -> bool {
        !matches!(self, State::Starting { .. } | State::Backoff { .. })
    }
}

/// Something the daemon records (registry, event log).
#[derive(Debug, Clone)]
pub enum Event {
    /// A process started.
    Started {
        /// Pid = process group id.
        pid: u32,
        /// Start time in clock ticks since boot.
        start_time: Option<u64>,
    },
    /// The state changed.
    State(State),
    /// Restarting after an exit.
    Restarting {
        /// How it exited.
        exit: String,
        /// After this delay.
        delay: Duration,
    },
    /// Gave up after too many failures.
    GaveUp {
        /// Why.
        reason: String,
    },
    /// A watched file changed: the service restarts.
    WatchRestart {
        /// What changed, relative to the watch root (the first few, sorted),
        /// and how many more did.
        changed: Vec<String>,
    },
}

/// What the daemon can ask of a running service task.
enum Control {
    /// Stop for good; answered with what is left of the group, if anything.
    Stop(oneshot::Sender<Option<String>>),
    /// Restart for a watched change; what changed.
    Restart(Vec<String>),
}

/// Controls one service task.
pub struct Handle {
    /// Current state.
    pub state: watch::Receiver<State>,
    ctl: mpsc::UnboundedSender<Control>,
}

impl Handle {
    /// Stops the service (signal, grace, SIGKILL to the whole group) and waits
    /// until every process of its group has exited, so its ports are free
    /// when this returns. A service that already ended returns at once.
    /// `Some(problem)` when processes of the group outlived SIGKILL by
    /// [`KILL_WAIT`] (stuck in the kernel, or another user's).
    pub async fn stop(&self) -> Option<String> {
        let (tx, rx) = oneshot::channel();
        if self.ctl.send(Control::Stop(tx)).is_ok() {
            return rx.await.ok().flatten();
        }
        None
    }

    /// Waits until the first start settles: healthy, unhealthy, failed or
    /// stopped.
    pub async fn wait_settled(&mut self) -> State {
        loop {
            let s = self.state.borrow_and_update().clone();
            if s.is_settled() {
                return s;
            }
            if self.state.changed().await.is_err() {
                return self.state.borrow().clone();
            }
        }
    }
}

/// Receives everything worth recording, called inline by the service task
/// before the state it reports becomes visible on [`Handle::state`], so a
/// reader of the state never sees it ahead of the record.
pub type Recorder = std::sync::Arc<dyn Fn(Event) + Send + Sync>;

/// Starts supervising `spec`.
pub fn spawn(spec: ServiceSpec, events: Recorder) -> Handle {
    let (state_tx, state_rx) = watch::channel(State::Starting { pid: 0 });
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let watcher = start_watcher(&spec, ctl_tx.clone());
    tokio::spawn(async move {
        let _watcher = watcher;
        run(spec, state_tx, ctl_rx, events, false).await;
    });
    Handle {
        state: state_rx,
        ctl: ctl_tx,
    }
}

/// Supervises a process a previous daemon started (`pid`, its own process
/// group): waits for its exit through the platform's exit notification
/// (pidfd on Linux), then carries on as [`spawn`] would, restart policy
/// included. Its exit status is not ours to read; an adopted exit counts as a
/// failure. `unhealthy`: the process never passed its probe (the reason as
/// recorded); it is adopted in that state, not taken for healthy.
pub fn adopt(spec: ServiceSpec, pid: u32, unhealthy: Option<String>, events: Recorder) -> Handle {
    let now = match unhealthy {
        Some(reason) => State::Unhealthy { pid, reason },
        None => State::Running { pid },
    };
    let (state_tx, state_rx) = watch::channel(now.clone());
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let watcher = start_watcher(&spec, ctl_tx.clone());
    tokio::spawn(async move {
        let _watcher = watcher;
        run_adopted(spec, now, pid, state_tx, ctl_rx, events).await;
    });
    Handle {
        state: state_rx,
        ctl: ctl_tx,
    }
}

async fn run_adopted(
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
    let _ = platform::signal_group(pid, Some(nix::sys::signal::Signal::SIGKILL));
    let mut history = VecDeque::new();
    match restart::decide(&spec.restart, false, &mut history, Instant::now()) {
        restart::Decision::Restart(delay) => {
            events(Event::Restarting {
                exit: "the adopted process exited".into(),
                delay,
            });
            set(State::Backoff { delay });
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

/// A service's `watch` globs: a path relative to the watch root matches
/// when an including glob matches it and no `!`-prefixed one does
/// (gitignore-style exclusion, e.g. `"!**/*_test.go"`; order does not
/// matter). globset has no negation of its own.
pub struct WatchSet {
    include: globset::GlobSet,
    exclude: globset::GlobSet,
}

impl WatchSet {
    /// `None` when no glob includes anything (every one is invalid or an
    /// exclusion): nothing to watch. Invalid globs are skipped (`binky
    /// check` reports them).
    pub fn new(globs: &[String]) -> Option<Self> {
        let (mut inc, mut exc) = (
            globset::GlobSetBuilder::new(),
            globset::GlobSetBuilder::new(),
        );
        let mut any = false;
        for g in globs {
            match g.strip_prefix('!') {
                Some(rest) => {
                    if let Ok(glob) = globset::Glob::new(rest) {
                        exc.add(glob);
                    }
                }
                None => {
                    if let Ok(glob) = globset::Glob::new(g) {
                        inc.add(glob);
                        any = true;
                    }
                }
            }
        }
        any.then_some(())?;
        Some(WatchSet {
            include: inc.build().ok()?,
            exclude: exc.build().ok()?,
        })
    }

    /// Whether a change to `rel` (relative to the watch root) restarts.
    pub fn is_match(&self, rel: &Path) -> bool {
        self.include.is_match(rel) && !self.exclude.is_match(rel)
    }
}

/// Whether a file event is a change (written, created, removed, renamed,
/// its times or mode set) rather than a look: opening or reading a watched
/// file — the service loading its own source does — must not restart it,
/// or a `watch` on `app.py` would restart `python3 app.py` for ever.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::EventKind as K;
    use notify::event::{AccessKind, AccessMode};
    match kind {
        K::Create(_) | K::Remove(_) | K::Modify(_) => true,
        // inotify's IN_CLOSE_WRITE: a write finished.
        K::Access(AccessKind::Close(AccessMode::Write)) => true,
        K::Access(_) | K::Any | K::Other => false,
    }
}

/// How long a burst of changes (an editor's save, a `git checkout`) is
/// gathered into one restart.
const WATCH_SETTLE: Duration = Duration::from_millis(300);

fn start_watcher(
    spec: &ServiceSpec,
    ctl: mpsc::UnboundedSender<Control>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    if spec.watch.is_empty() {
        return None;
    }
    let set = WatchSet::new(&spec.watch)?;
    let root = spec.watch_root.clone();
    let root_cb = root.clone();
    // A change is noted at once; the restart follows once changes have
    // stopped for WATCH_SETTLE. The thread ends with the watcher (its
    // sender is in the watcher's callback).
    let (tx, rx) = std::sync::mpsc::channel::<Vec<String>>();
    std::thread::Builder::new()
        .name("binky-watch".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut changed: std::collections::BTreeSet<String> = first.into_iter().collect();
                loop {
                    match rx.recv_timeout(WATCH_SETTLE) {
                        Ok(more) => changed.extend(more),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                if ctl.send(Control::Restart(shown(&changed))).is_err() {
                    return;
                }
            }
        })
        .ok()?;
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        if !is_change(&event.kind) {
            return;
        }
        let hits: Vec<String> = event
            .paths
            .iter()
            .filter_map(|p| p.strip_prefix(&root_cb).ok())
            .filter(|rel| set.is_match(rel))
            .map(|rel| rel.to_string_lossy().into_owned())
            .collect();
        if !hits.is_empty() {
            let _ = tx.send(hits);
        }
    })
    .ok()?;
    watcher
        .watch(&root, notify::RecursiveMode::Recursive)
        .ok()?;
    Some(watcher)
}

/// The first few of `changed` (sorted) and how many more, for the restart's
/// event.
fn shown(changed: &std::collections::BTreeSet<String>) -> Vec<String> {
    const MOST: usize = 5;
    let mut out: Vec<String> = changed.iter().take(MOST).cloned().collect();
    if changed.len() > MOST {
        out.push(format!("{} more", changed.len() - MOST));
    }
    out
}

/// How long, at most, a service's exit waits for its log writer to write
/// the last lines, so an error quoting the log tail has them.
const LOG_DRAIN_WAIT: Duration = Duration::from_millis(500);

/// Starts the service; with it, a receiver that completes when its log
/// writer (if any) has written everything and exited.
fn spawn_process(
    spec: &ServiceSpec,
) -> std::io::Result<(tokio::process::Child, Option<oneshot::Receiver<()>>)> {
    logs::roll(&spec.log, LOG_ROLL_BYTES, LOG_GENERATIONS);
    // Before its first byte: where this run's output begins.
    logs::mark_run(&spec.log, &format!("{} starting", spec.name));
    let mut drained = None;
    let (out, err): (Stdio, Stdio) = match &spec.log_writer {
        Some(exe) => {
            let (writer, mut stamper) = logs::spawn_writer(exe, &spec.log)?;
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
            let out = logs::open_append(&spec.log)?;
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

fn describe(status: std::io::Result<std::process::ExitStatus>) -> (bool, String) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) if s.success() => (true, CLEAN_EXIT.into()),
        Ok(s) => match (s.code(), s.signal()) {
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
async fn stop_group(
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
async fn obey(
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
pub const KILL_WAIT: Duration = Duration::from_secs(5);

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
    let _ = platform::signal_group(pgid, platform::signal_by_name(signal));
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
    let _ = platform::signal_group(pgid, Some(nix::sys::signal::Signal::SIGKILL));
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

/// Probes until it passes (Ok) or the timeout ends (Err with the last reason).
///
/// For the first second attempts come every 10 ms, then every `interval`:
/// most dev servers are ready within a few hundred milliseconds, and a fixed
/// 250 ms pause made `up` wait on average half an interval per service after
/// it was already listening (see benchmarks/up.py). A refused loopback connect
/// costs microseconds.
async fn probe_until_healthy(
    probe: &ProbeSpec,
    timeout: Duration,
    interval: Duration,
) -> Result<(), String> {
    const EAGER: Duration = Duration::from_secs(1);
    let start = tokio::time::Instant::now();
    let deadline = start + timeout;
    let per_attempt = interval
        .max(Duration::from_millis(500))
        .min(Duration::from_secs(5));
    loop {
        let last = match health::attempt(probe, per_attempt).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let pause = if start.elapsed() < EAGER {
            interval.min(Duration::from_millis(10))
        } else {
            interval
        };
        if tokio::time::Instant::now() + pause >= deadline {
            return Err(last);
        }
        tokio::time::sleep(pause).await;
    }
}

async fn run(
    spec: ServiceSpec,
    state: watch::Sender<State>,
    mut ctl: mpsc::UnboundedReceiver<Control>,
    events: Recorder,
    was_healthy: bool,
) {
    let set = |s: State| {
        events(Event::State(s.clone()));
        let _ = state.send(s);
    };
    let mut history: VecDeque<Instant> = VecDeque::new();
    let mut ever_healthy = was_healthy;
    loop {
        let (mut child, drained) = match spawn_process(&spec) {
            Ok(c) => c,
            Err(e) => {
                set(State::Failed {
                    reason: format!("cannot start `{}`: {e}", spec.name),
                });
                return;
            }
        };
        let pid = child.id().unwrap_or(0);
        // A crash here leaves a process nobody recorded; the next daemon
        // finds it by its session and environment (see daemon reconcile).
        crate::faults::point("spawn:unrecorded");
        events(Event::Started {
            pid,
            start_time: platform::process_start_time(pid),
        });
        set(State::Starting { pid });

        // Phase 1: until ready, unless it exits or is stopped.
        let healthy = ready(&spec, pid);
        tokio::pin!(healthy);
        let mut exit: Option<std::io::Result<std::process::ExitStatus>> = None;
        let mut restart_now = false;
        let mut phase1_done = false;
        while !phase1_done && exit.is_none() {
            tokio::select! {
                r = &mut healthy => {
                    phase1_done = true;
                    match r {
                        Ok(()) => { ever_healthy = true; set(State::Running { pid }); }
                        Err(reason) => set(State::Unhealthy { pid, reason: unhealthy_reason(&spec, pid, reason) }),
                    }
                }
                st = child.wait() => exit = Some(st),
                c = ctl.recv() => {
                    if !obey(c, &mut child, pid, &spec, &events, &set).await {
                        return;
                    }
                    restart_now = true;
                    phase1_done = true;
                }
            }
        }
        // Phase 2: running until it exits or we are asked to stop/restart.
        if !restart_now && exit.is_none() {
            tokio::select! {
                st = child.wait() => exit = Some(st),
                c = ctl.recv() => {
                    if !obey(c, &mut child, pid, &spec, &events, &set).await {
                        return;
                    }
                    restart_now = true;
                }
            }
        }
        if restart_now {
            continue;
        }
        // It exited on its own. Leave no stray descendants holding its port.
        let _ = platform::signal_group(pid, Some(nix::sys::signal::Signal::SIGKILL));
        // Its last lines may still be on their way through the log writer;
        // the state set below makes `up` quote the log's tail.
        if let Some(rx) = drained {
            let _ = tokio::time::timeout(LOG_DRAIN_WAIT, rx).await;
        }
        let (success, how) = describe(exit.expect("exit recorded"));
        // A probe-less service that finished its work cleanly inside the
        // grace period did not fail: its restart policy decides.
        if spec.health.is_none() && success {
            ever_healthy = true;
        }
        if !ever_healthy {
            // It never came up: restarting would only repeat the failure, and
            // `up` should report it now.
            set(State::Failed {
                reason: format!("{how} before it became ready"),
            });
            return;
        }
        match restart::decide(&spec.restart, success, &mut history, Instant::now()) {
            restart::Decision::Stop => {
                set(State::Stopped { exit: Some(how) });
                return;
            }
            restart::Decision::GiveUp => {
                let reason = format!(
                    "gave up: {} exits within {:?} (last: {how})",
                    spec.restart.max_failures, spec.restart.failure_window
                );
                events(Event::GaveUp {
                    reason: reason.clone(),
                });
                set(State::Failed { reason });
                return;
            }
            restart::Decision::Restart(delay) => {
                events(Event::Restarting { exit: how, delay });
                set(State::Backoff { delay });
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    c = ctl.recv() => match c {
                        Some(Control::Stop(done)) => {
                            set(State::Stopped { exit: None });
                            let _ = done.send(None);
                            return;
                        }
                        Some(Control::Restart(_)) => {}
                        None => return,
                    },
                }
            }
        }
    }
}

/// Waits until the service is ready, or says why it is not by the end of
/// its timeout. Ready means its *own* process answers:
///
/// - with a probe: the probe passes, and when the probe dials the service's
///   own port, a listener there belongs to its process group (something
///   else — an orphan of an earlier run — may answer it otherwise);
/// - without one: it has stayed up [`NO_PROBE_GRACE`], so a command that
///   fails at once fails `up` instead of looping in backoff behind a
///   "running" world; and a url service listens on its port (else the
///   proxy could only answer 502).
async fn ready(spec: &ServiceSpec, pid: u32) -> Result<(), String> {
    match &spec.health {
        Some((probe, timeout, interval)) => {
            let deadline = tokio::time::Instant::now() + *timeout;
            let own_port = probe.port().is_some() && probe.port() == spec.port;
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                probe_until_healthy(probe, left, *interval).await?;
                let Some(why) = own_port.then(|| port_problem(spec, pid)).flatten() else {
                    return Ok(());
                };
                if tokio::time::Instant::now() + *interval >= deadline {
                    return Err(why);
                }
                tokio::time::sleep(*interval).await;
            }
        }
        None => {
            tokio::time::sleep(NO_PROBE_GRACE).await;
            if !spec.must_listen {
                return Ok(());
            }
            let deadline = tokio::time::Instant::now() + listen_timeout();
            let mut pause = Duration::from_millis(10);
            loop {
                let Some(why) = port_problem(spec, pid) else {
                    return Ok(());
                };
                if tokio::time::Instant::now() >= deadline {
                    return Err(why);
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
        }
    }
}

/// How long a url service without a probe may take to listen on its port:
/// the default health timeout (tests shorten it with
/// `BINKY_TEST_LISTEN_TIMEOUT_MS` in the daemon's environment).
fn listen_timeout() -> Duration {
    crate::tunables::duration(
        "BINKY_TEST_LISTEN_TIMEOUT_MS",
        Duration::ZERO..=Duration::from_secs(3600),
    )
    .unwrap_or(crate::config::DEFAULT_HEALTH_TIMEOUT)
}

/// Why the service's own port does not show it ready, if it does not: a
/// listener there must belong to its process group (or its descendants).
/// Names whoever else holds the port.
fn port_problem(spec: &ServiceSpec, pid: u32) -> Option<String> {
    let port = spec.port?;
    let mut ours = platform::group_members(pid);
    ours.extend(platform::process_tree(pid));
    ours.sort_unstable();
    ours.dedup();
    let listening = platform::listening_ports(&ours);
    if listening.contains(&port) {
        return None;
    }
    if let Some(other) = platform::listeners_of(port)
        .into_iter()
        .find(|p| !ours.contains(p))
    {
        let cmd = platform::command_line(other).unwrap_or_else(|| "?".into());
        return Some(format!(
            "its port {port} is answered by another process (pid {other}: {cmd}), not by this service; stop that process (perhaps left from an earlier run), or `binky remove` this world and `up` it again for other ports"
        ));
    }
    if platform::port_has_listener(port) {
        return Some(format!(
            "its port {port} is held by a process binky cannot see (another user's), not by this service"
        ));
    }
    if listening.is_empty() {
        return Some(format!("nothing listens on its assigned port {port}"));
    }
    let list: Vec<String> = listening.iter().map(|p| p.to_string()).collect();
    Some(format!(
        "nothing listens on its assigned port {port}, but its processes listen on {}; pass ${{self.port}} (or read $PORT) in its cmd",
        list.join(", ")
    ))
}

/// Explains a failed probe; when nothing listens on the assigned port but
/// the process tree listens elsewhere, says so (the service ignores `$PORT`).
fn unhealthy_reason(spec: &ServiceSpec, pid: u32, last: String) -> String {
    let Some(port) = spec
        .health
        .as_ref()
        .and_then(|(p, _, _)| p.port())
        .filter(|p| Some(*p) == spec.port)
    else {
        return last;
    };
    let listening = platform::listening_ports(&platform::process_tree(pid));
    if listening.contains(&port) || listening.is_empty() {
        return last;
    }
    let list: Vec<String> = listening.iter().map(|p| p.to_string()).collect();
    format!(
        "nothing listens on its assigned port {port}, but its processes listen on {}; pass ${{self.port}} (or read $PORT) in its cmd",
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::WatchSet;
    use std::path::Path;

    #[test]
    fn a_bang_glob_excludes_what_the_others_include() {
        let set = WatchSet::new(&[
            "backend/**/*.go".to_owned(),
            "!backend/**/*_test.go".to_owned(),
        ])
        .unwrap();
        assert!(set.is_match(Path::new("backend/api/server.go")));
        assert!(!set.is_match(Path::new("backend/api/server_test.go")));
        assert!(!set.is_match(Path::new("frontend/app.go")));
        // Only exclusions: nothing to watch.
        assert!(WatchSet::new(&["!**/*.go".to_owned()]).is_none());
    }
}
