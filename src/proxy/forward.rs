//! Forwarding one request: hop-by-hop headers dropped and `X-Forwarded-*`
//! set, upgrades passed through, a restart ridden through (the request
//! replayed when it was not sent), and the answer when there is no route.

use super::body::{Body, COALESCE_YIELDS, SMALL_BODY_BYTES, full, read_short, ready_soon};
use super::connection::Held;
use super::routes::{Route, TLS_ASK_PATH, request_host, tls_ask};
use super::upstream::{Attempt, UpstreamError};
use super::{UpBody, Worker};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Enough of a body-less idempotent request (GET, HEAD, OPTIONS) to send it
/// again: a dev server that is shutting down for a restart may accept a
/// connection and close it without answering, and the request is then sent
/// to the new server instead.
pub(super) struct Replay {
    pub(super) method: hyper::Method,
    pub(super) uri: Uri,
    pub(super) version: hyper::Version,
    pub(super) headers: HeaderMap,
}

impl Replay {
    pub(super) fn of(parts: &hyper::http::request::Parts, body: &Incoming) -> Option<Self> {
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

    pub(super) fn request(&self) -> Request<UpBody> {
        let mut r = Request::new(http_body_util::Either::Right(http_body_util::Empty::new()));
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.version_mut() = self.version;
        *r.headers_mut() = self.headers.clone();
        r
    }
}

pub(super) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(super) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(super) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that are hop-by-hop in themselves (RFC 9110 §7.6.1), never
/// forwarded. `Trailer` is not one (RFC 2616 listed it; RFC 9110 does not):
/// it declares the trailer fields, and hyper sends only declared ones on.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// `name`'s place in [`HOP_BY_HOP`]. A match on the name's text (a length
/// check and one comparison), where comparing with six `HeaderName`s cost
/// ~90 instructions a header (callgrind).
fn hop_by_hop(name: &HeaderName) -> Option<usize> {
    match name.as_str() {
        "connection" => Some(0),
        "proxy-connection" => Some(1),
        "keep-alive" => Some(2),
        "te" => Some(3),
        "transfer-encoding" => Some(4),
        "upgrade" => Some(5),
        _ => None,
    }
}

/// `Connection` tokens that name no header to drop: `close` and
/// `keep-alive` are options, `upgrade` and `te` are dropped anyway, and Host
/// is never dropped (the service needs it to know which site is asked for).
fn names_no_header(token: &str) -> bool {
    ["close", "keep-alive", "upgrade", "te", "host", ""]
        .iter()
        .any(|k| token.eq_ignore_ascii_case(k))
}

/// Removes hop-by-hop headers, including any named in `Connection`, and
/// returns the protocol asked for when the message is an upgrade
/// (`Connection: upgrade` and an `Upgrade` header; the first one's value).
///
/// One pass over the headers finds everything; most messages carry none or
/// only `Connection: keep-alive`, so nothing is hashed or allocated then.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) -> Option<HeaderValue> {
    // Bit i: HOP_BY_HOP[i] is present.
    let mut found = 0u8;
    let mut named: Vec<HeaderName> = Vec::new();
    let mut conn_upgrade = false;
    let mut upgrade: Option<HeaderValue> = None;
    for (name, value) in headers.iter() {
        let Some(i) = hop_by_hop(name) else {
            continue;
        };
        found |= 1 << i;
        if HOP_BY_HOP[i] == header::UPGRADE {
            upgrade.get_or_insert_with(|| value.clone());
        } else if HOP_BY_HOP[i] == header::CONNECTION {
            let v = value.as_bytes();
            // The usual values name no header: nothing to parse.
            if v.eq_ignore_ascii_case(b"keep-alive") || v.eq_ignore_ascii_case(b"close") {
                continue;
            }
            for t in value.to_str().unwrap_or("").split(',').map(str::trim) {
                if t.eq_ignore_ascii_case("upgrade") {
                    conn_upgrade = true;
                } else if !names_no_header(t)
                    && let Ok(n) = HeaderName::from_bytes(t.as_bytes())
                    && !named.contains(&n)
                {
                    named.push(n);
                }
            }
        }
    }
    for (i, n) in HOP_BY_HOP.iter().enumerate() {
        if found & (1 << i) != 0 {
            headers.remove(n);
        }
    }
    for n in named {
        headers.remove(n);
    }
    if conn_upgrade { upgrade } else { None }
}

