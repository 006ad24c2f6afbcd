//! The proxy and message framing: how a request's target and Host are read,
//! and how bodies cross it — streamed at flat memory, chunked replies whole,
//! short replies with a length, trailers kept.

use crate::harness::*;
use crate::project::*;
use crate::proxy::{connect, echo_repo, proxy_port, request_response};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn daemon_rss_kib(home: &Home) -> u64 {
    let pid = home.daemon_pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn a_100_mib_upload_and_download_stream_at_flat_memory() {
    const SIZE: usize = 100 * 1024 * 1024;
    let home = Home::new();
    let repo = echo_repo("");
    repo.ok(&home, &["up", "big"]);
    let port = proxy_port(&home);
    let before = daemon_rss_kib(&home);
    // Download: read and discard.
    let mut c = connect(port);
    write!(
        c,
        "GET /download/{SIZE} HTTP/1.1\r\nHost: echo.big.px.localhost\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0usize;
    let mut peak = before;
    while total < SIZE {
        let n = r.read(&mut buf).unwrap();
        assert!(n > 0, "stream ended after {total} bytes");
        total += n;
        if total % (16 << 20) < n {
            peak = peak.max(daemon_rss_kib(&home));
        }
    }
    // Upload: stream the body in chunks.
    let mut c = connect(port);
    write!(
        c,
        "POST /upload HTTP/1.1\r\nHost: echo.big.px.localhost\r\nContent-Length: {SIZE}\r\n\r\n"
    )
    .unwrap();
    let chunk = vec![7u8; 1 << 16];
    let mut sent = 0;
    while sent < SIZE {
        c.write_all(&chunk).unwrap();
        sent += chunk.len();
        if sent % (16 << 20) == 0 {
            peak = peak.max(daemon_rss_kib(&home));
        }
    }
    let (status, _, body) = request_response(&mut c);
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["bytes"],
        SIZE as u64
    );
    let grown_mib = (peak.saturating_sub(before)) / 1024;
    assert!(
        grown_mib < 32,
        "daemon RSS grew {grown_mib} MiB while streaming 100 MiB each way"
    );
}

/// Sends raw request bytes on a new connection; returns (status, headers, body).
fn raw(port: u16, request: &str) -> (u16, String, String) {
    let mut c = connect(port);
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    request_response(&mut c)
}

#[test]
fn the_host_comes_from_an_absolute_target_else_one_host_header() {
    let home = Home::new();
    let repo = echo_repo("");
    repo.ok(&home, &["up", "a"]);
    repo.ok(&home, &["up", "b"]);
    let port = proxy_port(&home);
    let seen = |body: &str| -> serde_json::Value { serde_json::from_str(body).unwrap() };
    // An absolute-form target routes by its authority, whatever Host says,
    // and the service gets a Host that matches it (RFC 9112 §3.2.2).
    for host_line in ["Host: echo.b.px.localhost\r\n", "Host: zzz\r\n", ""] {
        let (status, head, body) = raw(
            port,
            &format!("GET HTTP://Echo.A.PX.localhost:{port}/abs?q=1 HTTP/1.1\r\n{host_line}\r\n"),
        );
        assert_eq!(status, 200, "{host_line:?}: {head}{body}");
        let v = seen(&body);
        assert_eq!(v["world"], "a", "{host_line:?}: {v}");
        assert_eq!(v["path"], "/abs?q=1");
        assert_eq!(
            v["headers"]["host"],
            format!("Echo.A.PX.localhost:{port}"),
            "{v}"
        );
    }
    // Connection may name headers to drop, but never Host.
    let (status, _, body) = raw(
        port,
        "GET / HTTP/1.1\r\nHost: echo.a.px.localhost\r\nConnection: close, Host, X-Secret\r\nX-Secret: 1\r\nX-Other: 2\r\n\r\n",
    );
    assert_eq!(status, 200, "{body}");
    let v = seen(&body);
    assert_eq!(v["headers"]["host"], "echo.a.px.localhost", "{v}");
    assert!(v["headers"].get("x-secret").is_none(), "{v}");
    assert_eq!(v["headers"]["x-other"], "2");
    // No Host, an empty one, two of them, or a non-ASCII one: 400 saying so.
    for (request, says) in [
        ("GET / HTTP/1.1\r\n\r\n", "no Host header"),
        ("GET / HTTP/1.1\r\nHost: \r\n\r\n", "Host header is empty"),
        (
            "GET / HTTP/1.1\r\nHost: echo.a.px.localhost\r\nHost: echo.b.px.localhost\r\n\r\n",
            "more than one Host header",
        ),
        (
            "GET / HTTP/1.1\r\nHost: \u{e9}.a.px.localhost\r\n\r\n",
            "not ASCII",
        ),
    ] {
        let (status, head, body) = raw(port, request);
        assert_eq!(status, 400, "{request:?}: {head}{body}");
        assert!(body.contains(says), "{request:?}: {body}");
    }
}

/// Reads one response on `conn` whatever its framing; returns (status,
/// headers, body, trailers). Headers and trailers are lowercase.
fn read_framed(r: &mut BufReader<TcpStream>) -> (u16, String, Vec<u8>, String) {
    let lines = |r: &mut BufReader<TcpStream>| {
        let mut out = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                return out;
            }
            out.push_str(&line.to_ascii_lowercase());
        }
    };
    let head = lines(r);
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = Vec::new();
    if head.contains("transfer-encoding: chunked") {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                return (status, head, body, lines(r));
            }
            let start = body.len();
            body.resize(start + n, 0);
            r.read_exact(&mut body[start..]).unwrap();
            let mut crlf = [0; 2];
            r.read_exact(&mut crlf).unwrap();
        }
    }
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a length or chunked framing");
    body.resize(len, 0);
    r.read_exact(&mut body).unwrap();
    (status, head, body, String::new())
}

