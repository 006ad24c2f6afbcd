//! How many client connections the proxy holds at once, so that nobody —
//! another local user opening twenty thousand idle connections, above all —
//! can exhaust the daemon's descriptors and take its control socket, and
//! every world's URL, down with them.
//!
//! The cap is derived from the daemon's open-file limit (raised to the hard
//! limit at start): each proxied connection may hold two descriptors (the
//! client's and an upstream one), and a reserve stays free for the control
//! socket, logs, the registry and service start-up. Past a quarter of the
//! cap, each new connection's owner is looked up (loopback only: the socket
//! table lists each socket's uid) and no user but the daemon's own may open
//! more than half the cap: another user can take at most three quarters,
//! and never crowd the daemon's user out. Refusals are
//! logged once a minute, not once a connection. Slow or silent clients are
//! closed by the header-read timeout (see `serve_connection`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connection accounting shared by the accept loops.
pub(crate) struct Limits {
    /// Client connections held now.
    total: AtomicUsize,
    /// Most client connections at once.
    cap: usize,
    /// Connections per uid, counted once the total passes a quarter of the
    /// cap.
    per_user: Mutex<HashMap<u32, usize>>,
    /// The daemon's own uid: never limited below the total cap.
    own_uid: u32,
    warned: Mutex<Option<Instant>>,
    /// Socket owners as last read from the socket table, and when: the
    /// fallback where the kernel's `sock_diag` will not answer.
    owners: Mutex<OwnerTable>,
}

/// When the socket table was read, and its owners by `(local, remote)` port.
type OwnerTable = (Option<Instant>, HashMap<(u16, u16), u32>);

/// How long a read of the socket table answers owner look-ups it has.
const OWNERS_FRESH: Duration = Duration::from_millis(100);

/// Who a connection whose owner could not be found counts as.
const UNKNOWN_UID: u32 = u32::MAX;

/// A held connection; releases its place when dropped.
pub(crate) struct Slot {
    limits: Arc<Limits>,
    uid: Option<u32>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.limits.total.fetch_sub(1, Ordering::Relaxed);
        if let Some(uid) = self.uid {
            let mut m = self
                .limits
                .per_user
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(n) = m.get_mut(&uid) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&uid);
                }
            }
        }
    }
}

impl Limits {
    /// Limits for a process allowed `open_files` descriptors.
    pub(crate) fn for_open_files(open_files: u64) -> Arc<Self> {
        let limit = usize::try_from(open_files).unwrap_or(usize::MAX);
        let reserve = (limit / 8).max(64);
        let cap = (limit.saturating_sub(reserve) / 2).max(16);
        Arc::new(Limits {
            total: AtomicUsize::new(0),
            cap,
            per_user: Mutex::new(HashMap::new()),
            own_uid: crate::platform::uid(),
            warned: Mutex::new(None),
            owners: Mutex::new((None, HashMap::new())),
        })
    }

    /// The most client connections held at once.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// A place for a new client connection from `peer` to `local`, or why
    /// there is none.
    pub(crate) fn admit(
        self: &Arc<Self>,
        peer: SocketAddr,
        local: Option<SocketAddr>,
    ) -> Result<Slot, String> {
        let held = self.total.fetch_add(1, Ordering::Relaxed);
        let mut slot = Slot {
            limits: self.clone(),
            uid: None,
        };
        if held >= self.cap {
            return Err(format!("{} client connections held (the cap)", self.cap));
        }
        if held >= self.cap / 4
            && peer.ip().is_loopback()
            && let Some(local) = local
        {
            let uid = self.owner(peer, local);
            let mut m = self.per_user.lock().unwrap_or_else(|p| p.into_inner());
            let n = m.entry(uid).or_insert(0);
            if uid != self.own_uid && *n >= self.cap / 2 {
                return Err(format!(
                    "uid {uid} holds {n} client connections, half the cap of {}",
                    self.cap
                ));
            }
            *n += 1;
            slot.uid = Some(uid);
        }
        Ok(slot)
    }

    /// The uid owning the client end of the connection from `peer` to our
    /// `local` address: asked of the kernel for that one socket; else from
    /// a socket table read at most [`OWNERS_FRESH`] ago.
    fn owner(&self, peer: SocketAddr, local: SocketAddr) -> u32 {
        if let Some(uid) = crate::platform::tcp_peer_uid(peer, local) {
            return uid;
        }
        let mut o = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        let key = (peer.port(), local.port());
        if o.0.is_none_or(|t| t.elapsed() >= OWNERS_FRESH) || !o.1.contains_key(&key) {
            *o = (Some(Instant::now()), crate::platform::tcp_socket_owners());
        }
        o.1.get(&key).copied().unwrap_or(UNKNOWN_UID)
    }

    /// Logs `why` at most once a minute.
    pub(crate) fn warn_once(&self, why: &str) {
        let mut last = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(Instant::now());
            tracing::warn!(
                "proxy refusing new connections: {why}; further refusals this minute are not logged"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_a_reserve_and_slots_give_back_their_place() {
        let l = Limits::for_open_files(1024);
        assert_eq!(l.cap(), (1024 - 128) / 2);
        let peer: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let held: Vec<Slot> = (0..l.cap()).map(|_| l.admit(peer, None).unwrap()).collect();
        assert!(l.admit(peer, None).is_err());
        drop(held);
        assert!(l.admit(peer, None).is_ok());
        assert_eq!(l.total.load(Ordering::Relaxed), 0);
    }
}

#[cfg(test)]
mod owner_tests {
    #[test]
    fn the_kernel_names_the_owner_of_a_loopback_connection() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = std::net::TcpListener::bind(addr) else {
                continue; // no IPv6 loopback here
            };
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (_, peer) = l.accept().unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            let uid = crate::platform::tcp_peer_uid(peer, l.local_addr().unwrap());
            assert_eq!(uid, Some(crate::platform::uid()), "{addr}");
            let table = crate::platform::tcp_socket_owners();
            assert_eq!(
                table.get(&(peer.port(), l.local_addr().unwrap().port())),
                Some(&crate::platform::uid())
            );
        }
    }
}
