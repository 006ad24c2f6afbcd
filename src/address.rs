//! Server URLs, read and rebuilt by the `url` crate: credentials and their
//! percent-coding, IPv6 hosts, and the default port of every scheme an
//! adapter speaks. Every adapter reads its `admin_url` through
//! [`Address::parse`], so `binky check` and `up` agree on what a URL means
//! and no adapter keeps a hand-written parser of its own.
//!
//! Text that may not be a URL at all (an error message to redact, a value
//! `check` lints, a Kafka bootstrap list) is read by [`userinfo`], the one
//! lenient reader, which never fails: redaction must work on malformed input
//! too.

use std::fmt;

/// A server URL with a host, as the `url` crate parsed it.
///
/// Its `Display` and `Debug` never show a password.
#[derive(Clone, PartialEq, Eq)]
pub struct Address {
    url: url::Url,
}

/// Why a text is not a server URL; its text never quotes a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// No `scheme://` before the rest (`key:secret@127.0.0.1:9000`).
    #[error("has no scheme (write it as {example})")]
    NoScheme {
        /// A URL of the right shape, for the message.
        example: String,
    },
    /// A scheme the adapter does not speak.
    #[error("must be {expected}, not {found}://")]
    Scheme {
        /// What the adapter takes (`amqp:// or amqps://`).
        expected: String,
        /// The scheme written.
        found: String,
    },
    /// No host after the scheme.
    #[error("has no host (write it as {example})")]
    NoHost {
        /// A URL of the right shape, for the message.
        example: String,
    },
    /// A port that is not a number from 1 to 65535.
    #[error("has a bad port (a number from 1 to 65535)")]
    Port,
    /// A user or password with a raw `/`, `?` or `#`, which ends the host
    /// part early (AWS secrets hold `/` and `+`).
    #[error(
        "is not a URL: its user or password holds `/`, `?` or `#`; percent-encode them (`/` is %2F, `?` %3F, `#` %23, and `+` %2B)"
    )]
    Unencoded,
    /// Anything else the `url` crate refused.
    #[error("is not a URL ({0})")]
    Invalid(String),
}

/// The default port of a scheme an adapter speaks, where the `url` crate
/// knows none (it knows only the web's: `http`, `https`, `ws`, `wss`).
pub fn default_port(scheme: &str) -> Option<u16> {
    Some(match scheme {
        "http" | "ws" => 80,
        "https" | "wss" => 443,
        "redis" | "valkey" => 6379,
        "rediss" => 6380,
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        "amqp" => 5672,
        "amqps" => 5671,
        "kafka" => 9092,
        "mongodb" => 27017,
        _ => return None,
    })
}

