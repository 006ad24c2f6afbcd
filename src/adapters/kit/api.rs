//! What every adapter that speaks HTTP to its server (RabbitMQ's management
//! API, S3, ClickHouse, Qdrant, Elasticsearch) shares: a client with the
//! resource's `options.timeout`, one reading of a failed exchange, one
//! reading of a DELETE's status, and [`Endpoint`]: a server whose
//! `admin_url` is an `http[s]://` URL carrying its credentials.

use super::super::{AdapterError, Slice};
use super::address::{Address, AdminUrl};
use super::names;
use crate::http::{Client, Fetched, HttpError, HttpErrorKind};
use bytes::Bytes;
use std::time::Duration;

/// A client whose every answer must come within `options.timeout` (else
/// `default`), its body at most `max_body` bytes.
pub fn client(slice: &Slice, default: Duration, max_body: usize) -> Client {
    Client {
        read_timeout: slice.timeout(default),
        max_body,
        ..Client::default()
    }
}

/// Why one exchange with the server failed, for people.
pub struct Exchange<'a> {
    /// Who and where, leading the message (`s3: GET h:9000/bucket`).
    pub call: &'a str,
    /// What to check when nothing answers (`check that the server runs
    /// and that admin_url names it`).
    pub unreachable: &'a str,
    /// Why an answer may be late (`vhost changes are cluster-wide`).
    pub slow: &'a str,
}

impl Exchange<'_> {
    /// The error for `e`: a connection that failed is environmental (the
    /// server is not there: a clone may fall back, a message says what to
    /// check); a late answer names the wait and `options.timeout`; anything
    /// else names the call. Never a credential: neither the call nor an
    /// `HttpError` holds one.
    pub fn error(&self, e: &HttpError, waited: Duration) -> AdapterError {
        match e.kind {
            HttpErrorKind::Connect => AdapterError::environmental(format!(
                "{}: cannot connect ({e}); {}",
                self.call, self.unreachable
            )),
            HttpErrorKind::Timeout => AdapterError::new(format!(
                "{}: no answer within {waited:?}: {}; raise options.timeout if it is only slow",
                self.call, self.slow
            )),
            _ => AdapterError::new(format!("{}: {e}", self.call)),
        }
    }
}

/// What a DELETE's status means for a teardown: `Some(true)` deleted,
/// `Some(false)` already gone (404), `None` refused (the caller names why).
pub fn deleted(status: u16) -> Option<bool> {
    match status {
        200..=299 => Some(true),
        404 => Some(false),
        _ => None,
    }
}

/// How an [`Endpoint`] proves who it is, read from `admin_url`'s user info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Basic` from `user:password` (ClickHouse,
    /// Elasticsearch); none when the URL has no user info.
    Basic,
    /// The password alone, sent in this header (Qdrant's `api-key`): the
    /// URL is written `http://:KEY@host:6333`.
    KeyHeader(&'static str),
}

/// What an adapter says about its server in messages.
#[derive(Debug, Clone, Copy)]
pub struct Server {
    /// The adapter's name, leading every message (`clickhouse`).
    pub adapter: &'static str,
    /// `admin_url` when a resource gives none.
    pub default_url: &'static str,
    /// How it proves who it is.
    pub auth: Auth,
    /// What to check when nothing answers.
    pub unreachable: &'static str,
    /// Why an answer may be late.
    pub slow: &'static str,
    /// The wait for one call when `options.timeout` is not given.
    pub timeout: Duration,
    /// The most one answer may hold, bytes.
    pub max_body: usize,
    /// How Binky names a slice on this server: a name it could not have
    /// made is never acted on ([`Endpoint::owned`]).
    pub rule: &'static names::Rule,
}

/// A server an adapter speaks HTTP to: where it is, how it proves who it
/// is, and the limits of one call. Its `Debug` shows no credential.
pub struct Endpoint {
    server: Server,
    address: Address,
    /// The header that carries the credentials, if any (never printed).
    credential: Option<(&'static str, String)>,
    /// `admin_url`'s path without its trailing `/` (a server behind a
    /// reverse proxy at a sub-path); calls' paths follow it.
    base: String,
    client: Client,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Endpoint({} at {})",
            self.server.adapter,
            self.host_port()
        )
    }
}

