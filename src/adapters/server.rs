//! Where a slice lives: the server it was made on, recorded at provision so
//! that a teardown reaches that server whatever `admin_url` renders to later.
//!
//! A [`Server`] is what the registry keeps per slice (and a golden
//! template's marker per template): the address of the server with no
//! credentials in it, and a keyed fingerprint of the credentials it was
//! reached with. The fingerprint lets a later verb tell whether the
//! credentials at hand today are the ones the slice was made with, so the
//! slice's own server can be reached with them even when `admin_url` now
//! names another; it is an HMAC-style SHA-256 under a random key kept in the
//! registry, so it cannot be looked up in a table of common passwords.

use super::kit::address::AdminUrl;
use sha2::{Digest, Sha256};

/// The server a slice lives on, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// `scheme://host:port[/path]` with no user, password, query or
    /// fragment ([`AdminUrl::server`]); the path only where it selects
    /// where slices live (see [`super::catalog::Facts::path_names_server`]).
    pub address: String,
    /// [`fingerprint`] of the user and password of the URL that reached it.
    pub credentials: String,
}

/// The fingerprint of `(user, password)` under `key`: `fp1:` and 16 hex
/// digits of SHA-256 over the key, the user and the password (each
/// delimited). One for "no credentials" too, so a server reached without
/// them is recognised as such.
pub fn fingerprint(key: &str, user: &str, password: &str) -> String {
    let mut h = Sha256::new();
    for part in [key, user, password] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let d = h.finalize();
    let hex: String = d.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("fp1:{hex}")
}

/// The [`Server`] `url` names, its credentials fingerprinted under `key`.
pub fn of(url: &AdminUrl, keep_path: bool, key: &str) -> Server {
    let (user, password) = url.credentials();
    Server {
        address: url.server(keep_path),
        credentials: fingerprint(key, &user, &password),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(url: &str, keep_path: bool) -> String {
        AdminUrl::new(url).server(keep_path)
    }

    fn credentials(url: &str) -> (String, String) {
        AdminUrl::new(url).credentials()
    }

    fn rebase(url: &str, to: &str) -> Option<String> {
        AdminUrl::new(url)
            .rebased(to)
            .map(|u| u.as_str().to_owned())
    }

    #[test]
    fn an_address_has_no_credentials_and_names_the_port() {
        assert_eq!(
            address("redis://:s3cret@127.0.0.1/5#shop:a:", true),
            "redis://127.0.0.1:6379/5"
        );
        assert_eq!(
            address(
                "postgres://u:p%40ss@db.local:5433/postgres?sslmode=disable",
                false
            ),
            "postgres://db.local:5433"
        );
        assert_eq!(address("http://K:S@[::1]:9000/", true), "http://[::1]:9000");
        assert_eq!(
            address("kafka://u:p@h1:9092,h2:9092", true),
            "kafka://h1:9092,h2:9092"
        );
        // One server, however its URL is spelled.
        assert_eq!(
            address("redis://127.0.0.1:6379/0/", true),
            address("redis://127.0.0.1/0", true)
        );
        assert_ne!(
            address("redis://127.0.0.1:6379/0", true),
            address("redis://127.0.0.1:6379/5", true)
        );
    }

    #[test]
    fn credentials_are_decoded_and_fingerprinted_under_the_key() {
        assert_eq!(
            credentials("amqp://guest:gu%40st@h/"),
            ("guest".into(), "gu@st".into())
        );
        assert_eq!(
            credentials("redis://h:6379/0"),
            (String::new(), String::new())
        );
        let a = fingerprint("k1", "u", "pw");
        assert_eq!(a, fingerprint("k1", "u", "pw"));
        assert_ne!(a, fingerprint("k2", "u", "pw"));
        assert_ne!(a, fingerprint("k1", "u", "pw2"));
        // The delimiting keeps ("ab", "c") apart from ("a", "bc").
        assert_ne!(fingerprint("k", "ab", "c"), fingerprint("k", "a", "bc"));
        assert!(!a.contains("pw"));
    }

    #[test]
    fn rebase_keeps_the_credentials_and_moves_the_server() {
        assert_eq!(
            rebase("redis://:pw@127.0.0.1:6379/5", "redis://127.0.0.1:6379/0").as_deref(),
            Some("redis://:pw@127.0.0.1:6379/0")
        );
        assert_eq!(
            rebase(
                "postgres://u:pw@new:5432/postgres?sslmode=disable",
                "postgres://old:5433"
            )
            .as_deref(),
            Some("postgres://u:pw@old:5433/postgres?sslmode=disable")
        );
        assert_eq!(rebase("kafka://h1:1,h2:2", "kafka://h3:3"), None);
    }
}
