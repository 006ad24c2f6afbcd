//! Unix implementation: private folders, exclusive file locks, the local
//! socket with peer credentials, and detaching the daemon into its own session.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The local stream type the CLI uses (blocking).
pub type ClientStream = std::os::unix::net::UnixStream;
/// The daemon's listener type (async).
pub type Listener = tokio::net::UnixListener;
/// The daemon's accepted stream type (async).
pub type ServerStream = tokio::net::UnixStream;
/// The read half of a [`ServerStream`] (`into_split`).
pub type ServerReadHalf = tokio::net::unix::OwnedReadHalf;
/// The write half of a [`ServerStream`].
pub type ServerWriteHalf = tokio::net::unix::OwnedWriteHalf;

/// Creates `dir` (and parents) with mode 0700; tightens an existing one.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Sets an existing file's mode to 0600.
pub fn make_private_file(path: &Path) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// An exclusive advisory lock on a file, released when dropped (or when the
/// process dies, which is why a dead daemon's lock never needs cleaning).
pub struct FileLock {
    _lock: nix::fcntl::Flock<File>,
}

/// Takes an exclusive lock on `path` (creating it, mode 0600). With
/// `wait = false`, returns `Ok(None)` when another process holds it.
pub fn lock_file(path: &Path, wait: bool) -> io::Result<Option<FileLock>> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(path)?;
    let arg = if wait {
        nix::fcntl::FlockArg::LockExclusive
    } else {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    };
    match nix::fcntl::Flock::lock(f, arg) {
        Ok(l) => Ok(Some(FileLock { _lock: l })),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

/// Binds the daemon's socket at `path` with mode 0600. A leftover socket file
/// must have been removed by the caller (it holds the daemon lock, so no live
/// daemon can own it).
pub fn bind_listener(path: &Path) -> io::Result<Listener> {
    // Bind under a tight umask so there is no window where the socket is
    // reachable with looser permissions.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let res = tokio::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let l = res?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Whether the peer of `stream` runs as the same user as this process.
pub fn peer_is_same_user(stream: &ServerStream) -> io::Result<bool> {
    let cred = stream.peer_cred()?;
    Ok(cred.uid() == nix::unistd::geteuid().as_raw())
}

/// Connects to the daemon's socket.
pub fn connect(path: &Path) -> io::Result<ClientStream> {
    ClientStream::connect(path)
}

/// Whether a connect error means "no daemon there" (as opposed to, say, a
/// permission problem the user must fix).
pub fn is_no_daemon(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

/// Starts `exe args…` detached: its own session (so closing the terminal does
/// not hang it up), stdin from /dev/null, stdout and stderr appended to `log`.
/// The child handle lets the caller notice an early exit; it is never killed
/// on drop.
pub fn spawn_detached(exe: &Path, args: &[&str], log: &Path) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)?;
    let err = out.try_clone()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: setsid and close_range are async-signal-safe and touch no
    // memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(io::Error::from)?;
            cloexec_above_stdio()
        });
    }
    cmd.spawn()
}

/// Writes to a connected socket without raising SIGPIPE when the peer is
/// gone (`send` with `MSG_NOSIGNAL`): the CLI restores SIGPIPE's default so
/// a closed stdout ends it quietly, and a dead daemon must still be an
/// error it can report, not a silent death.
pub struct NoSigpipe<'a>(pub &'a ClientStream);

impl io::Write for NoSigpipe<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        nix::sys::socket::send(
            self.0.as_raw_fd(),
            buf,
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        )
        .map_err(io::Error::from)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Restores SIGPIPE's default action (end the process), which Rust's
/// runtime sets to "ignore": a command whose reader went away then ends
/// quietly, as `cat` does, instead of panicking in `println!`.
pub fn default_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: installing SIG_DFL runs no code in a signal context.
    unsafe {
        let _ = signal(Signal::SIGPIPE, SigHandler::SigDfl);
    }
}