impl Address {
    /// Parses `text` as a server URL whose scheme is one of `schemes` (any
    /// when empty); `example` is shown in the errors that need one.
    ///
    /// # Errors
    /// No scheme, another scheme, no host, a bad port (0 included) or any
    /// other refusal of the `url` crate; never quoting a credential.
    pub fn parse(text: &str, schemes: &[&str], example: &str) -> Result<Address, AddressError> {
        let Some((scheme, _)) = text.split_once("://") else {
            return Err(AddressError::NoScheme {
                example: example.to_owned(),
            });
        };
        if !schemes.is_empty() && !schemes.contains(&scheme) {
            return Err(AddressError::Scheme {
                expected: schemes
                    .iter()
                    .map(|s| format!("{s}://"))
                    .collect::<Vec<_>>()
                    .join(" or "),
                // A scheme is letters, digits and `+-.`: never a secret.
                found: scheme
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || "+-.".contains(*c))
                    .take(20)
                    .collect(),
            });
        }
        let url = url::Url::parse(text).map_err(|e| match e {
            _ if raw_delimiter_in_userinfo(text) => AddressError::Unencoded,
            url::ParseError::EmptyHost => AddressError::NoHost {
                example: example.to_owned(),
            },
            url::ParseError::InvalidPort => AddressError::Port,
            // The crate's texts name the fault, never the input.
            other => AddressError::Invalid(other.to_string()),
        })?;
        if url.host_str().is_none_or(str::is_empty) && !is_socket(url.scheme()) {
            return Err(AddressError::NoHost {
                example: example.to_owned(),
            });
        }
        if url.port() == Some(0) {
            return Err(AddressError::Port);
        }
        Ok(Address { url })
    }

    /// The scheme, lowercase.
    pub fn scheme(&self) -> &str {
        self.url.scheme()
    }

    /// The host, without IPv6 brackets (what a socket connects to).
    pub fn host(&self) -> String {
        match self.url.host() {
            Some(url::Host::Ipv6(a)) => a.to_string(),
            Some(h) => h.to_string(),
            None => String::new(),
        }
    }

    /// The port: the one written, else the scheme's default; `None` for a
    /// scheme without one.
    pub fn port(&self) -> Option<u16> {
        self.url.port().or_else(|| default_port(self.url.scheme()))
    }

    /// The port, or `fallback` for a scheme without a default.
    pub fn port_or(&self, fallback: u16) -> u16 {
        self.port().unwrap_or(fallback)
    }

    /// `host:port` (`[::1]:9000` for IPv6), or the socket's path for a
    /// Unix-socket URL: for messages and `Host` headers; never a
    /// credential.
    pub fn host_port(&self) -> String {
        if self.host().is_empty() {
            return self.url.path().to_owned();
        }
        host_port(&self.host(), self.port_or(80))
    }

    /// The user name, percent-decoded; empty when there is none.
    pub fn user(&self) -> String {
        decode(self.url.username())
    }

    /// The password, percent-decoded; `None` when there is none.
    pub fn password(&self) -> Option<String> {
        self.url.password().map(decode)
    }

    /// The path as written (`/0`, `/postgres`, `` for none).
    pub fn path(&self) -> &str {
        self.url.path()
    }

    /// The path without its leading `/`, percent-decoded: a database
    /// number or name, a vhost.
    pub fn database(&self) -> String {
        decode(self.url.path().trim_start_matches('/'))
    }

    /// The first value of query parameter `key`, percent-decoded.
    pub fn query_value(&self, key: &str) -> Option<String> {
        self.url
            .query_pairs()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }

    /// The URL as written, credentials included: only for a driver.
    pub fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// This URL with its path replaced by `/db` (percent-encoded), the query
    /// kept and the fragment dropped.
    pub fn with_database(&self, db: &str) -> String {
        set_database(self.url.clone(), db)
    }

    /// This URL with `user` and `password` in place of its own credentials
    /// (`None`: none), the rest kept.
    pub fn with_credentials(&self, user: &str, password: Option<&str>) -> String {
        let mut u = self.url.clone();
        // The crate percent-encodes what the user info may not hold.
        let _ = u.set_username(user);
        let _ = u.set_password(password);
        u.into()
    }

    /// This URL with `fragment` as its fragment (Redis's key prefix).
    pub fn with_fragment(&self, fragment: &str) -> String {
        let mut u = self.url.clone();
        u.set_fragment(Some(fragment));
        u.into()
    }

    /// `scheme://host:port[/path]`: the server, with no credentials, query
    /// or fragment, the default port written out, and the path (a trailing
    /// `/` dropped) only when `keep_path` — where it selects where slices
    /// live, such as Redis's database number.
    pub fn server(&self, keep_path: bool) -> String {
        let path = if keep_path {
            self.url.path().trim_end_matches('/')
        } else {
            ""
        };
        let port = self.port().map(|p| format!(":{p}")).unwrap_or_default();
        let host = match self.url.host() {
            Some(url::Host::Ipv6(a)) => format!("[{a}]"),
            _ => self.host(),
        };
        format!("{}://{host}{port}{path}", self.scheme())
    }

    /// This URL moved to the server `to` (from [`Address::server`]): its
    /// credentials and query kept, scheme, host, port — and path, when `to`
    /// has one — taken from `to`; `None` when `to` is not a URL with a host.
    pub fn rebased(&self, to: &str) -> Option<String> {
        let a = Address::parse(to, &[], "").ok()?;
        let mut u = self.url.clone();
        if u.scheme() != a.scheme() {
            u.set_scheme(a.scheme()).ok()?;
        }
        u.set_host(a.url.host_str()).ok()?;
        u.set_port(a.url.port()).ok()?;
        if !matches!(a.path(), "" | "/") {
            u.set_path(a.path());
        }
        u.set_fragment(None);
        Some(u.into())
    }
}

