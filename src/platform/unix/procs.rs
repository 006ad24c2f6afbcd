//! The process table as `/proc` shows it: signals to a process or group,
//! a process's stat, start time, environment and descendants, and the
//! processes a daemon marked as its own.

use crate::platform::{SelfUsage, Signal};
use std::io;

/// Sends `sig` to every process in group `pgid`. `Ok(false)` when the group
/// no longer exists.
///
/// # Errors
/// The kernel refused (another user's group: `EPERM`).
pub(crate) fn signal_group(pgid: u32, sig: Signal) -> io::Result<bool> {
    send_signal(pgid, Some(native(sig)), true)
}

/// The native signal for `sig`.
fn native(sig: Signal) -> nix::sys::signal::Signal {
    use nix::sys::signal::Signal as N;
    match sig {
        Signal::Term => N::SIGTERM,
        Signal::Int => N::SIGINT,
        Signal::Quit => N::SIGQUIT,
        Signal::Hup => N::SIGHUP,
        Signal::Kill => N::SIGKILL,
        Signal::Usr1 => N::SIGUSR1,
        Signal::Usr2 => N::SIGUSR2,
        Signal::Winch => N::SIGWINCH,
    }
}

/// `kill` (or `killpg` when `group`); never to pid/pgid 0 or 1, which would
/// reach our own group or init. `Ok(false)` when the target is gone. No
/// signal (`None`, signal 0) only checks that the target exists.
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
pub(crate) struct ProcStat {
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
    /// CPU time used, user plus system, clock ticks (fields 14 and 15).
    pub cpu_ticks: u64,
    /// Where its environment starts in its memory (field 50; 0 where the
    /// kernel hides it): a new address after each `execve`, so with the
    /// pid and start time it tells one exec'd program from the next.
    pub env_start: u64,
}

impl ProcStat {
    /// Whether it has exited and only waits to be reaped (holds nothing).
    pub(crate) fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parses `/proc/<pid>/stat`; `None` when the process is gone.
pub(crate) fn proc_stat(pid: u32) -> Option<ProcStat> {
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
        cpu_ticks: f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?,
        env_start: f.get(47).and_then(|v| v.parse().ok()).unwrap_or(0),
    })
}

/// Every process on the machine, as `/proc` lists it now.
pub(crate) fn all_processes() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter_map(proc_stat)
        .collect()
}

/// Live (non-zombie) members of process group `pgid`.
pub(crate) fn group_members(pgid: u32) -> Vec<u32> {
    all_processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid && !p.is_zombie())
        .map(|p| p.pid)
        .collect()
}

/// Whether any process of group `pgid` is still alive. Zombies do not count:
/// a member whose parent died waits for init to reap it, which can take
/// seconds, and it holds nothing (no port, no file) meanwhile.
pub(crate) fn group_alive(pgid: u32) -> bool {
    // Signal 0 sends nothing: it only asks whether the group exists.
    send_signal(pgid, None, true).unwrap_or(false) && !group_members(pgid).is_empty()
}

/// A process's start time in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`). With the pid it identifies a process across pid
/// reuse. `None` for a zombie: it has exited and only waits to be reaped.
pub(crate) fn process_start_time(pid: u32) -> Option<u64> {
    proc_stat(pid)
        .filter(|p| !p.is_zombie())
        .map(|p| p.start_time)
}

/// The environment a process was started with (`/proc/<pid>/environ`);
/// `None` when it is gone or not ours to read.
pub(crate) fn process_env(pid: u32) -> Option<Vec<(String, String)>> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .ok()
        .map(|raw| parse_environ(&raw))
}

