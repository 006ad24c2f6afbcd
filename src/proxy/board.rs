//! The proxy's own page: every world on the machine, live and read-only,
//! at `binky.localhost` (and `localhost`, `127.0.0.1`, `[::1]` on the
//! proxy's port, with no world host).
//!
//! - `GET /` is one HTML page with the table drawn on the server; `GET
//!   /events` is a server-sent-event stream of the same table, drawn again
//!   after each burst of the daemon's events (and a comment line every
//!   [`KEEPALIVE`], so a closed tab is noticed). Nothing is read while
//!   nothing happens.
//! - Only those Host names get it: a page elsewhere that rebinds its own
//!   name to 127.0.0.1 sends its own Host and is refused, so it cannot read
//!   the table. The page's one script is allowed by its hash
//!   (Content-Security-Policy), nothing else runs.
//! - Every value (branch names, errors a service caused) is HTML-escaped
//!   on the server, once, in [`table`]; the script only swaps the escaped
//!   table in.
//! - No verb changes state here: anything but `GET`/`HEAD` is 405.

use super::{Body, full};
use crate::protocol::{Event, StatusReport, WorldState, WorldStatus};
use bytes::Bytes;
use hyper::{Method, Response, StatusCode, header};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// What the page shows, as the daemon provides it (the proxy knows no
/// registry).
pub trait Board: Send + Sync + 'static {
    /// Every world now.
    ///
    /// # Errors
    /// The registry could not be read (the text says why).
    fn report(&self) -> Result<StatusReport, String>;
    /// A receiver woken by every event the daemon emits.
    fn changes(&self) -> broadcast::Receiver<Event>;
}

/// The Host names the page answers to (normalised: no port, no trailing
/// dot, lower case).
pub const BOARD_HOSTS: &[&str] = &["binky.localhost", "localhost", "127.0.0.1", "::1"];

/// A burst of events draws the table once, this long after its first.
const COALESCE: Duration = Duration::from_millis(150);

/// A comment line this often on an open stream: how a closed tab is found
/// (the write fails), at a cost of a few bytes a minute.
pub const KEEPALIVE: Duration = Duration::from_secs(30);

/// The page's script: keep the table as the stream sends it.
const SCRIPT: &str = "const s=new EventSource('/events'),l=document.getElementById('live');\
s.addEventListener('table',e=>{document.getElementById('worlds').innerHTML=e.data;l.textContent='live';});\
s.onerror=()=>{l.textContent='reconnecting…';};";

/// Whether `host` (normalised) is one the page answers to.
pub(super) fn is_board_host(host: &str) -> bool {
    BOARD_HOSTS.contains(&host)
}

/// The answer to a request for the page.
pub(super) fn answer(board: &Arc<dyn Board>, method: &Method, path: &str) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, "GET, HEAD")
            .body(full("read-only: the dashboard page changes nothing\n"))
            .expect("valid response");
    }
    match path {
        "/" => page(board),
        "/events" => stream(board.clone()),
        _ => super::pages::page(
            StatusCode::NOT_FOUND,
            "Not here",
            "<p>The dashboard is at <a href=\"/\">/</a>.</p>".to_owned(),
        ),
    }
}

