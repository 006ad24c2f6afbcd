//! Binky's one HTTP/1.1 client, on hyper: health probes, `binky curl`, and
//! the adapters that speak HTTP (RabbitMQ's management API, S3).
//!
//! Every exchange is bounded: the connect by [`Client::connect_timeout`],
//! the response head and each body frame by [`Client::read_timeout`], a
//! buffered body by [`Client::max_body`] (a server claiming a huge chunk
//! never makes Binky allocate it: hyper decodes chunks as they stream).
//! Interim `1xx` answers (`100 Continue`) are skipped by hyper. Errors name
//! the method, host, port and path — never a header, so credentials sent as
//! `Authorization` cannot reach a message.
//!
//! `localhost` dials 127.0.0.1 then ::1 (see [`dial`]), so a server bound
//! to either loopback is reached. `https` needs the `tls` feature (rustls
//! with the ring provider, trusting the system's roots and `SSL_CERT_FILE`);
//! without it an `https` URL is an error that says how to get it, so the
//! default build stays quick.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

/// Why an exchange failed. The message is for people and carries no header
/// value or URL credential.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct HttpError {
    /// What failed, naming the method, host:port and path.
    pub message: String,
    /// Which stage failed.
    pub kind: HttpErrorKind,
}

/// The stage an [`HttpError`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpErrorKind {
    /// The URL is not one this client speaks.
    BadUrl,
    /// No connection (refused, unreachable, or past the connect timeout).
    Connect,
    /// Connected, but the answer (or a part of it) did not come in time.
    Timeout,
    /// The body is larger than the cap.
    TooLarge,
    /// The connection broke or the answer was not HTTP.
    Protocol,
}

impl HttpError {
    fn new(kind: HttpErrorKind, message: String) -> Self {
        HttpError { message, kind }
    }
}

/// A parsed `http://` (or, with the `tls` feature, `https://`) URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `https`: the connection is TLS, verified for [`Url::host`].
    pub tls: bool,
    /// The host to dial, without IPv6 brackets.
    pub host: String,
    /// The port (80, or 443 for `https`, when the URL has none).
    pub port: u16,
    /// The `Host` header value: brackets kept, `:port` when the URL has one.
    pub authority: String,
    /// Origin-form target: `/path?query` (`/` when the URL has no path).
    pub path_and_query: String,
}

/// Whether this build speaks `https` (the `tls` feature).
pub(crate) const TLS: bool = cfg!(feature = "tls");

/// The URL schemes this build's client speaks: what an adapter's HTTP
/// `admin_url` may start with.
pub(crate) const SCHEMES: &[&str] = if TLS { &["http", "https"] } else { &["http"] };

