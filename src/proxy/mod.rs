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

pub mod caddy;
mod counters;
mod limits;
mod pages;

use crate::protocol::ServiceState;
use bytes::Bytes;
pub use counters::{CounterShard, ProxyCounters};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Where one hostname goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Project name.
    pub project: String,
    /// World name.
    pub world: String,
    /// Service name.
    pub service: String,
    /// The service's current port.
    pub port: u16,
    /// Its service's state: whether requests go through, wait or get a page.
    pub state: ServiceState,
    /// Its project asks for HTTPS: Caddy may get a certificate for the host
    /// (see [`TLS_ASK_PATH`]).
    pub https: bool,
}

/// Where Caddy asks, before it gets a certificate on demand, whether a name
/// is one of ours (`?domain=NAME`): only the host of a routed service of an
/// `https = true` project that is not stopped gets a yes, so a client
/// naming any other host (`www.google.com`) gets no certificate chained to
/// the local CA.
pub const TLS_ASK_PATH: &str = "/.well-known/binky/tls-ask";

/// The live routing table, shared with the daemon.
#[derive(Default)]
pub struct Routes {
    table: RwLock<BTreeMap<String, Arc<Route>>>,
}

/// Normalises a Host header value: lowercase, no port, no trailing dot.
pub fn normalise_host(host: &str) -> String {
    let h = host.trim();
    let h = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        h.rsplit_once(':')
            .filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit()))
            .map_or(h, |(n, _)| n)
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

