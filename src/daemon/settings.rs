//! Machine-global settings: validation and the effective proxy ports.

use super::Daemon;
use crate::protocol::{ApiError, Settings};
use crate::registry::Setting;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};

/// The proxy's port when port 80 cannot be bound (not root, or taken).
pub(super) const FALLBACK_PROXY_PORT: u16 = 18080;
/// The HTTPS port when 443 cannot be bound.
pub(super) const FALLBACK_HTTPS_PORT: u16 = 18443;

/// Environment overrides for the default ports (CI and tests run several
/// daemons on one machine).
pub(super) const PROXY_PORT_ENV: &str = "BINKY_PROXY_PORT";
/// See [`PROXY_PORT_ENV`].
pub(super) const HTTPS_PORT_ENV: &str = "BINKY_HTTPS_PORT";

/// Whether `port` can be bound on loopback right now (IPv4, and IPv6 where
/// the machine has it).
pub(super) fn port_is_free(port: u16) -> bool {
    let v4 = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).is_ok();
    let v6 = match TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port))) {
        Ok(_) => true,
        // No IPv6 on this machine: only IPv4 matters.
        Err(e) => e.kind() == std::io::ErrorKind::AddrNotAvailable,
    };
    v4 && v6
}

fn env_port(name: &str) -> Option<u16> {
    std::env::var(name).ok()?.parse().ok().filter(|p| *p != 0)
}

/// Fills in unset proxy ports: 80/443 when bindable, else the documented
/// fallbacks. Run once at start-up so `binky config` shows real values.
pub(super) fn init_defaults(d: &Daemon) -> anyhow::Result<()> {
    d.registry(init_defaults_in)
}

fn init_defaults_in(reg: &mut crate::registry::Registry) -> anyhow::Result<()> {
    let s = reg.settings()?;
    let mut pairs = Vec::new();
    if s.proxy_port == 0 {
        let p = env_port(PROXY_PORT_ENV).unwrap_or_else(|| {
            if port_is_free(80) {
                80
            } else {
                FALLBACK_PROXY_PORT
            }
        });
        pairs.push(Setting::ProxyPort(p));
    }
    if s.https_port == 0 {
        let p = env_port(HTTPS_PORT_ENV).unwrap_or_else(|| {
            if port_is_free(443) {
                443
            } else {
                FALLBACK_HTTPS_PORT
            }
        });
        pairs.push(Setting::HttpsPort(p));
    }
    if !pairs.is_empty() {
        reg.set_settings(&pairs)?;
    }
    Ok(())
}

/// The largest disk reserve `binky reserve --disk` takes, GB.
pub(super) const MAX_DISK_RESERVE_GB: f64 = 1_000_000.0;

/// The largest queue cap `binky reserve --queue-max` takes: past it the
/// queue itself is the problem (benchmarks/admission.py measures 5,000).
pub(super) const MAX_QUEUE_CAP: u32 = 10_000;

/// What `binky reserve` changes; `None` leaves a value as it is.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ReserveChange {
    pub ram: Option<f64>,
    pub disk: Option<f64>,
    pub max_parallel: Option<u32>,
    pub queue_max: Option<u32>,
    pub queue_per_group: Option<u32>,
}

