//! Error pages a person can act on.

use super::{Body, Route, full};
use crate::protocol::ServiceState;
use hyper::{Response, StatusCode, header};

/// `s` as HTML text or a quoted attribute value: markup characters as
/// entities, a newline as `&#10;` (so a page fragment stays one line), and
/// a control or [`crate::output::hidden_format`] character (a bidi
/// override) shown as `<U+XXXX>`, as on the terminal and the dashboard.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push(' '),
            // Shown, never sent: an escape in a page would still act on a
            // terminal that prints it (`curl` of the page).
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push((c as u8 + b'@') as char);
            }
            c if c.is_control() || crate::output::hidden_format(c) => {
                out.push_str(&format!("&lt;U+{:04X}&gt;", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// A small page with `title` and `body` (HTML the caller escaped).
pub(super) fn page(status: StatusCode, title: &str, body: String) -> Response<Body> {
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>{t}</title><body style=\"font-family:sans-serif;max-width:50em;margin:2em auto\"><h1>{t}</h1>{body}<p><small>binky proxy</small></p></body>\n",
        t = escape(title)
    );
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .body(full(html))
        .expect("valid response")
}

/// 404: no route for this host. It links to the dashboard page at
/// `board` (`binky.localhost` on the port the request came to). A host
/// under `.localhost` (a typo of a world's name) also gets the list of
/// names served here; any other (a page that rebound its own name to
/// loopback) gets the bare page: what runs here is not its to read.
pub(super) fn not_found(host: &str, board: &str, routes: &[(String, Route)]) -> Response<Body> {
    let mut body = format!("<p>No world serves <code>{}</code>.</p>", escape(host));
    body.push_str(&format!(
        "<p>Every world on this machine: <a href=\"{b}\">{b}</a></p>",
        b = escape(board)
    ));
    let local = super::normalise_host(host).ends_with(".localhost");
    if local && routes.is_empty() {
        body.push_str("<p>No worlds are up. Run <code>binky up &lt;branch&gt;</code>.</p>");
    } else if local {
        body.push_str("<p>Known here:</p><ul>");
        for (h, r) in routes {
            body.push_str(&format!(
                "<li><code>{}</code> — {} / {} / {} ({})</li>",
                escape(h),
                escape(&r.project),
                escape(&r.world),
                escape(&r.service),
                escape(r.state.as_str())
            ));
        }
        body.push_str("</ul>");
    }
    page(StatusCode::NOT_FOUND, "Unknown host", body)
}

/// A command for the page, as a person runs it from anywhere: with `-p`
/// and the project's name (the page cannot know the folder they are in).
fn command(r: &Route, verb: &str, service: bool) -> String {
    let mut c = format!("binky -p {} {verb} {}", r.project, r.world);
    if service {
        c.push(' ');
        c.push_str(&r.service);
    }
    format!("<code>{}</code>", escape(&c))
}

/// 503 while starting (with Retry-After), 502 when stopped or failed. A
/// failed world's page says why (the first line `status` shows) and the
/// command to run.
pub(super) fn unavailable(r: &Route) -> Response<Body> {
    let starting = r.state.is_coming();
    let status = if starting || matches!(r.state, ServiceState::Suspended | ServiceState::Sleeping)
    {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::BAD_GATEWAY
    };
    let logs = command(r, "logs", true);
    let hint = if r.state == ServiceState::Restarting {
        format!(
            "It exited and is being restarted after a backoff; {logs} shows why. This page retries shortly."
        )
    } else if starting {
        "It is starting; this page retries shortly.".to_owned()
    } else if let Some(why) = &r.why {
        format!(
            "Its world's <code>up</code> failed: {}</p><p>Fix that, then run {}; {logs} shows its output.",
            escape(why),
            command(r, "up", false)
        )
    } else {
        format!("Run {}, or {logs} to see why.", command(r, "up", false))
    };
    let verb = if r.state == ServiceState::Failed {
        "has"
    } else {
        "is"
    };
    let mut resp = page(
        status,
        &format!("{} {verb} {}", r.service, r.state),
        format!(
            "<p>Service <code>{}</code> of world <code>{}</code> (project {}) is <b>{}</b>.</p><p>{hint}</p>",
            escape(&r.service),
            escape(&r.world),
            escape(&r.project),
            escape(r.state.as_str())
        ),
    );
    if starting {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("2"));
    }
    resp
}

/// 503 for a sleeping world being woken that is not serving yet: queued
/// for admission (`queued` says why it waits) or still starting. The page
/// refreshes itself, and Retry-After asks a client to try again.
pub(super) fn waking(r: &Route, queued: Option<&str>) -> Response<Body> {
    let why = match queued {
        Some(q) => format!(
            "It is waking up and waits for room to start: {}.",
            escape(q)
        ),
        None => "It is waking up and still starting.".to_owned(),
    };
    let mut resp = page(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("{} is waking up", r.service),
        format!(
            "<p>World <code>{}</code> (project {}) was asleep after its idle time. {why} This page retries by itself; {} shows its output.</p>",
            escape(&r.world),
            escape(&r.project),
            command(r, "logs", true)
        ),
    );
    let h = resp.headers_mut();
    h.insert(header::RETRY_AFTER, header::HeaderValue::from_static("2"));
    h.insert(header::REFRESH, header::HeaderValue::from_static("2"));
    resp
}

/// 502: the upstream refused or broke the connection.
pub(super) fn bad_gateway(r: &Route, e: &dyn std::fmt::Display) -> Response<Body> {
    page(
        StatusCode::BAD_GATEWAY,
        &format!("{} did not answer", r.service),
        format!(
            "<p>Service <code>{}</code> of world <code>{}</code> is {} but its port {} did not answer: {}.</p><p>Does it listen on <code>$PORT</code>? {} shows its output.</p>",
            escape(&r.service),
            escape(&r.world),
            escape(r.state.as_str()),
            r.port,
            escape(&e.to_string()),
            command(r, "logs", true)
        ),
    )
}

/// 400.
pub(super) fn bad_request(why: &str) -> Response<Body> {
    page(
        StatusCode::BAD_REQUEST,
        "Bad request",
        format!("<p>{}</p>", escape(why)),
    )
}
