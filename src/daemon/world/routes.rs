//! A world's URLs and the HTTPS front (Caddy) for projects that ask for it.

use super::*;

/// The URL Binky prints for a url service: https through Caddy when the
/// project asks for it and Caddy runs, else http through the proxy. It
/// carries the port whenever it is not the scheme's default, so a printed URL
/// always works.
pub(super) fn proxy_url(d: &Daemon, label: &str, slug: &str, domain: &str, https: bool) -> String {
    let s = d.registry().settings().ok();
    url_of(s.as_ref(), d, &format!("{label}.{slug}.{domain}"), https)
}

pub(super) fn url_of(
    s: Option<&crate::protocol::Settings>,
    d: &Daemon,
    host: &str,
    https: bool,
) -> String {
    let (scheme, port, default) =
        if https && d.https_live.load(std::sync::atomic::Ordering::Relaxed) {
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

/// Fills in each url service's [`ServiceStatus::url`] (see [`proxy_url`]).
/// A project's config is read only when Caddy runs, to learn whether it
/// asks for HTTPS.
pub(crate) fn fill_urls(d: &Daemon, report: &mut crate::protocol::StatusReport) {
    let s = d.registry().settings().ok();
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
                svc.url = Some(url_of(s.as_ref(), d, h, https));
            }
        }
    }
}

/// Starts Caddy for a project with `https = true`; logs and degrades to
/// http when it cannot.
pub(super) async fn ensure_https(d: &Daemon, project: &str, world: &str) -> Option<String> {
    let s = d.registry().settings().ok()?;
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
            d.event(world_event("https_unavailable", project, world).detail(e.clone()));
            Some(format!("HTTPS is off: {e}; URLs stay http"))
        }
    }
}

pub(super) fn host_of(address: &str) -> Option<String> {
    let rest = address.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match hostport.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => hostport.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_owned())
}