/// Marks every descriptor above stderr close-on-exec, so a program started
/// next keeps only stdin, stdout and stderr. For `pre_exec` hooks: it is one
/// system call (`close_range` with `CLOSE_RANGE_CLOEXEC`, Linux 5.11+), and
/// async-signal-safe. Rust opens its own descriptors close-on-exec already;
/// this catches the ones a parent leaked to us (a `make` jobserver pipe, a
/// `7>&1` in a shell), which would otherwise keep a pipe open for as long
/// as the daemon or a service lives.
pub fn cloexec_above_stdio() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range takes three integers and touches no memory.
        let r = unsafe {
            nix::libc::syscall(
                nix::libc::SYS_close_range,
                3u32,
                u32::MAX,
                nix::libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if r == 0 {
            return Ok(());
        }
    }
    // Older kernels: the daemon closed what it inherited at start
    // (close_inherited_fds), and everything it opens is close-on-exec.
    Ok(())
}

/// A command for `program` that starts with only stdin, stdout and stderr
/// open (see [`cloexec_above_stdio`]): the one way Binky starts a process
/// (services, their log writers, migrate/seed/verify, probes, Caddy,
/// adapters' clients).
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(program);
    // SAFETY: the hook makes one async-signal-safe system call.
    unsafe {
        c.pre_exec(cloexec_above_stdio);
    }
    c
}

/// [`command`] for a blocking `std::process::Command`.
pub fn std_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new(program);
    // SAFETY: the hook makes one async-signal-safe system call.
    unsafe {
        c.pre_exec(cloexec_above_stdio);
    }
    c
}

/// Closes every descriptor above stderr that this process inherited. The
/// daemon calls it first thing, before it opens anything, so whatever its
/// starter had open (a pipe a shell or `make` passed down) is not held for
/// the daemon's whole life.
pub fn close_inherited_fds() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range takes three integers and touches no memory.
        let r = unsafe { nix::libc::syscall(nix::libc::SYS_close_range, 3u32, u32::MAX, 0) };
        if r == 0 {
            return;
        }
    }
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .or_else(|_| std::fs::read_dir("/dev/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .filter(|fd| *fd > 2)
                .collect()
        })
        .unwrap_or_default();
    for fd in fds {
        // The listing's own descriptor is gone by now: EBADF, harmless.
        let _ = nix::unistd::close(fd);
    }
}

/// Whether this process's stderr is the file at `path` (the daemon started
/// by the CLI writes there; one run in a terminal does not).
pub fn stderr_is(path: &Path) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let err = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(File::from)
        .and_then(|f| f.metadata());
    let (Ok(err), Ok(file)) = (err, std::fs::metadata(path)) else {
        return false;
    };
    err.dev() == file.dev() && err.ino() == file.ino()
}

/// Points stdout and stderr at `file` (the daemon's current `daemon.log`),
/// so a panic or a stray print lands where the log is read.
pub fn redirect_stdio_to(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 takes two integers; both descriptors are valid.
    unsafe {
        nix::libc::dup2(file.as_raw_fd(), 1);
        nix::libc::dup2(file.as_raw_fd(), 2);
    }
}

/// The first of `names` that is an executable file in a folder of
/// `search_path` (the daemon's `PATH` when `None`); names are tried in order,
/// each across the whole path.
pub fn find_executable(
    names: &[&str],
    search_path: Option<&std::ffi::OsStr>,
) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = search_path
        .map(|p| p.to_owned())
        .or_else(|| std::env::var_os("PATH"))?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path).map(|d| d.join(n)).find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Runs `on_interrupt(n, signo)` on a thread of its own for the `n`-th
/// interruption from now on — Ctrl-C (SIGINT), SIGTERM (`timeout`, a CI
/// runner cancelling) or SIGHUP (the terminal closed) — instead of the
/// default of ending the process. The signals are blocked in the calling
/// thread (and so in threads it starts later) and taken with `sigwait` by
/// the new one, so the handler may do anything (write to a socket, print).
/// For a CLI that must tell its daemon before it goes.
pub fn on_interrupt(mut on_interrupt: impl FnMut(u32, i32) + Send + 'static) {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    if set.thread_block().is_err() {
        return;
    }
    std::thread::spawn(move || {
        let mut n = 0;
        while let Ok(sig) = set.wait() {
            n += 1;
            on_interrupt(n, sig as i32);
        }
    });
}