/// Validates and stores reserves, the parallelism limit and the queue's
/// caps. RAM 0–90 %, disk 0 to [`MAX_DISK_RESERVE_GB`] GB, max_parallel 0
/// (unlimited) to 10,000, queue_max 2 to [`MAX_QUEUE_CAP`],
/// queue_per_group 1 to half of queue_max: one caller may hold
/// `queue_max - queue_per_group` places, which must cover a full group.
pub(super) fn set_reserve(d: &Daemon, c: ReserveChange) -> Result<Settings, ApiError> {
    let ReserveChange {
        ram,
        disk,
        max_parallel,
        queue_max,
        queue_per_group,
    } = c;
    let mut pairs = Vec::new();
    if queue_max.is_some() || queue_per_group.is_some() {
        let now = d.registry(|r| r.settings())?;
        let max = queue_max.unwrap_or(now.queue_max);
        let per = queue_per_group.unwrap_or(now.queue_per_group);
        if !(2..=MAX_QUEUE_CAP).contains(&max) {
            return Err(
                ApiError::new(format!("--queue-max {max} is out of range")).hint(format!(
                    "give a number of queued worlds from 2 to {MAX_QUEUE_CAP}"
                )),
            );
        }
        if per == 0 || per > max / 2 {
            return Err(ApiError::new(format!(
                "--queue-per-group {per} is out of range: it must be from 1 to half of queue_max ({max}), so one caller can fill a group and another still finds room"
            ))
            .hint("lower --queue-per-group, or raise --queue-max with it"));
        }
        pairs.push(Setting::QueueMax(max));
        pairs.push(Setting::QueuePerGroup(per));
    }
    if let Some(n) = max_parallel {
        if n > 10_000 {
            return Err(ApiError::new(format!("--max-parallel {n} is out of range"))
                .hint("give a number of worlds from 1 to 10000, or 0 for no limit"));
        }
        pairs.push(Setting::MaxParallel(n));
    }
    if let Some(r) = ram {
        if !(0.0..=90.0).contains(&r) || r.is_nan() {
            return Err(ApiError::new(format!("--ram {r} is out of range"))
                .hint("give a percentage from 0 to 90"));
        }
        pairs.push(Setting::RamReservePct(r));
    }
    if let Some(g) = disk {
        // A petabyte: past it a reserve is a typo (and beyond what the
        // free-space figures count exactly).
        if !(0.0..=MAX_DISK_RESERVE_GB).contains(&g) || !g.is_finite() {
            return Err(ApiError::new(format!("--disk {g} is out of range"))
                .hint("give gigabytes from 0 to 1000000"));
        }
        pairs.push(Setting::DiskReserveGb(g));
    }
    store(d, &pairs)
}

/// Validates and stores proxy ports: 1–65535 and free (unless unchanged).
pub(super) fn set_ports(
    d: &Daemon,
    proxy: Option<u32>,
    https: Option<u32>,
) -> Result<Settings, ApiError> {
    let current = d.registry(|r| r.settings())?;
    let mut pairs = Vec::new();
    let check = |flag: &str, p: u32, now: u16| -> Result<u16, ApiError> {
        let port = u16::try_from(p).ok().filter(|p| *p != 0).ok_or_else(|| {
            ApiError::new(format!("--{flag} {p} is not a port")).hint("give a port from 1 to 65535")
        })?;
        if port != now && !port_is_free(port) {
            return Err(ApiError::new(format!("port {port} is in use on loopback"))
                .hint("pick a free port; `ss -ltnp` shows who holds it"));
        }
        Ok(port)
    };
    let new_proxy = proxy
        .map(|p| check("proxy", p, current.proxy_port))
        .transpose()?;
    let new_https = https
        .map(|p| check("https", p, current.https_port))
        .transpose()?;
    if new_proxy.is_some() && new_proxy == new_https {
        return Err(ApiError::new("the proxy and HTTPS ports must differ"));
    }
    if let Some(p) = new_proxy {
        if p == current.https_port && new_https.is_none() {
            return Err(ApiError::new(format!("port {p} is already the HTTPS port")));
        }
        pairs.push(Setting::ProxyPort(p));
    }
    if let Some(p) = new_https {
        if p == current.proxy_port && new_proxy.is_none() {
            return Err(ApiError::new(format!("port {p} is already the proxy port")));
        }
        pairs.push(Setting::HttpsPort(p));
    }
    store(d, &pairs)
}

fn store(d: &Daemon, pairs: &[Setting]) -> Result<Settings, ApiError> {
    d.registry(|reg| {
        if !pairs.is_empty() {
            reg.set_settings(pairs)?;
        }
        Ok(reg.settings()?)
    })
}
