//! Following the daemon's events or a world's logs across daemon
//! restarts: reconnect, read back what was missed, never repeat it.

use super::{Client, Ended, Feed};
use crate::paths::Paths;
use crate::protocol::{ApiError, Event, Subscription};
use std::time::Duration;

/// How often a follower whose daemon went away looks for it again (only
/// while it is gone): first soon, a restart takes moments; then less
/// often, a stopped daemon may stay stopped.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EventKind;

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
