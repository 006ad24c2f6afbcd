//! A world's URLs and the HTTPS front (Caddy) for projects that ask for it.

use crate::config;
use crate::daemon::Daemon;
use crate::daemon::events::EventKind;
use crate::daemon::world::world_event;
use std::path::Path;

/// The URL Binky prints for a url service: https through Caddy when the
/// project asks for it and Caddy runs, else http through the proxy. It
/// carries the port whenever it is not the scheme's default, so a printed URL
/// always works.
pub(in crate::daemon::world) fn proxy_url(
    d: &Daemon,
    label: &str,
    slug: &str,
    domain: &str,
    https: bool,
) -> String {
    let s = d.read_registry(|r| r.settings()).ok();
    url_of(
        s.as_ref(),
        https_live(d),
        &format!("{label}.{slug}.{domain}"),
        https,
    )
}

/// Whether Caddy runs, so https projects get https URLs.
fn https_live(d: &Daemon) -> bool {
    d.https_live.load(std::sync::atomic::Ordering::Relaxed)
}

/// The URL of `host` through the front it is served on: Caddy's HTTPS port
/// when the project asks for `https` and Caddy runs, else the proxy's
/// port; the port is left out when it is the scheme's default (or unknown,
/// 0). Without settings the defaults (80, 443) are assumed.
pub(in crate::daemon::world) fn url_of(
    s: Option<&crate::protocol::Settings>,
    https_live: bool,
    host: &str,
    https: bool,
) -> String {
    let (scheme, port, default) = if https && https_live {
        ("https", s.map(|s| s.https_port).unwrap_or(443), 443)
    } else {
        ("http", s.map(|s| s.proxy_port).unwrap_or(80), 80)
    };
    if port == default || port == 0 {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}:{port}")
    }
}

/// Fills in each url service's [`ServiceStatus::url`](crate::protocol::ServiceStatus::url) (see [`proxy_url`]).
/// A project's config is read only when Caddy runs, to learn whether it
/// asks for HTTPS.
pub(crate) fn fill_urls(d: &Daemon, report: &mut crate::protocol::StatusReport) {
    let s = d.read_registry(|r| r.settings()).ok();
    let caddy = d.https_live.load(std::sync::atomic::Ordering::Relaxed);
    for p in &mut report.projects {
        if !p
            .worlds
            .iter()
            .any(|w| w.services.iter().any(|s| s.host.is_some()))
        {
            continue;
        }
        let https = caddy
            && config::load(&Path::new(&p.root).join(config::FILE_NAME))
                .is_ok_and(|c| c.project.https);
        for svc in p.worlds.iter_mut().flat_map(|w| w.services.iter_mut()) {
            if let Some(h) = &svc.host {
                svc.url = Some(url_of(s.as_ref(), https_live(d), h, https));
            }
        }
    }
}

/// Starts Caddy for a project with `https = true`; logs and degrades to
/// http when it cannot.
pub(in crate::daemon::world) async fn ensure_https(
    d: &Daemon,
    project: &str,
    world: &str,
) -> Option<String> {
    let s = d.read_registry(|r| r.settings()).ok()?;
    // Caddy insists on an HTTP port too; give it a free one nobody uses.
    let http_port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0);
    match d
        .caddy
        .ensure(
            &d.paths.home().join("caddy"),
            s.https_port,
            http_port,
            s.proxy_port,
        )
        .await
    {
        Ok(()) => {
            d.https_live
                .store(true, std::sync::atomic::Ordering::Relaxed);
            None
        }
        Err(e) => {
            tracing::warn!("https unavailable: {e}");
            d.event(world_event(EventKind::HttpsUnavailable, project, world).detail(e.clone()));
            Some(format!("HTTPS is off: {e}; URLs stay http"))
        }
    }
}

/// The host of a URL-shaped address (`scheme://[user@]host[:port]/…`), IPv6
/// brackets removed, as the adapter kit reads it; `None` when there is none.
pub(in crate::daemon::world) fn host_of(address: &str) -> Option<String> {
    let host = crate::address::Address::parse(address, &[], "")
        .ok()?
        .host();
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(proxy_port: u16, https_port: u16) -> crate::protocol::Settings {
        crate::protocol::Settings {
            proxy_port,
            https_port,
            ..crate::registry::default_settings()
        }
    }

    #[test]
    fn urls_carry_the_port_unless_it_is_the_schemes_default() {
        let host = "web.feat-a.shop.localhost";
        let s = settings(8080, 8443);
        assert_eq!(
            url_of(Some(&s), false, host, false),
            "http://web.feat-a.shop.localhost:8080"
        );
        assert_eq!(
            url_of(Some(&settings(80, 443)), true, host, true),
            "https://web.feat-a.shop.localhost"
        );
        assert_eq!(
            url_of(Some(&s), true, host, true),
            "https://web.feat-a.shop.localhost:8443"
        );
        // Port 0 (not yet bound) and no settings at all print no port.
        assert_eq!(
            url_of(Some(&settings(0, 0)), false, host, false),
            "http://web.feat-a.shop.localhost"
        );
        assert_eq!(
            url_of(None, false, host, false),
            "http://web.feat-a.shop.localhost"
        );
    }

    #[test]
    fn https_needs_both_the_project_and_a_running_caddy() {
        let s = settings(8080, 8443);
        // Asked for, Caddy down: http through the proxy, so the URL works.
        assert_eq!(url_of(Some(&s), false, "h", true), "http://h:8080");
        // Caddy up, project did not ask: http.
        assert_eq!(url_of(Some(&s), true, "h", false), "http://h:8080");
    }

    #[test]
    fn host_of_reads_every_address_shape() {
        for (address, host) in [
            ("postgres://u:p@db.local:5432/x", Some("db.local")),
            ("redis://127.0.0.1:6379/0", Some("127.0.0.1")),
            ("http://[::1]:9000/bucket", Some("::1")),
            ("amqp://guest:guest@localhost/%2F", Some("localhost")),
            ("mysql://root@host", Some("host")),
            // A password holding `@` and `:`: the last `@` ends the userinfo.
            ("postgres://u:p@ss:w@h:1/d", Some("h")),
            ("no-scheme:5432", None),
            ("http://", None),
            // As every HTTP client reads it (WHATWG): the host is `path`.
            ("http:///path", Some("path")),
        ] {
            assert_eq!(host_of(address).as_deref(), host, "{address}");
        }
    }
}
