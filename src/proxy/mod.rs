//! The embedded reverse proxy: `<service>.<world>.<domain>` → the service's
//! current port.
//!
//! hyper 1.x on loopback only (127.0.0.1 and ::1). Routing is by Host —
//! case-insensitive, port and trailing dot ignored — against a table the
//! daemon keeps in step with services as they start, stop and move. Bodies
//! stream both ways without buffering; `Upgrade` (WebSockets, dev-server HMR)
//! passes through; hop-by-hop headers are dropped per RFC 9110 §7.6.1 and
//! `X-Forwarded-*`/`Forwarded` are set, with Host reaching the service
//! unchanged.
//!
//! How it is built for speed (measured with benchmarks/proxy.py):
//! - One proxy thread per core (at most [`MAX_THREADS`]), each a
//!   single-threaded tokio runtime. The daemon's runtime accepts and hands
//!   each connection to the thread serving the fewest; from then on the
//!   client connection, its upstream connection and every wake-up between
//!   them stay on that thread, as in nginx's workers.
//! - Upstream keep-alive: a client connection keeps the upstream connection
//!   it used for its next request; when it closes, that connection goes to
//!   its thread's idle pool ([`MAX_IDLE_PER_PORT`] per port).
//! - A reply of at most [`SMALL_BODY_BYTES`] whose bytes are already at
//!   hand leaves in one write with its headers; anything longer, or still
//!   arriving (SSE), streams.
//! - Per request, no boxed body and no hashing of absent hop-by-hop names;
//!   both hyper connections write head and body from one buffer.
//!
//! | module | holds |
//! |---|---|
//! | `routes` | the Host → route table, the Host a request names, Caddy's TLS question |
//! | `connection` | one client connection on its thread: client and upstream driven as one task |
//! | `forward` | one request: headers, upgrades, ride-through and replay, the answer without a route |
//! | `upstream` | the per-thread idle pool, connecting, sending |
//! | `body` | the one body type: streamed, or whole when small and at hand |
//! | `pages` | error pages (text a service or branch names is escaped) |
//! | `wake` | each world's traffic for the idle check; a request to a sleeping world held while it wakes |
//! | `board` | the read-only dashboard page at `binky.localhost`, live over SSE |
//! | `limits`, `counters` | per-user connection limits; the counters `metrics` reads |
//! | [`caddy`] | HTTPS through Caddy when it is on PATH |
//! | here | the proxy threads, binding, the accept loop |

mod board;
pub mod caddy;
mod counters;
mod limits;
mod pages;

use bytes::Bytes;
pub use counters::{CounterShard, ProxyCounters};
use hyper::body::Incoming;
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

mod body;
mod connection;
mod forward;
mod routes;
mod upstream;
mod wake;
pub use board::{BOARD_HOSTS, Board, KEEPALIVE};
pub(crate) use body::Body;
pub use body::SMALL_BODY_BYTES;
use body::full;
use connection::serve_connection;
pub use routes::{Route, Routes, TLS_ASK_PATH, normalise_host};
pub use wake::{Activity, Seen, Waker};

/// The proxy's shared state.
pub struct Proxy {
    routes: Arc<Routes>,
    counters: Arc<ProxyCounters>,
    /// What the proxy's own names ([`BOARD_HOSTS`]) show; without one they
    /// are unknown hosts like any other.
    board: Option<Arc<dyn Board>>,
    /// Wakes a sleeping world on its first request; without one, a
    /// sleeping world's URL gets the unavailable page.
    waker: Option<Arc<dyn Waker>>,
}

/// One proxy thread's state: the shared [`Proxy`] plus this thread's own
/// pool of idle upstream connections (by port).
struct Worker {
    proxy: Arc<Proxy>,
    /// This thread's index, which picks its counter shard.
    index: usize,
    idle: Mutex<HashMap<u16, Vec<Upstream>>>,
}

/// An HTTP/1.1 connection to a service, driven by its own task on the
/// same proxy thread.
type Upstream = hyper::client::conn::http1::SendRequest<UpBody>;

/// What goes to a service: the client's body as it streams, or nothing for
/// a body-less request sent again after the service dropped it unanswered
/// (see [`Replay`](forward::Replay)). An enum, not a box: no allocation per request.
type UpBody = http_body_util::Either<Incoming, http_body_util::Empty<Bytes>>;

/// Idle upstream connections kept per port and proxy thread.
pub const MAX_IDLE_PER_PORT: usize = 64;

impl Proxy {
    /// A proxy over `routes`, counting into `counters`.
    pub fn new(routes: Arc<Routes>, counters: Arc<ProxyCounters>) -> Arc<Self> {
        Arc::new(Proxy {
            routes,
            counters,
            board: None,
            waker: None,
        })
    }