impl Endpoint {
    /// The endpoint `slice`'s `admin_url` (else `server.default_url`)
    /// names; each answer at most `server.max_body` bytes.
    ///
    /// # Errors
    /// `admin_url` is not an `http[s]://` URL this build speaks (see
    /// [`AdminUrl::http`]); the message quotes no credential.
    pub fn of(server: Server, slice: &Slice) -> Result<Endpoint, AdapterError> {
        let address = slice
            .admin_url_or(server.default_url)
            .http(server.default_url)
            .map_err(|e| AdapterError::new(format!("{}: {e}", server.adapter)).redacted(slice))?
            .clone();
        let credential = match server.auth {
            Auth::Basic if !address.user().is_empty() || address.password().is_some() => {
                use base64::Engine as _;
                let pair = format!(
                    "{}:{}",
                    address.user(),
                    address.password().unwrap_or_default()
                );
                Some((
                    "Authorization",
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(pair)
                    ),
                ))
            }
            Auth::Basic => None,
            Auth::KeyHeader(h) => address.password().filter(|k| !k.is_empty()).map(|k| (h, k)),
        };
        Ok(Endpoint {
            server,
            base: address.path().trim_end_matches('/').to_owned(),
            address,
            credential,
            client: client(slice, server.timeout, server.max_body),
        })
    }

    /// As [`Self::of`], for a call that makes or deletes: the endpoint only
    /// when `slice.name` is a name `server.rule` could have given a world,
    /// so Binky never acts on a slice it did not name (`*`, `system`).
    ///
    /// # Errors
    /// [`Self::of`]'s, or [`AdapterError::not_ours`] naming the slice and
    /// the server.
    pub fn owned(server: Server, slice: &Slice) -> Result<Endpoint, AdapterError> {
        let ep = Self::of(server, slice)?;
        super::owner::check_name(server.adapter, &ep.host_port(), server.rule, &slice.name)?;
        Ok(ep)
    }

    /// `host:port`, for messages.
    pub fn host_port(&self) -> String {
        self.address.host_port()
    }

    /// `admin_url` itself (credentials included: only for a slice's
    /// address, never a message).
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// `method path` (after `admin_url`'s own path) with `body` of
    /// `content_type`; the answer, whatever its status.
    ///
    /// # Errors
    /// No answer: [`Exchange::error`] (unreachable is environmental).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: impl Into<Bytes>,
        content_type: &str,
    ) -> Result<Fetched, AdapterError> {
        let host = self.address.host();
        let port = self.address.port_or(80);
        let url = crate::http::Url {
            tls: self.address.scheme() == "https",
            authority: crate::http::host_header(&host, port),
            host,
            port,
            path_and_query: format!("{}{path}", self.base),
        };
        let mut headers: Vec<(&str, &str)> = Vec::with_capacity(2);
        if let Some((k, v)) = &self.credential {
            headers.push((k, v));
        }
        let body = body.into();
        if !body.is_empty() {
            headers.push(("Content-Type", content_type));
        }
        // Where the query begins, the path a message may show ends: a query
        // may hold a value the caller would not print.
        let shown = path.split('?').next().unwrap_or(path);
        let req = crate::http::request(method, &url, &headers, body)
            .map_err(|e| AdapterError::new(format!("{}: {e}", self.server.adapter)))?;
        self.client.fetch(&url, req).await.map_err(|e| {
            Exchange {
                call: &format!(
                    "{} at {}: {method} {shown}",
                    self.server.adapter,
                    self.host_port()
                ),
                unreachable: self.server.unreachable,
                slow: self.server.slow,
            }
            .error(&e, self.client.read_timeout)
        })
    }

    /// [`Endpoint::call`] with a JSON body (empty: none).
    ///
    /// # Errors
    /// As `call`.
    pub async fn json(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Fetched, AdapterError> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        self.call(method, path, body, "application/json").await
    }

    /// Empties `slice` through `listing` ([`super::batch::drain`]): the
    /// deadline from `options.timeout`, errors led by `<adapter> at
    /// host:port: deleting the <things> under <slice>` and redacted.
    ///
    /// # Errors
    /// The drain's.
    pub async fn drain<L: super::batch::Listing>(
        &self,
        slice: &Slice,
        things: &str,
        listing: &mut L,
    ) -> Result<(), AdapterError> {
        let what = format!(
            "{} at {}: deleting the {things} under {}",
            self.server.adapter,
            self.host_port(),
            slice.name
        );
        let within = super::batch::within(slice.timeout(self.server.timeout));
        super::batch::drain(&what, within, listing)
            .await
            .map(drop)
            .map_err(|e| e.redacted(slice))
    }

    /// An answer's body as JSON; an error naming the server when it is not.
    ///
    /// # Errors
    /// The body is not JSON of that shape.
    pub fn read<T: serde::de::DeserializeOwned>(&self, f: &Fetched) -> Result<T, AdapterError> {
        f.json().map_err(|e| {
            AdapterError::new(format!(
                "{} at {}: {e}",
                self.server.adapter,
                self.host_port()
            ))
        })
    }

    /// An answer that is not a success as an error: `<adapter> at
    /// host:port: <what> answered <status>: <body head><hint>`. A 401 or
    /// 403 with no `hint` says which credentials were refused.
    pub fn refused(&self, what: &str, f: &Fetched, hint: &str) -> AdapterError {
        let hint = match (hint, f.status.as_u16()) {
            ("", 401) => "; the credentials in admin_url are not ones the server accepts".into(),
            ("", 403) => {
                "; the account in admin_url may not do this: give it the rights to create and delete what Binky makes".into()
            }
            (h, _) => h.to_owned(),
        };
        AdapterError::new(format!(
            "{} at {}: {what} answered {}: {}{hint}",
            self.server.adapter,
            self.host_port(),
            f.status,
            f.text_head().trim()
        ))
    }
}

