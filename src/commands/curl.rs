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

/// Runs `binky curl`.
pub fn run(args: &CurlArgs, project: Option<&str>) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let target = match client.request(&Request::Locate {
        world: super::world::world_ref(project, &args.name),
        service: args.service.clone(),
    }) {
        Ok(Response::Located(t)) => t,
        Ok(other) => return super::unexpected(&other),
        Err(e) => return fail(&e),
    };
    let method = args
        .method
        .clone()
        .unwrap_or_else(|| if args.data.is_some() { "POST" } else { "GET" }.to_owned());
    let path = if args.path.starts_with('/') {
        args.path.clone()
    } else {
        format!("/{}", args.path)
    };
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", target.host);
    let has = |name: &str| {
        args.headers.iter().any(|h| {
            h.split(':')
                .next()
                .is_some_and(|n| n.trim().eq_ignore_ascii_case(name))
        })
    };
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
    for h in &args.headers {
        if !h.contains(':') {
            crate::output::error(format!("header `{h}` is not `Name: value`"), None);
            return ExitCode::from(2);
        }
        head.push_str(h.trim());
        head.push_str("\r\n");
    }
    let body = args.data.clone().unwrap_or_default();
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
        .and_then(|_| conn.write_all(body.as_bytes()))
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
    let _ = out.flush();
    if let Err(e) = result {
        return fail(&crate::protocol::ApiError::new(format!(
            "reading the response: {e}"
        )));
    }
    if args.fail && status >= 400 {
        eprintln!("binky curl: HTTP {status}");
        return ExitCode::from(HTTP_ERROR_EXIT);
    }
    ExitCode::SUCCESS
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
