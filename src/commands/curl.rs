//! `binky curl <world> <service> [path]`: one HTTP request through the proxy
//! with the Host header filled in.
//!
//! A small blocking HTTP/1.1 client is enough here: one request, the answer
//! read to its end (`Connection: close`), chunked bodies decoded.

use super::fail;
use crate::cli::CurlArgs;
use crate::protocol::{Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::ExitCode;

/// Exit code for `-f` on an HTTP error, as curl uses.
const HTTP_ERROR_EXIT: u8 = 22;
/// Exit code when standard output cannot be written, as curl uses.
const WRITE_ERROR_EXIT: u8 = 23;

/// Runs `binky curl`.
pub fn run(args: &CurlArgs, project: Option<&str>) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let target = match client.request(&Request::Locate {
        world: match super::world::world_ref(project, &args.name) {
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
    let Prepared {
        method,
        path,
        headers: extra,
        body,
    } = request;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", target.host);
    let has = |name: &str| extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !has("user-agent") {
        head.push_str(concat!(
            "User-Agent: binky/",
            env!("CARGO_PKG_VERSION"),
            "\r\n"
        ));
    }
    if !has("accept") {
        head.push_str("Accept: */*\r\n");
    }
    for (name, value) in &extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if args.data.is_some() {
        if !has("content-type") {
            head.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut conn = match TcpStream::connect(("127.0.0.1", target.port))
        .or_else(|_| TcpStream::connect(("::1", target.port)))
    {
        Ok(c) => c,
        Err(e) => {
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
    };
    if conn
        .write_all(head.as_bytes())
        .and_then(|_| conn.write_all(&body))
        .is_err()
    {
        return fail(&crate::protocol::ApiError::new(
            "the connection closed while sending",
        ));
    }
    let mut r = BufReader::new(conn);
    let mut status_line = String::new();
    if r.read_line(&mut status_line).unwrap_or(0) == 0 {
        return fail(&crate::protocol::ApiError::new("no response"));
    }
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        headers.push(line.trim_end().to_owned());
    }
    let chunked = headers.iter().any(|h| {
        let l = h.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if args.fail && status >= 400 {
        // As curl's -f: nothing of the response, the status on stderr.
        eprintln!("binky curl: HTTP {status}");
        return ExitCode::from(HTTP_ERROR_EXIT);
    }
    let mut out = std::io::stdout().lock();
    if args.include {
        let _ = write!(out, "{}", status_line.trim_end());
        let _ = out.write_all(b"\r\n");
        for h in &headers {
            let _ = write!(out, "{h}\r\n");
        }
        let _ = out.write_all(b"\r\n");
    }
    let result = if chunked {
        copy_chunked(&mut r, &mut out)
    } else {
        std::io::copy(&mut r, &mut out).map(|_| ())
    };
    let flushed = out.flush();
    // Standard output closed early (`| head`): the reader has what it
    // wanted; say nothing and exit as curl does on a write error.
    if [result.as_ref().err(), flushed.as_ref().err()]
        .iter()
        .flatten()
        .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    {
        return ExitCode::from(WRITE_ERROR_EXIT);
    }
    if let Err(e) = result {
        return fail(&crate::protocol::ApiError::new(format!(
            "reading the response: {e}"
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

/// Decodes a chunked body (RFC 9112 §7.1) from `r` into `out`.
fn copy_chunked(r: &mut impl BufRead, out: &mut impl Write) -> std::io::Result<()> {
    loop {
        let mut size_line = String::new();
        if r.read_line(&mut size_line)? == 0 {
            return Ok(());
        }
        let size_hex = size_line.trim().split(';').next().unwrap_or("0");
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size"))?;
        if size == 0 {
            return Ok(());
        }
        let mut chunk = vec![0u8; size];
        r.read_exact(&mut chunk)?;
        out.write_all(&chunk)?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
    }
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

    #[test]
    fn chunked_bodies_decode() {
        let mut out = Vec::new();
        super::copy_chunked(
            &mut &b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n"[..],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"hello, world");
    }
}