impl AdminUrl {
    /// This URL as an HTTP adapter's endpoint, as [`Endpoint::of`] reads
    /// it: `binky check` refuses a literal one by this same reader.
    /// `example` is shown where the error needs one.
    ///
    /// # Errors
    /// Not an `http[s]://` URL this build speaks; never quoting a
    /// credential.
    pub fn http(&self, example: &str) -> Result<&Address, String> {
        self.read(crate::http::SCHEMES, example).map_err(|e| {
            let tls = if self.as_str().starts_with("https://") && !crate::http::TLS {
                " (https needs binky built with `--features tls`)"
            } else {
                ""
            };
            format!("admin_url {e}{tls}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_of_what_is_gone_is_done_and_a_refusal_is_not() {
        assert_eq!(deleted(204), Some(true));
        assert_eq!(deleted(404), Some(false));
        assert_eq!(deleted(403), None);
        assert_eq!(deleted(500), None);
    }

    #[test]
    fn a_dead_server_is_environmental_and_a_late_one_names_the_wait() {
        let x = Exchange {
            call: "s3: GET h:9000/b",
            unreachable: "check that the server runs",
            slow: "stuck, or not an S3 server",
        };
        let refused = HttpError {
            message: "connection refused".into(),
            kind: HttpErrorKind::Connect,
        };
        let e = x.error(&refused, Duration::from_secs(30));
        assert!(e.is_environmental());
        assert_eq!(
            e.message,
            "s3: GET h:9000/b: cannot connect (connection refused); check that the server runs"
        );
        let late = HttpError {
            message: "timed out".into(),
            kind: HttpErrorKind::Timeout,
        };
        let e = x.error(&late, Duration::from_secs(2));
        assert!(!e.is_environmental());
        assert!(e.message.contains("no answer within 2s"), "{e}");
        assert!(e.message.contains("options.timeout"), "{e}");
    }
}
