//! The serde shape of `binky.toml`, exactly as written.
//!
//! Every struct denies unknown fields so a typo fails loudly. A service is parsed
//! with the union of process and resource keys; [`super::validate`] then decides
//! which kind it is, so "resource-only key on a process" gets its own message
//! instead of a generic "unknown field".

use indexmap::IndexMap;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[project]` (required).
    pub project: RawProject,
    /// `[services.<name>]`, in file order.
    #[serde(default)]
    pub services: IndexMap<String, RawService>,
    /// `[agents]`.
    #[serde(default)]
    pub agents: Option<RawAgents>,
    /// `[env]`: the project's environment, for every process and command.
    #[serde(default)]
    pub env: Option<IndexMap<String, EnvValue>>,
}

/// `[project]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProject {
    pub name: String,
    pub domain: Option<String>,
    pub https: Option<bool>,
    pub port_range: Option<[i64; 2]>,
    pub worktree_root: Option<String>,
    pub env_file: Option<String>,
    pub copy: Option<Vec<String>>,
    pub setup: Option<Vec<String>>,
    pub idle_after: Option<DurationText>,
}

/// `[services.<name>]`: the union of process and resource keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawService {
    // process keys
    pub cmd: Option<String>,
    pub cwd: Option<String>,
    pub url: Option<String>,
    pub ports: Option<Vec<String>>,
    pub depends_on: Option<Vec<String>>,
    pub env: Option<IndexMap<String, EnvValue>>,
    pub env_file: Option<String>,
    pub health: Option<RawHealth>,
    pub restart: Option<RawRestart>,
    pub watch: Option<Vec<String>>,
    pub stop_signal: Option<String>,
    pub stop_timeout: Option<DurationText>,
    pub sleep: Option<bool>,
    // resource keys
    pub adapter: Option<String>,
    pub admin_url: Option<String>,
    pub migrate: Option<String>,
    pub seed: Option<String>,
    pub clone_from: Option<String>,
    pub clone_inputs: Option<Vec<String>>,
    pub options: Option<toml::Table>,
}

/// Keys only a process (`cmd`) service may carry.
pub const PROCESS_KEYS: &[&str] = &[
    "cmd",
    "cwd",
    "url",
    "ports",
    "depends_on",
    "env",
    "env_file",
    "health",
    "restart",
    "watch",
    "stop_signal",
    "stop_timeout",
    "sleep",
];

/// Keys only a resource (`adapter`) service may carry.
pub const RESOURCE_KEYS: &[&str] = &[
    "adapter",
    "admin_url",
    "migrate",
    "seed",
    "clone_from",
    "clone_inputs",
    "options",
];

impl RawService {
    /// The keys present in this table, in the order of [`PROCESS_KEYS`] then
    /// [`RESOURCE_KEYS`].
    pub fn present_keys(&self) -> Vec<&'static str> {
        let flags = [
            ("cmd", self.cmd.is_some()),
            ("cwd", self.cwd.is_some()),
            ("url", self.url.is_some()),
            ("ports", self.ports.is_some()),
            ("depends_on", self.depends_on.is_some()),
            ("env", self.env.is_some()),
            ("env_file", self.env_file.is_some()),
            ("health", self.health.is_some()),
            ("restart", self.restart.is_some()),
            ("watch", self.watch.is_some()),
            ("stop_signal", self.stop_signal.is_some()),
            ("stop_timeout", self.stop_timeout.is_some()),
            ("sleep", self.sleep.is_some()),
            ("adapter", self.adapter.is_some()),
            ("admin_url", self.admin_url.is_some()),
            ("migrate", self.migrate.is_some()),
            ("seed", self.seed.is_some()),
            ("clone_from", self.clone_from.is_some()),
            ("clone_inputs", self.clone_inputs.is_some()),
            ("options", self.options.is_some()),
        ];
        flags.iter().filter(|(_, p)| *p).map(|(k, _)| *k).collect()
    }
}

/// An `env` value. TOML numbers and booleans are accepted and rendered as the
/// text a shell would see, so `WORKERS = 4` does what it looks like.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvValue(pub String);

