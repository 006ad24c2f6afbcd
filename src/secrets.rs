//! Secrets Binky knows, and the one scrubber every text it stores or prints
//! passes through.
//!
//! Binky renders credentials it does not own: the password in a resource's
//! `admin_url`, and values whose variable name says they are secret
//! (`DB_PASSWORD`, `API_TOKEN`, …) from `${env.NAME}`, `env_file` and `env`
//! tables, plus the password of any URL among them. The daemon registers each
//! one when it renders it; [`scrub`] replaces every registered secret — as
//! written and percent-decoded — with `***`. The daemon scrubs:
//!
//! - every reply (errors, notes, progress lines): the terminal, `--json`, MCP;
//! - `events.log` details;
//! - the registry's free texts (a world's error, a service's exit, a verify
//!   result), so nothing reaches `registry.db`;
//! - `daemon.log` lines.
//!
//! A service's own log file is the user's and stays as the service wrote it.
//! The set lives in daemon memory only and is never written anywhere.

use crate::address::userinfo;
use std::borrow::Cow;
use std::sync::RwLock;

/// Shorter values are not registered: replacing a two-letter string
/// everywhere would mangle every message and protect little.
const MIN_LEN: usize = 3;

/// What replaces a secret.
pub(crate) const MASK: &str = "***";

static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers `secret` (and its percent-decoded form) to be scrubbed from
/// now on. Values shorter than 3 bytes are ignored.
pub(crate) fn register(secret: &str) {
    for s in [secret.to_owned(), percent_decode(secret)] {
        if s.len() < MIN_LEN {
            continue;
        }
        let mut known = KNOWN.write().unwrap_or_else(|p| p.into_inner());
        if !known.contains(&s) {
            known.push(s);
            // Longest first, so a secret that contains another is masked
            // whole.
            known.sort_by_key(|k| std::cmp::Reverse(k.len()));
        }
    }
}

/// Registers the password of `url` (`scheme://user:password@host…`), if it
/// has one — but not one that merely repeats the user name (RabbitMQ's
/// `guest:guest`): that is a published default, not a secret, and masking
/// it would garble every message naming the user.
pub(crate) fn register_url(url: &str) {
    if let Some(pw) = url_password(url)
        && url_user(url).is_none_or(|user| user != pw)
    {
        register(&pw);
    }
}

/// The user name of `url`, as written.
fn url_user(url: &str) -> Option<&str> {
    userinfo(url).map(|(user, _)| user)
}

/// Registers what a variable `name = value` holds that is secret: the whole
/// value when the name says so ([`name_is_secret`]), and a URL's password
/// in any case.
pub(crate) fn register_var(name: &str, value: &str) {
    if name_is_secret(name) {
        register(value);
    }
    register_url(value);
}

/// Whether a variable's name says it holds a credential: it contains
/// `PASSWORD`, `PASSWD`, `PASS`, `SECRET`, `TOKEN`, `CREDENTIAL`, `AUTH`,
/// `PRIVATE` or ends in `KEY` (any case).
pub(crate) fn name_is_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    [
        "PASSWORD",
        "PASSWD",
        "PASS",
        "SECRET",
        "TOKEN",
        "CREDENTIAL",
        "AUTH",
        "PRIVATE",
    ]
    .iter()
    .any(|w| n.contains(w))
        || n.ends_with("KEY")
}

/// `text` with every registered secret replaced by [`MASK`].
pub(crate) fn scrub(text: &str) -> Cow<'_, str> {
    let known = KNOWN.read().unwrap_or_else(|p| p.into_inner());
    if !known.iter().any(|s| text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_owned();
    for s in known.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    Cow::Owned(out)
}

/// `text` with every registered secret replaced by [`MASK`], except where
/// one of `keep` stands (a world's own password, handed to its agent): a
/// short secret that happens to occur inside a kept one is left there.
pub(crate) fn scrub_keeping(text: &str, keep: &[String]) -> String {
    let keep: Vec<&str> = keep
        .iter()
        .map(String::as_str)
        .filter(|k| !k.is_empty())
        .collect();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        // The earliest kept secret in what is left (the longest there).
        let next = keep
            .iter()
            .filter_map(|k| rest.find(k).map(|at| (at, std::cmp::Reverse(k.len()), *k)))
            .min();
        match next {
            Some((at, _, k)) => {
                out.push_str(&scrub(&rest[..at]));
                out.push_str(k);
                rest = &rest[at + k.len()..];
            }
            None => {
                out.push_str(&scrub(rest));
                return out;
            }
        }
    }
}