impl Routes {
    /// Adds or replaces the route for `host`.
    pub fn set(&self, host: &str, route: Route) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        t.insert(normalise_host(host), Arc::new(route));
    }
    /// Updates the state of every route of one service.
    pub fn set_state(&self, project: &str, world: &str, service: &str, state: ServiceState) {
        self.update_state(
            |r| r.project == project && r.world == world && r.service == service,
            state,
        );
    }
    /// Updates the state of every route of one world.
    pub fn set_world_state(&self, project: &str, world: &str, state: ServiceState) {
        self.update_state(|r| r.project == project && r.world == world, state);
    }
    fn update_state(&self, which: impl Fn(&Route) -> bool, state: ServiceState) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        for r in t.values_mut().filter(|r| which(r)) {
            Arc::make_mut(r).state = state;
        }
    }
    /// Waits until the route for `host` is running (polled: only a request
    /// that met a restart waits), at most until `until`; the route then, or
    /// `None`.
    pub async fn wait_running(
        &self,
        host: &str,
        until: tokio::time::Instant,
    ) -> Option<Arc<Route>> {
        loop {
            let r = self.get(host)?;
            if r.state.serves() {
                return Some(r);
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    /// Drops every route of a world.
    pub fn remove_world(&self, project: &str, world: &str) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        t.retain(|_, r| !(r.project == project && r.world == world));
    }
    /// The route for a Host header value (shared: the proxy looks one up
    /// per request, so this neither copies the route nor, for a Host that is
    /// already lowercase without port or trailing dot, the name).
    pub fn get(&self, host: &str) -> Option<Arc<Route>> {
        let t = self.table.read().unwrap_or_else(|p| p.into_inner());
        let plain = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !host.ends_with('.');
        if plain {
            t.get(host).cloned()
        } else {
            t.get(&normalise_host(host)).cloned()
        }
    }
    /// Every route, by hostname.
    pub fn all(&self) -> Vec<(String, Route)> {
        let t = self.table.read().unwrap_or_else(|p| p.into_inner());
        t.iter().map(|(h, r)| (h.clone(), (**r).clone())).collect()
    }
}

/// What the proxy answers with. An enum rather than a boxed body: one
/// response per request, so the box and the dynamic calls would be paid on
/// every request.
pub(crate) enum Body {
    /// Bytes already at hand (pages, short replies), sent with the headers
    /// in one write. `None` once sent, or when empty.
    Full(Option<Bytes>),
    /// Bytes gathered already (if any), then the rest of the upstream's
    /// body, streamed as it arrives.
    Stream(Option<Bytes>, Incoming),
    /// Bytes gathered already, then the upstream's trailers.
    Trailers(Option<Bytes>, Option<HeaderMap>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        use hyper::body::Frame;
        use std::task::Poll;
        match self.get_mut() {
            Body::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Body::Stream(first, body) => match first.take() {
                Some(d) => Poll::Ready(Some(Ok(Frame::data(d)))),
                None => Pin::new(body).poll_frame(cx),
            },
            Body::Trailers(first, trailers) => Poll::Ready(match first.take() {
                Some(d) => Some(Ok(Frame::data(d))),
                None => trailers.take().map(|t| Ok(Frame::trailers(t))),
            }),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(data) => data.is_none(),
            Body::Stream(first, body) => first.is_none() && body.is_end_stream(),
            Body::Trailers(first, trailers) => first.is_none() && trailers.is_none(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Full(data) => {
                hyper::body::SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Body::Stream(first, body) => {
                let head = first.as_ref().map_or(0, |d| d.len() as u64);
                let rest = body.size_hint();
                let mut hint = hyper::body::SizeHint::new();
                hint.set_lower(rest.lower() + head);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + head);
                }
                hint
            }
            Body::Trailers(..) => hyper::body::SizeHint::default(),
        }
    }
}

/// Responses with a `Content-Length` up to this many bytes are read whole
/// before they are sent on, and bodies of unknown length are gathered up to
/// this size while frames keep arriving; see `Worker::handle`. Bounded, so
/// a 1 GiB download still runs in constant memory.
pub const SMALL_BODY_BYTES: u64 = 64 * 1024;

/// How many turns of the proxy thread's scheduler a body of unknown length
/// gets to produce its next frame before what has arrived is sent on. One
/// turn lets the upstream connection's task read what is already in its
/// socket; the second covers a frame split across reads.
const COALESCE_YIELDS: u32 = 2;

/// `fut`'s output if it is ready now or within `turns` trips through the
/// scheduler (other ready tasks run in between), else `None`.
async fn ready_soon<F: std::future::Future>(
    mut fut: std::pin::Pin<&mut F>,
    turns: u32,
) -> Option<F::Output> {
    let mut left = turns;
    std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending if left == 0 => std::task::Poll::Ready(None),
        std::task::Poll::Pending => {
            left -= 1;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

fn full(text: impl Into<Bytes>) -> Body {
    let bytes = text.into();
    Body::Full((!bytes.is_empty()).then_some(bytes))
}

/// The proxy's shared state.
pub struct Proxy {
    routes: Arc<Routes>,
    counters: Arc<ProxyCounters>,
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
/// (see [`Replay`]). An enum, not a box: no allocation per request.
type UpBody = http_body_util::Either<Incoming, http_body_util::Empty<Bytes>>;

/// Enough of a body-less idempotent request (GET, HEAD, OPTIONS) to send it
/// again: a dev server that is shutting down for a restart may accept a
/// connection and close it without answering, and the request is then sent
/// to the new server instead.
struct Replay {
    method: hyper::Method,
    uri: Uri,
    version: hyper::Version,
    headers: HeaderMap,
}

impl Replay {
    fn of(parts: &hyper::http::request::Parts, body: &Incoming) -> Option<Self> {
        use hyper::body::Body as _;
        let idempotent = matches!(
            parts.method,
            hyper::Method::GET | hyper::Method::HEAD | hyper::Method::OPTIONS
        );
        (idempotent && body.is_end_stream()).then(|| Replay {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            version: parts.version,
            headers: parts.headers.clone(),
        })
    }

    fn request(&self) -> Request<UpBody> {
        let mut r = Request::new(http_body_util::Either::Right(http_body_util::Empty::new()));
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.version_mut() = self.version;
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// Idle upstream connections kept per port and proxy thread.
pub const MAX_IDLE_PER_PORT: usize = 64;

/// The upstream connection one client connection uses between its requests
/// (keep-alive affinity: no pool lookup on the hot path). When the client
/// goes, the connection returns to the thread's pool.
struct Held {
    worker: Arc<Worker>,
    slot: Mutex<Option<(u16, Upstream)>>,
    /// The client's address as `X-Forwarded-For` and `Forwarded: for=` put
    /// it, made once per connection.
    peer_ip: HeaderValue,
    forwarded_for: String,
    /// `Forwarded` for the last Host seen on this connection (usually the
    /// only one), so it is formatted once.
    forwarded: Mutex<Option<(HeaderValue, bool, HeaderValue)>>,
    /// Upstream connections just made for this client connection, for its
    /// task to take over and drive.
    new_conns: Mutex<Vec<ConnFuture>>,
}

/// An upstream connection's future (hyper's dispatcher for it).
type ConnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Held {
    fn new(worker: Arc<Worker>, peer: SocketAddr) -> Self {
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
        }
    }

    /// Sets `X-Forwarded-For`, `-Proto`, `-Host` and `Forwarded`.
    fn add_forwarded(&self, h: &mut HeaderMap, host: &HeaderValue) {
        match h.get(X_FORWARDED_FOR).map(|v| v.as_bytes()) {
            Some(prev) => {
                let mut v = prev.to_vec();
                v.extend_from_slice(b", ");
                v.extend_from_slice(self.peer_ip.as_bytes());
                if let Ok(v) = HeaderValue::from_bytes(&v) {
                    h.insert(X_FORWARDED_FOR, v);
                }
            }
            None => {
                h.insert(X_FORWARDED_FOR, self.peer_ip.clone());
            }
        }
        // A proto set in front of us (Caddy terminating TLS) is kept, and
        // `Forwarded` says the same, so the two never disagree.
        let https = match h.get(X_FORWARDED_PROTO) {
            Some(p) => p.as_bytes().eq_ignore_ascii_case(b"https"),
            None => {
                h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
                false
            }
        };
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

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((port, up)) = self.slot.get_mut().ok().and_then(|s| s.take()) {
            self.worker.park(port, up);
        }
    }
}

/// Why an upstream could not be reached.
enum UpstreamError {
    Dial(std::io::Error),
    Http(hyper::Error),
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Dial(e) => write!(f, "cannot connect: {e}"),
            UpstreamError::Http(e) => write!(f, "{e}"),
        }
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded. Typed names,
/// so finding them does not parse a string per request. `Trailer` is not
/// one (RFC 2616 listed it; RFC 9110 does not): it declares the trailer
/// fields, and hyper sends only declared ones on.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including any named in `Connection`.
///
/// One pass over the names finds them; most messages carry none or only
/// `Connection: keep-alive`, so nothing is hashed or allocated for the
/// seven names that are absent.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut gone: Vec<HeaderName> = Vec::new();
    for (name, value) in headers.iter() {
        if !HOP_BY_HOP.contains(name) {
            continue;
        }
        if name == header::CONNECTION {
            // `close`, `keep-alive` and `upgrade` are the usual tokens: no
            // header to find for the first, and the loop finds the others
            // itself, so only other names are parsed.
            let named = value
                .to_str()
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                // Host is never dropped: the service needs it to know which
                // site is asked for.
                .filter(|t| {
                    !["close", "keep-alive", "upgrade", "te", "host", ""]
                        .iter()
                        .any(|k| t.eq_ignore_ascii_case(k))
                })
                .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok());
            for n in named {
                if !gone.contains(&n) {
                    gone.push(n);
                }
            }
        }
        if !gone.contains(name) {
            gone.push(name.clone());
        }
    }
    for n in gone {
        headers.remove(n);
    }
}

fn is_upgrade<B>(req: &Request<B>) -> Option<HeaderValue> {
    let conn_upgrade = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        });
    if conn_upgrade {
        req.headers().get(header::UPGRADE).cloned()
    } else {
        None
    }
}

impl Proxy {
    /// A proxy over `routes`, counting into `counters`.
    pub fn new(routes: Arc<Routes>, counters: Arc<ProxyCounters>) -> Arc<Self> {
        Arc::new(Proxy { routes, counters })
    }
}

impl Worker {
    fn new(proxy: Arc<Proxy>, index: usize) -> Self {
        Worker {
            proxy,
            index,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// An idle pooled connection to `port` that is still open.
    fn checkout(&self, port: u16) -> Option<Upstream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(&port)?;
        while let Some(up) = list.pop() {
            if !up.is_closed() {
                return Some(up);
            }
        }
        None
    }

    /// Returns a connection to the pool (closed ones are dropped).
    fn park(&self, port: u16, up: Upstream) {
        if up.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(port).or_default();
        list.retain(|u| !u.is_closed());
        if list.len() < MAX_IDLE_PER_PORT {
            list.push(up);
        }
    }

    /// Dials `port` with the health probes' loopback logic (127.0.0.1, then
    /// ::1) and starts an HTTP/1.1 connection driven by its own task.
    /// Dials the service. A refused dial is tried again until `ride` (the
    /// service restarts itself: a dev server's autoreload leaves its port
    /// refusing for a moment), so a request rides through instead of
    /// failing.
    async fn connect(
        port: u16,
        driver: Option<&Held>,
        ride: Option<Duration>,
    ) -> Result<Upstream, UpstreamError> {
        // The deadline is taken at the first refusal: nothing on the normal
        // path.
        let mut until: Option<tokio::time::Instant> = None;
        let stream = loop {
            match crate::http::dial("localhost", port, Duration::from_secs(5)).await {
                Ok(s) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && ride.is_some() => {
                    let deadline = *until.get_or_insert_with(|| {
                        tokio::time::Instant::now() + ride.unwrap_or_default()
                    });
                    if tokio::time::Instant::now() >= deadline {
                        return Err(UpstreamError::Dial(e));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(UpstreamError::Dial(e)),
            }
        };
        let _ = stream.set_nodelay(true);
        // Headers and a short body copied into one buffer and written as one
        // slice: fewer instructions per request than hyper's queue of
        // buffers for writev (measured with callgrind), and large bodies are
        // still written in bounded pieces.
        let (up, conn) = hyper::client::conn::http1::Builder::new()
            .writev(false)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(UpstreamError::Http)?;
        let conn: ConnFuture = Box::pin(async move {
            let _ = conn.with_upgrades().await;
        });
        match driver {
            // Driven by the client connection's own task (see `Driver`).
            Some(held) => held
                .new_conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn),
            None => {
                tokio::spawn(conn);
            }
        }
        Ok(up)
    }

    /// Sends `req` to `port` on the connection this client connection holds,
    /// else a pooled one, else a new one. A request a stale connection did
    /// not take (closed by the service while idle) is sent again on a new
    /// connection.
    ///
    /// With `ride`, a refused dial is tried again for that long (see
    /// [`Self::connect`]), and so is a `replay`able request that a new
    /// connection took but never answered.
    async fn send(
        &self,
        held: &Held,
        port: u16,
        mut req: Request<UpBody>,
        keep: bool,
        ride: Option<Duration>,
        replay: Option<&Replay>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let reuse = held
            .slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .and_then(|(p, up)| {
                if p == port {
                    Some(up)
                } else {
                    self.park(p, up);
                    None
                }
            })
            .or_else(|| self.checkout(port));
        if let Some(mut up) = reuse
            && up.ready().await.is_ok()
        {
            match up.try_send_request(req).await {
                Ok(resp) => {
                    if keep {
                        *held.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((port, up));
                    }
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    Some(r) => req = r,
                    // Sent on a kept-alive connection the server closed
                    // (going down for a restart): a replayable request
                    // rides through on a new one, as below.
                    None if replay.is_some() && ride.is_some() => {
                        req = replay.map(Replay::request).expect("replay");
                    }
                    None => return Err(UpstreamError::Http(e.into_error())),
                },
            }
        }
        // An upgraded connection outlives the request: it gets its own task.
        let mut up = Self::connect(port, keep.then_some(held), ride).await?;
        let mut until: Option<tokio::time::Instant> = None;
        let resp = loop {
            match up.send_request(req).await {
                Ok(r) => break r,
                // Dropped unanswered — by a server going down for a restart,
                // most likely: a body-less GET goes to the next one.
                Err(e) if replay.is_some() && ride.is_some() => {
                    let deadline = *until.get_or_insert_with(|| {
                        tokio::time::Instant::now() + ride.unwrap_or_default()
                    });
                    if tokio::time::Instant::now() >= deadline {
                        return Err(UpstreamError::Http(e));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    up = Self::connect(port, keep.then_some(held), Some(left)).await?;
                    req = replay.map(Replay::request).expect("replay");
                }
                Err(e) => return Err(UpstreamError::Http(e)),
            }
        };
        if keep {
            *held.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((port, up));
        }
        Ok(resp)
    }

    async fn handle(&self, held: &Held, mut req: Request<Incoming>) -> Response<Body> {
        let this = &*self.proxy;
        let counters = this.counters.shard(self.index);
        counters.requests.fetch_add(1, Ordering::Relaxed);
        let host_value = match request_host(&mut req) {
            Ok(h) => h,
            Err(why) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                return pages::bad_request(why);
            }
        };
        let host_raw = host_value.to_str().unwrap_or("");
        let Some(route) = this.routes.get(host_raw) else {
            if req.uri().path() == TLS_ASK_PATH {
                return tls_ask(&this.routes, req.uri().query());
            }
            counters.errors.fetch_add(1, Ordering::Relaxed);
            return pages::not_found(host_raw, &this.routes.all());
        };
        // A service that is (re)starting gets a moment to come up, so a
        // planned restart never fails a request that arrives during it.
        let route = if route.state.is_coming() {
            let until = tokio::time::Instant::now() + ride_through();
            match this.routes.wait_running(host_raw, until).await {
                Some(r) => r,
                None => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    return pages::unavailable(&route);
                }
            }
        } else {
            route
        };
        if !route.state.serves() {
            counters.errors.fetch_add(1, Ordering::Relaxed);
            return pages::unavailable(&route);
        }
        let upgrade = is_upgrade(&req);
        let mut client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        // Origin form on the wire to the service (an absolute-form target
        // from the client loses its scheme and authority).
        if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
            let path = parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            parts.uri = match path.parse::<Uri>() {
                Ok(u) => u,
                Err(_) => return pages::bad_request("bad request target"),
            };
        }
        strip_hop_by_hop(&mut parts.headers);
        if let Some(proto) = &upgrade {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(header::UPGRADE, proto.clone());
        }
        held.add_forwarded(&mut parts.headers, &host_value);
        let replay = if upgrade.is_none() {
            Replay::of(&parts, &body)
        } else {
            None
        };
        let mut upstream_req = Some(Request::from_parts(
            parts,
            http_body_util::Either::Left(body),
        ));
        // A replayable request whose short answer broke off mid-body (the
        // old process died between headers and bytes during a restart) is
        // sent again, within the same ride-through: a restart never shows
        // the client a 502.
        let deadline = tokio::time::Instant::now() + ride_through();
        loop {
            let req = match upstream_req.take() {
                Some(r) => r,
                None => replay.as_ref().map(Replay::request).expect("replay"),
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let resp = self
                .send(
                    held,
                    route.port,
                    req,
                    upgrade.is_none(),
                    Some(left),
                    replay.as_ref(),
                )
                .await;
            let retry = replay.is_some() && tokio::time::Instant::now() < deadline;
            match self
                .answer(
                    host_raw,
                    &route,
                    resp,
                    client_upgrade.take(),
                    &upgrade,
                    retry,
                )
                .await
            {
                Some(r) => return r,
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// The client's response from the service's `resp`, or `None` when a
    /// short body broke off and `retry` allows the request to go again.
    async fn answer(
        &self,
        host_raw: &str,
        route: &Route,
        resp: Result<Response<Incoming>, UpstreamError>,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
        upgrade: &Option<HeaderValue>,
        retry: bool,
    ) -> Option<Response<Body>> {
        let this = &*self.proxy;
        let counters = this.counters.shard(self.index);
        let mut resp = match resp {
            Ok(r) => r,
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                // The supervisor began a restart while this request
                // waited: that is a 503 with Retry-After, not a 502. Its
                // state reaches the routes through a task, so a restart
                // that broke this very request gets a moment to show.
                for _ in 0..STATE_GRACE_STEPS {
                    if let Some(now) = this.routes.get(host_raw)
                        && !now.state.serves()
                    {
                        return Some(pages::unavailable(&now));
                    }
                    tokio::time::sleep(STATE_GRACE_STEP).await;
                }
                return Some(pages::bad_gateway(route, &e));
            }
        };
        let length = resp
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(len) = length {
            counters.bytes.fetch_add(len, Ordering::Relaxed);
        }
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_upgrade) = client_upgrade
        {
            let upstream_upgrade = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                let (Ok(client), Ok(upstream)) = (client_upgrade.await, upstream_upgrade.await)
                else {
                    return;
                };
                let mut client = TokioIo::new(client);
                let mut upstream = TokioIo::new(upstream);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
            let (mut parts, _) = resp.into_parts();
            // Keep Connection/Upgrade on a 101: the client needs them.
            let mut keep = parts.headers.clone();
            strip_hop_by_hop(&mut keep);
            keep.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            if let Some(p) = upgrade {
                keep.insert(header::UPGRADE, p.clone());
            }
            parts.headers = keep;
            return Some(Response::from_parts(parts, full(Bytes::new())));
        }
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // We speak HTTP/1.1 to the client whatever the upstream spoke.
        parts.version = hyper::Version::HTTP_11;
        if length.is_some_and(|n| n <= SMALL_BODY_BYTES) {
            // A short, length-delimited body is read whole so its headers and
            // bytes leave in one write (as nginx's proxy_buffering does).
            return match read_short(body).await {
                Ok(b) => Some(Response::from_parts(parts, full(b))),
                Err(_) if retry => None,
                Err(e) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    Some(pages::bad_gateway(route, &e))
                }
            };
        }
        if length.is_some() {
            return Some(Response::from_parts(parts, Body::Stream(None, body)));
        }
        // Unknown length (chunked: most dev servers, SSE): take the frames
        // already on hand — up to SMALL_BODY_BYTES — so a short reply leaves
        // in one write; then stream the rest as it comes. Nothing waits on
        // a clock: an event stream's first bytes go out as soon as the
        // upstream connection has had its turn to read.
        let mut body = body;
        let mut head = bytes::BytesMut::new();
        loop {
            if hyper::body::Body::is_end_stream(&body) {
                return Some(Response::from_parts(parts, full(head.freeze())));
            }
            match ready_soon(std::pin::pin!(body.frame()), COALESCE_YIELDS).await {
                Some(None) => return Some(Response::from_parts(parts, full(head.freeze()))),
                Some(Some(Err(_))) if retry => return None,
                Some(Some(Err(e))) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    return Some(pages::bad_gateway(route, &e));
                }
                Some(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        head.extend_from_slice(&data);
                        if head.len() as u64 > SMALL_BODY_BYTES {
                            break;
                        }
                    }
                    // Trailers end the body; keep them by streaming.
                    Err(frame) => {
                        let trailers = frame.into_trailers().ok();
                        let head = (!head.is_empty()).then(|| head.freeze());
                        return Some(Response::from_parts(parts, Body::Trailers(head, trailers)));
                    }
                },
                None => break,
            }
        }
        let head = (!head.is_empty()).then(|| head.freeze());
        Some(Response::from_parts(parts, Body::Stream(head, body)))
    }
}