/// Parses an `http://host[:port][/path][?query]` URL, or an `https://` one
/// when built with `tls` (user info refused: credentials go in a header,
/// never a URL Binky may print).
///
/// # Errors
/// Not `http`/`https`, `https` without the `tls` feature, no host, a bad
/// port, or user info.
pub(crate) fn parse_url(url: &str) -> Result<Url, HttpError> {
    // The reason alone, never the URL: it may hold a password.
    let bad = |why: &str| HttpError::new(HttpErrorKind::BadUrl, why.to_owned());
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| bad(&format!("is not a URL: {e}")))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") if TLS => true,
        Some("https") => {
            return Err(bad(
                "is https, which this build does not speak: build binky with `--features tls`",
            ));
        }
        _ if TLS => return Err(bad("must start with http:// or https://")),
        _ => return Err(bad("must start with http://")),
    };
    let authority = uri.authority().ok_or_else(|| bad("has no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad("holds user info; pass credentials another way"));
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    // hyper keeps an out-of-range port in the text and reports none:
    // read it here, so `:99999` is an error rather than port 80.
    let text = authority.as_str();
    let port_text = match text.rfind(']') {
        Some(i) => text[i + 1..].strip_prefix(':'),
        None => text.rsplit_once(':').map(|(_, p)| p),
    };
    let port = match port_text {
        None | Some("") if tls => 443,
        None | Some("") => 80,
        Some(p) => p.parse::<u16>().map_err(|_| bad("has a bad port"))?,
    };
    let path_and_query = match uri.path_and_query().map(|p| p.as_str()) {
        None | Some("") => "/".to_owned(),
        Some(p) if p.starts_with('?') => format!("/{p}"),
        Some(p) => p.to_owned(),
    };
    Ok(Url {
        tls,
        host: host.to_owned(),
        port,
        authority: authority.as_str().to_owned(),
        path_and_query,
    })
}

/// The `Host` header for `host:port`: IPv6 literals in brackets.
pub(crate) fn host_header(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Connects to `host:port` within `timeout` per address. `localhost` (and
/// an empty host) try IPv4 then IPv6 loopback, so a service bound to only
/// one of them is reached; a name is resolved.
///
/// # Errors
/// The last address's error, or `TimedOut`.
pub(crate) async fn dial(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = match host {
        "localhost" | "" => vec![
            (Ipv4Addr::LOCALHOST, port).into(),
            (Ipv6Addr::LOCALHOST, port).into(),
        ],
        h => match h.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((h, port)).await?.collect(),
        },
    };
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    Err(last)
}

/// A buffered answer.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Its status.
    pub status: StatusCode,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its whole body (at most [`Client::max_body`] bytes).
    pub body: Bytes,
}

impl Fetched {
    /// The body as JSON.
    ///
    /// # Errors
    /// It is not JSON of that shape.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            HttpError::new(
                HttpErrorKind::Protocol,
                format!("the answer is not the JSON expected: {e}"),
            )
        })
    }

    /// The body as text, lossily, for error messages (at most 300 chars).
    pub fn text_head(&self) -> String {
        String::from_utf8_lossy(&self.body)
            .chars()
            .take(300)
            .collect()
    }
}

/// The limits of one exchange. Cheap to copy.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    /// Longest wait for a connection, per address.
    pub connect_timeout: Duration,
    /// Longest wait for the response head, and for each body frame after it.
    pub read_timeout: Duration,
    /// Largest body [`Client::fetch`] buffers, bytes.
    pub max_body: usize,
}

impl Default for Client {
    fn default() -> Self {
        Client {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(30),
            max_body: 16 * 1024 * 1024,
        }
    }
}