fn page(board: &Arc<dyn Board>) -> Response<Body> {
    let table = match board.report() {
        Ok(r) => table(&r),
        Err(e) => format!(
            "<p>cannot read the registry: {}</p>",
            super::pages::escape(&e)
        ),
    };
    let html = format!(
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
<title>binky</title><style>{STYLE}</style><body><header><b>binky</b> · every world on this machine \
<span id=live>loading…</span></header><main id=worlds>{table}</main>\
<footer>read-only · <code>binky dashboard</code> in a terminal acts on worlds</footer><script>{SCRIPT}</script></body></html>\n"
    );
    let mut resp = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8");
    for (k, v) in security_headers() {
        resp = resp.header(k, v);
    }
    resp.body(full(html)).expect("valid response")
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222}\
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.2em .6em;vertical-align:top}\
th{border-bottom:1px solid #999}h2{margin:1em 0 .3em;font-size:1.1em}\
.running{color:#080}.failed{color:#c00;font-weight:bold}.queued,.suspended{color:#a60}.stopped,.sleeping{color:#777}\
#live{color:#777;font-size:.9em}footer{margin-top:2em;color:#777;font-size:.85em}";

/// Headers that keep the page to itself: only its own script runs, it
/// connects only to its own origin, no frame holds it.
fn security_headers() -> Vec<(header::HeaderName, String)> {
    use base64::Engine;
    use sha2::Digest;
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(SCRIPT));
    vec![
        (
            header::CONTENT_SECURITY_POLICY,
            format!(
                "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'"
            ),
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".into()),
        (header::REFERRER_POLICY, "no-referrer".into()),
        (header::CACHE_CONTROL, "no-store".into()),
    ]
}

/// The event stream: the table now, then again after each burst of
/// events, until the client goes.
fn stream(board: Arc<dyn Board>) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    tokio::spawn(async move {
        let mut changes = board.changes();
        loop {
            let b = board.clone();
            let drawn = tokio::task::spawn_blocking(move || b.report()).await;
            let frame = match drawn {
                Ok(Ok(r)) => format!("event: table\ndata: {}\n\n", table(&r)),
                _ => ": the registry could not be read\n\n".to_owned(),
            };
            if tx.send(Bytes::from(frame)).await.is_err() {
                return;
            }
            // Wait for a change, saying something now and then so a
            // closed client is found.
            loop {
                tokio::select! {
                    r = changes.recv() => match r {
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    () = tokio::time::sleep(KEEPALIVE) => {
                        if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                            return;
                        }
                    }
                    () = tx.closed() => return,
                }
            }
            tokio::time::sleep(COALESCE).await;
            while changes.try_recv().is_ok() {}
        }
    });
    let mut resp = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header("x-accel-buffering", "no");
    for (k, v) in security_headers() {
        resp = resp.header(k, v);
    }
    resp.body(Body::Channel(rx)).expect("valid response")
}

/// The table of every world by project, as one line of HTML (an SSE data
/// line holds no newline), every value escaped.
pub(super) fn table(r: &StatusReport) -> String {
    use super::pages::escape;
    if r.projects.is_empty() {
        return "<p>No worlds yet: <code>binky up &lt;branch&gt;</code> in a project makes one.</p>"
            .into();
    }
    let mut out = String::new();
    for p in &r.projects {
        out.push_str(&format!(
            "<h2>{}</h2><table><tr><th>world</th><th>state</th><th>services</th><th>verify</th></tr>",
            escape(&p.name)
        ));
        for w in &p.worlds {
            out.push_str(&format!(
                "<tr><td>{}</td><td class={}>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&w.name),
                w.state.as_str(),
                escape(&state_text(w)),
                services(w),
                escape(w.verify.as_deref().unwrap_or("")),
            ));
        }
        out.push_str("</table>");
    }
    out
}

fn state_text(w: &WorldStatus) -> String {
    match (&w.state, &w.queue, &w.error) {
        (WorldState::Queued, Some(q), _) => {
            format!("queued {}/{}: {}", q.position, q.of, q.reason)
        }
        (WorldState::Failed | WorldState::Suspended, _, Some(e)) => {
            format!("{}: {e}", w.state.as_str())
        }
        (WorldState::Sleeping, ..) => match &w.sleeping_since {
            Some(since) => format!("sleeping since {since}: a request wakes it"),
            None => "sleeping: a request wakes it".to_owned(),
        },
        (s, ..) => s.as_str().to_owned(),
    }
}

/// Each service with its port; a URL service as a link (only an
/// `http(s)://` URL the daemon made becomes one).
fn services(w: &WorldStatus) -> String {
    use super::pages::escape;
    w.services
        .iter()
        .map(|s| {
            let mut cell = escape(&s.name);
            if let Some(port) = s.port {
                cell.push_str(&format!(" :{port}"));
            }
            if let Some(url) = s
                .url
                .as_deref()
                .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            {
                cell = format!("<a href=\"{}\">{cell}</a>", escape(url));
            }
            format!("{cell} <small>{}</small>", s.state.as_str())
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ProjectStatus, ServiceKind, ServiceState, ServiceStatus};

    #[test]
    fn every_value_is_escaped_and_the_table_is_one_line() {
        let r = StatusReport {
            projects: vec![ProjectStatus {
                name: "<b>shop</b>".into(),
                root: "/r".into(),
                queued_unlisted: 0,
                spares: None,
                worlds: vec![WorldStatus {
                    name: "x\"><script>alert(1)</script>\nnext".into(),
                    slug: "x".into(),
                    state: WorldState::Failed,
                    path: String::new(),
                    group: None,
                    error: Some("<img src=x onerror=alert(2)>\x1b]0;title\x07\u{9b}".into()),
                    verify: None,
                    services: vec![ServiceStatus {
                        name: "web".into(),
                        kind: ServiceKind::Process,
                        state: ServiceState::Failed,
                        pid: None,
                        port: Some(41000),
                        ports: Default::default(),
                        restarts: 0,
                        host: Some("web.x.shop.localhost".into()),
                        url: Some("javascript:alert(3)".into()),
                        log_flood: None,
                    }],
                    queue: None,
                    suspended_since: None,
                    sleeping_since: None,
                    idle_after_s: None,
                    created: None,
                    usage: None,
                    notes: Vec::new(),
                }],
            }],
            ..Default::default()
        };
        let html = table(&r);
        assert!(!html.contains('\n'), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>shop"), "{html}");
        assert!(!html.contains("href=\"javascript"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        // Control characters are shown, not sent (a terminal printing the
        // page would act on them).
        assert!(!html.chars().any(char::is_control), "{html}");
        assert!(html.contains("^[]0;title^G"), "{html}");
    }

    #[test]
    fn a_sleeping_world_says_since_when_and_that_a_request_wakes_it() {
        let mut w: WorldStatus = serde_json::from_value(serde_json::json!({
            "name": "napper", "slug": "napper", "state": "sleeping", "path": "",
            "services": [], "sleeping_since": "2026-12-07T10:00:00Z"
        }))
        .unwrap();
        assert_eq!(
            state_text(&w),
            "sleeping since 2026-12-07T10:00:00Z: a request wakes it"
        );
        w.sleeping_since = None;
        assert_eq!(state_text(&w), "sleeping: a request wakes it");
    }

    #[test]
    fn only_the_proxy_s_own_names_get_the_page() {
        for h in ["binky.localhost", "localhost", "127.0.0.1", "::1"] {
            assert!(is_board_host(h), "{h}");
        }
        for h in [
            "evil.example",
            "web.main.shop.localhost",
            "binky.localhost.evil.example",
        ] {
            assert!(!is_board_host(h), "{h}");
        }
    }
}