/// Raises this process's soft limit on open files to its hard limit (a
/// daemon holding many connections needs them; 1,024 is a common soft
/// default), and returns the limit now in force.
pub fn raise_open_files_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// The owner (uid) of every TCP socket on this machine, by its `(local
/// port, remote port)`, from `/proc/net/tcp{,6}` (which list each socket
/// with its owner). The client end of a loopback connection to our `local`
/// port from `peer` is the entry `(peer.port(), local.port())`.
pub fn tcp_socket_owners() -> std::collections::HashMap<(u16, u16), u32> {
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

/// The uid owning the client end of a loopback TCP connection from `peer`
/// to our `local` address, asked of the kernel directly (a `sock_diag`
/// netlink query for that one socket: microseconds, however many sockets
/// the machine has). `None` when the kernel will not say.
pub fn tcp_peer_uid(peer: std::net::SocketAddr, local: std::net::SocketAddr) -> Option<u32> {
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

/// This process's effective user id.
pub fn uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// `n` random bytes from the kernel (`/dev/urandom`), as lowercase hex:
/// for passwords Binky makes (a Redis ACL user per world).
///
/// # Errors
/// The device cannot be read.
pub fn random_hex(n: usize) -> io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// Maps a portable signal name (`SIGTERM`…) to the native signal.
pub fn signal_by_name(name: &str) -> Option<nix::sys::signal::Signal> {
    name.parse().ok()
}

/// Sends `sig` to every process in group `pgid`. `Ok(false)` when the group
/// no longer exists.
pub fn signal_group(pgid: u32, sig: Option<nix::sys::signal::Signal>) -> io::Result<bool> {
    send_signal(pgid, sig, true)
}

/// `kill` (or `killpg` when `group`); never to pid/pgid 0 or 1, which would
/// reach our own group or init. `Ok(false)` when the target is gone.
fn send_signal(id: u32, sig: Option<nix::sys::signal::Signal>, group: bool) -> io::Result<bool> {
    let Ok(raw) = i32::try_from(id) else {
        return Ok(false);
    };
    if raw <= 1 {
        return Ok(false);
    }
    let target = nix::unistd::Pid::from_raw(raw);
    let sent = if group {
        nix::sys::signal::killpg(target, sig)
    } else {
        nix::sys::signal::kill(target, sig)
    };
    match sent {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::ESRCH) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// The fields of `/proc/<pid>/stat` Binky reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id.
    pub pid: u32,
    /// One-letter state (`R`, `S`, `Z`…).
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
    /// Process group id.
    pub pgrp: u32,
    /// Session id.
    pub session: u32,
    /// Start time in clock ticks since boot.
    pub start_time: u64,
    /// Resident set size, pages (field 24; what `VmRSS` shows in kB).
    pub rss_pages: u64,
}

impl ProcStat {
    /// Whether it has exited and only waits to be reaped (holds nothing).
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parses `/proc/<pid>/stat`; `None` when the process is gone.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is parenthesised and may hold
    // spaces or parentheses itself.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state); field n is f[n - 3].
    Some(ProcStat {
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        session: f.get(3)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
        rss_pages: f.get(21)?.parse().ok()?,
    })
}

/// Every process on the machine, as `/proc` lists it now.
pub fn all_processes() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter_map(proc_stat)
        .collect()
}

/// Live (non-zombie) members of process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    all_processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid && !p.is_zombie())
        .map(|p| p.pid)
        .collect()
}

/// Whether any process of group `pgid` is still alive. Zombies do not count:
/// a member whose parent died waits for init to reap it, which can take
/// seconds, and it holds nothing (no port, no file) meanwhile.
pub fn group_alive(pgid: u32) -> bool {
    signal_group(pgid, None).unwrap_or(false) && !group_members(pgid).is_empty()
}

/// A process's start time in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`). With the pid it identifies a process across pid
/// reuse. `None` for a zombie: it has exited and only waits to be reaped.
pub fn process_start_time(pid: u32) -> Option<u64> {
    proc_stat(pid)
        .filter(|p| !p.is_zombie())
        .map(|p| p.start_time)
}

/// The environment a process was started with (`/proc/<pid>/environ`);
/// `None` when it is gone or not ours to read.
pub fn process_env(pid: u32) -> Option<Vec<(String, String)>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect(),
    )
}

