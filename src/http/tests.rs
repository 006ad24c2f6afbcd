//! Unit tests of `http`.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn urls_parse_as_hyper_reads_them() {
    let u = parse_url("http://[::1]:9/x?y").unwrap();
    assert_eq!((u.host.as_str(), u.port), ("::1", 9));
    assert_eq!(u.authority, "[::1]:9");
    assert_eq!(u.path_and_query, "/x?y");
    // A query with no path is not a bad port.
    let u = parse_url("http://h:1?x").unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.path_and_query.as_str()),
        ("h", 1, "/?x")
    );
    let u = parse_url("http://example.test").unwrap();
    assert_eq!(
        (u.port, u.authority.as_str(), u.path_and_query.as_str()),
        (80, "example.test", "/")
    );
    assert_eq!(parse_url("https://x").is_ok(), TLS);
    if TLS {
        let u = parse_url("https://[::1]/h").unwrap();
        assert_eq!((u.tls, u.port, u.authority.as_str()), (true, 443, "[::1]"));
    } else {
        let e = parse_url("https://x").unwrap_err().message;
        assert!(e.contains("--features tls"), "{e}");
    }
    for bad in ["ftp://x", "x:1", "http://u:p@h/", "http://h:99999/"] {
        assert!(parse_url(bad).is_err(), "{bad}");
    }
    // The reason, never the URL: it would print the password.
    let e = parse_url("http://u:secret@h/").unwrap_err().message;
    assert!(e.contains("user info") && !e.contains("secret"), "{e}");
    let e = parse_url("http://h:99999/secret").unwrap_err().message;
    assert!(e.contains("bad port") && !e.contains("secret"), "{e}");
    assert_eq!(host_header("::1", 9), "[::1]:9");
    assert_eq!(host_header("localhost", 80), "localhost:80");
}

/// A one-shot server: answers the first connection with `answer` and
/// hands back what it was sent.
async fn serve_once(answer: &'static [u8]) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let h = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut got = vec![0u8; 4096];
        let n = s.read(&mut got).await.unwrap();
        got.truncate(n);
        let _ = s.write_all(answer).await;
        let _ = s.shutdown().await;
        // Keep the socket open a moment so a stall is a stall.
        tokio::time::sleep(Duration::from_millis(300)).await;
        got
    });
    (port, h)
}

fn at(port: u16) -> Url {
    parse_url(&format!("http://127.0.0.1:{port}/p")).unwrap()
}

fn get(port: u16) -> Request<Full<Bytes>> {
    request(
        "GET",
        &at(port),
        &[("Authorization", "Basic c2VjcmV0")],
        Bytes::new(),
    )
    .unwrap()
}

