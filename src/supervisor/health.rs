//! Health probes: HTTP (2xx/3xx), TCP connect, or a command exiting 0.
//!
//! HTTP probes go through [`crate::http`], whose dial the proxy shares:
//! `localhost` means "try 127.0.0.1, then ::1", so services bound to either
//! (or both) are reached.

use std::path::PathBuf;
use std::time::Duration;

/// A rendered probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeSpec {
    /// `GET path` on host:port.
    Http {
        /// Host to dial (and send as Host).
        host: String,
        /// Port.
        port: u16,
        /// Path with query.
        path: String,
    },
    /// Connect to host:port.
    Tcp {
        /// Host.
        host: String,
        /// Port.
        port: u16,
    },
    /// `sh -c cmd` exits 0.
    Cmd {
        /// The command.
        cmd: String,
        /// Working directory.
        cwd: PathBuf,
        /// Environment.
        env: Vec<(String, String)>,
    },
}

impl ProbeSpec {
    /// The port this probe dials, if any.
    pub(crate) fn port(&self) -> Option<u16> {
        match self {
            ProbeSpec::Http { port, .. } | ProbeSpec::Tcp { port, .. } => Some(*port),
            ProbeSpec::Cmd { .. } => None,
        }
    }
}

/// Parses `http://host:port/path` (see [`crate::http::parse_url`]). A value
/// starting with `/` is a path on `own_port`.
pub(crate) fn parse_http(url: &str, own_port: Option<u16>) -> Result<ProbeSpec, String> {
    if url.starts_with('/') {
        let port = own_port.ok_or("a path probe needs the service to have a port")?;
        return Ok(ProbeSpec::Http {
            host: "localhost".into(),
            port,
            path: url.to_owned(),
        });
    }
    if !url.starts_with("http://") {
        return Err(format!(
            "health URL `{url}` must start with http:// (or be a path like /healthz)"
        ));
    }
    let u = crate::http::parse_url(url).map_err(|e| format!("health URL: {}", e.message))?;
    Ok(ProbeSpec::Http {
        host: u.host,
        port: u.port,
        path: u.path_and_query,
    })
}

/// Parses `host:port` for a TCP probe (`[::1]:9` for IPv6).
pub(crate) fn parse_tcp(addr: &str) -> Result<ProbeSpec, String> {
    let bad = || format!("tcp probe `{addr}` needs host:port");
    let (host, port) = match addr.strip_prefix('[') {
        Some(rest) => rest.split_once("]:").ok_or_else(bad)?,
        None => addr.rsplit_once(':').ok_or_else(bad)?,
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("bad port in tcp probe `{addr}`"))?;
    if port == 0 {
        return Err(bad());
    }
    Ok(ProbeSpec::Tcp {
        host: host.to_owned(),
        port,
    })
}

/// One probe attempt. `Err` carries a short reason for the last failure.
pub(crate) async fn attempt(probe: &ProbeSpec, timeout: Duration) -> Result<(), String> {
    match probe {
        ProbeSpec::Tcp { host, port } => crate::http::dial(host, *port, timeout)
            .await
            .map(|_| ())
            .map_err(|e| format!("tcp {}: {e}", crate::http::host_header(host, *port))),
        ProbeSpec::Http { host, port, path } => {
            let client = crate::http::Client {
                connect_timeout: timeout,
                read_timeout: timeout,
                max_body: 0,
            };
            let url = crate::http::Url {
                tls: false,
                host: host.clone(),
                port: *port,
                authority: crate::http::host_header(host, *port),
                path_and_query: path.clone(),
            };
            let req = crate::http::request(
                "GET",
                &url,
                &[("User-Agent", "binky-health")],
                bytes::Bytes::new(),
            )
            .map_err(|e| e.message)?;
            // The head is enough; dropping the answer closes the connection.
            let code = client
                .send(&url, req)
                .await
                .map_err(|e| e.message)?
                .status()
                .as_u16();
            if (200..400).contains(&code) {
                Ok(())
            } else {
                Err(format!("GET {path} answered {code}"))
            }
        }
        ProbeSpec::Cmd { cmd, cwd, env } => {
            let mut c = crate::platform::command("/bin/sh");
            c.arg("-c")
                .arg(cmd)
                .current_dir(cwd)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true);
            match tokio::time::timeout(timeout, c.status()).await {
                Ok(Ok(st)) if st.success() => Ok(()),
                Ok(Ok(st)) => Err(format!("probe command exited with {st}")),
                Ok(Err(e)) => Err(format!("probe command: {e}")),
                Err(_) => Err(format!("probe command ran over {timeout:?}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        assert_eq!(
            parse_http("/healthz", Some(20001)).unwrap(),
            ProbeSpec::Http {
                host: "localhost".into(),
                port: 20001,
                path: "/healthz".into()
            }
        );
        assert_eq!(
            parse_http("http://127.0.0.1:8080", None).unwrap(),
            ProbeSpec::Http {
                host: "127.0.0.1".into(),
                port: 8080,
                path: "/".into()
            }
        );
        assert_eq!(
            parse_http("http://[::1]:9/x?y", None).unwrap(),
            ProbeSpec::Http {
                host: "::1".into(),
                port: 9,
                path: "/x?y".into()
            }
        );
        assert!(parse_http("https://x", None).is_err());
        assert!(parse_http("/", None).is_err());
        assert!(parse_tcp("localhost").is_err());
    }

    #[test]
    fn tcp_probes_take_ipv6_literals() {
        assert_eq!(
            parse_tcp("[::1]:9").unwrap(),
            ProbeSpec::Tcp {
                host: "::1".into(),
                port: 9
            }
        );
        assert!(parse_tcp("[::1]").is_err());
        assert!(parse_tcp("h:0").is_err());
    }

    #[tokio::test]
    async fn an_ipv6_probe_sends_a_bracketed_host() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(l) = tokio::net::TcpListener::bind("[::1]:0").await else {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        };
        let port = l.local_addr().unwrap().port();
        let seen = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 2048];
            let n = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase()
        });
        let probe = parse_http(&format!("http://[::1]:{port}/healthz"), None).unwrap();
        attempt(&probe, Duration::from_secs(2)).await.unwrap();
        let req = seen.await.unwrap();
        assert!(req.contains(&format!("host: [::1]:{port}\r\n")), "{req}");
    }
}
