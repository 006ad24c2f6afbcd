//! One client connection on its proxy thread: the client and upstream
//! connections driven as one task, and what it holds between requests.

use super::forward::{X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO};
use super::routes::{Route, Routes};
use super::{Upstream, Worker};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The upstream connection one client connection uses between its requests
/// (keep-alive affinity: no pool lookup on the hot path). When the client
/// goes, the connection returns to the thread's pool.
pub(super) struct Held {
    pub(super) worker: Arc<Worker>,
    pub(super) slot: Mutex<Option<(u16, Upstream)>>,
    /// The client's address as `X-Forwarded-For` and `Forwarded: for=` put
    /// it, made once per connection.
    pub(super) peer_ip: HeaderValue,
    pub(super) forwarded_for: String,
    /// `Forwarded` for the last Host seen on this connection (usually the
    /// only one), so it is formatted once.
    pub(super) forwarded: Mutex<Option<(HeaderValue, bool, HeaderValue)>>,
    /// Upstream connections just made for this client connection, for its
    /// task to take over and drive.
    pub(super) new_conns: Mutex<Vec<ConnFuture>>,
    /// The route of the last Host seen on this connection, as of a routing
    /// table generation: this connection's own copy, so the requests of a
    /// keep-alive connection share nothing with other proxy threads.
    route: Mutex<Option<(u64, HeaderValue, Arc<Route>)>>,
    /// The proxy port the client connected to, for links on the proxy's
    /// own pages when the Host header names none.
    pub(super) local_port: Option<u16>,
}

/// An upstream connection's future (hyper's dispatcher for it).
pub(super) type ConnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Held {
    pub(super) fn new(worker: Arc<Worker>, peer: SocketAddr, local_port: Option<u16>) -> Self {
        let ip = peer.ip().to_string();
        let forwarded_for = match peer.ip() {
            IpAddr::V6(v6) => format!("\"[{v6}]\""),
            IpAddr::V4(_) => ip.clone(),
        };
        Held {
            worker,
            slot: Mutex::new(None),
            peer_ip: HeaderValue::from_str(&ip).unwrap_or(HeaderValue::from_static("unknown")),
            forwarded_for,
            forwarded: Mutex::new(None),
            new_conns: Mutex::new(Vec::new()),
            route: Mutex::new(None),
            local_port,
        }
    }

    /// The route for `host` (a Host header value), from this connection's
    /// copy while the table has not changed since it was made.
    pub(super) fn route(&self, routes: &Routes, host: &HeaderValue) -> Option<Arc<Route>> {
        let generation = routes.generation();
        let mut cached = self.route.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((g, h, r)) = &*cached
            && *g == generation
            && h == host
        {
            return Some(r.clone());
        }
        let shared = routes.get(host.to_str().unwrap_or(""))?;
        let own = Arc::new((*shared).clone());
        *cached = Some((generation, host.clone(), own.clone()));
        Some(own)
    }

    /// Sets `X-Forwarded-For`, `-Proto`, `-Host` and `Forwarded`.
    pub(super) fn add_forwarded(&self, h: &mut HeaderMap, host: &HeaderValue) {
        // Entries, so each name is hashed once.
        match h.entry(X_FORWARDED_FOR) {
            header::Entry::Occupied(mut e) => {
                let mut v = e.get().as_bytes().to_vec();
                v.extend_from_slice(b", ");
                v.extend_from_slice(self.peer_ip.as_bytes());
                if let Ok(v) = HeaderValue::from_bytes(&v) {
                    e.insert(v);
                }
            }
            header::Entry::Vacant(e) => {
                e.insert(self.peer_ip.clone());
            }
        }
        // A proto set in front of us (Caddy terminating TLS) is kept, and
        // `Forwarded` says the same, so the two never disagree.
        let https = h
            .entry(X_FORWARDED_PROTO)
            .or_insert(HeaderValue::from_static("http"))
            .as_bytes()
            .eq_ignore_ascii_case(b"https");
        h.insert(X_FORWARDED_HOST, host.clone());
        let mut cached = self.forwarded.lock().unwrap_or_else(|p| p.into_inner());
        let fwd = match &*cached {
            Some((for_host, was_https, v)) if for_host == host && *was_https == https => v.clone(),
            _ => {
                let text = format!(
                    "for={};host=\"{}\";proto={}",
                    self.forwarded_for,
                    host.to_str().unwrap_or(""),
                    if https { "https" } else { "http" }
                );
                match HeaderValue::from_str(&text) {
                    Ok(v) => {
                        *cached = Some((host.clone(), https, v.clone()));
                        v
                    }
                    Err(_) => return,
                }
            }
        };
        h.append(header::FORWARDED, fwd);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((port, up)) = self.slot.get_mut().ok().and_then(|s| s.take()) {
            self.worker.park(port, up);
        }
    }
}