/// The body `/chunked/<n>/<size>` of the echo fixture sends.
fn chunked_body(n: usize, size: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| vec![b'A' + (i % 26) as u8; size])
        .collect()
}

#[test]
fn chunked_replies_arrive_whole_short_long_and_with_trailers() {
    let home = Home::new();
    let repo = echo_repo("");
    repo.ok(&home, &["up", "ch"]);
    let port = proxy_port(&home);
    let conn = connect(port);
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    let host = "echo.ch.px.localhost";
    // One connection for all three, so each reply must end exactly.
    for (n, size) in [(3, 10), (40, 4096)] {
        write!(
            w,
            "GET /chunked/{n}/{size} HTTP/1.1\r\nHost: {host}\r\n\r\n"
        )
        .unwrap();
        let (status, head, body, _) = read_framed(&mut r);
        assert_eq!(status, 200, "{head}");
        assert_eq!(body.len(), n * size, "{head}");
        assert!(
            body == chunked_body(n, size),
            "{n} chunks of {size}: body differs"
        );
        // A short reply may leave gathered, with a length, when all of it
        // was at hand; a long one always streams.
        if n * size > 64 * 1024 {
            assert!(head.contains("transfer-encoding: chunked"), "{head}");
        }
    }
    // Trailers reach a client that accepts them.
    write!(
        w,
        "GET /chunked/2/5?trailer HTTP/1.1\r\nHost: {host}\r\nTE: trailers\r\n\r\n"
    )
    .unwrap();
    let (status, head, body, trailers) = read_framed(&mut r);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, chunked_body(2, 5));
    assert!(
        trailers.contains("x-checksum: done"),
        "trailers: {trailers:?}\n{head}"
    );
}

/// A short reply of unknown length that is whole in the upstream's socket
/// — Node's `res.end(body)` after `writeHead`: chunked, in one write — leaves
/// the proxy gathered, with a Content-Length (headers and body in one write),
/// whichever upstream connection carried it: the one a client connection
/// keeps, or one from the pool, driven as a task of its own, that a new
/// client connection takes over. From the pool it went out chunked, in two
/// writes, when the proxy gave such a body too few turns to arrive.
#[test]
fn a_short_chunked_reply_at_hand_leaves_with_a_length_every_time() {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        skip("node is not on PATH");
        return;
    }
    let js = "require('http').createServer((q, s) => {\n\
              s.writeHead(200, {'content-type': 'text/plain'});\n\
              s.end('hello from node');\n\
              }).listen(+process.env.PORT, '127.0.0.1');\n";
    let toml = format!(
        "{}[services.web]\ncmd = \"exec node server.js\"\nurl = \"web\"\nhealth = {{ http = \"http://127.0.0.1:${{self.port}}/\", timeout = \"20s\", interval = \"50ms\" }}\n",
        project_header("pn", 10)
    );
    let repo = Repo::with("", &toml, &[("server.js", js)]);
    let home = Home::new();
    repo.ok(&home, &["up", "kn"]);
    let port = proxy_port(&home);
    // Three requests on each of three client connections in turn: the
    // first of each takes the upstream connection the last one gave back.
    for c in 0..3 {
        let conn = connect(port);
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        for i in 0..3 {
            write!(w, "GET / HTTP/1.1\r\nHost: web.kn.pn.localhost\r\n\r\n").unwrap();
            let (status, head, body, _) = read_framed(&mut r);
            assert_eq!(status, 200, "{head}");
            assert_eq!(body, b"hello from node");
            assert!(
                head.contains("content-length: 15") && !head.contains("transfer-encoding"),
                "request {i} on client connection {c} left chunked:\n{head}"
            );
        }
        // Closed, and the proxy seen to close its side, so its upstream
        // connection is back in the pool for the next client.
        w.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = r.read_to_end(&mut rest);
    }
}