/// As [`process_env`], for a caller about to act on what it reads: a
/// process caught inside `execve` (its environment reads empty until the
/// kernel has laid out its new stack) is read again every 5 ms, for up to
/// `EXEC_SETTLE` (2 s), instead of being taken for one with no environment.
pub(crate) async fn process_env_settled(pid: u32) -> Option<Vec<(String, String)>> {
    let was = proc_stat(pid)?;
    let deadline = std::time::Instant::now() + EXEC_SETTLE;
    loop {
        let env = process_env(pid)?;
        if !env.is_empty()
            || !inside_exec(&was, proc_stat(pid).as_ref())
            || std::time::Instant::now() >= deadline
        {
            return Some(env);
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// `NAME=value` pairs of a raw `environ` (NUL-separated).
fn parse_environ(raw: &[u8]) -> Vec<(String, String)> {
    raw.split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// What one read of a process's `environ` says of its marks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EnvRead {
    /// Read: `(home, mark)` when it holds both variables. Final for this
    /// process (its pid and start time): kept.
    Read(Option<(String, String)>),
    /// Not ours to read: final too.
    Foreign,
    /// Nothing to go by yet: an empty `environ` (a process inside
    /// `execve`, between its new memory and its new stack, reads empty),
    /// or a read that failed otherwise. Read again at the next look, so a
    /// process caught mid-exec is never taken for unmarked for good.
    Unknown,
}

impl EnvRead {
    fn of(read: std::io::Result<Vec<u8>>, home_var: &str, mark_var: &str) -> EnvRead {
        match read {
            Ok(raw) if raw.is_empty() => EnvRead::Unknown,
            Ok(raw) => {
                let env = parse_environ(&raw);
                let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                EnvRead::Read(get(home_var).zip(get(mark_var)))
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => EnvRead::Foreign,
            Err(_) => EnvRead::Unknown,
        }
    }

    /// `(home, mark)` when known to hold both.
    fn marks(&self) -> Option<&(String, String)> {
        match self {
            EnvRead::Read(m) => m.as_ref(),
            _ => None,
        }
    }
}

/// A process that carries a mark in its environment: the value of a
/// variable it was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marked {
    /// What `/proc/<pid>/stat` says of it now.
    pub stat: ProcStat,
    /// The value of the marking variable.
    pub mark: String,
}

/// Every live process whose environment holds `home_var=home` and a
/// `mark_var`, with that mark: processes a daemon of this home started,
/// found whatever process group or session they moved to since (a server
/// that daemonizes itself, a double fork). An environment is fixed when a
/// process is exec'd, so what each `(pid, start time, exec)` holds is read
/// once and remembered; only this user's processes can be read at all.
///
/// A process inside `execve` reads as having no environment for a moment
/// (a service's `setsid()` child exec'ing as its parent is stopped): such
/// a process is read again, every millisecond for up to
/// `EXEC_REREADS` ms, before this returns, so one look never misses it.
/// That is the only time this blocks; one still empty after that has no
/// environment, and is remembered so.
pub(crate) fn marked_processes(home_var: &str, home: &str, mark_var: &str) -> Vec<Marked> {
    look(home_var, home, mark_var).0
}

/// As [`marked_processes`], for a caller about to stop what it finds: a
/// process still inside `execve` after the re-reads (a loaded machine can
/// hold one there for longer; its `env_start` reads 0 until the kernel has
/// laid out its new stack) is waited for, looking again every 5 ms for up
/// to `EXEC_SETTLE` (2 s), so a sweep never leaves one running unseen.
pub(crate) async fn marked_processes_settled(
    home_var: &str,
    home: &str,
    mark_var: &str,
) -> Vec<Marked> {
    let deadline = std::time::Instant::now() + EXEC_SETTLE;
    loop {
        let (found, in_exec) = look(home_var, home, mark_var);
        if !in_exec || std::time::Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// How long, at most, [`marked_processes_settled`] waits for processes
/// inside `execve` to come out of it.
pub(super) const EXEC_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// One look: the marked processes, and whether one was still inside
/// `execve` when the look ended (its marks unknown).
fn look(home_var: &str, home: &str, mark_var: &str) -> (Vec<Marked>, bool) {
    use std::sync::Mutex;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let procs = all_processes();
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = seen.get_or_insert_with(std::collections::HashMap::new);
    // Forget processes that are gone, so the memory stays bounded.
    seen.retain(|(pid, start, env), _| {
        procs
            .iter()
            .any(|p| p.pid == *pid && p.start_time == *start && p.env_start == *env)
    });
    let marks = Marks {
        home_var,
        home,
        mark_var,
    };
    let mut out = Vec::new();
    let mut unsure = Vec::new();
    // Kernel threads (kthreadd, pid 2, and its children) carry no
    // environment: never read.
    for p in procs
        .into_iter()
        .filter(|p| !p.is_zombie() && p.pid != 2 && p.ppid != 2)
    {
        let key = (p.pid, p.start_time, p.env_start);
        let r = match seen.get(&key) {
            Some(r) => r.clone(),
            None => marks.read(p.pid),
        };
        if r == EnvRead::Unknown {
            unsure.push(p);
            continue;
        }
        seen.insert(key, r.clone());
        marks.keep(p, &r, &mut out);
    }
    let in_exec = marks.reread(unsure, seen, &mut out);
    (out, in_exec)
}

/// What [`look`] remembers of each process it read, keyed by pid, start
/// time and the exec too: a child read between its fork and its exec
/// holds its parent's environment, not the one it runs with.
type Seen = std::collections::HashMap<(u32, u64, u64), EnvRead>;

/// The variables a [`look`] reads: Binky's home, and the mark.
struct Marks<'a> {
    home_var: &'a str,
    home: &'a str,
    mark_var: &'a str,
}

impl Marks<'_> {
    fn read(&self, pid: u32) -> EnvRead {
        EnvRead::of(
            std::fs::read(format!("/proc/{pid}/environ")),
            self.home_var,
            self.mark_var,
        )
    }

    /// Adds `p` to `out` when `r` shows it marked under this home.
    fn keep(&self, p: ProcStat, r: &EnvRead, out: &mut Vec<Marked>) {
        if let Some((h, mark)) = r.marks()
            && h == self.home
        {
            out.push(Marked {
                mark: mark.clone(),
                stat: p,
            });
        }
    }

    /// Reads again, a few times, the processes whose environment could
    /// not be read; returns whether one is still inside `execve` after.
    fn reread(&self, mut unsure: Vec<ProcStat>, seen: &mut Seen, out: &mut Vec<Marked>) -> bool {
        for _ in 0..EXEC_REREADS {
            if unsure.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            unsure.retain(|p| {
                let r = self.read(p.pid);
                if r == EnvRead::Unknown {
                    // Still there (not exited, not a zombie): read again.
                    return proc_stat(p.pid)
                        .is_some_and(|s| s.start_time == p.start_time && !s.is_zombie());
                }
                seen.insert((p.pid, p.start_time, p.env_start), r.clone());
                self.keep(*p, &r, out);
                false
            });
        }
        // Still inside `execve` (its new stack not laid out: `env_start`
        // 0), or empty all along: a process started with no environment.
        let mut in_exec = false;
        for p in unsure {
            if inside_exec(&p, proc_stat(p.pid).as_ref()) {
                in_exec = true;
            } else {
                seen.insert((p.pid, p.start_time, p.env_start), EnvRead::Read(None));
            }
        }
        in_exec
    }
}

/// Whether process `was` (listed with an empty `environ`) is, as `now`
/// reads, the same process still inside `execve`: alive, and its
/// environment not laid out yet (`env_start` 0, as the kernel's new memory
/// map starts). One that exited, or runs with `env_start` set, is not.
fn inside_exec(was: &ProcStat, now: Option<&ProcStat>) -> bool {
    now.is_some_and(|s| s.start_time == was.start_time && !s.is_zombie() && s.env_start == 0)
}

/// How many times, a millisecond apart, [`marked_processes`] reads again
/// a process whose environment read empty (one inside `execve`).
pub(super) const EXEC_REREADS: u32 = 20;

/// The number of the signal that ended a process, when one did (`None` when
/// it exited with a code). Only for messages: the number is the system's.
pub(crate) fn exit_signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// This process's resident memory and CPU time so far, read through
/// `sysinfo` (which reads `/proc/self` here). Zero for both when they
/// cannot be read.
pub(crate) fn self_usage() -> SelfUsage {
    use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
    let pid = Pid::from_u32(std::process::id());
    let mut sys = System::new();
    sys.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_memory().with_cpu(),
    );
    sys.process(pid)
        .map(|p| SelfUsage {
            rss_bytes: p.memory(),
            cpu_time_ms: p.accumulated_cpu_time(),
        })
        .unwrap_or_default()
}

/// The size of a memory page, bytes.
pub(crate) fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as u64)
}

