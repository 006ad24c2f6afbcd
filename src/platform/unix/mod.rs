//! Unix implementation: private folders, exclusive file locks, the local
//! socket with peer credentials, and detaching the daemon into its own session.
//!
//! | module | holds |
//! |---|---|
//! | [`procs`] | the process table: signals, stat, start time, environment, descendants, marked processes, how a process ended, this process's usage |
//! | [`sockets`] | `/proc/net`: who owns a TCP connection, who listens on a port |
//! | [`memory`](mod@memory) | `MemAvailable` within the cgroup limit, pressure-stall triggers, RSS, free disk |
//! | [`files`] | copying a file by copy-on-write clone where the filesystem can; a file's identity and mode |
//! | here | files, locks, the socket, spawning and detaching, descriptors, signals to the CLI and the daemon |

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

mod files;
mod memory;
mod nofollow;
mod procs;
mod sockets;
pub(crate) use files::{
    FileCopy, clone_file, clone_into, file_id, filesystem, is_executable, is_private, mode_bits,
    set_file_mode,
};
pub(crate) use memory::{
    PressureTrigger, disk_space, groups_rss, groups_usage, memory, memory_pressure_avg10,
};
pub(crate) use nofollow::{
    DirHandle, is_link_refusal, open_append_nofollow, open_read_nofollow, replacing_writer,
    write_replacing,
};
pub(crate) use procs::{
    Marked, all_processes, command_line, exit_signal, group_alive, group_members, marked_processes,
    marked_processes_settled, page_size, proc_stat, process_env, process_env_settled,
    process_start_time, process_tree, self_usage, session_id, signal_group, signal_process,
};
pub(crate) use sockets::{
    listeners_of, listening_ports, port_has_listener, tcp_peer_uid, tcp_socket_owners,
};
// Built where it is used: the PostgreSQL adapter's clone lock.
#[cfg(feature = "postgres")]
pub(crate) use sockets::tcp_client_alive;

/// The local stream type the CLI uses (blocking).
pub(crate) type ClientStream = std::os::unix::net::UnixStream;
/// The daemon's listener type (async).
pub(crate) type Listener = tokio::net::UnixListener;
/// The daemon's accepted stream type (async).
pub(crate) type ServerStream = tokio::net::UnixStream;
/// The read half of a [`ServerStream`] (`into_split`).
pub(crate) type ServerReadHalf = tokio::net::unix::OwnedReadHalf;
/// The write half of a [`ServerStream`].
pub(crate) type ServerWriteHalf = tokio::net::unix::OwnedWriteHalf;

/// Creates `dir` (and parents) with mode 0700; tightens an existing one.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    if !is_private(&meta) {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Sets an existing file's mode to 0600.
pub(crate) fn make_private_file(path: &Path) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// An exclusive advisory lock on a file, released when dropped (or when the
/// process dies, which is why a dead daemon's lock never needs cleaning).
pub(crate) struct FileLock {
    lock: nix::fcntl::Flock<File>,
}

impl FileLock {
    /// Replaces the locked file's content with `text` (the daemon's pid,
    /// for whoever finds the lock held), through the locked handle itself:
    /// never by name, which a link planted since could redirect, and never
    /// by a new file, which would be another inode with a lock of its own.
    ///
    /// # Errors
    /// The file cannot be truncated or written.
    pub(crate) fn set_note(&self, text: &str) -> io::Result<()> {
        use std::io::Write;
        let mut f: &File = &self.lock;
        f.set_len(0)?;
        f.write_all(text.as_bytes())
    }
}