impl fmt::Display for Address {
    /// The server, never the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.host_port())
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({})", self.server(true))
    }
}

/// A resource's `admin_url` as rendered: read once, where it is rendered
/// (or where `binky check` reads a literal one), and carried in
/// [`Slice`](crate::adapters::Slice) to the adapter that reaches the server
/// with it.
///
/// It keeps the text whole, since that is what a driver is given
/// (credentials included), and beside it the text read as one server URL
/// by [`Address::parse`]. Not every `admin_url` is one: a Kafka server list
/// (`kafka://h1:9092,h2:9092`) and libpq's multi-host and socket-only forms
/// are not, and there the lenient readers ([`userinfo`]) apply.
///
/// Its `Display` (as [`shown`]) and `Debug` show the server, never a
/// credential.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminUrl {
    text: String,
    address: Option<Address>,
}

impl AdminUrl {
    /// Reads `text` (a rendered or literal `admin_url`); never fails, since
    /// what a URL must be is each adapter's to say ([`AdminUrl::read`]).
    pub fn new(text: impl Into<String>) -> AdminUrl {
        let text = text.into();
        let address = Address::parse(&text, &[], "").ok();
        AdminUrl { text, address }
    }

    /// The text as written, credentials included: only for a driver, or
    /// for an external adapter's request.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text read as one server URL of any scheme; `None` when it is
    /// not one (a server list, a URL with no host).
    pub fn address(&self) -> Option<&Address> {
        self.address.as_ref()
    }

    /// The text as a server URL whose scheme is one of `schemes` (any when
    /// empty): what an adapter that takes one URL reads.
    ///
    /// # Errors
    /// As [`Address::parse`] would say for the text, `example` shown where
    /// the error needs one; never quoting a credential.
    pub fn read(&self, schemes: &[&str], example: &str) -> Result<&Address, AddressError> {
        match &self.address {
            Some(a) if schemes.is_empty() || schemes.contains(&a.scheme()) => Ok(a),
            // The error path only: the one parser names what is wrong.
            _ => match Address::parse(&self.text, schemes, example) {
                Err(e) => Err(e),
                Ok(_) => Err(AddressError::Invalid("an unreadable URL".into())),
            },
        }
    }

    /// The user and password, percent-decoded; empty when absent. Read
    /// leniently where the text is no single URL (a server list).
    pub fn credentials(&self) -> (String, String) {
        match &self.address {
            Some(a) => (a.user(), a.password().unwrap_or_default()),
            None => match userinfo(&self.text) {
                Some((u, p)) => (decode(u), p.map(decode).unwrap_or_default()),
                None => Default::default(),
            },
        }
    }

    /// The server with no credentials, query or fragment:
    /// [`Address::server`], or for a text that is no single URL (a Kafka
    /// server list) the text without its user info, query and fragment.
    pub fn server(&self, keep_path: bool) -> String {
        if let Some(a) = &self.address {
            return a.server(keep_path);
        }
        let base = self.text.split(['?', '#']).next().unwrap_or(&self.text);
        let base = match base.split_once("://") {
            Some((scheme, rest)) => {
                let rest = match rest.rsplit_once('@') {
                    Some((_, host)) if userinfo(base).is_some() => host,
                    _ => rest,
                };
                format!("{scheme}://{rest}")
            }
            None => base.to_owned(),
        };
        base.trim_end_matches('/').to_owned()
    }

    /// This URL moved to the server `to` (from [`AdminUrl::server`]), as
    /// [`Address::rebased`]; `None` when either is no URL with a host.
    pub fn rebased(&self, to: &str) -> Option<AdminUrl> {
        self.address.as_ref()?.rebased(to).map(AdminUrl::new)
    }
}

