//! Upstream connections: the per-thread idle pool, connecting (with the
//! service's own loopback family), and sending one request.

use super::connection::{ConnFuture, Held};
use super::forward::Replay;
use super::{MAX_IDLE_PER_PORT, Proxy, UpBody, Upstream, Worker};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why an upstream could not be reached.
pub(super) enum UpstreamError {
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

/// How one request goes to its service: what [`Worker::send`] may do when
/// the first try fails, and whether the connection stays with the client
/// connection afterwards.
#[derive(Clone, Copy)]
pub(super) struct Attempt<'a> {
    /// The connection is kept for the client's next request (false for an
    /// upgrade, whose connection becomes the tunnel).
    pub(super) keep: bool,
    /// How long a refused dial, or a replayable request dropped unanswered,
    /// is tried again (what is left of the ride-through).
    pub(super) ride: Option<Duration>,
    /// The request again, when it can be sent twice.
    pub(super) replay: Option<&'a Replay>,
}

impl Worker {
    pub(super) fn new(proxy: Arc<Proxy>, index: usize) -> Self {
        Worker {
            proxy,
            index,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// An idle pooled connection to `port` that is still open.
    pub(super) fn checkout(&self, port: u16) -> Option<Upstream> {
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
    pub(super) fn park(&self, port: u16, up: Upstream) {
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
    pub(super) async fn connect(
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
    /// With a `ride`, a refused dial is tried again for that long (see
    /// [`Self::connect`]), and so is a `replay`able request that a new
    /// connection took but never answered.
    pub(super) async fn send(
        &self,
        held: &Held,
        port: u16,
        mut req: Request<UpBody>,
        attempt: Attempt<'_>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let Attempt { keep, ride, replay } = attempt;
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
}