impl<'de> Deserialize<'de> for EnvValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EnvValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EnvValue, E> {
                Ok(EnvValue(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<EnvValue, E> {
                Ok(EnvValue(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<EnvValue, E> {
                Ok(EnvValue(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<EnvValue, E> {
                Ok(EnvValue(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<EnvValue, E> {
                Ok(EnvValue(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `health`: a string is an HTTP URL (or a path on the service's own port);
/// a table names exactly one of `http`, `tcp` or `cmd`.
#[derive(Debug, Clone)]
pub enum RawHealth {
    Url(String),
    Table(RawHealthTable),
}

/// The table form of `health`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthTable {
    pub http: Option<String>,
    pub tcp: Option<String>,
    pub cmd: Option<String>,
    pub timeout: Option<DurationText>,
    pub interval: Option<DurationText>,
}

impl<'de> Deserialize<'de> for RawHealth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StringOrTable {
            expecting: "a URL string or a table with one of `http`, `tcp`, `cmd`",
            string: RawHealth::Url,
            boolean: None,
            table: RawHealth::Table,
        })
    }
}

/// `restart`: a policy name, or a table with the policy and its backoff and
/// give-up settings.
#[derive(Debug, Clone)]
pub enum RawRestart {
    Policy(String),
    Table(RawRestartTable),
}

/// The table form of `restart`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRestartTable {
    pub policy: Option<String>,
    pub backoff: Option<DurationText>,
    pub max_backoff: Option<DurationText>,
    pub max_failures: Option<i64>,
    pub failure_window: Option<DurationText>,
}

impl<'de> Deserialize<'de> for RawRestart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StringOrTable {
            expecting: r#""no", "on-failure", "always", or a table with `policy`"#,
            string: RawRestart::Policy,
            // TOML users write `restart = false`; read it as the policy it means.
            boolean: Some(|v| RawRestart::Policy(if v { "always" } else { "no" }.to_owned())),
            table: RawRestart::Table,
        })
    }
}

/// A key written either as a string or as a table (`health`, `restart`).
/// The table is read by its own `Deserialize`, so a misspelt key in it is
/// still refused by name rather than as "not a string".
struct StringOrTable<T, Table> {
    expecting: &'static str,
    string: fn(String) -> T,
    /// What `true` and `false` mean, for a key that takes them.
    boolean: Option<fn(bool) -> T>,
    table: fn(Table) -> T,
}

impl<'de, T, Table: Deserialize<'de>> Visitor<'de> for StringOrTable<T, Table> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Ok((self.string)(v.to_owned()))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        match self.boolean {
            Some(boolean) => Ok(boolean(v)),
            // What serde's own default says to a boolean.
            None => Err(E::invalid_type(de::Unexpected::Bool(v), &self)),
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        Table::deserialize(de::value::MapAccessDeserializer::new(map)).map(self.table)
    }
}

/// `[agents]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgents {
    pub expose: Option<Vec<String>>,
    pub verify: Option<Vec<String>>,
}

/// Every key each table accepts, for "did you mean" suggestions.
pub fn known_keys(table: &str) -> &'static [&'static str] {
    match table {
        "" => &["project", "services", "agents", "env"],
        "project" => &[
            "name",
            "domain",
            "https",
            "port_range",
            "worktree_root",
            "env_file",
            "copy",
            "setup",
            "idle_after",
        ],
        "service" => &[
            "cmd",
            "cwd",
            "url",
            "ports",
            "depends_on",
            "env",
            "env_file",
            "health",
            "restart",
            "watch",
            "stop_signal",
            "stop_timeout",
            "sleep",
            "adapter",
            "admin_url",
            "migrate",
            "seed",
            "clone_from",
            "clone_inputs",
            "options",
        ],
        "health" => &["http", "tcp", "cmd", "timeout", "interval"],
        "restart" => &[
            "policy",
            "backoff",
            "max_backoff",
            "max_failures",
            "failure_window",
        ],
        "agents" => &["expose", "verify"],
        _ => &[],
    }
}

/// A duration as written: a string such as `"30s"` or `"1m 30s"`, or a bare
/// integer meaning seconds. Parsed (and its errors located) by validation.
#[derive(Debug, Clone, PartialEq)]
pub struct DurationText(pub String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#"a duration such as "30s" or "500ms""#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DurationText, E> {
                Ok(DurationText(format!("{v}s")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DurationText, E> {
                Ok(DurationText(format!("{v}s")))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Keys {
        health: Option<RawHealth>,
        restart: Option<RawRestart>,
    }

    fn read(src: &str) -> Result<Keys, String> {
        toml::from_str(src).map_err(|e| e.message().to_owned())
    }

    /// `health` and `restart` each take a string or a table; `restart`
    /// also takes a boolean, `health` does not.
    #[test]
    fn a_string_or_a_table() {
        let k = read("health = \"/up\"\nrestart = \"always\"").unwrap();
        assert!(matches!(k.health, Some(RawHealth::Url(u)) if u == "/up"));
        assert!(matches!(k.restart, Some(RawRestart::Policy(p)) if p == "always"));
        let k = read("health = { tcp = \"x\" }\nrestart = { policy = \"no\" }").unwrap();
        assert!(matches!(k.health, Some(RawHealth::Table(t)) if t.tcp.as_deref() == Some("x")));
        assert!(
            matches!(k.restart, Some(RawRestart::Table(t)) if t.policy.as_deref() == Some("no"))
        );
        for (b, policy) in [("true", "always"), ("false", "no")] {
            let k = read(&format!("restart = {b}")).unwrap();
            assert!(matches!(k.restart, Some(RawRestart::Policy(p)) if p == policy));
        }
    }

    #[test]
    fn the_wrong_kind_says_what_it_takes() {
        assert_eq!(
            read("health = true").unwrap_err(),
            "invalid type: boolean `true`, expected a URL string or a table with one of `http`, `tcp`, `cmd`"
        );
        assert_eq!(
            read("restart = 3").unwrap_err(),
            r#"invalid type: integer `3`, expected "no", "on-failure", "always", or a table with `policy`"#
        );
        let e = read("health = { htp = \"/\" }").unwrap_err();
        assert!(e.starts_with("unknown field `htp`, expected one of"), "{e}");
        let e = read("restart = { polcy = \"no\" }").unwrap_err();
        assert!(
            e.starts_with("unknown field `polcy`, expected one of"),
            "{e}"
        );
    }
}