/// This process's session id.
pub(crate) fn session_id() -> u32 {
    nix::unistd::getsid(None).map_or(0, |p| p.as_raw() as u32)
}

/// Sends `sig` to one process. `Ok(false)` when it no longer exists.
///
/// # Errors
/// The kernel refused (another user's process: `EPERM`).
pub(crate) fn signal_process(pid: u32, sig: Signal) -> io::Result<bool> {
    send_signal(pid, Some(native(sig)), false)
}

/// Pids of `pid` and all its descendants (from `/proc/*/stat` parent links).
pub(crate) fn process_tree(pid: u32) -> Vec<u32> {
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

/// The command line of `pid`, its arguments joined by spaces (for messages).
pub(crate) fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn an_empty_or_failed_environ_read_is_unknown_and_read_again() {
        let of = |r| EnvRead::of(r, "H", "M");
        // Mid-exec a process's environ reads empty: not "unmarked".
        assert_eq!(of(Ok(Vec::new())), EnvRead::Unknown);
        assert_eq!(
            of(Err(io::Error::from(io::ErrorKind::NotFound))),
            EnvRead::Unknown
        );
        assert_eq!(
            of(Err(io::Error::from(io::ErrorKind::PermissionDenied))),
            EnvRead::Foreign
        );
        assert_eq!(of(Ok(b"PATH=/bin\0".to_vec())), EnvRead::Read(None));
        assert_eq!(
            of(Ok(b"H=/home\0X=1\0M=tok=en\0".to_vec())),
            EnvRead::Read(Some(("/home".into(), "tok=en".into())))
        );
    }

    #[test]
    fn only_a_live_process_without_its_stack_yet_is_inside_exec() {
        let me = proc_stat(std::process::id()).unwrap();
        // A running program has its environment laid out.
        assert_ne!(me.env_start, 0);
        assert!(!inside_exec(&me, Some(&me)));
        let mid = ProcStat { env_start: 0, ..me };
        assert!(inside_exec(&me, Some(&mid)));
        // Gone, reaped-pending, or a recycled pid: not waited for.
        assert!(!inside_exec(&me, None));
        let zombie = ProcStat { state: 'Z', ..mid };
        assert!(!inside_exec(&me, Some(&zombie)));
        let other = ProcStat {
            start_time: me.start_time + 1,
            ..mid
        };
        assert!(!inside_exec(&me, Some(&other)));
    }

    #[test]
    fn a_marked_child_is_found_wherever_its_group_is() {
        let home = format!("/nonexistent/home-{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("BINKY_TEST_HOME_MARK", &home)
            .env("BINKY_TEST_TOKEN_MARK", "t1")
            .process_group(0)
            .spawn()
            .unwrap();
        // Looked at from its first moment until seen: a look before its
        // exec (its parent's environment) or inside it (none) finds
        // nothing yet, and must not hide it from the next.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            let f = marked_processes("BINKY_TEST_HOME_MARK", &home, "BINKY_TEST_TOKEN_MARK");
            if !f.is_empty() || std::time::Instant::now() > deadline {
                break f;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].stat.pid, child.id());
        assert_eq!(found[0].mark, "t1");
    }
}
