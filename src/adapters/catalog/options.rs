//! The options a resource's `options` table may hold: each key's kind, how
//! a value is checked against it, and the options several adapters share.

/// One key of a resource's `options` table.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// The key.
    pub name: &'static str,
    /// The value it takes.
    pub kind: OptionKind,
    /// What it does, for `binky check`'s messages.
    pub help: &'static str,
}

/// The value an option takes.
#[derive(Debug, Clone, Copy)]
pub enum OptionKind {
    /// `true` or `false`.
    Bool,
    /// Any string.
    Text,
    /// An `http://` URL (or `https://` in a build with `tls`).
    HttpUrl,
    /// A duration such as `"30s"`.
    Duration,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// An array of strings.
    TextList,
    /// A whole number from 1 to 32,767.
    Count,
    /// Checked by the adapter's own function; its `Err` says what is
    /// expected (Kafka topic names).
    Custom(fn(&toml::Value) -> Result<(), String>),
}

impl OptionKind {
    /// Whether `v` is a value of this kind; `Err` says what is expected.
    /// `v` is a value as the adapter will see it: a value still holding a
    /// token (`"${env.RMQ_MGMT}"`) is the caller's to pass over until it is
    /// rendered (`binky check` does; `up` checks the rendered value with
    /// [`Entry::check_options`](super::Entry::check_options)).
    pub fn check(self, v: &toml::Value) -> Result<(), String> {
        let ok = match self {
            OptionKind::Bool => v.is_bool(),
            OptionKind::Text => v.as_str().is_some_and(|s| !s.trim().is_empty()),
            OptionKind::HttpUrl => match v.as_str().map(crate::http::parse_url) {
                Some(Ok(_)) => true,
                // Why this URL is refused (user info, a bad port), never
                // the URL itself: it may hold a password.
                Some(Err(e)) => {
                    return Err(format!(
                        "{}; this one {}",
                        Self::HttpUrl.wanted(),
                        e.message
                    ));
                }
                None => false,
            },
            OptionKind::Duration => v
                .as_str()
                .is_some_and(|s| humantime::parse_duration(s.trim()).is_ok_and(|d| !d.is_zero())),
            OptionKind::Choice(c) => v.as_str().is_some_and(|s| c.contains(&s)),
            OptionKind::TextList => v
                .as_array()
                .is_some_and(|a| a.iter().all(toml::Value::is_str)),
            OptionKind::Count => v
                .as_integer()
                .is_some_and(|n| (1..=i64::from(i16::MAX)).contains(&n)),
            OptionKind::Custom(f) => return f(v),
        };
        if ok {
            return Ok(());
        }
        Err(self.wanted())
    }

    /// What a value of this kind must be, in words.
    fn wanted(self) -> String {
        match self {
            OptionKind::Bool => "true or false".to_owned(),
            OptionKind::Text => "a non-empty string".to_owned(),
            OptionKind::HttpUrl if crate::http::TLS => "an http:// or https:// URL".to_owned(),
            OptionKind::HttpUrl => {
                "an http:// URL (https needs binky built with `--features tls`)".to_owned()
            }
            OptionKind::Duration => "a duration above zero such as \"30s\" or \"5m\"".to_owned(),
            OptionKind::Choice(c) => format!("one of {}", c.join(", ")),
            OptionKind::TextList => "an array of strings".to_owned(),
            OptionKind::Count => "a whole number from 1 to 32767".to_owned(),
            OptionKind::Custom(_) => unreachable!("a custom check says what it wants"),
        }
    }
}

/// `options.clone_strategy` of an adapter that clones several ways.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) const fn clone_strategy(choices: &'static [&'static str]) -> OptionSpec {
    OptionSpec {
        name: "clone_strategy",
        kind: OptionKind::Choice(choices),
        help: "how clone_from copies the golden template",
    }
}

/// The most spares `options.spares` may ask for per template: each is a
/// database on the server, and one or two cover a burst of `up`s.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const MAX_SPARES: i64 = 8;

/// `options.spares` of an adapter that keeps spare clones.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) const SPARE_COUNT: OptionSpec = OptionSpec {
    name: "spares",
    kind: OptionKind::Custom(|v| match v.as_integer() {
        Some(n) if (0..=MAX_SPARES).contains(&n) => Ok(()),
        _ => Err(format!("a whole number from 0 (no spares) to {MAX_SPARES}")),
    }),
    help: "clones of the golden template kept ready, so an up takes one by renaming it (default 1; 0 turns them off)",
};

/// `options.acl` of an adapter that gives each world a user of its own by
/// default (PostgreSQL, MySQL, RabbitMQ).
pub(super) const WORLD_USER: OptionSpec = OptionSpec {
    name: "acl",
    kind: OptionKind::Bool,
    help: "a login user per world, allowed only the world's slice (on unless false)",
};

/// `options.timeout` of an adapter that waits on one server call at a time.
pub(super) const TIMEOUT: OptionSpec = OptionSpec {
    name: "timeout",
    kind: OptionKind::Duration,
    help: "how long one call to the server may take",
};
