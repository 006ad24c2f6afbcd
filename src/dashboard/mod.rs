//! `binky dashboard`: every world on the machine, live, in the terminal.
//!
//! Three feeds go into one channel the main thread blocks on: the daemon's
//! event subscription (a change means "read the status again"), the keys
//! (crossterm), and the log subscription of the followed world. Nothing is
//! polled while nothing happens: the screen is drawn after a key or a burst
//! of events, and the one timer is the usage refresh (RSS, CPU), every
//! [`USAGE_EVERY`] while some world runs. Actions run the same daemon verbs
//! as the CLI, on a thread each, with their progress in the status line.
//!
//! The terminal is restored on `q`, on a panic (ratatui's hook) and on
//! SIGTERM, SIGHUP or SIGINT (taken on a thread of their own).

mod model;
mod view;

use crate::client::{Client, Ended, Feed};
use crate::paths::Paths;
use crate::protocol::{
    ApiError, ClientEnv, LogFollow, LogsReport, Request, Response, Subscription, UpRequest,
    WorldRef,
};
use model::{Action, App, Link, Verb, WorldKey};
use ratatui::crossterm::event::{Event as TermEvent, KeyEventKind};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How often the figures that change on their own (RSS, CPU, age) are read
/// again while a world runs. The only timer: an idle machine with no world
/// running costs the dashboard nothing.
pub(crate) const USAGE_EVERY: Duration = Duration::from_secs(5);

/// A burst of events is read once: the status is read again this long
/// after the first event of a burst at the soonest.
const COALESCE: Duration = Duration::from_millis(150);

/// What the main thread wakes for.
enum Msg {
    Term(TermEvent),
    /// Something happened: the status is stale.
    Changed,
    Gone,
    Signal(i32),
    /// Lines of the followed logs, of follow number `.0`.
    Logs(u64, LogsReport),
    /// The log follow number `.0` ended with an error.
    LogsEnded(u64, ApiError),
    Progress(String),
    Done(String),
}

/// Runs `binky dashboard`.
pub(crate) fn run() -> ExitCode {
    let paths = match crate::client::paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    // Started (as every verb does) before the screen changes, so an error
    // prints as any command's does.
    let client = match Client::connect_or_start(&paths) {
        Ok(c) => c,
        Err(e) => return crate::client::fail(&e),
    };
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return crate::client::fail(
            &ApiError::new("binky dashboard draws on a terminal, and stdout is not one")
                .hint("for scripts: `binky status --watch --json` or `binky events -f --json`"),
        );
    }
    let (tx, rx) = mpsc::channel::<Msg>();
    // First, before any thread starts: the signals are then taken by the
    // one thread that waits for them, never by a thread that would die.
    let sig_tx = tx.clone();
    crate::platform::on_interrupt(move |_, sig| {
        let _ = sig_tx.send(Msg::Signal(sig));
    });
    spawn_events(&paths, tx.clone());
    spawn_keys(tx.clone());
    let theme = view::Theme {
        colour: anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never,
    };
    let mut terminal = ratatui::init();
    let mut runner = Runner {
        paths,
        client: Some(client),
        tx,
        app: App::default(),
        follow_no: Arc::new(AtomicU64::new(0)),
        follow_stop: Arc::new(Mutex::new(None)),
        refreshed: Instant::now(),
    };
    let code = runner.run(&rx, &mut terminal, theme);
    ratatui::restore();
    code
}

struct Runner {
    paths: Paths,
    /// The connection status reads use (made again after a daemon restart).
    client: Option<Client>,
    tx: mpsc::Sender<Msg>,
    app: App,
    /// The log follow in force; an older one's lines are dropped.
    follow_no: Arc<AtomicU64>,
    /// Ends the log follow in force (its connection's canceller).
    follow_stop: Arc<Mutex<Option<crate::client::Canceller>>>,
    /// When the status was last read.
    refreshed: Instant,
}