    /// The daemon's proxy: over `routes`, serving the dashboard page from
    /// `board` at its own names, and waking sleeping worlds through
    /// `waker`.
    pub fn for_daemon(
        routes: Arc<Routes>,
        counters: Arc<ProxyCounters>,
        board: Arc<dyn Board>,
        waker: Arc<dyn Waker>,
    ) -> Arc<Self> {
        Arc::new(Proxy {
            routes,
            counters,
            board: Some(board),
            waker: Some(waker),
        })
    }
}

/// Binds loopback (IPv4, and IPv6 where present) on `port`.
async fn bind(port: u16) -> std::io::Result<Vec<TcpListener>> {
    let mut out = vec![TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?];
    match TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port))).await {
        Ok(l) => out.push(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {}
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// A proxy thread, as the acceptor sees it.
struct WorkerHandle {
    conns: tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, SocketAddr, limits::Slot)>,
    /// Client connections it serves now.
    active: Arc<AtomicUsize>,
}

/// Proxy threads: one per core, or `BINKY_PROXY_THREADS` (at most
/// [`MAX_THREADS`] either way), each running a
/// single-threaded runtime that owns its connections end to end — the
/// client's, and the upstream ones in its own pool — so a request never
/// crosses threads (as nginx's workers do). They idle in `epoll_wait`.
fn start_workers(proxy: &Arc<Proxy>) -> Vec<WorkerHandle> {
    let n = std::env::var("BINKY_PROXY_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .clamp(1, MAX_THREADS);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let active = Arc::new(AtomicUsize::new(0));
        let proxy = proxy.clone();
        let count = active.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("binky-proxy-{i}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start a proxy thread");
                        return;
                    }
                };
                rt.block_on(async move {
                    tokio::spawn(timer_heartbeat());
                    let worker = Arc::new(Worker::new(proxy, i));
                    while let Some((stream, peer, slot)) = rx.recv().await {
                        match tokio::net::TcpStream::from_std(stream) {
                            Ok(stream) => {
                                let (count, worker) = (count.clone(), worker.clone());
                                tokio::spawn(async move {
                                    serve_connection(worker, stream, peer, count).await;
                                    drop(slot);
                                });
                            }
                            Err(e) => {
                                count.fetch_sub(1, Ordering::Relaxed);
                                tracing::warn!(error = %e, "proxy connection");
                            }
                        }
                    }
                });
            });
        match spawned {
            Ok(_) => out.push(WorkerHandle { conns: tx, active }),
            Err(e) => tracing::error!(error = %e, "cannot start a proxy thread"),
        }
    }
    out
}

/// Keeps a timer due within [`HEARTBEAT`] on a proxy thread, for good.
///
/// Why: each request arms hyper's header-read timer (20 s) while its
/// connection waits for the next request. Tokio's timer wheel wakes the
/// thread's I/O driver — an `eventfd` write, a system call — whenever a timer
/// is set earlier than the driver's next promised wake-up, which with no other
/// timer is every time. With this one due sooner, setting the header timer
/// costs no system call: one wake-up a second instead of one write a request
/// (a fifth of the proxy's system calls per request, `strace -f`).
async fn timer_heartbeat() {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
    }
}

/// See [`timer_heartbeat`]: 1 s.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);

/// At most this many proxy threads, whatever the core count: beyond a few,
/// the proxy is never the bottleneck of a development machine.
pub const MAX_THREADS: usize = 4;

/// Where the proxy's listener stands: what each bind attempt leaves for
/// `status`, `doctor` and a waiter on a port change to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The port it tried.
    pub port: u16,
    /// It listens there now.
    pub listening: bool,
    /// Why not, while not listening: the last bind's error.
    pub error: Option<String>,
    /// Binds on this port that failed in a row (0 once it listens).
    pub failures: u32,
    /// When it tries again, while not listening.
    pub next_try: Option<tokio::time::Instant>,
}

/// The first wait after a failed bind; it doubles with each failure in a
/// row, up to the caller's most.
pub const RETRY_FIRST: Duration = Duration::from_millis(250);

/// How long to wait before bind number `failures + 1`, after `failures`
/// (≥ 1) failed in a row: [`RETRY_FIRST`], doubling, never above `most`.
pub fn retry_delay(failures: u32, most: Duration) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << exp).min(most)
}