impl Client {
    /// Sends `req` to `url`'s host and port on a new connection (closed
    /// when the response is dropped; TLS for an `https` URL) and returns
    /// once the response head arrived; the body streams (read it with
    /// [`Client::next_frame`]). `req` needs its `Host` header set.
    ///
    /// # Errors
    /// No connection (or no TLS session within the connect timeout), no
    /// head within the read timeout, or not HTTP.
    pub async fn send(
        &self,
        url: &Url,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, HttpError> {
        // The path only: a query may carry a signature or a token (an S3
        // presigned URL's `X-Amz-Signature`), and errors reach terminals.
        let what = format!(
            "{} {}://{}{}",
            req.method(),
            if url.tls { "https" } else { "http" },
            host_header(&url.host, url.port),
            req.uri().path()
        );
        let stream = dial(&url.host, url.port, self.connect_timeout)
            .await
            .map_err(|e| HttpError::new(HttpErrorKind::Connect, format!("{what}: {e}")))?;
        let stream = self
            .secure(url, stream)
            .await
            .map_err(|e| HttpError::new(HttpErrorKind::Connect, format!("{what}: TLS: {e}")))?;
        let exchange = async {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| HttpError::new(HttpErrorKind::Protocol, format!("{what}: {e}")))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            sender
                .send_request(req)
                .await
                .map_err(|e| HttpError::new(HttpErrorKind::Protocol, format!("{what}: {e}")))
        };
        tokio::time::timeout(self.read_timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(HttpError::new(
                    HttpErrorKind::Timeout,
                    format!("{what}: no answer within {:?}", self.read_timeout),
                ))
            })
    }

    /// The next data frame of `body` (trailers skipped), `None` at its end.
    ///
    /// # Errors
    /// No frame within the read timeout, or the connection broke.
    pub async fn next_frame(&self, body: &mut Incoming) -> Result<Option<Bytes>, HttpError> {
        loop {
            let frame = tokio::time::timeout(self.read_timeout, body.frame())
                .await
                .map_err(|_| {
                    HttpError::new(
                        HttpErrorKind::Timeout,
                        format!("the body stalled for {:?}", self.read_timeout),
                    )
                })?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(HttpError::new(
                        HttpErrorKind::Protocol,
                        format!("reading the body: {e}"),
                    ));
                }
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    /// The connection `send` speaks HTTP over: `stream` itself, or a TLS
    /// session on it for an `https` URL.
    async fn secure(&self, url: &Url, stream: TcpStream) -> std::io::Result<Box<dyn Io>> {
        if !url.tls {
            return Ok(Box::new(stream));
        }
        #[cfg(feature = "tls")]
        {
            let session = tls::connect(&url.host, stream);
            match tokio::time::timeout(self.connect_timeout, session).await {
                Ok(s) => Ok(Box::new(s?)),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no TLS handshake within the connect timeout",
                )),
            }
        }
        #[cfg(not(feature = "tls"))]
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this build speaks no https (build with `--features tls`)",
        ))
    }

    /// [`Client::send`], then the whole body, at most [`Client::max_body`]
    /// bytes.
    ///
    /// # Errors
    /// As `send`, a stalled body, or one over the cap.
    pub async fn fetch(&self, url: &Url, req: Request<Full<Bytes>>) -> Result<Fetched, HttpError> {
        let resp = self.send(url, req).await?;
        let (parts, mut body) = resp.into_parts();
        let mut buf = bytes::BytesMut::new();
        while let Some(chunk) = self.next_frame(&mut body).await? {
            if buf.len() + chunk.len() > self.max_body {
                return Err(HttpError::new(
                    HttpErrorKind::TooLarge,
                    format!("the answer is larger than {} bytes", self.max_body),
                ));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            status: parts.status,
            headers: parts.headers,
            body: buf.freeze(),
        })
    }
}

/// A byte stream HTTP runs over: TCP, or TLS on TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// TLS for `https` (the `tls` feature): rustls with the ring provider.
#[cfg(feature = "tls")]
mod tls {
    use std::sync::{Arc, OnceLock};
    use tokio::net::TcpStream;
    use tokio_rustls::rustls;

    /// One client config per process: loading the roots reads files.
    fn config() -> std::io::Result<Arc<rustls::ClientConfig>> {
        static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
        CONFIG
            .get_or_init(|| {
                // The system's roots, or `SSL_CERT_FILE`/`SSL_CERT_DIR`
                // where set (rustls-native-certs reads them).
                let found = rustls_native_certs::load_native_certs();
                let mut roots = rustls::RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err("no trusted root certificates found (install ca-certificates, or set SSL_CERT_FILE)".to_owned());
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(std::io::Error::other)
    }

    /// A TLS session on `stream`, verified for `host` (a name or an IP).
    pub(super) async fn connect(
        host: &str,
        stream: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        tokio_rustls::TlsConnector::from(config()?)
            .connect(name, stream)
            .await
    }
}

/// A request for `url` with its `Host` header and `body` (empty: none).
///
/// # Errors
/// The method is not one, or a header does not fit.
pub(crate) fn request(
    method: &str,
    url: &Url,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Request<Full<Bytes>>, HttpError> {
    let mut b = Request::builder()
        .method(method)
        .uri(&url.path_and_query)
        .header(hyper::header::HOST, &url.authority);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    // A body, or a method that carries one (an empty PUT still says
    // `Content-Length: 0`: S3 answers 411 without it).
    if !body.is_empty() || matches!(method, "PUT" | "POST" | "PATCH") {
        b = b.header(hyper::header::CONTENT_LENGTH, body.len());
    }
    // The builder's error would quote the offending value: a header may be
    // a credential, so the message names none.
    b.body(Full::new(body)).map_err(|_| {
        HttpError::new(
            HttpErrorKind::BadUrl,
            format!(
                "{method} {}: a header or the method is not valid HTTP",
                url.path_and_query
            ),
        )
    })
}

#[cfg(test)]
mod tests;
