//! `binky events [-f] [-n N] [--world W] [--json]` and `binky status
//! --watch`: both follow the daemon's subscription ([`Request::Subscribe`]),
//! so nothing is polled while nothing happens.

use super::{fail, paths_or_exit};
use crate::cli::EventsArgs;
use crate::client::{Client, Ended, Feed};
use crate::output::{DIM, paint, untrusted};
use crate::paths::Paths;
use crate::protocol::{ApiError, Event, Request, Subscription, WorldRef};
use std::process::ExitCode;
use std::time::Duration;

/// How often a follower whose daemon went away looks for it again (only
/// while it is gone).
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

/// Runs `binky events`.
pub fn run(args: &EventsArgs, project: Option<&str>) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    let world = match &args.world {
        None => None,
        Some(name) => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
            match WorldRef::from_arg(project, &cwd, name) {
                Ok(w) => Some(w),
                Err(e) => return fail(&ApiError::new(e)),
            }
        }
    };
    let sub = Subscription {
        world,
        tail: args.lines.min(Subscription::MAX_TAIL),
    };
    let print = |e: &Event| {
        if args.json {
            println!("{}", serde_json::to_string(e).expect("an event serialises"));
        } else {
            anstream::println!("{}", line(e));
        }
    };
    let result = follow(&paths, sub, args.follow, &mut |feed| match feed {
        Feed::Event(e) => {
            print(e);
            true
        }
        Feed::Live => args.follow,
        Feed::Lagged(n) => {
            eprintln!("binky events: {n} event(s) dropped: this reader fell behind");
            true
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Subscribes with `sub` and hands every frame to `on_feed` until it
/// returns `false`. With `across_restarts`, a daemon that goes away is
/// waited for (not started: it was stopped on purpose, or is restarting)
/// and followed again: what it logged meanwhile first (read back from
/// `events.log`, from the last event seen here), then live.
///
/// # Errors
/// The daemon refused the subscription, or (without `across_restarts`)
/// went away.
pub(super) fn follow(
    paths: &Paths,
    mut sub: Subscription,
    across_restarts: bool,
    on_feed: &mut dyn FnMut(Feed<'_>) -> bool,
) -> Result<(), ApiError> {
    let mut client = Client::connect_or_start(paths)?;
    let mut seen = Seen::default();
    loop {
        let ended = client.subscribe(sub.clone(), &mut |feed| match feed {
            Feed::Event(e) if seen.again(e) => true,
            Feed::Live => {
                seen.replaying = false;
                on_feed(Feed::Live)
            }
            other => on_feed(other),
        })?;
        match ended {
            Ended::Caller => return Ok(()),
            Ended::DaemonGone if !across_restarts => {
                return Err(
                    ApiError::new("the daemon stopped").hint("any `binky` command starts it again")
                );
            }
            Ended::DaemonGone => {
                eprintln!("binky: the daemon stopped; waiting for it to come back");
                client = loop {
                    std::thread::sleep(RECONNECT_EVERY);
                    // A daemon still starting may refuse for a moment.
                    if let Ok(Some(c)) = Client::connect(paths) {
                        break c;
                    }
                };
                sub.tail = Subscription::MAX_TAIL;
                seen.replaying = true;
            }
        }
    }
}

/// The newest events a follower has passed on, so that after a restart
/// the log's tail is read back without repeating them.
#[derive(Default)]
struct Seen {
    /// The newest time passed on, and the events of exactly that time.
    last: Option<(String, Vec<Event>)>,
    /// Reading back a new daemon's tail: events up to `last` are repeats.
    replaying: bool,
}

impl Seen {
    /// Whether `e` was passed on already; records it if not.
    fn again(&mut self, e: &Event) -> bool {
        if self.replaying
            && let Some((ts, at)) = &self.last
            && (e.ts < *ts || (e.ts == *ts && at.contains(e)))
        {
            return true;
        }
        match &mut self.last {
            Some((ts, at)) if *ts == e.ts => at.push(e.clone()),
            _ => self.last = Some((e.ts.clone(), vec![e.clone()])),
        }
        false
    }
}

/// One event as a line: time, what, where, and the detail. Names and the
/// detail are untrusted text (a branch name, a service's words): control
/// characters are shown, never sent to the terminal.
fn line(e: &Event) -> String {
    let what = serde_json::to_value(e.event)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut place = match (&e.project, &e.worktree) {
        (Some(p), Some(w)) => format!("{p}/{w}"),
        (Some(p), None) => p.clone(),
        (None, Some(w)) => w.clone(),
        (None, None) => String::new(),
    };
    if let Some(s) = &e.service {
        place.push_str(&format!(" {s}"));
    }
    let mut out = format!("{} {what:<18} {}", paint(DIM, &e.ts), untrusted(&place));
    if let Some(d) = &e.detail {
        out.push_str(&format!("  {}", paint(DIM, untrusted(d))));
    }
    out.trim_end().to_owned()
}

/// `binky status --watch`: the table (or with `json`, one JSON document a
/// line), drawn now and again after each burst of events. A burst is
/// coalesced: the redraw waits until events stop arriving for a moment
/// (at most half a second), so an `up` of ten services draws a few times,
/// not fifty.
pub(super) fn watch_status(project: Option<String>, json: bool) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let sub_paths = paths.clone();
    std::thread::spawn(move || {
        let _ = follow(&sub_paths, Subscription::default(), true, &mut |_| {
            tx.send(()).is_ok()
        });
    });
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    loop {
        // The first frame (the subscription is live) draws at once.
        if rx.recv().is_err() {
            return ExitCode::SUCCESS;
        }
        let burst_end = std::time::Instant::now() + Duration::from_millis(500);
        while let Some(left) = burst_end.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(()) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return ExitCode::SUCCESS,
            }
        }
        let report = match Client::connect_or_start(&paths).and_then(|mut c| {
            c.request(&Request::Status {
                project: project.clone(),
            })
        }) {
            Ok(crate::protocol::Response::Status(r)) => r,
            Ok(other) => return super::unexpected(&other),
            Err(e) => return fail(&e),
        };
        if json {
            println!(
                "{}",
                serde_json::to_string(&report).expect("a report serialises")
            );
        } else {
            if terminal {
                // Home and clear: redrawn in place.
                print!("\x1b[H\x1b[2J");
            } else {
                println!(
                    "--- {}",
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                );
            }
            super::status::print_human(&report);
        }
    }
}