impl Runner {
    fn run(
        &mut self,
        rx: &mpsc::Receiver<Msg>,
        terminal: &mut ratatui::DefaultTerminal,
        theme: view::Theme,
    ) -> ExitCode {
        self.refresh();
        let mut stale_since: Option<Instant> = None;
        loop {
            if terminal.draw(|f| view::draw(f, &self.app, theme)).is_err() {
                return ExitCode::from(1);
            }
            // Sleep until a message, the end of a coalescing wait, or the
            // next usage refresh; with nothing running and nothing stale,
            // until a message.
            let deadline = match stale_since {
                Some(t) => Some(t + COALESCE),
                None if self.app.anything_running() => Some(self.refreshed + USAGE_EVERY),
                None => None,
            };
            let first = match deadline {
                Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                    Ok(m) => Some(m),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return ExitCode::SUCCESS,
                },
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => return ExitCode::SUCCESS,
                },
            };
            let Some(first) = first else {
                stale_since = None;
                self.refresh();
                continue;
            };
            // Everything already waiting is taken before drawing once.
            for msg in std::iter::once(first).chain(rx.try_iter()) {
                match self.on_msg(msg) {
                    Step::Go => {}
                    Step::Stale => {
                        stale_since.get_or_insert_with(Instant::now);
                    }
                    Step::Exit(code) => return code,
                }
            }
            if stale_since.is_some_and(|t| t.elapsed() >= COALESCE) {
                stale_since = None;
                self.refresh();
            }
        }
    }

    fn on_msg(&mut self, msg: Msg) -> Step {
        match msg {
            Msg::Term(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => {
                let action = self.app.on_key(k);
                return self.act(action);
            }
            Msg::Term(_) => {}
            Msg::Changed => {
                if self.app.link != Link::Live {
                    self.app.link = Link::Live;
                }
                return Step::Stale;
            }
            Msg::Gone => {
                self.app.link = Link::Gone;
                self.client = None;
            }
            Msg::Signal(sig) => return Step::Exit(ExitCode::from(128 + sig as u8)),
            Msg::Logs(n, r) if n == self.follow_no.load(Ordering::SeqCst) => {
                self.app.logs.skipped |= r.truncated;
                self.app.logs.push(r.lines);
            }
            Msg::LogsEnded(n, e) if n == self.follow_no.load(Ordering::SeqCst) => {
                self.app.logs.ended = Some(e.message);
            }
            Msg::Logs(..) | Msg::LogsEnded(..) => {}
            Msg::Progress(p) => self.app.status = p,
            Msg::Done(text) => {
                self.app.status = text;
                return Step::Stale;
            }
        }
        Step::Go
    }

    fn act(&mut self, action: Action) -> Step {
        match action {
            Action::Draw => {}
            Action::Quit => return Step::Exit(ExitCode::SUCCESS),
            Action::Run(verb, key) => self.run_verb(verb, key),
            Action::Follow(key, service) => self.follow_logs(key, service),
            Action::Copy(text) => {
                // OSC 52: the terminal (or tmux with set-clipboard) puts it
                // on the clipboard; the status line shows it either way.
                use base64::Engine;
                let b64 = base64::engine::general_purpose::STANDARD.encode(&text);
                let mut out = std::io::stdout();
                let _ =
                    std::io::Write::write_all(&mut out, format!("\x1b]52;c;{b64}\x07").as_bytes());
                let _ = std::io::Write::flush(&mut out);
                self.app.status = format!("copied: {text}");
            }
        }
        Step::Go
    }

    /// Reads the status (with usage), settings and metrics again.
    fn refresh(&mut self) {
        self.refreshed = Instant::now();
        if self.client.is_none() {
            self.client = Client::connect(&self.paths).ok().flatten();
        }
        let Some(c) = self.client.as_mut() else {
            self.app.link = Link::Gone;
            return;
        };
        let status = c.request(&Request::Status {
            project: None,
            usage: true,
        });
        let settings = c.request(&Request::Config);
        let metrics = c.request(&Request::Metrics);
        match (status, settings, metrics) {
            (Ok(Response::Status(r)), Ok(Response::Settings(s)), Ok(Response::Metrics(m))) => {
                self.app.set_report(r, Instant::now());
                self.app.settings = Some(s);
                self.app.metrics = Some(m);
                self.app.link = Link::Live;
            }
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => {
                self.app.status = e.message;
                self.client = None;
            }
            _ => self.client = None,
        }
    }

    /// Runs `verb` on `key` on a thread of its own: the screen stays live,
    /// and its progress and outcome go to the status line.
    fn run_verb(&mut self, verb: Verb, key: WorldKey) {
        let world = WorldRef {
            project_dir: None,
            project: Some(key.project.clone()),
            name: key.world.clone(),
        };
        let env = ClientEnv::current();
        let req = match verb {
            Verb::Up | Verb::Reload => {
                let up = UpRequest {
                    detach: false,
                    idle_after: None,
                    world,
                    group: None,
                    caller: None,
                    env,
                    // Queued is an answer too: the table shows the place.
                    wait: false,
                };
                if verb == Verb::Up {
                    Request::Up(up)
                } else {
                    Request::Reload(up)
                }
            }
            Verb::Down => Request::Down(world),
            Verb::Remove => Request::Remove {
                world,
                force: false,
                env,
            },
            Verb::Verify => Request::Verify {
                world,
                keep_going: false,
                from_branch: false,
                env,
            },
        };
        let name = format!("{} {}/{}", verb.name(), key.project, key.world);
        self.app.status = format!("{name}…");
        let (paths, tx) = (self.paths.clone(), self.tx.clone());
        std::thread::spawn(move || {
            let result = Client::connect_or_start(&paths).and_then(|mut c| {
                c.call(&req, &mut |p| {
                    let _ = tx.send(Msg::Progress(format!("{name}: {}", p.message)));
                })
            });
            let text = match result {
                Ok(Response::Verified(v)) if v.passed => format!("{name}: passed"),
                Ok(Response::Verified(v)) => {
                    let failed = v
                        .checks
                        .iter()
                        .find(|c| !c.passed)
                        .map(|c| c.command.clone());
                    format!("{name}: FAILED ({})", failed.unwrap_or_default())
                }
                Ok(Response::World(o)) if o.left_queue && o.world.path.is_empty() => {
                    format!("{name}: it left the queue (it was never made)")
                }
                Ok(Response::World(o)) if o.left_queue => format!("{name}: it left the queue"),
                Ok(Response::World(o)) if o.noop => format!("{name}: nothing to do"),
                Ok(Response::World(o)) => format!("{name}: {}", o.world.state),
                Ok(_) => format!("{name}: done"),
                Err(e) => match e.hint {
                    Some(h) => format!("{name} failed: {} ({h})", e.message),
                    None => format!("{name} failed: {}", e.message),
                },
            };
            let _ = tx.send(Msg::Done(text));
        });
    }

    /// Follows `key`'s logs (`service`'s alone when given) in the pane,
    /// ending the follow before it.
    fn follow_logs(&mut self, key: WorldKey, service: Option<String>) {
        let no = self.follow_no.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(c) = self
            .follow_stop
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            c.cancel();
        }
        self.app.logs = model::LogPane {
            target: Some((key.clone(), service.clone())),
            ..Default::default()
        };
        let sub = Subscription {
            world: Some(WorldRef {
                project_dir: None,
                project: Some(key.project),
                name: key.world,
            }),
            tail: 0,
            logs: Some(LogFollow {
                service,
                lines: 200,
                cursor: None,
            }),
        };
        let (paths, tx, current, stop) = (
            self.paths.clone(),
            self.tx.clone(),
            self.follow_no.clone(),
            self.follow_stop.clone(),
        );
        std::thread::spawn(move || follow_thread(&paths, sub, no, &current, &stop, &tx));
    }
}