/// A process that carries a mark in its environment: the value of a
/// variable it was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marked {
    /// What `/proc/<pid>/stat` says of it now.
    pub stat: ProcStat,
    /// The value of the marking variable.
    pub mark: String,
}

/// Every live process whose environment holds `home_var=home` and a
/// `mark_var`, with that mark: processes a daemon of this home started,
/// found whatever process group or session they moved to since (a server
/// that daemonizes itself, a double fork). An environment is fixed when a
/// process is exec'd, so what each `(pid, start time)` holds is read once
/// and remembered; only this user's processes can be read at all.
pub fn marked_processes(home_var: &str, home: &str, mark_var: &str) -> Vec<Marked> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Seen = HashMap<(u32, u64), Option<(String, String)>>;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let procs = all_processes();
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = seen.get_or_insert_with(HashMap::new);
    // Forget processes that are gone, so the memory stays bounded.
    seen.retain(|(pid, start), _| {
        procs
            .iter()
            .any(|p| p.pid == *pid && p.start_time == *start)
    });
    let mut out = Vec::new();
    for p in procs.into_iter().filter(|p| !p.is_zombie()) {
        let entry = seen.entry((p.pid, p.start_time)).or_insert_with(|| {
            let env = process_env(p.pid)?;
            let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            Some((get(home_var)?, get(mark_var)?))
        });
        if let Some((h, mark)) = entry
            && h == home
        {
            out.push(Marked {
                mark: mark.clone(),
                stat: p,
            });
        }
    }
    out
}

/// The size of a memory page, bytes.
pub fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as u64)
}

/// This process's session id.
pub fn session_id() -> u32 {
    nix::unistd::getsid(None).map_or(0, |p| p.as_raw() as u32)
}

/// Sends `sig` to one process. `Ok(false)` when it no longer exists.
pub fn signal_process(pid: u32, sig: Option<nix::sys::signal::Signal>) -> io::Result<bool> {
    send_signal(pid, sig, false)
}

/// Pids of `pid` and all its descendants (from `/proc/*/stat` parent links).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let parent_of: Vec<(u32, u32)> = all_processes().iter().map(|p| (p.pid, p.ppid)).collect();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let cur = tree[i];
        tree.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| *pp == cur)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// Socket inodes of the processes in `pids` (from their `/proc/<pid>/fd`).
fn socket_inodes(pids: &[u32]) -> std::collections::HashSet<String> {
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
fn listening_sockets() -> Vec<(u16, String)> {
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
pub fn listeners_of(port: u16) -> Vec<u32> {
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
pub fn port_has_listener(port: u16) -> bool {
    listening_sockets().iter().any(|(p, _)| *p == port)
}

/// The command line of `pid`, its arguments joined by spaces (for messages).
pub fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    (!text.is_empty()).then_some(text)
}

/// TCP ports the processes in `pids` listen on (their socket inodes matched
/// against `/proc/net/tcp{,6}` LISTEN entries).
pub fn listening_ports(pids: &[u32]) -> Vec<u16> {
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

/// Ignores SIGHUP and SIGINT, so closing or interrupting the terminal that
/// started a helper process does not end it.
pub fn ignore_terminal_signals() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: installing SIG_IGN runs no code in a signal context.
    unsafe {
        let _ = signal(Signal::SIGHUP, SigHandler::SigIgn);
        let _ = signal(Signal::SIGINT, SigHandler::SigIgn);
    }
}

/// Resolves when process `pid` (not necessarily our child) exits. On Linux a
/// pidfd becomes readable at exit, so this waits without polling; where
/// `pidfd_open` is unavailable it falls back to checking every 500 ms.
pub async fn wait_exit(pid: u32) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::{FromRawFd, OwnedFd};
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd =
            unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as nix::libc::pid_t, 0) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this fd; we own it.
            let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            // SAFETY: `owned` is a valid fd we own, and the AsyncFd keeps it
            // open for as long as it is registered.
            let registered = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    owned,
                    tokio::io::Interest::READABLE,
                )
            };
            if let Ok(afd) = registered {
                let _ = afd.readable().await;
                return;
            }
        }
    }
    while process_start_time(pid).is_some() {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// The running binary, to start helper processes of its own (`binky
/// log-writer`): `/proc/self/exe`, which still names this very binary when
/// the file on disk was replaced or deleted (a reinstall or `cargo build`
/// while the daemon runs), where the path [`std::env::current_exe`] gives
/// ends in ` (deleted)` and cannot be run.
pub fn self_exe() -> std::io::Result<PathBuf> {
    let proc_self = PathBuf::from("/proc/self/exe");
    if proc_self.exists() {
        Ok(proc_self)
    } else {
        std::env::current_exe()
    }
}

/// Whether process `pid` runs a binary whose file was replaced or deleted
/// since it started (`/proc/<pid>/exe` reads `… (deleted)`): a daemon from
/// before a reinstall.
pub fn runs_replaced_binary(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .is_ok_and(|p| p.to_string_lossy().ends_with(" (deleted)"))
}

/// Memory as the kernel reports it, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// `MemTotal`, or the daemon's cgroup limit when lower.
    pub total: u64,
    /// `MemAvailable`, or what the cgroup limit leaves when lower.
    pub available: u64,
}