/// Serves on the port `port` holds, moving when it changes (no daemon
/// restart). A port that cannot be bound is tried again with backoff
/// ([`retry_delay`], at most `retry_most` apart) for as long as it fails, and
/// at once when the port setting changes: a port another process held
/// for a while is served as soon as it is free. The first failure of a run
/// of failures (and a change of error) is reported through `on_error`, not
/// every try; a bind that succeeds after failures is logged.
///
/// `bound` reports each attempt (see [`Binding`]).
pub async fn serve(
    proxy: Arc<Proxy>,
    mut port: watch::Receiver<u16>,
    bound: watch::Sender<Option<Binding>>,
    retry_most: Duration,
    on_error: impl Fn(String) + Send + Sync + 'static,
) {
    let workers = Arc::new(start_workers(&proxy));
    if workers.is_empty() {
        on_error("cannot start any proxy thread".into());
        return;
    }
    let limits = limits::Limits::for_open_files(crate::platform::raise_open_files_limit());
    tracing::debug!(cap = limits.cap(), "proxy connection cap");
    let mut streak = Streak::default();
    loop {
        let p = *port.borrow_and_update();
        if streak.port != Some(p) {
            streak = Streak {
                port: Some(p),
                ..Streak::default()
            };
        }
        let listeners = match bind(p).await {
            Ok(l) => l,
            Err(e) => {
                let delay = streak.failed(p, e.to_string(), retry_most, &bound, &on_error);
                tokio::select! {
                    changed = port.changed() => if changed.is_err() {
                        return;
                    },
                    () = tokio::time::sleep(delay) => {}
                }
                continue;
            }
        };
        if streak.failures > 0 {
            tracing::info!(
                port = p,
                failures = streak.failures,
                "proxy listening after {} failed bind(s)",
                streak.failures
            );
        } else {
            tracing::info!(port = p, threads = workers.len(), "proxy listening");
        }
        streak = Streak {
            port: Some(p),
            ..Streak::default()
        };
        bound.send_replace(Some(Binding {
            port: p,
            listening: true,
            error: None,
            failures: 0,
            next_try: None,
        }));
        let mut tasks = tokio::task::JoinSet::new();
        for l in listeners {
            tasks.spawn(accept_loop(workers.clone(), l, limits.clone()));
        }
        // Move when the setting changes; dropping the tasks closes the old
        // listeners (connections already accepted finish on their own).
        if port.changed().await.is_err() {
            return;
        }
        tasks.abort_all();
    }
}

/// Failed binds in a row on one port, and the last error said (each
/// distinct error is said once, not every try).
#[derive(Default)]
struct Streak {
    port: Option<u16>,
    failures: u32,
    said: Option<String>,
}

impl Streak {
    /// Records a failed bind on `p`, says it when the error is new, and
    /// publishes the proxy as down; returns how long to wait before the
    /// next try.
    fn failed(
        &mut self,
        p: u16,
        error: String,
        retry_most: Duration,
        bound: &watch::Sender<Option<Binding>>,
        on_error: &impl Fn(String),
    ) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let delay = retry_delay(self.failures, retry_most);
        if self.said.as_deref() != Some(error.as_str()) {
            on_error(format!(
                "cannot bind the proxy on port {p}: {error}; trying again with backoff (at most {} apart) until it is free, or `binky port --proxy <port>` moves it",
                humantime::format_duration(retry_most)
            ));
            self.said = Some(error.clone());
        }
        // send_replace: kept even while nobody is subscribed (a plain send
        // would drop it, and a later waiter would time out on a proxy that
        // has long answered).
        bound.send_replace(Some(Binding {
            port: p,
            listening: false,
            error: Some(error),
            failures: self.failures,
            next_try: Some(tokio::time::Instant::now() + delay),
        }));
        delay
    }
}