/// How long a client has to send a request's headers, counted from when
/// the connection is ready for one (so also an idle keep-alive connection's
/// lifetime): 20 s, or `BINKY_TEST_HEADER_TIMEOUT_MS` (tests).
pub(super) fn header_read_timeout() -> Duration {
    static T: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        crate::tunables::duration(
            "BINKY_TEST_HEADER_TIMEOUT_MS",
            Duration::ZERO..=Duration::from_secs(3600),
        )
        .unwrap_or(Duration::from_secs(20))
    })
}

/// One client connection, on its proxy thread.
pub(super) async fn serve_connection(
    worker: Arc<Worker>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    active: Arc<AtomicUsize>,
) {
    let local_port = stream.local_addr().ok().map(|a| a.port());
    let held = Arc::new(Held::new(worker, peer, local_port));
    let for_service = held.clone();
    let svc = hyper::service::service_fn(move |req| {
        let held = for_service.clone();
        async move {
            let worker = held.worker.clone();
            Ok::<_, std::convert::Infallible>(worker.handle(&held, req).await)
        }
    });
    let server = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        // A client must send a request's headers within this long, and an
        // idle keep-alive connection is closed after it: a silent or
        // trickling client (slowloris) cannot hold a descriptor forever.
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout())
        // One buffer, one slice per write, as for the upstream side.
        .writev(false)
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades();
    // Unconstrained: tokio's co-operative budget is per task poll, and one
    // poll here carries a whole request through both connections; the
    // driver bounds its own work with DRIVER_PASSES instead.
    tokio::task::coop::unconstrained(Driver {
        server: Box::pin(async move {
            let _ = server.await;
        }),
        held,
        conns: Vec::new(),
        wake: Arc::new(SelfWake::default()),
    })
    .await;
    active.fetch_sub(1, Ordering::Relaxed);
}

/// Drives a client connection and its upstream connection(s) as one task.
///
/// Why: with separate tasks, each step of a request — the request reaching
/// the upstream dispatcher, the reply coming back, its body being asked for
/// and delivered — is a wake-up that queues behind every other connection on
/// the thread, which costs CPU and, under load, tail latency. Here a poll
/// runs the upstream side, then the client side, and again while either
/// woke the other, so a request is usually carried through in one poll.
pub(super) struct Driver {
    pub(super) server: ConnFuture,
    pub(super) held: Arc<Held>,
    pub(super) conns: Vec<ConnFuture>,
    pub(super) wake: Arc<SelfWake>,
}

/// Records wake-ups that happen while the driver is polling (they mean
/// "poll again now"); forwards the others to the task's waker.
#[derive(Default)]
pub(super) struct SelfWake {
    pub(super) polling: std::sync::atomic::AtomicBool,
    pub(super) woken: std::sync::atomic::AtomicBool,
    pub(super) task: Mutex<Option<std::task::Waker>>,
}

impl std::task::Wake for SelfWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst)
            && let Some(w) = self.task.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
        {
            w.wake_by_ref();
        }
    }
}

/// Passes of [`Driver`]'s loop in one poll before it yields to the thread's
/// other connections.
pub(super) const DRIVER_PASSES: usize = 4;

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::task::Poll;
        let this = self.get_mut();
        {
            let mut task = this.wake.task.lock().unwrap_or_else(|p| p.into_inner());
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let waker = std::task::Waker::from(this.wake.clone());
        let mut inner = std::task::Context::from_waker(&waker);
        for _ in 0..DRIVER_PASSES {
            this.wake.polling.store(true, Ordering::SeqCst);
            this.wake.woken.store(false, Ordering::SeqCst);
            // Upstream first: a reply it reads reaches the client side in
            // this same pass.
            this.conns
                .retain_mut(|c| c.as_mut().poll(&mut inner).is_pending());
            if this.server.as_mut().poll(&mut inner).is_ready() {
                this.wake.polling.store(false, Ordering::SeqCst);
                // The client is gone; upstream connections may sit in the
                // thread's pool now, so they keep running as their own tasks.
                let left = this.conns.drain(..).chain(
                    this.held
                        .new_conns
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .drain(..)
                        .collect::<Vec<_>>(),
                );
                for c in left {
                    tokio::spawn(c);
                }
                return Poll::Ready(());
            }
            let again = {
                let mut fresh = this
                    .held
                    .new_conns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let any = !fresh.is_empty();
                this.conns.append(&mut fresh);
                any
            };
            this.wake.polling.store(false, Ordering::SeqCst);
            if !again && !this.wake.woken.swap(false, Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still busy: let the thread's other connections run first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
