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
/// while it is gone): first soon, a restart takes moments; then less
/// often, a stopped daemon may stay stopped.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// What a follower says when its daemon goes away.
pub(super) const DAEMON_GONE: &str = "binky: the daemon stopped; waiting for it to come back";

/// Runs `binky events`.
pub fn run(args: &EventsArgs, project: Option<&str>) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    // `--world W`: that world's; `-p P` alone: every world of P's.
    let world = match (&args.world, project) {
        (None, None) => None,
        (name, _) => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
            match WorldRef::from_arg(project, &cwd, name.as_deref().unwrap_or("")) {
                Ok(w) => Some(w),
                Err(e) => return fail(&ApiError::new(e)),
            }
        }
    };
    let sub = Subscription {
        world,
        tail: args.lines.min(Subscription::MAX_TAIL),
        logs: None,
    };
    let print = |e: &Event| {
        if args.json {
            println!("{}", serde_json::to_string(e).expect("an event serialises"));
        } else {
            anstream::println!("{}", line(e));
        }
    };
    let mut printed = 0usize;
    let result = follow(&paths, sub, args.follow, &mut |feed| match feed {
        Feed::Event(e) => {
            printed += 1;
            print(e);
            true
        }
        Feed::Live => args.follow,
        Feed::Lagged(n) => {
            eprintln!("binky events: {n} event(s) dropped: this reader fell behind");
            true
        }
        Feed::Logs(_) => true,
        Feed::Gone => {
            eprintln!("{DAEMON_GONE}");
            true
        }
    });
    if let (Ok(()), Some(w), 0, false) = (&result, &args.world, printed, args.follow) {
        // A typo would otherwise look like a quiet world.
        if args.lines > 0 {
            eprintln!(
                "binky events: no events of world `{}` among the newest {}",
                untrusted(w),
                Subscription::MAX_TAIL
            );
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Subscribes with `sub` and hands every frame to `on_feed` until it
/// returns `false`. With `across_restarts`, a daemon that goes away is
/// waited for (not started: it was stopped on purpose, or is restarting)
/// and followed again: what it logged meanwhile first (read back from
/// `events.log`, from the last event seen here; for a log subscription,
/// from the cursor of the last lines seen), then live.
///
/// # Errors
/// The daemon refused the subscription, or (without `across_restarts`)
/// went away.
pub(crate) fn follow(
    paths: &Paths,
    mut sub: Subscription,
    across_restarts: bool,
    on_feed: &mut dyn FnMut(Feed<'_>) -> bool,
) -> Result<(), ApiError> {
    let mut client = Client::connect_or_start(paths)?;
    let mut seen = Seen::default();
    let mut log_cursor = None;
    loop {
        let ended = client.subscribe(sub.clone(), &mut |feed| match feed {
            Feed::Event(e) if seen.again(e) => true,
            Feed::Live => {
                seen.live();
                on_feed(Feed::Live)
            }
            Feed::Logs(r) => {
                log_cursor = Some(r.cursor.clone());
                on_feed(Feed::Logs(r))
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
                if !on_feed(Feed::Gone) {
                    return Ok(());
                }
                let mut pause = RECONNECT_FIRST;
                client = loop {
                    std::thread::sleep(pause);
                    // A daemon still starting may refuse for a moment.
                    if let Ok(Some(c)) = Client::connect(paths) {
                        break c;
                    }
                    pause = (pause * 2).min(RECONNECT_MAX);
                };
                // Read back what was missed, from the last event passed on
                // (or from when the follow went live). A follow that went
                // away before either starts over as asked: with `-n 0` it
                // has no "now" yet, and the whole tail would be history.
                if seen.last.is_some() {
                    sub.tail = Subscription::MAX_TAIL;
                    seen.replaying = true;
                }
                if let Some(l) = &mut sub.logs {
                    l.cursor = log_cursor.clone();
                }
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
    /// The subscription is live: past events are done with. A follower that
    /// has passed none on yet started now, so a new daemon's read-back
    /// begins here too.
    fn live(&mut self) {
        self.replaying = false;
        if self.last.is_none() {
            let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
            self.last = Some((now, Vec::new()));
        }
    }

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
    let mut out = format!("{} {what:<18} {}", paint(DIM, &e.ts), plain(&place));
    if let Some(d) = &e.detail {
        out.push_str(&format!("  {}", paint(DIM, plain(d))));
    }
    // One event a line, whatever its text holds.
    out.trim_end().replace('\n', "^J").replace('\t', " ")
}

/// Untrusted text with no escape sequence left at all: a name or a detail
/// has no business colouring the line (a "conceal" would hide the rest).
fn plain(text: &str) -> String {
    untrusted(text).replace('\x1b', "^[")
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
        let _ = follow(&sub_paths, Subscription::default(), true, &mut |feed| {
            if let Feed::Gone = feed {
                eprintln!("{DAEMON_GONE}");
            }
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
        // Never started here: a daemon that stopped was stopped on purpose
        // (the follower waits for it to come back).
        let report = match Client::connect(&paths).and_then(|c| {
            c.map(|mut c| {
                c.request(&Request::Status {
                    usage: false,
                    project: project.clone(),
                })
            })
            .transpose()
        }) {
            Ok(Some(crate::protocol::Response::Status(r))) => r,
            Ok(None) => continue,
            Ok(Some(other)) => return super::unexpected(&other),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EventKind;

    #[test]
    fn an_event_is_one_line_whatever_its_text_holds() {
        let mut e = Event::named(EventKind::WatchRestart)
            .detail("changed: a\n2026-12-03T09:00:00.000Z removed  evt/w2  FORGED\n.txt");
        e.project = Some("evt".into());
        e.worktree = Some("w2".into());
        let l = line(&e);
        assert!(!l.contains('\n'), "{l}");
        assert!(l.contains("a^J2026"), "{l}");
        // Not even colour from a name or a detail.
        e.detail = Some("\x1b[8mhidden".into());
        assert!(line(&e).contains("^[[8mhidden"), "{}", line(&e));
    }

    #[test]
    fn a_follower_that_saw_nothing_skips_what_came_before_it_went_live() {
        let at = |ts: &str| {
            let mut e = Event::named(EventKind::Up);
            e.ts = ts.into();
            e
        };
        let mut seen = Seen::default();
        seen.live();
        seen.replaying = true;
        assert!(seen.again(&at("2000-01-01T00:00:00.000Z")));
        assert!(!seen.again(&at("2999-01-01T00:00:00.000Z")));
        // Once passed on, the same event is a repeat while reading back.
        assert!(seen.again(&at("2999-01-01T00:00:00.000Z")));
    }
}