/// The host a request is for, as the Host header the service will get
/// (shared bytes, not copied, in the usual case).
///
/// An absolute-form target's authority wins over Host and replaces it (RFC
/// 9112 §3.2.2); otherwise there must be exactly one Host header, non-empty
/// and ASCII (RFC 9112 §3.2 asks for a 400 otherwise).
///
/// # Errors
/// Why the request is a 400, in words for the error page.
fn request_host<B>(req: &mut Request<B>) -> Result<HeaderValue, &'static str> {
    if let Some(host) = req.uri().host() {
        let value = match req.uri().port_u16() {
            Some(p) => HeaderValue::from_str(&format!("{host}:{p}")),
            None => HeaderValue::from_str(host),
        }
        .map_err(|_| "the request target's host is not a valid host")?;
        req.headers_mut().insert(header::HOST, value.clone());
        return Ok(value);
    }
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let value = match (hosts.next(), hosts.next()) {
        (Some(h), None) => h.clone(),
        (None, _) => {
            return Err("the request has no Host header; \
                        send Host: <service>.<world>.<project>.localhost");
        }
        (Some(_), Some(_)) => return Err("the request has more than one Host header"),
    };
    match value.to_str() {
        Err(_) => Err("the Host header is not ASCII (use the punycode form of a name)"),
        Ok(h) if h.trim().is_empty() => Err("the Host header is empty; \
                     send Host: <service>.<world>.<project>.localhost"),
        Ok(_) => Ok(value),
    }
}