/// The log follow number `no`: until a newer one starts, across daemon
/// restarts (carried on from the last cursor).
fn follow_thread(
    paths: &Paths,
    mut sub: Subscription,
    no: u64,
    current: &AtomicU64,
    stop: &Mutex<Option<crate::client::Canceller>>,
    tx: &mpsc::Sender<Msg>,
) {
    let live = || current.load(Ordering::SeqCst) == no;
    let mut pause = Duration::from_millis(100);
    while live() {
        let Ok(Some(mut c)) = Client::connect(paths) else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(2));
            continue;
        };
        if let Ok(canceller) = c.canceller() {
            *stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(canceller);
        }
        let mut cursor = None;
        let ended = c.subscribe(sub.clone(), &mut |feed| {
            if let Feed::Logs(r) = feed {
                cursor = Some(r.cursor.clone());
                return live() && tx.send(Msg::Logs(no, r.clone())).is_ok();
            }
            live()
        });
        match ended {
            Ok(Ended::Caller) => return,
            Ok(Ended::DaemonGone) => {
                if let (Some(l), Some(c)) = (sub.logs.as_mut(), cursor) {
                    l.cursor = Some(c);
                }
            }
            Err(e) => {
                let _ = tx.send(Msg::LogsEnded(no, e));
                return;
            }
        }
    }
}

enum Step {
    Go,
    /// The status should be read again (soon: bursts are coalesced).
    Stale,
    Exit(ExitCode),
}

/// The event subscription: every event marks the status stale.
fn spawn_events(paths: &Paths, tx: mpsc::Sender<Msg>) {
    let paths = paths.clone();
    std::thread::spawn(move || {
        let _ = crate::client::follow(&paths, Subscription::default(), true, &mut |feed| {
            let msg = match feed {
                Feed::Gone => Msg::Gone,
                _ => Msg::Changed,
            };
            tx.send(msg).is_ok()
        });
    });
}

/// Keys and resizes, read on a thread of their own (a blocking read costs
/// nothing while no key is pressed).
fn spawn_keys(tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        while let Ok(ev) = ratatui::crossterm::event::read() {
            if tx.send(Msg::Term(ev)).is_err() {
                return;
            }
        }
    });
}
