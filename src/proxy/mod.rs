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

pub mod caddy;
mod pages;

use crate::daemon::ProxyCounters;
use crate::supervisor::health;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
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
    /// `running`, `starting`, `stopped`, `failed`, …
    pub state: String,
}

/// The live routing table, shared with the daemon.
#[derive(Default)]
pub struct Routes {
    table: RwLock<BTreeMap<String, Route>>,
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
        t.insert(normalise_host(host), route);
    }
    /// Updates the state of every route of one service.
    pub fn set_state(&self, project: &str, world: &str, service: &str, state: &str) {
        self.update_state(
            |r| r.project == project && r.world == world && r.service == service,
            state,
        );
    }
    /// Updates the state of every route of one world.
    pub fn set_world_state(&self, project: &str, world: &str, state: &str) {
        self.update_state(|r| r.project == project && r.world == world, state);
    }
    fn update_state(&self, which: impl Fn(&Route) -> bool, state: &str) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        for r in t.values_mut().filter(|r| which(r)) {
            r.state = state.to_owned();
        }
    }
    /// Drops every route of a world.
    pub fn remove_world(&self, project: &str, world: &str) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        t.retain(|_, r| !(r.project == project && r.world == world));
    }
    /// The route for a Host header value.
    pub fn get(&self, host: &str) -> Option<Route> {
        let t = self.table.read().unwrap_or_else(|p| p.into_inner());
        t.get(&normalise_host(host)).cloned()
    }
    /// Every route, by hostname.
    pub fn all(&self) -> Vec<(String, Route)> {
        let t = self.table.read().unwrap_or_else(|p| p.into_inner());
        t.iter().map(|(h, r)| (h.clone(), r.clone())).collect()
    }
}

/// Dials upstreams with the same loopback logic as health probes: a service
/// bound to 127.0.0.1 only, ::1 only, or both is reached.
#[derive(Clone)]
struct LoopbackConnector;

impl tower_service::Service<Uri> for LoopbackConnector {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let port = uri.port_u16().unwrap_or(80);
            let s = health::dial("localhost", port, Duration::from_secs(5)).await?;
            let _ = s.set_nodelay(true);
            Ok(TokioIo::new(s))
        })
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into())
        .map_err(|never| match never {})
        .boxed()
}

/// The proxy's shared state.
pub struct Proxy {
    routes: Arc<Routes>,
    client: Client<LoopbackConnector, Incoming>,
    counters: Arc<ProxyCounters>,
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes hop-by-hop headers, including any named in `Connection`.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for h in HOP_BY_HOP {
        headers.remove(*h);
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
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(64)
            .build(LoopbackConnector);
        Arc::new(Proxy {
            routes,
            client,
            counters,
        })
    }

    async fn handle(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<Body> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let host_raw = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| req.uri().host().map(str::to_owned))
            .unwrap_or_default();
        let Some(route) = self.routes.get(&host_raw) else {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
            return pages::not_found(&host_raw, &self.routes.all());
        };
        if route.state != "running" && route.state != "unhealthy" {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
            return pages::unavailable(&route);
        }
        let upgrade = is_upgrade(&req);
        let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into());
        let uri: Uri = match format!("http://localhost:{}{path}", route.port).parse() {
            Ok(u) => u,
            Err(_) => return pages::bad_request("bad request target"),
        };
        let (mut parts, body) = req.into_parts();
        parts.uri = uri;
        strip_hop_by_hop(&mut parts.headers);
        if let Some(proto) = &upgrade {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(header::UPGRADE, proto.clone());
        }
        add_forwarded(&mut parts.headers, peer, &host_raw);
        let upstream_req = Request::from_parts(parts, body);
        let mut resp = match self.client.request(upstream_req).await {
            Ok(r) => r,
            Err(e) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                return pages::bad_gateway(&route, &e);
            }
        };
        if let Some(len) = resp
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            self.counters.bytes.fetch_add(len, Ordering::Relaxed);
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
                keep.insert(header::UPGRADE, p);
            }
            parts.headers = keep;
            return Response::from_parts(parts, full(Bytes::new()));
        }
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // We speak HTTP/1.1 to the client whatever the upstream spoke.
        parts.version = hyper::Version::HTTP_11;
        Response::from_parts(parts, body.boxed())
    }
}

fn add_forwarded(h: &mut HeaderMap, peer: SocketAddr, host: &str) {
    let ip = peer.ip().to_string();
    let xff = match h.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {ip}"),
        None => ip.clone(),
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        h.insert("x-forwarded-for", v);
    }
    if !h.contains_key("x-forwarded-proto") {
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    }
    if let Ok(v) = HeaderValue::from_str(host) {
        h.insert("x-forwarded-host", v);
    }
    let for_ = match peer.ip() {
        IpAddr::V6(v6) => format!("\"[{v6}]\""),
        IpAddr::V4(v4) => v4.to_string(),
    };
    let fwd = format!("for={for_};host=\"{host}\";proto=http");
    if let Ok(v) = HeaderValue::from_str(&fwd) {
        h.append("forwarded", v);
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

/// Serves on the port `port` holds, moving when it changes (no daemon
/// restart). A port that cannot be bound is reported through `on_error` and
/// retried at the next change.
pub async fn serve(
    proxy: Arc<Proxy>,
    mut port: watch::Receiver<u16>,
    on_error: impl Fn(String) + Send + Sync + 'static,
) {
    loop {
        let p = *port.borrow_and_update();
        let listeners = match bind(p).await {
            Ok(l) => l,
            Err(e) => {
                on_error(format!("cannot bind the proxy on port {p}: {e}"));
                if port.changed().await.is_err() {
                    return;
                }
                continue;
            }
        };
        tracing::info!(port = p, "proxy listening");
        let mut tasks = tokio::task::JoinSet::new();
        for l in listeners {
            let proxy = proxy.clone();
            tasks.spawn(accept_loop(proxy, l));
        }
        // Move when the setting changes; dropping the tasks closes the old
        // listeners (connections already accepted finish on their own).
        if port.changed().await.is_err() {
            return;
        }
        tasks.abort_all();
    }
}

async fn accept_loop(proxy: Arc<Proxy>, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "proxy accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move { Ok::<_, std::convert::Infallible>(proxy.handle(req, peer).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades()
                .await;
        });
    }
}

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
