//! `binky curl <world> <service> [path]`: one HTTP request through the proxy
//! with the Host header filled in.
//!
//! The request goes through [`crate::http`] (hyper): bounded waits for the
//! connection, the answer and each part of the body, chunked bodies decoded
//! as they stream, `100 Continue` skipped.

use super::fail;
use crate::cli::CurlArgs;
use crate::protocol::{Request, Response};
use std::io::Write;
use std::process::ExitCode;

/// Exit code for `-f` on an HTTP error, as curl uses.
const HTTP_ERROR_EXIT: u8 = 22;
/// Exit code when standard output cannot be written, as curl uses.
const WRITE_ERROR_EXIT: u8 = 23;

/// Runs `binky curl`.
pub(crate) fn run(args: &CurlArgs, project: Option<&str>) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let target = match client.request(&Request::Locate {
        world: match super::world::world_ref(project, &args.name, false) {
            Ok(w) => w,
            Err(c) => return c,
        },
        service: args.service.clone(),
    }) {
        Ok(Response::Located(t)) => t,
        Ok(other) => return super::unexpected(&other),
        Err(e) => return fail(&e),
    };
    let request = match Prepared::new(args) {
        Ok(r) => r,
        Err(e) => {
            crate::output::error(e, None);
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(&crate::protocol::ApiError::new(format!(
                "cannot start: {e}"
            )));
        }
    };
    rt.block_on(exchange(args, &target, request))
}

/// How long `binky curl` waits for a connection, and then for the answer
/// and each part of its body.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Sends the request through [`crate::http`] and streams the answer to
/// standard output.
async fn exchange(
    args: &CurlArgs,
    target: &crate::protocol::ServiceTarget,
    request: Prepared,
) -> ExitCode {
    let Prepared {
        method,
        path,
        headers: extra,
        body,
    } = request;
    let headers = default_headers(&extra, args.data.is_some());
    let url = crate::http::Url {
        tls: false,
        host: "localhost".into(),
        port: target.port,
        authority: target.host.clone(),
        path_and_query: path,
    };
    let client = crate::http::Client {
        connect_timeout: CONNECT_TIMEOUT,
        read_timeout: READ_TIMEOUT,
        ..crate::http::Client::default()
    };
    let req = match crate::http::request(&method, &url, &headers, body.into()) {
        Ok(r) => r,
        Err(e) => return fail(&crate::protocol::ApiError::new(e.message)),
    };
    let resp = match client.send(&url, req).await {
        Ok(r) => r,
        Err(e) if e.kind == crate::http::HttpErrorKind::Connect => {
            let what = if target.via_proxy {
                "the proxy"
            } else {
                "the service"
            };
            return fail(
                &crate::protocol::ApiError::new(format!(
                    "cannot connect to {what} on port {}: {e}",
                    target.port
                ))
                .hint(
                    "`binky daemon status` and `binky config` show the daemon and its proxy port",
                ),
            );
        }
        Err(e) => return fail(&crate::protocol::ApiError::new(e.message)),
    };
    let status = resp.status();
    if args.fail && status.as_u16() >= 400 {
        // As curl's -f: nothing of the response, the status on stderr.
        eprintln!("binky curl: HTTP {}", status.as_u16());
        return ExitCode::from(HTTP_ERROR_EXIT);
    }
    stream_out(args.include, &client, resp).await
}

