//! Health probes: HTTP (2xx/3xx), TCP connect, or a command exiting 0.
//!
//! The dial logic is shared with the proxy: `localhost` means "try 127.0.0.1,
//! then ::1", so services bound to either (or both) are reached.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A rendered probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeSpec {
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
    pub fn port(&self) -> Option<u16> {
        match self {
            ProbeSpec::Http { port, .. } | ProbeSpec::Tcp { port, .. } => Some(*port),
            ProbeSpec::Cmd { .. } => None,
        }
    }
}

/// Parses `http://host:port/path` (or `host:port` for TCP). A value starting
/// with `/` is a path on `own_port`.
pub fn parse_http(url: &str, own_port: Option<u16>) -> Result<ProbeSpec, String> {
    if url.starts_with('/') {
        let port = own_port.ok_or("a path probe needs the service to have a port")?;
        return Ok(ProbeSpec::Http {
            host: "localhost".into(),
            port,
            path: url.to_owned(),
        });
    }
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("health URL `{url}` must start with http:// (or be a path like /healthz)")
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    let (host, port) = split_host_port(authority, 80)?;
    Ok(ProbeSpec::Http { host, port, path })
}

/// Parses `host:port` for a TCP probe.
pub fn parse_tcp(addr: &str) -> Result<ProbeSpec, String> {
    let (host, port) = split_host_port(addr, 0)?;
    if port == 0 {
        return Err(format!("tcp probe `{addr}` needs a port"));
    }
    Ok(ProbeSpec::Tcp { host, port })
}

fn split_host_port(authority: &str, default: u16) -> Result<(String, u16), String> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (h, p) = rest.split_once(']').ok_or("bad IPv6 literal")?;
        let port = match p.strip_prefix(':') {
            Some(p) => p
                .parse()
                .map_err(|_| format!("bad port in `{authority}`"))?,
            None => default,
        };
        return Ok((h.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Ok((
            h.to_owned(),
            p.parse()
                .map_err(|_| format!("bad port in `{authority}`"))?,
        )),
        None => Ok((authority.to_owned(), default)),
    }
}

/// Connects to `host:port`. `localhost` (and the loopback literals) try IPv4
/// then IPv6 loopback, so a service bound to only one of them is reached.
pub async fn dial(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = match host {
        "localhost" | "" => vec![
            (Ipv4Addr::LOCALHOST, port).into(),
            (Ipv6Addr::LOCALHOST, port).into(),
        ],
        h => match h.parse::<std::net::IpAddr>() {
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

/// One probe attempt. `Err` carries a short reason for the last failure.
pub async fn attempt(probe: &ProbeSpec, timeout: Duration) -> Result<(), String> {
    match probe {
        ProbeSpec::Tcp { host, port } => dial(host, *port, timeout)
            .await
            .map(|_| ())
            .map_err(|e| format!("tcp {host}:{port}: {e}")),
        ProbeSpec::Http { host, port, path } => {
            let fut = async {
                let mut s = dial(host, *port, timeout)
                    .await
                    .map_err(|e| format!("GET http://{host}:{port}{path}: {e}"))?;
                let req = format!(
                    "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: binky-health\r\nConnection: close\r\n\r\n"
                );
                s.write_all(req.as_bytes())
                    .await
                    .map_err(|e| format!("GET {path}: {e}"))?;
                let mut buf = vec![0u8; 256];
                let mut n = 0;
                while n < 12 {
                    let m = s
                        .read(&mut buf[n..])
                        .await
                        .map_err(|e| format!("GET {path}: {e}"))?;
                    if m == 0 {
                        break;
                    }
                    n += m;
                }
                let head = String::from_utf8_lossy(&buf[..n]);
                let code: u16 = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .ok_or_else(|| format!("GET {path}: not an HTTP response"))?;
                if (200..400).contains(&code) {
                    Ok(())
                } else {
                    Err(format!("GET {path} answered {code}"))
                }
            };
            tokio::time::timeout(timeout, fut)
                .await
                .unwrap_or_else(|_| Err(format!("GET {path}: no answer within {timeout:?}")))
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
}
