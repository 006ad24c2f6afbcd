//! The restart decision: one small pure function over the policy, the exit
//! and the recent failure history.

use crate::config::{Restart, RestartPolicy};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What to do after a process exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Start it again after this delay.
    Restart(Duration),
    /// Too many failures within the window: state `failed`, event `gave_up`.
    GiveUp,
    /// The policy says leave it stopped.
    Stop,
}

/// Decides, recording this exit in `history` (exit instants within the
/// window). The delay doubles from `backoff` with each exit still in the
/// window, capped at `max_backoff`.
pub(crate) fn decide(
    r: &Restart,
    success: bool,
    history: &mut VecDeque<Instant>,
    now: Instant,
) -> Decision {
    match r.policy {
        RestartPolicy::No => return Decision::Stop,
        RestartPolicy::OnFailure if success => return Decision::Stop,
        _ => {}
    }
    while history
        .front()
        .is_some_and(|t| now.duration_since(*t) > r.failure_window)
    {
        history.pop_front();
    }
    history.push_back(now);
    if history.len() as u32 >= r.max_failures {
        return Decision::GiveUp;
    }
    let exp = (history.len() as u32).saturating_sub(1).min(20);
    let delay = r.backoff.saturating_mul(1u32 << exp).min(r.max_backoff);
    Decision::Restart(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_gives_up() {
        let r = Restart::default();
        let mut h = VecDeque::new();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(decide(&r, false, &mut h, t0), Decision::Restart(s(1)));
        assert_eq!(
            decide(&r, false, &mut h, t0 + s(1)),
            Decision::Restart(s(2))
        );
        assert_eq!(
            decide(&r, false, &mut h, t0 + s(3)),
            Decision::Restart(s(4))
        );
        assert_eq!(
            decide(&r, false, &mut h, t0 + s(7)),
            Decision::Restart(s(8))
        );
        assert_eq!(decide(&r, false, &mut h, t0 + s(15)), Decision::GiveUp);
    }

    #[test]
    fn window_forgets_old_failures_and_cap_holds() {
        let r = Restart {
            max_failures: 100,
            ..Restart::default()
        };
        let mut h = VecDeque::new();
        let t0 = Instant::now();
        for i in 0..10 {
            decide(&r, false, &mut h, t0 + Duration::from_secs(i));
        }
        assert_eq!(
            decide(&r, false, &mut h, t0 + Duration::from_secs(10)),
            Decision::Restart(Duration::from_secs(30))
        );
        // Long after: the history has aged out, back to the first delay.
        assert_eq!(
            decide(&r, false, &mut h, t0 + Duration::from_secs(500)),
            Decision::Restart(Duration::from_secs(1))
        );
    }

    #[test]
    fn policies() {
        let mut h = VecDeque::new();
        let now = Instant::now();
        let no = Restart {
            policy: RestartPolicy::No,
            ..Restart::default()
        };
        assert_eq!(decide(&no, false, &mut h, now), Decision::Stop);
        let on = Restart::default();
        assert_eq!(decide(&on, true, &mut h, now), Decision::Stop);
        let always = Restart {
            policy: RestartPolicy::Always,
            ..Restart::default()
        };
        assert!(matches!(
            decide(&always, true, &mut h, now),
            Decision::Restart(_)
        ));
    }
}
