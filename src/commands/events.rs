//! `binky events [-f] [-n N] [--world W] [--json]`: follows the daemon's
//! subscription ([`Request::Subscribe`](crate::protocol::Request::Subscribe)), so nothing is polled while
//! nothing happens (`binky status --watch` follows it too).

use super::{fail, paths_or_exit};
use crate::cli::EventsArgs;
use crate::client::{Feed, follow};
use crate::output::{DIM, paint, untrusted};
use crate::protocol::{ApiError, Event, Subscription, WorldRef};
use std::process::ExitCode;

/// What a follower says when its daemon goes away.
pub(super) const DAEMON_GONE: &str = "binky: the daemon stopped; waiting for it to come back";

/// Runs `binky events`.
pub(crate) fn run(args: &EventsArgs, project: Option<&str>) -> ExitCode {
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
}