/// Accepts and hands each connection to the proxy thread serving the fewest
/// (a shared listening socket would let one thread take most of them and
/// saturate its core while the other idles).
async fn accept_loop(
    workers: Arc<Vec<WorkerHandle>>,
    listener: TcpListener,
    limits: Arc<limits::Limits>,
) {
    let mut next = 0usize;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and the like: said once a minute, not once a try.
                limits.warn_once(&format!("accept failed: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match limits.admit(peer, stream.local_addr().ok()) {
            Ok(s) => s,
            Err(why) => {
                limits.warn_once(&why);
                continue; // dropping the stream closes it
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        // Least connections, ties broken round-robin.
        next = next.wrapping_add(1);
        let n = workers.len();
        let w = (0..n)
            .map(|k| &workers[(next + k) % n])
            .min_by_key(|w| w.active.load(Ordering::Relaxed))
            .expect("at least one proxy thread");
        w.active.fetch_add(1, Ordering::Relaxed);
        if w.conns.send((stream, peer, slot)).is_err() {
            w.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forward::strip_hop_by_hop;
    use hyper::header::{HeaderMap, HeaderValue};

    #[test]
    fn a_failed_bind_is_tried_again_sooner_first_then_at_most_the_cap() {
        let most = Duration::from_secs(10);
        let ms = Duration::from_millis;
        assert_eq!(retry_delay(1, most), ms(250));
        assert_eq!(retry_delay(2, most), ms(500));
        assert_eq!(retry_delay(3, most), ms(1000));
        assert_eq!(retry_delay(6, most), ms(8000));
        assert_eq!(retry_delay(7, most), most);
        assert_eq!(retry_delay(u32::MAX, most), most);
        assert_eq!(retry_delay(1, ms(100)), ms(100));
    }

    #[test]
    fn hosts_normalise() {
        assert_eq!(
            normalise_host("Web.X.Acme.Localhost.:8080"),
            "web.x.acme.localhost"
        );
        assert_eq!(
            normalise_host("web.x.acme.localhost"),
            "web.x.acme.localhost"
        );
        assert_eq!(normalise_host("[::1]:80"), "::1");
    }

    /// A daemon start waited 2 s for nothing when the proxy bound before
    /// anyone subscribed: the report was dropped.
    #[tokio::test]
    async fn the_bind_report_is_kept_for_a_waiter_that_comes_later() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let proxy = Proxy::new(Arc::default(), Arc::default());
        let (_port_tx, port_rx) = watch::channel(port);
        let (bound, _) = watch::channel(None);
        let report = bound.clone();
        tokio::spawn(serve(
            proxy,
            port_rx,
            report,
            Duration::from_millis(50),
            |_| {},
        ));
        // Listening first, subscribed after.
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut rx = bound.subscribe();
        let seen = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            rx.wait_for(|b| b.as_ref().is_some_and(|b| b.port == port && b.listening)),
        )
        .await;
        assert!(seen.is_ok(), "the proxy's bind report was lost");
    }

    /// Issue 48: one failed bind was the last: the proxy served nothing for
    /// the rest of the daemon's life although its port became free.
    #[tokio::test]
    async fn a_port_that_was_taken_is_bound_once_it_is_free() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = holder.local_addr().unwrap().port();
        let proxy = Proxy::new(Arc::default(), Arc::default());
        let (_port_tx, port_rx) = watch::channel(port);
        let (bound, _) = watch::channel(None);
        let said = Arc::new(Mutex::new(Vec::new()));
        let log = said.clone();
        tokio::spawn(serve(
            proxy,
            port_rx,
            bound.clone(),
            Duration::from_millis(50),
            move |m| log.lock().unwrap().push(m),
        ));
        let mut rx = bound.subscribe();
        let failing = tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|b| b.as_ref().is_some_and(|b| b.failures >= 3)),
        )
        .await
        .expect("the proxy tries again")
        .unwrap()
        .clone()
        .unwrap();
        assert!(!failing.listening);
        assert!(
            failing.error.as_deref().unwrap_or("").contains("in use"),
            "{failing:?}"
        );
        assert!(failing.next_try.is_some());
        // Said once for the run of failures, not once a try.
        assert_eq!(said.lock().unwrap().len(), 1, "{:?}", said.lock().unwrap());
        drop(holder);
        let up = tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|b| b.as_ref().is_some_and(|b| b.listening)),
        )
        .await;
        assert!(up.is_ok(), "the proxy never bound the freed port");
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        );
        let now = bound.borrow().clone().unwrap();
        assert_eq!((now.failures, now.error, now.next_try), (0, None, None));
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-end-to-end", HeaderValue::from_static("1"));
        assert_eq!(strip_hop_by_hop(&mut h), None);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-end-to-end"));
    }

    /// The one pass that drops hop-by-hop headers also says whether the
    /// message asks for an upgrade: `Connection` must name it (in any of
    /// its values, any case) and `Upgrade` must say to what.
    #[test]
    fn an_upgrade_is_found_in_the_same_pass() {
        let map = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        let mut h = map(&[
            ("connection", "keep-alive"),
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "k"),
        ]);
        assert_eq!(
            strip_hop_by_hop(&mut h),
            Some(HeaderValue::from_static("websocket"))
        );
        assert_eq!(h.len(), 1, "{h:?}");
        // Upgrade without Connection naming it is no upgrade (and goes).
        let mut h = map(&[("upgrade", "websocket"), ("x-a", "1")]);
        assert_eq!(strip_hop_by_hop(&mut h), None);
        assert_eq!(h.len(), 1);
        // Connection: upgrade with no Upgrade header: nothing to ask for.
        let mut h = map(&[("connection", "upgrade"), ("x-a", "1")]);
        assert_eq!(strip_hop_by_hop(&mut h), None);
        assert_eq!(h.len(), 1);
        // Close and the usual tokens name no header; Host is never dropped.
        let mut h = map(&[
            ("connection", "close, Host, TE"),
            ("te", "trailers"),
            ("host", "a.localhost"),
            ("transfer-encoding", "chunked"),
            ("proxy-connection", "keep-alive"),
        ]);
        assert_eq!(strip_hop_by_hop(&mut h), None);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("host"));
    }
}