/// `/proc/meminfo`'s `MemTotal` and `MemAvailable`, bounded by the
/// memory limit of this process's cgroup (v2 `memory.max` less
/// `memory.current`) when there is one: a daemon in a container must not
/// count the host's RAM. `None` where the kernel gives no `MemAvailable`.
pub fn memory() -> Option<Memory> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let mut m = Memory {
        total: kib_field(&info, "MemTotal:")?,
        available: kib_field(&info, "MemAvailable:")?,
    };
    if let Some((limit, used)) = cgroup_memory() {
        m.total = m.total.min(limit);
        m.available = m.available.min(limit.saturating_sub(used));
    }
    Some(m)
}

/// The `name: N kB` line of a `/proc` file (`meminfo`, `<pid>/status`),
/// in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// This process's cgroup memory limit and use, bytes, when it has a limit:
/// cgroup v2 (`memory.max`, `memory.current`) or v1 (`memory.limit_in_bytes`,
/// `memory.usage_in_bytes`). The use leaves out the cgroup's inactive file
/// cache, which the kernel reclaims before it runs out (as `MemAvailable`
/// counts it).
fn cgroup_memory() -> Option<(u64, u64)> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (limit, used, cache) = cgroup_files(&cg)?;
    let read = |f: &Path| std::fs::read_to_string(f).ok();
    // v2 writes "max" and v1 a number near 2^63 for "no limit".
    let limit: u64 = read(&limit)?.trim().parse().ok()?;
    if limit >= 1 << 60 {
        return None;
    }
    let used: u64 = read(&used)?.trim().parse().ok()?;
    let inactive = read(&cache)
        .and_then(|stat| {
            stat.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                matches!(k, "inactive_file" | "total_inactive_file")
                    .then(|| v.trim().parse::<u64>().ok())?
            })
        })
        .unwrap_or(0);
    Some((limit, used.saturating_sub(inactive)))
}

/// The limit, use and stat files of this process's memory cgroup, from
/// `/proc/self/cgroup`'s text: the v1 `memory` controller's line when there
/// is one (a v1 or hybrid host), else the unified (`0::`) line.
fn cgroup_files(proc_cgroup: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let v1 = proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    if let Some(rel) = v1 {
        let dir = Path::new("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/'));
        return Some((
            dir.join("memory.limit_in_bytes"),
            dir.join("memory.usage_in_bytes"),
            dir.join("memory.stat"),
        ));
    }
    let rel = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    Some((
        dir.join("memory.max"),
        dir.join("memory.current"),
        dir.join("memory.stat"),
    ))
}

/// A kernel pressure-stall trigger on memory (`/proc/pressure/memory`,
/// Linux 5.2 and later): readable with priority whenever tasks stalled on
/// memory for at least the threshold within one window. The descriptor is
/// close-on-exec, so no service inherits it.
pub struct PressureTrigger {
    fd: tokio::io::unix::AsyncFd<File>,
}

impl PressureTrigger {
    /// Arms a trigger: some task stalled on memory `stall` out of each
    /// `window` (the kernel wants a window of 500 ms to 10 s; an
    /// unprivileged user's must be a whole number of 2 s).
    ///
    /// # Errors
    /// When the kernel has no PSI (`ENOENT`, or `EOPNOTSUPP` with `psi=0`),
    /// refuses the trigger, or no Tokio reactor runs.
    pub fn memory(stall: std::time::Duration, window: std::time::Duration) -> io::Result<Self> {
        use std::io::Write;
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open("/proc/pressure/memory")?;
        // The kernel reads the whole trigger from one write.
        f.write_all(format!("some {} {}\0", stall.as_micros(), window.as_micros()).as_bytes())?;
        // SAFETY: the AsyncFd owns the File for its whole life, and a
        // File's descriptor never changes while it is open.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(f, tokio::io::Interest::PRIORITY)
        }
        .map_err(io::Error::from)?;
        Ok(Self { fd })
    }

    /// Waits until the trigger fires (at most once per window).
    ///
    /// # Errors
    /// When the descriptor can no longer be polled.
    pub async fn stalled(&self) -> io::Result<()> {
        let mut guard = self.fd.ready(tokio::io::Interest::PRIORITY).await?;
        guard.clear_ready();
        Ok(())
    }
}