/// A length-delimited body of at most [`SMALL_BODY_BYTES`], whole. Usually
/// one frame, returned as it is (no copy).
async fn read_short(mut body: Incoming) -> Result<Bytes, hyper::Error> {
    let mut first: Option<Bytes> = None;
    let mut more = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        match &first {
            None if more.is_empty() => first = Some(data),
            _ => {
                if let Some(f) = first.take() {
                    more.extend_from_slice(&f);
                }
                more.extend_from_slice(&data);
            }
        }
        if hyper::body::Body::is_end_stream(&body) {
            break;
        }
    }
    Ok(first.unwrap_or_else(|| more.freeze()))
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

/// At most this many proxy threads, whatever the core count: beyond a few,
/// the proxy is never the bottleneck of a development machine.
pub const MAX_THREADS: usize = 4;

/// Answers Caddy's on-demand question for `?domain=NAME` (see
/// [`TLS_ASK_PATH`]): 200 for a host of a live https world, else 403.
fn tls_ask(routes: &Routes, query: Option<&str>) -> Response<Body> {
    let domain = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("domain="))
        .unwrap_or("");
    let ours = routes.get(domain).is_some_and(|r| {
        r.https && !matches!(r.state, ServiceState::Stopped | ServiceState::Failed)
    });
    let status = if ours {
        StatusCode::OK
    } else {
        StatusCode::FORBIDDEN
    };
    let text: &'static [u8] = if ours {
        b"ok\n"
    } else {
        b"not a binky https host\n"
    };
    let mut resp = Response::new(Body::Full(Some(Bytes::from_static(text))));
    *resp.status_mut() = status;
    resp
}

