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
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawHealth;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a URL string or a table with one of `http`, `tcp`, `cmd`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawHealth, E> {
                Ok(RawHealth::Url(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawHealth, A::Error> {
                RawHealthTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawHealth::Table)
            }
        }
        d.deserialize_any(V)
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
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawRestart;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#""no", "on-failure", "always", or a table with `policy`"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawRestart, E> {
                Ok(RawRestart::Policy(v.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawRestart, E> {
                // TOML users write `restart = false`; read it as the policy it means.
                Ok(RawRestart::Policy(
                    if v { "always" } else { "no" }.to_owned(),
                ))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawRestart, A::Error> {
                RawRestartTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawRestart::Table)
            }
        }
        d.deserialize_any(V)
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
