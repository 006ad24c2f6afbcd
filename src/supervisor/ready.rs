//! When a service is ready: its probe passes, or (with none) its own
//! process group listens on its port; and why not, naming whoever else
//! holds the port.

use super::health::ProbeSpec;
use super::{NO_PROBE_GRACE, ServiceSpec};
use crate::platform;
use std::time::Duration;

/// Probes until it passes (Ok) or the timeout ends (Err with the last reason).
///
/// For the first second attempts come every 10 ms, then every `interval`:
/// most dev servers are ready within a few hundred milliseconds, and a fixed
/// 250 ms pause made `up` wait on average half an interval per service after
/// it was already listening (see benchmarks/up.py). A refused loopback connect
/// costs microseconds.
pub(super) async fn probe_until_healthy(
    probe: &ProbeSpec,
    timeout: Duration,
    interval: Duration,
) -> Result<(), String> {
    const EAGER: Duration = Duration::from_secs(1);
    let start = tokio::time::Instant::now();
    let deadline = start + timeout;
    let per_attempt = interval
        .max(Duration::from_millis(500))
        .min(Duration::from_secs(5));
    loop {
        let last = match super::health::attempt(probe, per_attempt).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let pause = if start.elapsed() < EAGER {
            interval.min(Duration::from_millis(10))
        } else {
            interval
        };
        if tokio::time::Instant::now() + pause >= deadline {
            return Err(last);
        }
        tokio::time::sleep(pause).await;
    }
}

/// Waits until the service is ready, or says why it is not by the end of
/// its timeout. Ready means its *own* process answers:
///
/// - with a probe: the probe passes, and when the probe dials the service's
///   own port, a listener there belongs to its process group (something
///   else — an orphan of an earlier run — may answer it otherwise);
/// - without one: it has stayed up [`NO_PROBE_GRACE`], so a command that
///   fails at once fails `up` instead of looping in backoff behind a
///   "running" world; and a url service listens on its port (else the
///   proxy could only answer 502).
pub(super) async fn ready(spec: &ServiceSpec, pid: u32) -> Result<(), String> {
    match &spec.health {
        Some((probe, timeout, interval)) => {
            let deadline = tokio::time::Instant::now() + *timeout;
            let own_port = probe.port().is_some() && probe.port() == spec.port;
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                probe_until_healthy(probe, left, *interval).await?;
                let Some(why) = own_port.then(|| port_problem(spec, pid)).flatten() else {
                    return Ok(());
                };
                if tokio::time::Instant::now() + *interval >= deadline {
                    return Err(why);
                }
                tokio::time::sleep(*interval).await;
            }
        }
        None => {
            tokio::time::sleep(NO_PROBE_GRACE).await;
            if !spec.must_listen {
                return Ok(());
            }
            let deadline = tokio::time::Instant::now() + listen_timeout();
            let mut pause = Duration::from_millis(10);
            loop {
                let Some(why) = port_problem(spec, pid) else {
                    return Ok(());
                };
                if tokio::time::Instant::now() >= deadline {
                    return Err(why);
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
        }
    }
}

/// How long a url service without a probe may take to listen on its port:
/// the default health timeout (tests shorten it with
/// `BINKY_TEST_LISTEN_TIMEOUT_MS` in the daemon's environment).
pub(super) fn listen_timeout() -> Duration {
    crate::tunables::duration(
        "BINKY_TEST_LISTEN_TIMEOUT_MS",
        Duration::ZERO..=Duration::from_secs(3600),
    )
    .unwrap_or(crate::config::DEFAULT_HEALTH_TIMEOUT)
}

/// Why the service's own port does not show it ready, if it does not: a
/// listener there must belong to its process group (or its descendants).
/// Names whoever else holds the port.
pub(super) fn port_problem(spec: &ServiceSpec, pid: u32) -> Option<String> {
    let port = spec.port?;
    let mut ours = platform::group_members(pid);
    ours.extend(platform::process_tree(pid));
    ours.sort_unstable();
    ours.dedup();
    let listening = platform::listening_ports(&ours);
    if listening.contains(&port) {
        return None;
    }
    if let Some(other) = platform::listeners_of(port)
        .into_iter()
        .find(|p| !ours.contains(p))
    {
        let cmd = platform::command_line(other).unwrap_or_else(|| "?".into());
        return Some(format!(
            "its port {port} is answered by another process (pid {other}: {cmd}), not by this service; stop that process (perhaps left from an earlier run), or `binky remove` this world and `up` it again for other ports"
        ));
    }
    if platform::port_has_listener(port) {
        return Some(format!(
            "its port {port} is held by a process binky cannot see (another user's), not by this service"
        ));
    }
    if listening.is_empty() {
        return Some(format!("nothing listens on its assigned port {port}"));
    }
    let list: Vec<String> = listening.iter().map(|p| p.to_string()).collect();
    Some(format!(
        "nothing listens on its assigned port {port}, but its processes listen on {}; pass ${{self.port}} (or read $PORT) in its cmd",
        list.join(", ")
    ))
}

/// Explains a failed probe; when nothing listens on the assigned port but
/// the process tree listens elsewhere, says so (the service ignores `$PORT`).
pub(super) fn unhealthy_reason(spec: &ServiceSpec, pid: u32, last: String) -> String {
    let Some(port) = spec
        .health
        .as_ref()
        .and_then(|(p, _, _)| p.port())
        .filter(|p| Some(*p) == spec.port)
    else {
        return last;
    };
    let listening = platform::listening_ports(&platform::process_tree(pid));
    if listening.contains(&port) || listening.is_empty() {
        return last;
    }
    let list: Vec<String> = listening.iter().map(|p| p.to_string()).collect();
    format!(
        "nothing listens on its assigned port {port}, but its processes listen on {}; pass ${{self.port}} (or read $PORT) in its cmd",
        list.join(", ")
    )
}
