//! Routing: the Host → route table the daemon keeps in step with services,
//! the Host a request names, and Caddy's on-demand TLS question.

use super::body::Body;
use super::wake::Seen;
use crate::protocol::ServiceState;
use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

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
    /// Why its world's `up` failed (the first line of the error `status`
    /// shows), while the route is failed because of it; shown on the page.
    pub why: Option<String>,
    /// Its world's traffic as the proxy sees it, shared by all the world's
    /// routes: [`Routes::set`] puts the world's own here, whatever is given.
    pub seen: Seen,
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
    pub(super) table: RwLock<BTreeMap<String, Arc<Route>>>,
    /// Bumped after every change to `table`, so a connection's copy of its
    /// route (see `Held::route`) knows when it is stale without touching the
    /// lock: a read lock is a write to a cache line every proxy thread
    /// shares, on every request.
    generation: AtomicU64,
    /// Each routed world's [`Seen`], by (project, world).
    seen: RwLock<std::collections::HashMap<(String, String), Seen>>,
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
    /// Adds or replaces the route for `host`, with its world's [`Seen`].
    pub fn set(&self, host: &str, mut route: Route) {
        route.seen = self
            .seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry((route.project.clone(), route.world.clone()))
            .or_default()
            .clone();
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        t.insert(normalise_host(host), Arc::new(route));
        self.changed();
    }
    /// What the proxy saw of world `world`'s traffic, when it has a route.
    pub fn seen(&self, project: &str, world: &str) -> Option<Seen> {
        self.seen
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(project.to_owned(), world.to_owned()))
            .cloned()
    }
    /// Marks the table changed; called with its write lock held.
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }
    /// The table's generation: it changes whenever the table does. Read it
    /// before looking a route up, so a change after the look-up is seen as
    /// a newer generation.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    /// Updates the state of every route of one service, as its supervisor
    /// reports it. A route whose world is going to sleep stays `sleeping`
    /// while its process stops, so a request meanwhile wakes it again
    /// instead of getting the stopped page.
    pub fn set_state(&self, project: &str, world: &str, service: &str, state: ServiceState) {
        self.update_state(
            |r| {
                r.project == project
                    && r.world == world
                    && r.service == service
                    && !(r.state == ServiceState::Sleeping && state == ServiceState::Stopped)
            },
            state,
        );
    }
    /// After world `world`'s `up` failed with `why`: its routes that were
    /// still waiting for their service (which never started) are failed,
    /// with the reason, so a browser is told what `status` says instead of
    /// "starting" for good. Routes of services that run are left serving.
    pub fn fail_world(&self, project: &str, world: &str, why: &str) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        for r in t
            .values_mut()
            .filter(|r| r.project == project && r.world == world)
        {
            // A sleeping world's wake-up failed: its page says why.
            if r.state.is_coming()
                || matches!(r.state, ServiceState::Failed | ServiceState::Sleeping)
            {
                let r = Arc::make_mut(r);
                r.state = ServiceState::Failed;
                r.why = Some(why.to_owned());
            }
        }
        self.changed();
    }
    /// Updates the state of every route of one world.
    pub fn set_world_state(&self, project: &str, world: &str, state: ServiceState) {
        self.update_state(|r| r.project == project && r.world == world, state);
    }
    pub(super) fn update_state(&self, which: impl Fn(&Route) -> bool, state: ServiceState) {
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        for r in t.values_mut().filter(|r| which(r)) {
            let r = Arc::make_mut(r);
            r.state = state;
            // A reason belongs to the failure it was given with.
            r.why = None;
        }
        self.changed();
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
        self.changed();
        drop(t);
        self.seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(project.to_owned(), world.to_owned()));
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

/// The host a request is for, as the Host header the service will get
/// (shared bytes, not copied, in the usual case).
///
/// An absolute-form target's authority wins over Host and replaces it (RFC
/// 9112 §3.2.2); otherwise there must be exactly one Host header, non-empty
/// and ASCII (RFC 9112 §3.2 asks for a 400 otherwise).
///
/// # Errors
/// Why the request is a 400, in words for the error page.
pub(super) fn request_host<B>(req: &mut Request<B>) -> Result<HeaderValue, &'static str> {
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

/// Answers Caddy's on-demand question for `?domain=NAME` (see
/// [`TLS_ASK_PATH`]): 200 for a host of a live https world, else 403.
pub(super) fn tls_ask(routes: &Routes, query: Option<&str>) -> Response<Body> {
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