impl fmt::Display for AdminUrl {
    /// Where it points, for a message: [`Address::host_port`], or `the
    /// server` when it is no single URL. Never a credential.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.address {
            Some(a) => f.write_str(&a.host_port()),
            None => f.write_str("the server"),
        }
    }
}

impl fmt::Debug for AdminUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AdminUrl({})", self.server(true))
    }
}

/// Whether an `@` follows a `/`, `?` or `#` after `scheme://`: a user
/// or password holding one raw, which no parser can read as meant.
fn raw_delimiter_in_userinfo(text: &str) -> bool {
    let rest = text.split_once("://").map_or(text, |(_, r)| r);
    rest.rfind('@')
        .is_some_and(|at| rest[..at].contains(['/', '?', '#']))
}

/// Whether `scheme` names a Unix socket (`unix`, `redis+unix`): its URL
/// has a path and no host.
fn is_socket(scheme: &str) -> bool {
    scheme == "unix" || scheme.ends_with("+unix")
}

/// Where `text` points, for a message: [`Address::host_port`] of it, or
/// `the server` when it is not a URL. Never a credential.
pub fn shown(text: &str) -> String {
    Address::parse(text, &[], "").map_or_else(|_| "the server".to_owned(), |a| a.host_port())
}

/// `url` with its path replaced by `/db` (percent-encoded), the query kept
/// and the fragment dropped. Unlike [`Address::parse`] it takes a URL with
/// no host (`postgresql:///postgres?host=/run/postgresql`, a Unix socket)
/// and libpq's multi-host form (`postgresql://h1:5432,h2:5433/postgres`),
/// which no URL parser takes: there the path is spliced in after the
/// authority.
///
/// # Errors
/// `url` has no `scheme://`; the text never quotes it.
pub fn with_database(url: &str, db: &str) -> Result<String, AddressError> {
    if let Ok(u) = url::Url::parse(url) {
        return Ok(set_database(u, db));
    }
    let Some(after) = url.find("://").map(|i| i + 3) else {
        return Err(AddressError::NoScheme {
            example: "postgresql://host:5432/postgres".into(),
        });
    };
    let rest = &url[after..];
    let authority = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let tail = &rest[authority..];
    let query = tail
        .find('?')
        .map(|q| &tail[q..])
        .map(|q| q.split('#').next().unwrap_or(q))
        .unwrap_or("");
    Ok(format!(
        "{}{}/{}{query}",
        &url[..after],
        &rest[..authority],
        encode(db)
    ))
}

fn set_database(mut u: url::Url, db: &str) -> String {
    u.set_path(&format!("/{}", encode(db)));
    u.set_fragment(None);
    u.into()
}

/// `host:port`, the host in brackets when it is an IPv6 address.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The servers of a comma-separated list `scheme://h1:p1,h2:p2[/]` (Kafka's
/// bootstrap servers, which no URL parser takes whole), each read by
/// [`Address::parse`] as `scheme://hN:pN`, as `host:port` strings.
///
/// # Errors
/// As [`Address::parse`], for the first server that is not one; a path,
/// query or fragment.
pub fn parse_list(text: &str, scheme: &str, example: &str) -> Result<Vec<String>, AddressError> {
    let Some(rest) = text.strip_prefix(&format!("{scheme}://")) else {
        // Let the one parser name what is wrong.
        Address::parse(text, &[scheme], example)?;
        return Err(AddressError::Invalid("an unreadable server list".into()));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#']) {
        return Err(AddressError::Invalid(format!(
            "only servers may follow {scheme}://, no path (write it as {example})"
        )));
    }
    rest.split(',')
        .map(|server| {
            let a = Address::parse(&format!("{scheme}://{}", server.trim()), &[scheme], example)?;
            Ok(a.host_port())
        })
        .collect()
}

/// The user info of URL-shaped `text` (`scheme://user:password@host…`), as
/// written: `(user, password)`. The one reader for text that may not parse
/// as a URL (a message to redact, a config value with `${…}` tokens in it, a
/// server list); `None` when there is no `scheme://…@`.
pub fn userinfo(text: &str) -> Option<(&str, Option<&str>)> {
    let rest = text.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let info = authority.rsplit_once('@')?.0;
    Some(match info.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (info, None),
    })
}