/// Takes an exclusive lock on `path` (creating it, mode 0600). With
/// `wait = false`, returns `Ok(None)` when another process holds it. A
/// symbolic link at `path` is refused, not followed (see
/// [`is_link_refusal`]).
pub(crate) fn lock_file(path: &Path, wait: bool) -> io::Result<Option<FileLock>> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let arg = if wait {
        nix::fcntl::FlockArg::LockExclusive
    } else {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    };
    match nix::fcntl::Flock::lock(f, arg) {
        Ok(l) => Ok(Some(FileLock { lock: l })),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

/// Binds the daemon's socket at `path` with mode 0600. A leftover socket file
/// must have been removed by the caller (it holds the daemon lock, so no live
/// daemon can own it).
pub(crate) fn bind_listener(path: &Path) -> io::Result<Listener> {
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
pub(crate) fn peer_is_same_user(stream: &ServerStream) -> io::Result<bool> {
    let cred = stream.peer_cred()?;
    Ok(cred.uid() == nix::unistd::geteuid().as_raw())
}

/// The session the peer of `stream` runs in (its session id): a terminal's
/// shell and everything it starts share one — wrappers such as `sh -c`,
/// `timeout`, `xargs` included — so it names who asks without trusting the
/// peer to say. `None` when the kernel does not tell.
pub(crate) fn peer_session(stream: &ServerStream) -> Option<u32> {
    let pid = stream.peer_cred().ok()?.pid()?;
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).ok()?;
    u32::try_from(sid.as_raw()).ok()
}

/// Connects to the daemon's socket.
pub(crate) fn connect(path: &Path) -> io::Result<ClientStream> {
    ClientStream::connect(path)
}

/// Whether a connect error means "no daemon there" (as opposed to, say, a
/// permission problem the user must fix).
pub(crate) fn is_no_daemon(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

/// Starts `exe args…` detached: its own session (so closing the terminal does
/// not hang it up), stdin from /dev/null, stdout and stderr to `log` (a
/// file the caller opened for appending). The child handle lets the caller
/// notice an early exit; it is never killed on drop.
pub(crate) fn spawn_detached(
    exe: &Path,
    args: &[&str],
    log: File,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let out = log;
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
pub(crate) struct NoSigpipe<'a>(pub &'a ClientStream);

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
pub(crate) fn default_sigpipe() {
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
pub(crate) fn cloexec_above_stdio() -> io::Result<()> {
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
pub(crate) fn command(program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(program);
    // SAFETY: the hook makes one async-signal-safe system call.
    unsafe {
        c.pre_exec(cloexec_above_stdio);
    }
    c
}

/// [`command`] for a blocking `std::process::Command`.
pub(crate) fn std_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
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
pub(crate) fn close_inherited_fds() {
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
pub(crate) fn stderr_is(path: &Path) -> bool {
    use std::os::fd::AsFd;
    let err = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(File::from)
        .and_then(|f| f.metadata());
    let (Ok(err), Ok(file)) = (err, std::fs::metadata(path)) else {
        return false;
    };
    file_id(&err) == file_id(&file)
}

/// Points stdout and stderr at `file` (the daemon's current `daemon.log`),
/// so a panic or a stray print lands where the log is read.
pub(crate) fn redirect_stdio_to(file: &File) {
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
    let path = search_path
        .map(|p| p.to_owned())
        .or_else(|| std::env::var_os("PATH"))?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && is_executable(&m)))
    })
}

/// Runs `on_interrupt(n, signo)` on a thread of its own for the `n`-th
/// interruption from now on — Ctrl-C (SIGINT), SIGTERM (`timeout`, a CI
/// runner cancelling) or SIGHUP (the terminal closed) — instead of the
/// default of ending the process. The signals are blocked in the calling
/// thread (and so in threads it starts later) and taken with `sigwait` by
/// the new one, so the handler may do anything (write to a socket, print).
/// For a CLI that must tell its daemon before it goes.
pub(crate) fn on_interrupt(mut on_interrupt: impl FnMut(u32, i32) + Send + 'static) {
    let set = interrupts();
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

/// The signals a terminal or a supervisor ends a command with.
fn interrupts() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set
}

/// Spawns a helper thread with SIGINT, SIGTERM and SIGHUP blocked from its
/// first instruction. [`on_interrupt`] blocks them only in the thread that
/// calls it; the kernel hands a process's signal to any thread that does
/// not block it, so a helper started earlier (the reaper of a daemon the
/// CLI started) would take a Ctrl-C and die of it, silently.
pub(crate) fn spawn_helper(f: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let mut old = SigSet::empty();
    // The new thread inherits the caller's mask: block, spawn, restore.
    let blocked =
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&interrupts()), Some(&mut old)).is_ok();
    let handle = std::thread::spawn(f);
    if blocked {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    handle
}

/// Raises this process's soft limit on open files to its hard limit (a
/// daemon holding many connections needs them; 1,024 is a common soft
/// default), and returns the limit now in force.
pub(crate) fn raise_open_files_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// This process's effective user id.
pub(crate) fn uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// `n` random bytes from the kernel (`/dev/urandom`), as lowercase hex:
/// for passwords Binky makes (a Redis ACL user per world; built where it is
/// used).
///
/// # Errors
/// The device cannot be read.
#[cfg(feature = "redis")]
pub(crate) fn random_hex(n: usize) -> io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// This process's id.
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// Ignores SIGHUP and SIGINT, so closing or interrupting the terminal that
/// started a helper process does not end it.
pub(crate) fn ignore_terminal_signals() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: installing SIG_IGN runs no code in a signal context.
    unsafe {
        let _ = signal(Signal::SIGHUP, SigHandler::SigIgn);
        let _ = signal(Signal::SIGINT, SigHandler::SigIgn);
    }
}

/// Resolves when this process is asked to end: SIGTERM (a service manager,
/// `kill`) or SIGINT (Ctrl-C in the terminal it runs in). For the daemon,
/// which then shuts down in order instead of dying mid-write. The handlers
/// are installed on the first poll; when they cannot be, it never resolves
/// (the daemon then runs until asked over its socket).
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Resolves when process `pid` (not necessarily our child) exits. On Linux a
/// pidfd becomes readable at exit, so this waits without polling; where
/// `pidfd_open` is unavailable it falls back to checking every 500 ms.
pub(crate) async fn wait_exit(pid: u32) {
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
pub(crate) fn self_exe() -> std::io::Result<PathBuf> {
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
pub(crate) fn runs_replaced_binary(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .is_ok_and(|p| p.to_string_lossy().ends_with(" (deleted)"))
}