/// Serves on the port `port` holds, moving when it changes (no daemon
/// restart). A port that cannot be bound is reported through `on_error` and
/// retried at the next change.
///
/// `bound` reports each attempt: the port and whether it now listens there.
pub async fn serve(
    proxy: Arc<Proxy>,
    mut port: watch::Receiver<u16>,
    bound: watch::Sender<Option<(u16, bool)>>,
    on_error: impl Fn(String) + Send + Sync + 'static,
) {
    let workers = Arc::new(start_workers(&proxy));
    if workers.is_empty() {
        on_error("cannot start any proxy thread".into());
        return;
    }
    let limits = limits::Limits::for_open_files(crate::platform::raise_open_files_limit());
    tracing::debug!(cap = limits.cap(), "proxy connection cap");
    loop {
        let p = *port.borrow_and_update();
        let listeners = match bind(p).await {
            Ok(l) => l,
            Err(e) => {
                on_error(format!("cannot bind the proxy on port {p}: {e}"));
                // send_replace: kept even while nobody is subscribed (a
                // plain send would drop it, and a later waiter would time
                // out on a proxy that has long answered).
                bound.send_replace(Some((p, false)));
                if port.changed().await.is_err() {
                    return;
                }
                continue;
            }
        };
        tracing::info!(port = p, threads = workers.len(), "proxy listening");
        bound.send_replace(Some((p, true)));
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

/// How long a request waits for a service that is restarting — its port
/// refusing for a moment, or the supervisor bringing it back — before the
/// proxy answers with an error page: 2 s, or `BINKY_PROXY_RIDE_THROUGH_MS`.
/// Only requests meeting a restart wait; the normal path never does.
fn ride_through() -> Duration {
    static T: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        crate::tunables::duration(
            "BINKY_PROXY_RIDE_THROUGH_MS",
            Duration::ZERO..=Duration::from_secs(3600),
        )
        .unwrap_or(Duration::from_secs(2))
    })
}

