//! Sockets as `/proc/net` shows them: who owns a TCP connection (the
//! proxy's per-user limit) and which processes listen on a port
//! (readiness, and naming whoever else holds one).

use super::procs::all_processes;

/// The owner (uid) of every TCP socket on this machine, by its `(local
/// port, remote port)`, from `/proc/net/tcp{,6}` (which list each socket
/// with its owner). The client end of a loopback connection to our `local`
/// port from `peer` is the entry `(peer.port(), local.port())`.
pub(crate) fn tcp_socket_owners() -> std::collections::HashMap<(u16, u16), u32> {
    let port_of = |a: &str| {
        a.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    let mut out = std::collections::HashMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address f[1], rem_address f[2], uid f[7].
            if f.len() > 7
                && let (Some(l), Some(r), Ok(uid)) = (port_of(f[1]), port_of(f[2]), f[7].parse())
            {
                out.insert((l, r), uid);
            }
        }
    }
    out
}

/// Whether a process still holds the client end of the loopback TCP
/// connection from `client_port` to `server_port`: its socket is listed in
/// `/proc/net/tcp{,6}` with an inode (a socket whose process is gone, or
/// closed it, is listed with inode 0 while it winds down, or not at all).
/// `None` when `/proc/net` cannot be read. Loopback only: a connection
/// from 127.0.0.1 comes from this network namespace.
#[cfg(feature = "postgres")]
pub(crate) fn tcp_client_alive(client_port: u16, server_port: u16) -> Option<bool> {
    let port_of = |a: &str| {
        a.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    let mut read = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        read = true;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address f[1], rem_address f[2], inode f[9].
            if f.len() > 9
                && port_of(f[1]) == Some(client_port)
                && port_of(f[2]) == Some(server_port)
                && f[9] != "0"
            {
                return Some(true);
            }
        }
    }
    read.then_some(false)
}

/// The uid owning the client end of a loopback TCP connection from `peer`
/// to our `local` address, asked of the kernel directly (a `sock_diag`
/// netlink query for that one socket: microseconds, however many sockets
/// the machine has). `None` when the kernel will not say.
pub(crate) fn tcp_peer_uid(peer: std::net::SocketAddr, local: std::net::SocketAddr) -> Option<u32> {
    use std::net::IpAddr;
    use std::os::fd::AsRawFd;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    let (family, src, dst) = match (peer.ip(), local.ip()) {
        (IpAddr::V4(p), IpAddr::V4(l)) => {
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s[..4].copy_from_slice(&p.octets());
            d[..4].copy_from_slice(&l.octets());
            (nix::libc::AF_INET as u8, s, d)
        }
        (IpAddr::V6(p), IpAddr::V6(l)) => (nix::libc::AF_INET6 as u8, p.octets(), l.octets()),
        _ => return None,
    };
    // nlmsghdr (16) + inet_diag_req_v2 (56): family, protocol, ext, pad,
    // states, then the socket id: sport, dport (big-endian), src, dst,
    // interface, cookie (none).
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&[family, nix::libc::IPPROTO_TCP as u8, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&peer.port().to_be_bytes());
    req.extend_from_slice(&local.port().to_be_bytes());
    req.extend_from_slice(&src);
    req.extend_from_slice(&dst);
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    let fd = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Netlink,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        nix::sys::socket::SockProtocol::NetlinkSockDiag,
    )
    .ok()?;
    let kernel = nix::sys::socket::NetlinkAddr::new(0, 0);
    nix::sys::socket::sendto(
        fd.as_raw_fd(),
        &req,
        &kernel,
        nix::sys::socket::MsgFlags::empty(),
    )
    .ok()?;
    let mut buf = [0u8; 512];
    let n = nix::sys::socket::recv(
        fd.as_raw_fd(),
        &mut buf,
        nix::sys::socket::MsgFlags::empty(),
    )
    .ok()?;
    let msg_type = u16::from_ne_bytes([buf[4], buf[5]]);
    // nlmsghdr (16), then inet_diag_msg: family, state, timer, retrans (4),
    // socket id (48), expires, rqueue, wqueue (12), then uid.
    const UID_AT: usize = 16 + 4 + 48 + 12;
    if n < UID_AT + 4 || msg_type == NLMSG_ERROR || msg_type != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    Some(u32::from_ne_bytes(buf[UID_AT..UID_AT + 4].try_into().ok()?))
}

/// Socket inodes of the processes in `pids` (from their `/proc/<pid>/fd`).
pub(super) fn socket_inodes(pids: &[u32]) -> std::collections::HashSet<String> {
    let mut inodes = std::collections::HashSet::new();
    for pid in pids {
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for e in dir.flatten() {
                if let Ok(target) = std::fs::read_link(e.path())
                    && let Some(inode) = target
                        .to_str()
                        .and_then(|t| t.strip_prefix("socket:["))
                        .and_then(|t| t.strip_suffix(']'))
                {
                    inodes.insert(inode.to_owned());
                }
            }
        }
    }
    inodes
}

/// `(port, socket inode)` of every TCP socket listening on this machine, as
/// `/proc/net/tcp{,6}` lists them.
pub(super) fn listening_sockets() -> Vec<(u16, String)> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is f[1] ("IP:PORT" in hex), state f[3] ("0A" = LISTEN), inode f[9].
            if f.len() > 9
                && f[3] == "0A"
                && let Some(port) = f[1]
                    .rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            {
                out.push((port, f[9].to_owned()));
            }
        }
    }
    out
}

/// Who listens on TCP `port`: the pids (among the processes this user may
/// inspect) holding a listening socket on it. Empty when nothing listens,
/// or only processes of another user do.
pub(crate) fn listeners_of(port: u16) -> Vec<u32> {
    let inodes: std::collections::HashSet<String> = listening_sockets()
        .into_iter()
        .filter(|(p, _)| *p == port)
        .map(|(_, i)| i)
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    all_processes()
        .into_iter()
        .map(|p| p.pid)
        .filter(|pid| !socket_inodes(&[*pid]).is_disjoint(&inodes))
        .collect()
}

/// Whether TCP `port` has a listener at all (whoever owns it).
pub(crate) fn port_has_listener(port: u16) -> bool {
    listening_sockets().iter().any(|(p, _)| *p == port)
}

/// TCP ports the processes in `pids` listen on (their socket inodes matched
/// against `/proc/net/tcp{,6}` LISTEN entries).
pub(crate) fn listening_ports(pids: &[u32]) -> Vec<u16> {
    let inodes = socket_inodes(pids);
    let mut ports: Vec<u16> = listening_sockets()
        .into_iter()
        .filter(|(_, i)| inodes.contains(i))
        .map(|(p, _)| p)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}