/// Percent-encodes all but RFC 3986's unreserved characters: safe in a
/// path segment, the user info and a query.
pub fn encode(s: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SET).to_string()
}

/// Percent-decodes `s` (invalid UTF-8 replaced).
pub fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Address, AddressError> {
        Address::parse(s, &[], "scheme://host:port")
    }

    #[test]
    fn credentials_are_decoded_and_hosts_read_bare() {
        let a = parse("amqp://admin:p%40ss@rmq.local/%2F").unwrap();
        assert_eq!(
            (a.user(), a.password()),
            ("admin".into(), Some("p@ss".into()))
        );
        assert_eq!(
            (a.host(), a.port(), a.database()),
            ("rmq.local".into(), Some(5672), "/".into())
        );
        let a = parse("amqps://u:p@[::1]:5999/").unwrap();
        assert_eq!(
            (a.host(), a.port(), a.host_port()),
            ("::1".into(), Some(5999), "[::1]:5999".into())
        );
        let a = parse("redis://127.0.0.1/3").unwrap();
        assert_eq!(
            (a.user(), a.password(), a.port()),
            (String::new(), None, Some(6379))
        );
        assert_eq!(a.database(), "3");
        assert_eq!(parse("http://h").unwrap().host_port(), "h:80");
        assert_eq!(
            shown("redis+unix:///run/redis.sock?db=1"),
            "/run/redis.sock"
        );
        assert_eq!(shown("redis://admin:s3cret@h:6380/0"), "h:6380");
        assert_eq!(shown("${env.URL}"), "the server");
    }

    #[test]
    fn errors_name_the_fault_never_the_secret() {
        let e = Address::parse("key:Hunter2@127.0.0.1:9000", &["http"], "http://K:S@h:9000");
        assert_eq!(
            e.unwrap_err().to_string(),
            "has no scheme (write it as http://K:S@h:9000)"
        );
        for bad in [
            "redis://u:Hunter2@h:99999/0",
            "redis://u:Hunter2@h:0/0",
            "redis://u:Hunter2@h:port/0",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e, AddressError::Port, "{bad}");
        }
        let e = Address::parse("http://Hunter2@h", &["amqp", "amqps"], "").unwrap_err();
        assert_eq!(e.to_string(), "must be amqp:// or amqps://, not http://");
        assert!(matches!(
            parse("redis://:pw@/0"),
            Err(AddressError::NoHost { .. })
        ));
        assert!(!format!("{:?}", parse("redis://:Hunter2@h/0").unwrap()).contains("Hunter2"));
        assert!(
            !parse("redis://:Hunter2@h/0")
                .unwrap()
                .to_string()
                .contains("Hunter2")
        );
    }

    #[test]
    fn urls_are_rebuilt_with_their_parts_encoded() {
        let a = parse("postgres://u:p@h/postgres?sslmode=disable#x").unwrap();
        assert_eq!(
            a.with_database("a b/c"),
            "postgres://u:p@h/a%20b%2Fc?sslmode=disable"
        );
        let a = parse("redis://admin:s3cret@h:6380/0#old").unwrap();
        assert_eq!(
            a.with_credentials("binky_shop_a", Some("p@w")),
            "redis://binky_shop_a:p%40w@h:6380/0#old"
        );
        assert_eq!(
            a.with_fragment("shop:a:"),
            "redis://admin:s3cret@h:6380/0#shop:a:"
        );
        assert_eq!(
            with_database("postgresql:///postgres?host=/run/postgresql", "shop_a").unwrap(),
            "postgresql:///shop_a?host=/run/postgresql"
        );
        assert_eq!(
            with_database("postgresql://u:p@h1:5432,h2:5433/postgres?x=1#f", "shop_a").unwrap(),
            "postgresql://u:p@h1:5432,h2:5433/shop_a?x=1"
        );
        assert_eq!(
            with_database("postgresql://h1,h2", "a b").unwrap(),
            "postgresql://h1,h2/a%20b"
        );
        assert_eq!(
            parse("amqp://h")
                .unwrap()
                .with_credentials("guest", Some("guest")),
            "amqp://guest:guest@h"
        );
    }

    #[test]
    fn a_server_is_one_however_its_url_is_spelled() {
        let s = |u: &str, keep| parse(u).unwrap().server(keep);
        assert_eq!(
            s("redis://:s3cret@127.0.0.1/5#shop:a:", true),
            "redis://127.0.0.1:6379/5"
        );
        assert_eq!(
            s("postgres://u:p%40ss@db.local:5433/postgres?x=1", false),
            "postgres://db.local:5433"
        );
        assert_eq!(s("http://K:S@[::1]:9000/", true), "http://[::1]:9000");
        assert_eq!(
            s("redis://127.0.0.1:6379/0/", true),
            s("redis://127.0.0.1/0", true)
        );
        assert_ne!(s("redis://h/0", true), s("redis://h/5", true));
        assert_eq!(
            parse("postgres://u:pw@new:5432/postgres?sslmode=disable")
                .unwrap()
                .rebased("postgres://old:5433")
                .as_deref(),
            Some("postgres://u:pw@old:5433/postgres?sslmode=disable")
        );
    }

    #[test]
    fn an_admin_url_is_read_once_and_never_shows_its_secret() {
        let u = AdminUrl::new("postgres://admin:Hunter2@db.local:5433/postgres?sslmode=disable");
        assert_eq!(u.to_string(), "db.local:5433");
        assert!(!format!("{u:?}").contains("Hunter2"), "{u:?}");
        assert_eq!(u.credentials(), ("admin".into(), "Hunter2".into()));
        assert_eq!(u.server(false), "postgres://db.local:5433");
        assert_eq!(u.read(&["postgres"], "").unwrap().database(), "postgres");
        // The error a scheme check gives is the one parser's, word for word.
        assert_eq!(
            u.read(&["mysql"], "").unwrap_err(),
            Address::parse(u.as_str(), &["mysql"], "").unwrap_err()
        );
        // A server list is no single URL: its parts are read leniently.
        let list = AdminUrl::new("kafka://u:p%40ss@h1:9092,h2:9092/");
        assert!(list.address().is_none());
        assert_eq!(list.to_string(), "the server");
        assert_eq!(list.server(true), "kafka://h1:9092,h2:9092");
        assert_eq!(list.credentials(), ("u".into(), "p@ss".into()));
        assert!(list.rebased("kafka://h3:9092").is_none());
        // A raw `/` in a secret is named as such, without the secret.
        let e = AdminUrl::new("http://AK:wJal/rXU+tn@127.0.0.1:9000")
            .read(&[], "")
            .unwrap_err();
        assert_eq!(e, AddressError::Unencoded);
        assert!(!e.to_string().contains("rXU"));
    }

    #[test]
    fn server_lists_are_read_server_by_server() {
        assert_eq!(
            parse_list("kafka://a:1,b,[::1]:3/", "kafka", "").unwrap(),
            ["a:1", "b:9092", "[::1]:3"]
        );
        for bad in [
            "kafka://a:1,",
            "kafka://a:0",
            "kafka://a:1/topic",
            "http://a:1",
            "kafka://a:x",
        ] {
            assert!(parse_list(bad, "kafka", "").is_err(), "{bad}");
        }
    }

    #[test]
    fn userinfo_reads_what_no_parser_takes() {
        assert_eq!(
            userinfo("postgres://u:${env.P}@h/db"),
            Some(("u", Some("${env.P}")))
        );
        assert_eq!(
            userinfo("http://K:a/b+c@h:9000"),
            None,
            "a raw / ends the authority"
        );
        assert_eq!(userinfo("kafka://u:p@h1:1,h2:2"), Some(("u", Some("p"))));
        assert_eq!(userinfo("postgres://u@h"), Some(("u", None)));
        assert_eq!(userinfo("no url here"), None);
    }
}