/// How long a client has to send a request's headers, counted from when
/// the connection is ready for one (so also an idle keep-alive connection's
/// lifetime): 20 s, or `BINKY_TEST_HEADER_TIMEOUT_MS` (tests).
fn header_read_timeout() -> Duration {
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
async fn serve_connection(
    worker: Arc<Worker>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    active: Arc<AtomicUsize>,
) {
    let held = Arc::new(Held::new(worker, peer));
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
struct Driver {
    server: ConnFuture,
    held: Arc<Held>,
    conns: Vec<ConnFuture>,
    wake: Arc<SelfWake>,
}

/// Records wake-ups that happen while the driver is polling (they mean
/// "poll again now"); forwards the others to the task's waker.
#[derive(Default)]
struct SelfWake {
    polling: std::sync::atomic::AtomicBool,
    woken: std::sync::atomic::AtomicBool,
    task: Mutex<Option<std::task::Waker>>,
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
const DRIVER_PASSES: usize = 4;

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
            let fresh: Vec<ConnFuture> = this
                .held
                .new_conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..)
                .collect();
            let again = !fresh.is_empty();
            this.conns.extend(fresh);
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

/// How long, in steps of [`STATE_GRACE_STEP`], a failed upstream request
/// waits for a restart's state to reach the routes before it answers 502:
/// 100 ms, only ever spent on the way to an error page.
const STATE_GRACE_STEPS: u32 = 10;
/// See [`STATE_GRACE_STEPS`].
const STATE_GRACE_STEP: std::time::Duration = std::time::Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

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
        tokio::spawn(serve(proxy, port_rx, report, |_| {}));
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
            rx.wait_for(|b| *b == Some((port, true))),
        )
        .await;
        assert!(seen.is_ok(), "the proxy's bind report was lost");
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
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-end-to-end"));
    }
}
