//! What every adapter that speaks HTTP to its server (RabbitMQ's management
//! API, S3, and the HTTP servers to come) shares: a client with the
//! resource's `options.timeout`, one reading of a failed exchange, and one
//! reading of a DELETE's status.

use super::super::{AdapterError, Slice};
use crate::http::{Client, HttpError, HttpErrorKind};
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
    /// [`HttpError`] holds one.
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
        assert!(e.environmental);
        assert_eq!(
            e.message,
            "s3: GET h:9000/b: cannot connect (connection refused); check that the server runs"
        );
        let late = HttpError {
            message: "timed out".into(),
            kind: HttpErrorKind::Timeout,
        };
        let e = x.error(&late, Duration::from_secs(2));
        assert!(!e.environmental);
        assert!(e.message.contains("no answer within 2s"), "{e}");
        assert!(e.message.contains("options.timeout"), "{e}");
    }
}