/// The headers `binky curl` sends: curl's defaults (a user agent, any
/// media type, a form body's type) unless the caller gave its own, then the
/// caller's.
fn default_headers(extra: &[(String, String)], has_data: bool) -> Vec<(&str, &str)> {
    let has = |name: &str| extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if !has("user-agent") {
        headers.push(("User-Agent", concat!("binky/", env!("CARGO_PKG_VERSION"))));
    }
    if !has("accept") {
        headers.push(("Accept", "*/*"));
    }
    if has_data && !has("content-type") {
        headers.push(("Content-Type", "application/x-www-form-urlencoded"));
    }
    headers.extend(extra.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    headers
}

/// Writes the answer to standard output (its status line and headers first
/// with `include`), ending quietly when the reader closed the pipe.
async fn stream_out(
    include: bool,
    client: &crate::http::Client,
    resp: hyper::Response<hyper::body::Incoming>,
) -> ExitCode {
    let status = resp.status();
    let mut out = std::io::stdout().lock();
    let mut written = Ok(());
    if include {
        let mut head = format!(
            "{:?} {} {}\r\n",
            resp.version(),
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        );
        for (name, value) in resp.headers() {
            head.push_str(&format!(
                "{name}: {}\r\n",
                String::from_utf8_lossy(value.as_bytes())
            ));
        }
        head.push_str("\r\n");
        written = out.write_all(head.as_bytes());
    }
    let mut body = resp.into_body();
    let mut read_error = None;
    while written.is_ok() {
        match client.next_frame(&mut body).await {
            Ok(Some(chunk)) => written = out.write_all(&chunk),
            Ok(None) => break,
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    let flushed = out.flush();
    // Standard output closed early (`| head`): the reader has what it
    // wanted; say nothing and exit as curl does on a write error.
    if [written.as_ref().err(), flushed.as_ref().err()]
        .iter()
        .flatten()
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    {
        return ExitCode::from(WRITE_ERROR_EXIT);
    }
    if let Some(e) = read_error {
        return fail(&crate::protocol::ApiError::new(format!(
            "reading the response: {e}"
        )));
    }
    if let Err(e) = written.and(flushed) {
        return fail(&crate::protocol::ApiError::new(format!(
            "writing the response: {e}"
        )));
    }
    ExitCode::SUCCESS
}

/// The request `binky curl` sends, checked before anything is sent.
struct Prepared {
    method: String,
    /// Origin-form target, percent-encoded where needed.
    path: String,
    /// Extra headers, in order, trimmed.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Headers `binky curl` sets itself: Host routes the request, and the body's
/// framing follows from `-d`.
const OWN_HEADERS: [&str; 3] = ["host", "content-length", "transfer-encoding"];

impl Prepared {
    /// # Errors
    /// What is wrong with the method, path, a header or `-d @FILE`, in words
    /// for the user.
    fn new(args: &CurlArgs) -> Result<Self, String> {
        let method = args
            .method
            .clone()
            .unwrap_or_else(|| if args.data.is_some() { "POST" } else { "GET" }.to_owned());
        if hyper::Method::from_bytes(method.as_bytes()).is_err() || method.is_empty() {
            return Err(format!(
                "method `{}` is not an HTTP method (letters, digits and !#$%&'*+-.^_`|~ only)",
                method.escape_debug()
            ));
        }
        let path = encode_target(&args.path);
        if path.parse::<hyper::Uri>().is_err() {
            return Err(format!(
                "path `{}` is not a valid request path",
                args.path.escape_debug()
            ));
        }
        let mut headers = Vec::new();
        for h in &args.headers {
            // Escaped in messages: a control character must neither reach
            // the terminal nor hide what was wrong.
            let shown = h.escape_debug();
            let Some((name, value)) = h.split_once(':') else {
                return Err(format!("header `{shown}` is not `Name: value`"));
            };
            let (name, value) = (name.trim(), value.trim());
            if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!(
                    "header `{shown}`: `{}` is not a header name (letters, digits and -, no spaces)",
                    name.escape_debug()
                ));
            }
            if hyper::header::HeaderValue::from_str(value).is_err() {
                return Err(format!(
                    "header `{}`: the value holds a line break or control character",
                    name.escape_debug()
                ));
            }
            if OWN_HEADERS.iter().any(|o| o.eq_ignore_ascii_case(name)) {
                return Err(format!(
                    "header `{name}` is binky's to set (Host routes the request; -d sets the body's length)"
                ));
            }
            headers.push((name.to_owned(), value.to_owned()));
        }
        let body = match args.data.as_deref() {
            None => Vec::new(),
            Some("@-") => {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
                    .map_err(|e| format!("-d @-: cannot read standard input: {e}"))?;
                b
            }
            Some(d) => match d.strip_prefix('@') {
                Some(file) => std::fs::read(file).map_err(|e| format!("-d @{file}: {e}"))?,
                None => d.as_bytes().to_vec(),
            },
        };
        Ok(Prepared {
            method,
            path,
            headers,
            body,
        })
    }
}

/// `path` as an origin-form request target: a leading `/`, and bytes a URL
/// cannot hold (space, controls, non-ASCII, `"<>\^`{|}`) percent-encoded.
/// `%` is kept, so an already encoded path stays as it is.
fn encode_target(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 1);
    if !path.starts_with('/') {
        out.push('/');
    }
    for b in path.bytes() {
        if b.is_ascii_graphic() && !b"\"<>\\^`{|}".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn targets_are_percent_encoded_where_needed() {
        assert_eq!(super::encode_target("a b?q=1"), "/a%20b?q=1");
        assert_eq!(super::encode_target("/x/%41?k=v&w"), "/x/%41?k=v&w");
        assert_eq!(super::encode_target("/é"), "/%C3%A9");
        assert_eq!(super::encode_target("/\"q\""), "/%22q%22");
    }
}