#[tokio::test]
async fn interim_answers_are_skipped_and_chunks_decoded() {
    let (port, sent) = serve_once(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .await;
    let f = Client::default().fetch(&at(port), get(port)).await.unwrap();
    assert_eq!(f.status, 200);
    assert_eq!(&f.body[..], b"hello");
    let sent = String::from_utf8(sent.await.unwrap()).unwrap();
    assert!(sent.starts_with("GET /p HTTP/1.1\r\n"), "{sent}");
    assert!(
        sent.to_ascii_lowercase()
            .contains(&format!("host: 127.0.0.1:{port}")),
        "{sent}"
    );
}

#[tokio::test]
async fn a_huge_chunk_claim_is_capped_not_allocated() {
    // Claims a 1 TiB chunk and sends 64 KiB of it.
    let (port, _sent) = serve_once(Box::leak(
        [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000\r\n"[..],
            &[b'x'; 65536][..],
        ]
        .concat()
        .into_boxed_slice(),
    ))
    .await;
    let c = Client {
        max_body: 1024,
        read_timeout: Duration::from_millis(200),
        ..Client::default()
    };
    let e = c.fetch(&at(port), get(port)).await.unwrap_err();
    assert_eq!(e.kind, HttpErrorKind::TooLarge, "{e}");
}

#[tokio::test]
async fn a_silent_server_times_out_and_errors_name_no_header() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let _keep = tokio::spawn(async move {
        let _s = l.accept().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let c = Client {
        read_timeout: Duration::from_millis(200),
        ..Client::default()
    };
    let e = c.fetch(&at(port), get(port)).await.unwrap_err();
    assert_eq!(e.kind, HttpErrorKind::Timeout, "{e}");
    assert!(e.message.contains(&format!("127.0.0.1:{port}/p")), "{e}");
    assert!(!e.message.contains("c2VjcmV0"), "{e}");
    // Nothing listening: a connect error naming host:port.
    drop(_keep);
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = free.local_addr().unwrap().port();
    drop(free);
    let e = c.fetch(&at(dead), get(dead)).await.unwrap_err();
    assert_eq!(e.kind, HttpErrorKind::Connect, "{e}");
    assert!(e.message.contains(&format!("127.0.0.1:{dead}")), "{e}");
    // A query may carry a signature (S3's presigned URLs): errors name
    // the path only.
    let signed = parse_url(&format!(
        "http://127.0.0.1:{dead}/b?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA"
    ))
    .unwrap();
    let req = request("HEAD", &signed, &[], Bytes::new()).unwrap();
    let e = c.fetch(&signed, req).await.unwrap_err();
    assert!(e.message.contains(&format!("127.0.0.1:{dead}/b")), "{e}");
    assert!(
        !e.message.contains("deadbeef") && !e.message.contains("AKIA"),
        "{e}"
    );
}

/// A CA, and a certificate for `localhost` it signs, made by openssl in
/// `dir` (`ca.pem`, `cert.pem`, `key.pem`).
#[cfg(feature = "tls")]
fn make_certificates(dir: &std::path::Path) {
    let f = |n: &str| dir.join(n);
    std::fs::write(
        f("leaf.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    // A CA, and a certificate for `localhost` it signs.
    for args in [
        "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=binky-test-ca -keyout ca.key -out ca.pem",
        "req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout key.pem -out leaf.csr",
        "x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile leaf.ext -out cert.pem",
    ] {
        let made = std::process::Command::new("openssl")
            .args(args.split(' '))
            .current_dir(dir)
            .output()
            .expect("openssl (Debian's openssl package) makes the test's certificates");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
}

/// Python's `ssl` serving `GET` with "over tls" on a port it picks.
#[cfg(feature = "tls")]
const SERVE: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"over tls"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = c.wrap_socket(s.socket, server_side=True)
print(s.server_port, flush=True)
s.serve_forever()
"#;

/// Starts the TLS server of [`SERVE`] with `cert` and `key`; returns it and
/// its port.
#[cfg(feature = "tls")]
fn serve_tls(cert: &std::path::Path, key: &std::path::Path) -> (std::process::Child, u16) {
    let mut server = std::process::Command::new("python3")
        .arg("-c")
        .arg(SERVE)
        .arg(cert)
        .arg(key)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port: u16 = line.trim().parse().expect("the server's port");
    (server, port)
}

/// A real TLS server: openssl makes a CA and a certificate for
/// `localhost`, Python's `ssl` serves it, and `SSL_CERT_FILE` makes the
/// CA the only trusted root (the `tls` feature, in the default build).
#[allow(unsafe_code)] // A test's own process: see the SAFETY notes.
#[cfg(feature = "tls")]
#[tokio::test]
async fn https_is_spoken_and_verified_against_the_trusted_roots() {
    let dir = tempfile::tempdir().unwrap();
    let f = |n: &str| dir.path().join(n);
    make_certificates(dir.path());
    let (cert, key) = (f("cert.pem"), f("key.pem"));
    // Read once, by the first TLS connection of this process (nextest
    // runs each test in a process of its own).
    // SAFETY: no other thread of this test reads the environment now.
    unsafe { std::env::set_var("SSL_CERT_FILE", f("ca.pem")) };
    let (mut server, port) = serve_tls(&cert, &key);
    let c = Client::default();
    let url = parse_url(&format!("https://localhost:{port}/t")).unwrap();
    let req = request("GET", &url, &[], Bytes::new()).unwrap();
    let f = c.fetch(&url, req).await;
    // The certificate names `localhost`, not 127.0.0.1: refused.
    let ip = parse_url(&format!("https://127.0.0.1:{port}/t")).unwrap();
    let req = request("GET", &ip, &[], Bytes::new()).unwrap();
    let refused = c.fetch(&ip, req).await;
    // Plain http to a TLS port is not an answer.
    let plain = parse_url(&format!("http://localhost:{port}/t")).unwrap();
    let req = request("GET", &plain, &[], Bytes::new()).unwrap();
    let plain = Client {
        read_timeout: Duration::from_secs(2),
        ..Client::default()
    }
    .fetch(&plain, req)
    .await;
    let _ = server.kill();
    let _ = server.wait();
    let f = f.unwrap();
    assert_eq!((f.status.as_u16(), &f.body[..]), (200, &b"over tls"[..]));
    let e = refused.unwrap_err();
    assert_eq!(e.kind, HttpErrorKind::Connect, "{e}");
    assert!(e.message.contains("TLS"), "{e}");
    assert!(e.message.contains("https://127.0.0.1"), "{e}");
    assert!(plain.is_err() || plain.is_ok_and(|p| p.status.as_u16() == 400));
}

#[tokio::test]
async fn dial_reaches_ipv6_only_and_ipv4_only_servers() {
    let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p4 = v4.local_addr().unwrap().port();
    assert!(dial("localhost", p4, Duration::from_secs(1)).await.is_ok());
    if let Ok(v6) = std::net::TcpListener::bind("[::1]:0") {
        let p6 = v6.local_addr().unwrap().port();
        assert!(dial("localhost", p6, Duration::from_secs(1)).await.is_ok());
    }
}
