//! Memory and disk as the kernel shows them: `MemAvailable` within this
//! process's cgroup limit, pressure-stall triggers, a group's RSS, free
//! disk.

use super::procs::{all_processes, page_size};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Memory as the kernel reports it, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memory {
    /// `MemTotal`, or the daemon's cgroup limit when lower.
    pub total: u64,
    /// `MemAvailable`, or what the cgroup limit leaves when lower.
    pub available: u64,
}

/// `/proc/meminfo`'s `MemTotal` and `MemAvailable`, bounded by the
/// memory limit of this process's cgroup (v2 `memory.max` less
/// `memory.current`) when there is one: a daemon in a container must not
/// count the host's RAM. `None` where the kernel gives no `MemAvailable`.
pub(crate) fn memory() -> Option<Memory> {
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
pub(super) fn kib_field(text: &str, name: &str) -> Option<u64> {
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
pub(super) fn cgroup_memory() -> Option<(u64, u64)> {
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
pub(super) fn cgroup_files(proc_cgroup: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
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
pub(crate) struct PressureTrigger {
    pub(super) fd: tokio::io::unix::AsyncFd<File>,
}

impl PressureTrigger {
    /// Arms a trigger: some task stalled on memory `stall` out of each
    /// `window` (the kernel wants a window of 500 ms to 10 s; an
    /// unprivileged user's must be a whole number of 2 s).
    ///
    /// # Errors
    /// When the kernel has no PSI (`ENOENT`, or `EOPNOTSUPP` with `psi=0`),
    /// refuses the trigger, or no Tokio reactor runs.
    pub(crate) fn memory(
        stall: std::time::Duration,
        window: std::time::Duration,
    ) -> io::Result<Self> {
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
    pub(crate) async fn stalled(&self) -> io::Result<()> {
        let mut guard = self.fd.ready(tokio::io::Interest::PRIORITY).await?;
        guard.clear_ready();
        Ok(())
    }
}

/// The `some avg10` figure of `/proc/pressure/memory`: the share of the
/// last 10 s in which some task stalled on memory, percent.
pub(crate) fn memory_pressure_avg10() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/pressure/memory").ok()?;
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// Bytes free for an unprivileged user, and the size, of the filesystem
/// holding `path` (its nearest existing ancestor).
pub(crate) fn disk_space(path: &Path) -> Option<(u64, u64)> {
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
pub(crate) fn groups_rss(pgids: &[u32]) -> Vec<u64> {
    groups_usage(pgids)
        .into_iter()
        .map(|u| u.rss_bytes)
        .collect()
}

/// [`groups_rss`] with each group's CPU time besides (user plus system of
/// its live members, milliseconds), in one pass.
pub(crate) fn groups_usage(pgids: &[u32]) -> Vec<crate::protocol::Usage> {
    let page = page_size();
    let tick_ms = 1000 / clock_ticks_per_second();
    let mut sums = vec![crate::protocol::Usage::default(); pgids.len()];
    if pgids.is_empty() {
        return sums;
    }
    for p in all_processes() {
        if p.is_zombie() {
            continue;
        }
        if let Some(i) = pgids.iter().position(|g| *g == p.pgrp) {
            sums[i].rss_bytes += p.rss_pages * page;
            sums[i].cpu_ms += p.cpu_ticks * tick_ms;
        }
    }
    sums
}

/// `_SC_CLK_TCK`: the unit of `/proc/<pid>/stat`'s times (100 on every
/// Linux Binky knows, the fallback).
fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| (1..=1000).contains(t))
        .unwrap_or(100)
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
