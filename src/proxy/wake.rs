//! Idle sleep, as the proxy sees it: what each world's URLs were asked
//! lately (the daemon reads it to decide a world is idle), and a request
//! to a sleeping world held while the daemon wakes it.

use super::Worker;
use super::body::Body;
use super::routes::Route;
use crate::protocol::ServiceState;
use hyper::Response;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// What the proxy saw of one world's traffic, shared by all its routes
/// (and every connection's copy of them): when its last request came and
/// how many requests (a reply being sent, an upgraded connection: a
/// WebSocket, HMR) are open now.
#[derive(Debug, Default)]
pub struct Activity {
    /// [`coarse_now`] at its last request; 0: none since the daemon started.
    last: AtomicU64,
    /// Requests in flight and upgraded connections open now.
    open: AtomicUsize,
}

/// A handle on a world's [`Activity`]. Two are equal when they are the
/// same world's (the same allocation), so a [`Route`] still compares by
/// what it routes.
#[derive(Debug, Clone, Default)]
pub struct Seen(Arc<Activity>);

impl PartialEq for Seen {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for Seen {}

/// [`mono_ms`](crate::clock::mono_ms) plus one, so 0 means never.
fn coarse_now() -> u64 {
    crate::clock::mono_ms() + 1
}

/// How stale the last-request time may get: a request stores it only when
/// it moved by this much, so a busy route's traffic does not write a shared
/// cache line per request, and the idle time is never read more than this
/// too long.
const TOUCH_EVERY_MS: u64 = 50;

impl Seen {
    /// A request arrived now.
    pub(super) fn touch(&self) {
        let now = coarse_now();
        let last = self.0.last.load(Ordering::Relaxed);
        if last == 0 || now.saturating_sub(last) >= TOUCH_EVERY_MS {
            self.0.last.store(now, Ordering::Relaxed);
        }
    }

    /// A request or an upgraded connection opened; it counts as activity
    /// until the guard is dropped (its reply sent, the connection closed),
    /// which is when its time is taken.
    pub(super) fn open(&self) -> OpenGuard {
        self.0.open.fetch_add(1, Ordering::Relaxed);
        OpenGuard(self.clone())
    }

    /// How long ago its last request came (`None`: none since the daemon
    /// started; at most 50 ms too long), and how many requests
    /// and upgraded connections are open: what the daemon's idle check
    /// reads.
    pub fn quiet(&self) -> (Option<Duration>, usize) {
        let last = self.0.last.load(Ordering::Relaxed);
        let ago = (last != 0).then(|| Duration::from_millis(coarse_now().saturating_sub(last)));
        (ago, self.0.open.load(Ordering::Relaxed))
    }
}

/// Keeps one request or upgraded connection counted as open (see
/// [`Seen::open`]).
#[derive(Debug)]
pub(crate) struct OpenGuard(Seen);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.0.open.fetch_sub(1, Ordering::Relaxed);
        // Its idle time starts when the connection closes.
        self.0.touch();
    }
}

/// How the daemon wakes a sleeping world for the proxy.
pub trait Waker: Send + Sync {
    /// Starts waking world `world` of `project` if it sleeps (an `up`
    /// through admission, as `binky up` would run); returns at once. Asked
    /// again while it wakes, it does nothing more.
    fn wake(&self, project: &str, world: &str);
    /// Why a world being woken still waits, when admission queued it
    /// (`"queued 2/5: max_parallel 4 reached"`); `None` otherwise.
    fn waiting(&self, project: &str, world: &str) -> Option<String>;
    /// How long a request waits for the world to wake before it gets a
    /// page that retries: about the world's own startup time.
    fn hold(&self, project: &str, world: &str) -> Duration;
}

/// How long a request to a world queued for admission waits before the
/// page that says so (and retries).
const QUEUED_HOLD: Duration = Duration::from_secs(2);

/// How often a held request asks again for a world that still sleeps.
const ASK_AGAIN: Duration = Duration::from_millis(500);

impl Worker {
    /// A request for `route`, whose world sleeps: the daemon is asked to
    /// wake it, and the request is held until the service serves (the
    /// route then), up to the world's startup time, or answered with a
    /// page that says why it waits and retries.
    pub(super) async fn wake(
        &self,
        host: &str,
        route: &Route,
    ) -> Result<Arc<Route>, Response<Body>> {
        let Some(waker) = &self.proxy.waker else {
            return Err(super::pages::unavailable(route));
        };
        waker.wake(&route.project, &route.world);
        let start = tokio::time::Instant::now();
        let until = start + waker.hold(&route.project, &route.world);
        let mut asked = start;
        loop {
            let Some(now) = self.proxy.routes.get(host) else {
                return Err(super::pages::unavailable(route));
            };
            if now.state.serves() {
                return Ok(now);
            }
            // Woken and failed, or stopped meanwhile: its page says so.
            if !now.state.is_coming() && now.state != ServiceState::Sleeping {
                return Err(super::pages::unavailable(&now));
            }
            let t = tokio::time::Instant::now();
            // Asked while it was still going to sleep, the daemon had no
            // sleeping world to wake: ask again.
            if now.state == ServiceState::Sleeping && t >= asked + ASK_AGAIN {
                waker.wake(&route.project, &route.world);
                asked = t;
            }
            let queued = waker.waiting(&route.project, &route.world);
            if let Some(why) = &queued
                && t >= start + QUEUED_HOLD
            {
                return Err(super::pages::waking(&now, Some(why)));
            }
            if t >= until {
                return Err(super::pages::waking(&now, queued.as_deref()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_and_an_open_upgrade_are_activity() {
        let seen = Seen::default();
        assert_eq!(seen.quiet(), (None, 0), "nothing seen yet");
        seen.touch();
        let (ago, open) = seen.quiet();
        assert!(ago.is_some_and(|a| a <= Duration::from_secs(1)), "{ago:?}");
        std::thread::sleep(Duration::from_millis(TOUCH_EVERY_MS + 20));
        let (before, _) = seen.quiet();
        seen.touch();
        let (after, _) = seen.quiet();
        assert!(
            after < before,
            "a later request moves the time: {before:?} {after:?}"
        );
        assert_eq!(open, 0);
        let guard = seen.open();
        assert_eq!(seen.quiet().1, 1);
        let copy = seen.clone();
        assert_eq!(copy, seen, "copies are the same world's");
        assert_ne!(Seen::default(), seen);
        drop(guard);
        assert_eq!(
            copy.quiet().1,
            0,
            "closing the upgrade is seen by every copy"
        );
    }
}