/// The `some avg10` figure of `/proc/pressure/memory`: the share of the
/// last 10 s in which some task stalled on memory, percent.
pub fn memory_pressure_avg10() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/pressure/memory").ok()?;
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// Bytes free for an unprivileged user on the filesystem holding `path`
/// (its nearest existing ancestor), `None` when it cannot be read.
pub fn disk_free(path: &Path) -> Option<u64> {
    disk_space(path).map(|(free, _)| free)
}

/// Bytes free for an unprivileged user, and the size, of the filesystem
/// holding `path` (its nearest existing ancestor).
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    let mut p = path;
    while !p.exists() {
        p = p.parent()?;
    }
    let s = nix::sys::statvfs::statvfs(p).ok()?;
    let unit = s.fragment_size() as u64;
    Some((s.blocks_available() as u64 * unit, s.blocks() as u64 * unit))
}

/// The resident memory of each process group in `pgids`, summed over its
/// live members, bytes, in the order given: what a world's services really
/// hold. One pass over `/proc` for all of them (a pass per group cost the
/// sampler 15 ms a sample with six worlds).
pub fn groups_rss(pgids: &[u32]) -> Vec<u64> {
    let page = page_size();
    let mut sums = vec![0u64; pgids.len()];
    if pgids.is_empty() {
        return sums;
    }
    for p in all_processes() {
        if p.is_zombie() {
            continue;
        }
        if let Some(i) = pgids.iter().position(|g| *g == p.pgrp) {
            sums[i] += p.rss_pages * page;
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_cgroup_is_found_on_v1_hybrid_and_v2_hosts() {
        // A v1 host (as Firecracker guests and older Docker run): the
        // memory controller's own line wins over the unified one.
        let v1 = "9:name=systemd:/\n4:memory:/process_api/291ecdb0\n3:cpuset:/\n0::/\n";
        let (limit, used, stat) = cgroup_files(v1).unwrap();
        assert_eq!(
            limit,
            Path::new("/sys/fs/cgroup/memory/process_api/291ecdb0/memory.limit_in_bytes")
        );
        assert!(used.ends_with("memory.usage_in_bytes"));
        assert!(stat.ends_with("process_api/291ecdb0/memory.stat"));
        // Controllers share a line: "memory" must be one of them exactly.
        let shared = "5:cpu,memory:/a\n";
        assert!(
            cgroup_files(shared)
                .unwrap()
                .0
                .starts_with("/sys/fs/cgroup/memory/a")
        );
        let not = "5:memory_extra:/a\n0::/user.slice/b\n";
        assert_eq!(
            cgroup_files(not).unwrap().0,
            Path::new("/sys/fs/cgroup/user.slice/b/memory.max")
        );
        // Unified only.
        let v2 = "0::/system.slice/binky.service\n";
        assert_eq!(
            cgroup_files(v2).unwrap().1,
            Path::new("/sys/fs/cgroup/system.slice/binky.service/memory.current")
        );
        assert_eq!(cgroup_files(""), None);
    }
}