/// Forwarding: one request through the route table to its upstream, riding
/// through a restart, and the answer when there is none.
impl Worker {
    pub(super) async fn handle(&self, held: &Held, mut req: Request<Incoming>) -> Response<Body> {
        let (host_value, route) = match self.route(held, &mut req).await {
            Ok(found) => found,
            Err(page) => return page,
        };
        // In flight, the request keeps its world awake; a reply that
        // streams on keeps the guard until it ends.
        let busy = route.seen.open();
        let resp = self.forward(held, req, host_value, &route).await;
        match resp.into_parts() {
            (parts, body @ Body::Stream(..)) => {
                Response::from_parts(parts, Body::Busy(Box::new(body), busy))
            }
            (parts, body) => Response::from_parts(parts, body),
        }
    }

    /// [`handle`](Self::handle) once the request has its route.
    async fn forward(
        &self,
        held: &Held,
        req: Request<Incoming>,
        host_value: HeaderValue,
        route: &Arc<Route>,
    ) -> Response<Body> {
        let host_raw = host_value.to_str().unwrap_or("");
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
                Err(_) => return super::pages::bad_request("bad request target"),
            };
        }
        let upgrade = strip_hop_by_hop(&mut parts.headers);
        let mut client_upgrade = upgrade
            .as_ref()
            .and_then(|_| parts.extensions.remove::<hyper::upgrade::OnUpgrade>());
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
            let attempt = Attempt {
                keep: upgrade.is_none(),
                ride: Some(left),
                replay: replay.as_ref(),
            };
            let resp = self.send(held, route.port, req, attempt).await;
            let retry = replay.is_some() && tokio::time::Instant::now() < deadline;
            let switch = client_upgrade.take().map(|c| (c, &upgrade));
            match self.answer(host_raw, route, resp, switch, retry).await {
                Some(r) => return r,
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// The route for `req`'s host, once it serves (a service that is coming
    /// up is waited for, within the ride-through), or the page to answer
    /// with instead: 400, the TLS ask, 404, 503.
    async fn route(
        &self,
        held: &Held,
        req: &mut Request<Incoming>,
    ) -> Result<(HeaderValue, Arc<Route>), Response<Body>> {
        let this = &*self.proxy;
        let counters = this.counters.shard(self.index);
        counters.requests.fetch_add(1, Ordering::Relaxed);
        let host_value = match request_host(req) {
            Ok(h) => h,
            Err(why) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                return Err(super::pages::bad_request(why));
            }
        };
        let host_raw = host_value.to_str().unwrap_or("");
        let Some(route) = held.route(&this.routes, &host_value) else {
            // Off the hot path: a world's host is never one of the page's.
            if req.uri().path() == TLS_ASK_PATH {
                return Err(tls_ask(&this.routes, req.uri().query()));
            }
            if let Some(board) = &this.board
                && super::board::is_board_host(&super::normalise_host(host_raw))
            {
                return Err(super::board::answer(board, req.method(), req.uri().path()));
            }
            counters.errors.fetch_add(1, Ordering::Relaxed);
            // The port the client used: Host's, else the one it connected
            // to (a client may leave the port out of Host).
            let port = host_raw
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .or(held.local_port)
                .filter(|p| *p != 80);
            let board = match port {
                Some(port) => format!("http://binky.localhost:{port}/"),
                None => "http://binky.localhost/".to_owned(),
            };
            return Err(super::pages::not_found(
                host_raw,
                &board,
                &this.routes.all(),
            ));
        };
        // A service that is (re)starting gets a moment to come up, so a
        // planned restart never fails a request that arrives during it.
        let route = if route.state == crate::protocol::ServiceState::Sleeping {
            match self.wake(host_raw, &route).await {
                Ok(r) => r,
                Err(page) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(page);
                }
            }
        } else if route.state.is_coming() {
            let until = tokio::time::Instant::now() + ride_through();
            match this.routes.wait_running(host_raw, until).await {
                Some(r) => r,
                None => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(super::pages::unavailable(&route));
                }
            }
        } else {
            route
        };
        if !route.state.serves() {
            counters.errors.fetch_add(1, Ordering::Relaxed);
            return Err(super::pages::unavailable(&route));
        }
        Ok((host_value, route))
    }
    /// The client's response from the service's `resp`, or `None` when a
    /// short body broke off and `retry` allows the request to go again.
    /// `switch` is the client's side of an upgrade and the protocol it
    /// asked for, taken by the first answer that switches.
    pub(super) async fn answer(
        &self,
        host_raw: &str,
        route: &Route,
        resp: Result<Response<Incoming>, UpstreamError>,
        switch: Option<(hyper::upgrade::OnUpgrade, &Option<HeaderValue>)>,
        retry: bool,
    ) -> Option<Response<Body>> {
        let this = &*self.proxy;
        let counters = this.counters.shard(self.index);
        let resp = match resp {
            Ok(r) => r,
            Err(e) => return Some(self.upstream_failed(host_raw, route, &e).await),
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
            && let Some((client_upgrade, upgrade)) = switch
        {
            return Some(switch_protocols(resp, client_upgrade, upgrade, &route.seen));
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
                    Some(super::pages::bad_gateway(route, &e))
                }
            };
        }
        if length.is_some() {
            return Some(Response::from_parts(parts, Body::Stream(None, body)));
        }
        self.unknown_length(parts, body, route, retry).await
    }

    /// The client's response when the service's attempt failed: a 503 with
    /// Retry-After when the supervisor began a restart meanwhile, else a 502.
    async fn upstream_failed(
        &self,
        host_raw: &str,
        route: &Route,
        e: &UpstreamError,
    ) -> Response<Body> {
        let this = &*self.proxy;
        this.counters
            .shard(self.index)
            .errors
            .fetch_add(1, Ordering::Relaxed);
        // Its state reaches the routes through a task, so a restart that
        // broke this very request gets a moment to show.
        for _ in 0..STATE_GRACE_STEPS {
            if let Some(now) = this.routes.get(host_raw)
                && !now.state.serves()
            {
                return super::pages::unavailable(&now);
            }
            tokio::time::sleep(STATE_GRACE_STEP).await;
        }
        super::pages::bad_gateway(route, e)
    }

    /// A body of unknown length as the client's response, or `None` when it
    /// broke off and `retry` allows the request to go again.
    async fn unknown_length(
        &self,
        parts: hyper::http::response::Parts,
        mut body: Incoming,
        route: &Route,
        retry: bool,
    ) -> Option<Response<Body>> {
        let counters = self.proxy.counters.shard(self.index);
        // Unknown length (chunked: most dev servers, SSE): take the frames
        // already on hand — up to SMALL_BODY_BYTES — so a short reply leaves
        // in one write; then stream the rest as it comes. Nothing waits on
        // a clock: an event stream's first bytes go out as soon as the
        // upstream connection has had its turn to read.
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
                    return Some(super::pages::bad_gateway(route, &e));
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

/// A 101 from the service: the client's and the service's upgraded
/// connections are joined, and the client gets the 101 with its
/// Connection and Upgrade headers.
fn switch_protocols(
    mut resp: Response<Incoming>,
    client_upgrade: hyper::upgrade::OnUpgrade,
    upgrade: &Option<HeaderValue>,
    seen: &super::Seen,
) -> Response<Body> {
    let upstream_upgrade = hyper::upgrade::on(&mut resp);
    // An open WebSocket (a tab's HMR) keeps its world awake until it closes.
    let open = seen.open();
    tokio::spawn(async move {
        let _open = open;
        let (Ok(client), Ok(upstream)) = (client_upgrade.await, upstream_upgrade.await) else {
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
    Response::from_parts(parts, full(Bytes::new()))
}

/// How long a request waits for a service that is restarting — its port
/// refusing for a moment, or the supervisor bringing it back — before the
/// proxy answers with an error page: 2 s, or `BINKY_PROXY_RIDE_THROUGH_MS`.
/// Only requests meeting a restart wait; the normal path never does.
pub(super) fn ride_through() -> Duration {
    static T: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        crate::tunables::duration(
            "BINKY_PROXY_RIDE_THROUGH_MS",
            Duration::ZERO..=Duration::from_secs(3600),
        )
        .unwrap_or(Duration::from_secs(2))
    })
}

/// How long, in steps of [`STATE_GRACE_STEP`], a failed upstream request
/// waits for a restart's state to reach the routes before it answers 502:
/// 100 ms, only ever spent on the way to an error page.
pub(super) const STATE_GRACE_STEPS: u32 = 10;
/// See [`STATE_GRACE_STEPS`].
pub(super) const STATE_GRACE_STEP: std::time::Duration = std::time::Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    /// The name match and the removal list are one list written twice (the
    /// match for speed): each name must find its own place.
    #[test]
    fn the_hop_by_hop_match_and_list_agree() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop(name), Some(i), "{name}");
        }
        assert_eq!(hop_by_hop(&header::HOST), None);
        assert_eq!(hop_by_hop(&header::TRAILER), None);
    }
}