/// [`scrub`] in place.
pub(crate) fn scrub_in_place(text: &mut String) {
    if let Cow::Owned(s) = scrub(text) {
        *text = s;
    }
}

/// `text` with `url` and the password inside it replaced by [`MASK`]
/// (as written and percent-decoded), whether or not they were registered.
pub(crate) fn redact_url(text: &str, url: Option<&str>) -> String {
    let Some(url) = url.filter(|u| !u.is_empty()) else {
        return text.to_owned();
    };
    let mut out = text.replace(url, MASK);
    if let Some(pw) = url_password(url) {
        let decoded = percent_decode(&pw);
        for secret in [pw, decoded] {
            if secret.len() >= MIN_LEN {
                out = out.replace(&secret, MASK);
            }
        }
    }
    out
}

/// The password in `scheme://user:password@host…`, as written.
pub(crate) fn url_password(url: &str) -> Option<String> {
    // The lenient reader: a message or a malformed URL is redacted too.
    let pw = userinfo(url)?.1?;
    (!pw.is_empty()).then(|| pw.to_owned())
}

fn percent_decode(s: &str) -> String {
    crate::address::decode(s)
}

/// A writer that scrubs each buffer before passing it on (for `daemon.log`,
/// where `tracing` writes one event per call).
pub(crate) struct Scrubbing<W>(pub W);

impl<W: std::io::Write> std::io::Write for Scrubbing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => {
                self.0.write_all(scrub(text).as_bytes())?;
                Ok(buf.len())
            }
            Err(_) => self.0.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_masked_raw_and_decoded() {
        register_url("mysql://app:Zq9%40Secret@127.0.0.1:3306/");
        register_var("STRIPE_API_KEY", "sk_live_abcdef");
        register_var("PLAIN", "visible-value");
        register_var("DATABASE_URL", "postgres://u:UrlPw77@h/db");
        let text =
            "pw Zq9@Secret raw Zq9%40Secret key sk_live_abcdef url UrlPw77 plain visible-value";
        let s = scrub(text);
        for leaked in ["Zq9", "sk_live", "UrlPw77"] {
            assert!(!s.contains(leaked), "{s}");
        }
        assert!(s.contains("visible-value"), "{s}");
        assert_eq!(scrub("nothing here"), Cow::Borrowed("nothing here"));
    }

    #[test]
    fn an_agent_keeps_its_worlds_own_password_and_loses_the_admins() {
        register_url("postgres://admin:AdminPw9@127.0.0.1/x");
        // A short secret that occurs inside the world's own password.
        register("c0ffee");
        let own = "aa11c0ffee22bb".to_owned();
        let text = format!("world postgres://w:{own}@h/db admin AdminPw9 alone c0ffee");
        assert_eq!(
            scrub_keeping(&text, std::slice::from_ref(&own)),
            format!("world postgres://w:{own}@h/db admin *** alone ***")
        );
        assert_eq!(scrub_keeping("AdminPw9", &[]), "***");
    }

    #[test]
    fn url_credentials_are_blanked_out_of_error_text() {
        let url = "mysql://app:S3cr%40t@127.0.0.1:3306/?require_ssl=false";
        let text = format!("failed: {url}; password S3cr@t; raw S3cr%40t; user app");
        let r = redact_url(&text, Some(url));
        assert!(!r.contains("S3cr"), "{r}");
        assert!(r.contains("user app"), "{r}");
        assert_eq!(redact_url("no url here", None), "no url here");
        assert_eq!(url_password("postgresql://u@h/db"), None);
    }

    #[test]
    fn a_password_that_repeats_the_user_is_not_masked() {
        register_url("amqp://rmqdefault:rmqdefault@127.0.0.1:5672/");
        assert!(scrub("user rmqdefault refused").contains("rmqdefault"));
    }

    #[test]
    fn secret_names() {
        for n in [
            "DB_PASSWORD",
            "api_token",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASS",
            "GH_AUTH",
        ] {
            assert!(name_is_secret(n), "{n}");
        }
        for n in ["PORT", "DATABASE_URL", "HOME", "KEYBOARD"] {
            assert!(!name_is_secret(n), "{n}");
        }
    }
}
