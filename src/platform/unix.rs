//! Unix implementation: private folders, exclusive file locks, the local
//! socket with peer credentials, and detaching the daemon into its own session.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The local stream type the CLI uses (blocking).
pub type ClientStream = std::os::unix::net::UnixStream;
/// The daemon's listener type (async).
pub type Listener = tokio::net::UnixListener;
/// The daemon's accepted stream type (async).
pub type ServerStream = tokio::net::UnixStream;

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
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(io::Error::from)?;
            Ok(())
        });
    }
    cmd.spawn()
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
    let Ok(raw) = i32::try_from(pgid) else {
        return Ok(false);
    };
    // pgid 0 or 1 would signal our own group or init: never.
    if raw <= 1 {
        return Ok(false);
    }
    match nix::sys::signal::killpg(nix::unistd::Pid::from_raw(raw), sig) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::ESRCH) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Whether any process of group `pgid` is still alive. Zombies do not count:
/// a member whose parent died waits for init to reap it, which can take
/// seconds, and it holds nothing (no port, no file) meanwhile.
pub fn group_alive(pgid: u32) -> bool {
    if !signal_group(pgid, None).unwrap_or(false) {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        // Fields after state: ppid, pgrp.
        let pgrp = f.nth(1).and_then(|g| g.parse::<u32>().ok());
        if pgrp == Some(pgid) && !matches!(state, "Z" | "X") {
            return true;
        }
    }
    false
}

/// A process's start time in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`). With the pid it identifies a process across pid reuse.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is parenthesised and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    // A zombie has exited; it only waits to be reaped. Not alive.
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Pids of `pid` and all its descendants (from `/proc/*/stat` parent links).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat"))
                && let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r)
                && let Some(pp) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok())
            {
                parent_of.push((p, pp));
            }
        }
    }
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

/// TCP ports the processes in `pids` listen on (their socket inodes matched
/// against `/proc/net/tcp{,6}` LISTEN entries).
pub fn listening_ports(pids: &[u32]) -> Vec<u16> {
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
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is f[1] ("IP:PORT" in hex), state f[3] ("0A" = LISTEN), inode f[9].
            if f.len() > 9
                && f[3] == "0A"
                && inodes.contains(f[9])
                && let Some(port) = f[1]
                    .rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                && !ports.contains(&port)
            {
                ports.push(port);
            }
        }
    }
    ports.sort_unstable();
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
