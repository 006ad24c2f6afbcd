//! The one list of built-in adapters: each name and alias, how to make it,
//! the options `binky check` knows for it, and the extra token fields
//! (`${cache.prefix}`) it fills, and its [`Facts`]: what it is whatever it
//! is asked (default server, capabilities, naming rule). `by_name`, `check` and the
//! daemon's "no adapter" hint all read this table, so they cannot disagree
//! about which names exist (they did: `postgresql` was served but not
//! listed). Features select the drivers compiled in.

use super::kit::address::AdminUrl;
use super::kit::names;
use super::{Adapter, Capabilities};
use std::sync::Arc;

mod options;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use options::SPARE_COUNT;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use options::clone_strategy;
pub use options::{OptionKind, OptionSpec};
use options::{TIMEOUT, WORLD_USER};

/// One built-in adapter.
pub struct Entry {
    /// Its name, as `adapter = "…"` writes it.
    pub name: &'static str,
    /// Other names for the same implementation (protocol-compatible
    /// servers, or the server's own spelling).
    pub aliases: &'static [&'static str],
    /// Makes one.
    pub make: fn() -> Arc<dyn Adapter>,
    /// The `options` it reads; `binky check` refuses any other key.
    pub options: &'static [OptionSpec],
    /// Token fields beyond `url` and `host` its slices have (`prefix`,
    /// `bucket`), as [`super::Adapter::fields`] fills them.
    pub fields: &'static [&'static str],
    /// What it is and can do, whatever it is asked.
    pub facts: Facts,
    /// The URL schemes a literal `admin_url` may have (empty: not checked).
    pub schemes: &'static [&'static str],
    /// The adapter's own check of a literal `admin_url`, past its scheme
    /// (`Err` says what is wrong, as `up` would).
    pub check_url: Option<UrlCheck>,
    /// An `admin_url` for a server on this machine, with placeholders in
    /// capitals (`binky init` suggests it); empty for no server.
    pub example_url: &'static str,
    /// How an app's own configuration reaches this server: `binky init`
    /// rewrites a compose value to `${SVC.url}` only when it is such a URL.
    pub client: ClientUrl,
}

/// What a built-in adapter is and can do, whatever it is asked: written
/// once, in its [`Entry`], and read through [`Adapter::facts`].
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// What it can do beyond the four verbs.
    pub capabilities: Capabilities,
    /// The `admin_url` used when a resource gives none; `None` when the
    /// adapter needs one, or needs no server (sqlite).
    pub default_url: Option<&'static str>,
    /// Its slices live on no server at all (sqlite's files under
    /// [`super::Slice::data_dir`]), so no `admin_url` is needed to reach one.
    pub serverless: bool,
    /// `admin_url`'s path selects where slices live (Redis's database
    /// number, an S3 endpoint's base path), so two URLs that differ only
    /// there name two servers ([`super::server`]). `false` where the path is
    /// only a way in (an admin database, a vhost).
    pub path_names_server: bool,
    /// Each world's slice gets a login user of its own (isolation by
    /// permission, not only by name), whose password the daemon makes,
    /// keeps and hands over as [`super::Slice::secret`]. Redis keeps its ACL
    /// user's password on the server instead, so says `false`.
    pub world_users: bool,
    /// The name of world `world_slug`'s slice of `project` within the
    /// backend's limits: `<project>_<world-slug>`, or with `resource` (a
    /// project with several resources on this adapter names all but the
    /// first: [`crate::config::Config::slice_resource`])
    /// `<project>__<resource>_<world-slug>`.
    pub slice_name: SliceName,
}

/// How an adapter names a world's slice: `(project, resource, world_slug)`.
pub type SliceName = fn(&str, Option<&str>, &str) -> String;

impl Facts {
    /// A server's adapter that clones nothing, reads its path as part of
    /// the server, makes no users and names slices
    /// [`default_slice_name`]: what an external adapter is unless it says
    /// more.
    pub const SERVER: Facts = Facts {
        capabilities: Capabilities {
            clone: false,
            spares: false,
        },
        default_url: None,
        serverless: false,
        path_names_server: true,
        world_users: false,
        slice_name: default_slice_name,
    };

    /// It cannot work without `admin_url`: no default server, and a server
    /// is needed.
    pub fn needs_admin_url(&self) -> bool {
        self.default_url.is_none() && !self.serverless
    }
}

/// `<project>_<world-slug>`, or `<project>__<resource>_<world-slug>`, with
/// no limit of a backend's applied.
pub fn default_slice_name(project: &str, resource: Option<&str>, world_slug: &str) -> String {
    match resource {
        None => format!("{project}_{world_slug}"),
        Some(r) => format!("{project}__{}_{world_slug}", r.replace('_', "-")),
    }
}

/// Clones server-side.
const CLONES: Capabilities = Capabilities {
    clone: true,
    spares: false,
};

/// Clones, and keeps spare clones ready (`options.spares`).
#[cfg(any(feature = "postgres", feature = "mysql"))]
const SPARES: Capabilities = Capabilities {
    clone: true,
    spares: true,
};

/// The URLs an app's client uses for a server: their schemes (the part
/// before any `+driver`), and the server's own port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientUrl {
    /// Schemes (`postgres`, `postgresql`).
    pub schemes: &'static [&'static str],
    /// The port the server listens on in its image (0: none).
    pub port: u16,
}

impl ClientUrl {
    /// No client URL (a file, not a server).
    pub const NONE: ClientUrl = client(&[], 0);
}

const fn client(schemes: &'static [&'static str], port: u16) -> ClientUrl {
    ClientUrl { schemes, port }
}

const HTTP: &[&str] = &["http", "https"];

/// An adapter's own check of a literal `admin_url`: `Err` says what is
/// wrong.
pub type UrlCheck = fn(&AdminUrl) -> Result<(), String>;

impl Entry {
    /// A rendered option value in the type its option takes: tokens render
    /// to text, so `acl = "${env.ACL}"` with `ACL=true` becomes `true`, and
    /// `partitions = "${env.P}"` with `P=3` becomes `3`. Only for `Bool`
    /// and `Count` options, and only text that spells a value of that kind;
    /// anything else is left for [`Entry::check_options`] to refuse.
    pub fn typed(&self, key: &str, rendered: toml::Value) -> toml::Value {
        let kind = self.options.iter().find(|o| o.name == key).map(|o| o.kind);
        let Some(text) = rendered.as_str().map(str::trim) else {
            return rendered;
        };
        match kind {
            Some(OptionKind::Bool) => match text {
                "true" => toml::Value::Boolean(true),
                "false" => toml::Value::Boolean(false),
                _ => rendered,
            },
            Some(OptionKind::Count) => text.parse::<i64>().map_or(rendered, toml::Value::Integer),
            _ => rendered,
        }
    }

    /// Checks a resource's options once their tokens are rendered, as
    /// `binky check` checks literal ones; an option this adapter does not
    /// read was refused by `check` already and is ignored here.
    ///
    /// # Errors
    /// The first option whose value is not of its kind, with what it must be.
    pub fn check_options(&self, options: &toml::Table) -> Result<(), String> {
        for (key, v) in options {
            if let Some(spec) = self.options.iter().find(|o| o.name == key) {
                spec.kind.check(v).map_err(|want| {
                    format!(
                        "options.{key} for the {} adapter ({}) must be {want}",
                        self.name, spec.help
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Checks an `admin_url` (literal in `binky check`, rendered at `up`)
    /// as the adapter will read it: its scheme, then the adapter's own
    /// reader. One function, so `check` refuses exactly what `up` would.
    ///
    /// # Errors
    /// What is wrong, never quoting a credential.
    pub fn check_admin_url(&self, url: &AdminUrl) -> Result<(), String> {
        if !self.schemes.is_empty()
            && !self
                .schemes
                .iter()
                .any(|s| url.as_str().starts_with(&format!("{s}://")))
        {
            let schemes = self.schemes.join("://, ");
            return Err(if url.as_str().contains("://") {
                format!(
                    "admin_url must start with {schemes}:// (this build speaks no other scheme)"
                )
            } else {
                format!("admin_url has no scheme: it must start with {schemes}://")
            });
        }
        match self.check_url {
            Some(check) => check(url),
            None => Ok(()),
        }
    }

    /// Whether `adapter = name` means this adapter.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

/// Every built-in adapter of this build, in the order help lists them.
pub const ENTRIES: &[Entry] = &[
    Entry {
        name: "sqlite",
        aliases: &[],
        make: || Arc::new(super::sqlite::Sqlite),
        options: &[],
        fields: &[],
        facts: Facts {
            capabilities: CLONES,
            serverless: true,
            ..Facts::SERVER
        },
        schemes: &[],
        check_url: None,
        example_url: "",
        client: ClientUrl::NONE,
    },
    #[cfg(feature = "postgres")]
    Entry {
        name: "postgres",
        aliases: &["postgresql"],
        make: || Arc::new(super::postgres::Postgres),
        options: &[
            clone_strategy(&["auto", "wal_log", "file_copy"]),
            SPARE_COUNT,
            WORLD_USER,
            OptionSpec {
                name: "createdb",
                kind: OptionKind::Bool,
                help: "the world's role may create databases (a test runner's own: Django, Rails, Prisma's shadow database)",
            },
            OptionSpec {
                name: "extensions",
                kind: OptionKind::TextList,
                help: "extensions the admin creates in each world's database before migrate (ones the world's own role may not create)",
            },
        ],
        fields: &[],
        facts: Facts {
            capabilities: SPARES,
            // The path is the database the admin connects to; the slices
            // are the server's.
            path_names_server: false,
            world_users: true,
            slice_name: |p, r, w| names::POSTGRES_DATABASE.name(p, r, w),
            ..Facts::SERVER
        },
        // The driver also takes `host=… user=…` connection strings.
        schemes: &[],
        check_url: Some(|u| u.postgres_config().map(|_| ())),
        example_url: "postgresql://USER@127.0.0.1:5432/postgres",
        client: client(&["postgres", "postgresql"], 5432),
    },
    #[cfg(feature = "mysql")]
    Entry {
        name: "mysql",
        aliases: &["mariadb", "percona"],
        make: || Arc::new(super::mysql::Mysql),
        options: &[clone_strategy(&["copy", "dump"]), SPARE_COUNT, WORLD_USER],
        fields: &[],
        facts: Facts {
            capabilities: SPARES,
            // As for postgres: the path is only the admin's way in.
            path_names_server: false,
            world_users: true,
            slice_name: |p, r, w| names::MYSQL_DATABASE.name(p, r, w),
            ..Facts::SERVER
        },
        schemes: &["mysql"],
        check_url: Some(|u| u.mysql_opts().map(|_| ())),
        example_url: "mysql://root@127.0.0.1:3306/",
        client: client(&["mysql", "mariadb"], 3306),
    },
    #[cfg(feature = "redis")]
    Entry {
        name: "redis",
        aliases: &["valkey"],
        make: || Arc::new(super::redis::Redis),
        options: &[
            OptionSpec {
                name: "acl",
                kind: OptionKind::Bool,
                help: "a Redis ACL user per world, allowed only the world's keys",
            },
            OptionSpec {
                name: "timeout",
                kind: OptionKind::Duration,
                help: "how long a connection and each command may take",
            },
        ],
        fields: &["prefix"],
        facts: Facts {
            default_url: Some(super::redis::DEFAULT_URL),
            slice_name: |p, r, w| names::KEY_PREFIX.name(p, r, w),
            ..Facts::SERVER
        },
        schemes: &["redis", "redis+unix", "unix"],
        check_url: Some(|u| u.redis_client().map(|_| ())),
        example_url: "redis://127.0.0.1:6379/0",
        client: client(&["redis", "rediss", "valkey"], 6379),
    },
    #[cfg(feature = "s3")]
    Entry {
        name: "s3",
        aliases: &["minio"],
        make: || Arc::new(super::s3::S3),
        options: &[
            OptionSpec {
                name: "region",
                kind: OptionKind::Text,
                help: "the region requests are signed for",
            },
            OptionSpec {
                name: "timeout",
                kind: OptionKind::Duration,
                help: "how long one call to the endpoint may take",
            },
        ],
        fields: &["bucket"],
        facts: Facts {
            slice_name: super::s3::bucket_name,
            ..Facts::SERVER
        },
        schemes: crate::http::SCHEMES,
        check_url: Some(|u| u.s3_account().map(|_| ())),
        example_url: "http://ACCESS_KEY:SECRET_KEY@127.0.0.1:9000",
        client: client(HTTP, 9000),
    },
    #[cfg(feature = "kafka")]
    Entry {
        name: "kafka",
        aliases: &["redpanda"],
        make: || Arc::new(super::kafka::Kafka),
        options: &[
            OptionSpec {
                name: "topics",
                kind: OptionKind::Custom(super::kafka::check_topics),
                help: "topics created under the world's prefix",
            },
            OptionSpec {
                name: "partitions",
                kind: OptionKind::Count,
                help: "partitions of each topic in options.topics",
            },
            OptionSpec {
                name: "replication_factor",
                kind: OptionKind::Count,
                help: "replicas of each topic",
            },
            OptionSpec {
                name: "timeout",
                kind: OptionKind::Duration,
                help: "how long one admin call, and teardown's wait for deletion, may take",
            },
        ],
        fields: &["prefix"],
        facts: Facts {
            default_url: Some(super::kafka::DEFAULT_URL),
            slice_name: |p, r, w| names::TOPIC_PREFIX.name(p, r, w),
            ..Facts::SERVER
        },
        schemes: &["kafka"],
        check_url: Some(|u| u.bootstrap().map(|_| ())),
        example_url: "kafka://127.0.0.1:9092",
        client: client(&["kafka"], 9092),
    },
    Entry {
        name: "rabbitmq",
        aliases: &[],
        make: || Arc::new(super::rabbitmq::RabbitMq),
        options: &[
            OptionSpec {
                name: "management_url",
                kind: OptionKind::HttpUrl,
                help: "the management API, when it is not on port 15672 of admin_url's host",
            },
            WORLD_USER,
            OptionSpec {
                name: "timeout",
                kind: OptionKind::Duration,
                help: "how long one management call may take",
            },
        ],
        fields: &[],
        facts: Facts {
            default_url: Some(super::rabbitmq::DEFAULT_URL),
            // The path is the admin's vhost; vhosts are the cluster's.
            path_names_server: false,
            world_users: true,
            slice_name: |p, r, w| names::VHOST.name(p, r, w),
            ..Facts::SERVER
        },
        schemes: &["amqp"],
        check_url: Some(|u| u.amqp().map(|_| ())),
        example_url: "amqp://USER:PASSWORD@127.0.0.1:5672/",
        client: client(&["amqp", "amqps"], 5672),
    },
    #[cfg(feature = "mongodb")]
    Entry {
        name: "mongodb",
        aliases: &[],
        make: || Arc::new(super::mongodb::MongoDb),
        options: &[TIMEOUT],
        fields: &["database"],
        facts: Facts {
            capabilities: CLONES,
            default_url: Some(super::mongodb::DEFAULT_URL),
            // The path is the admin's authentication database.
            path_names_server: false,
            slice_name: |p, r, w| names::DATABASE.name(p, r, w),
            ..Facts::SERVER
        },
        // Checked by its own reader, which says why `mongodb+srv` is not
        // taken.
        schemes: &[],
        check_url: Some(|u| u.mongodb().map(drop)),
        example_url: "mongodb://127.0.0.1:27017",
        client: client(&["mongodb"], 27017),
    },
    Entry {
        name: "clickhouse",
        aliases: &[],
        make: || Arc::new(super::clickhouse::ClickHouse),
        options: &[TIMEOUT],
        fields: &["database"],
        facts: Facts {
            // Copies where the server can (24.10+) and refuses as
            // environmental elsewhere, so the world falls back.
            capabilities: CLONES,
            default_url: Some(super::clickhouse::DEFAULT_URL),
            // A path on the HTTP interface selects nothing.
            path_names_server: false,
            slice_name: |p, r, w| names::DATABASE.name(p, r, w),
            ..Facts::SERVER
        },
        schemes: crate::http::SCHEMES,
        check_url: Some(super::clickhouse::check_url),
        example_url: "http://127.0.0.1:8123",
        client: client(HTTP, 8123),
    },
    Entry {
        name: "qdrant",
        aliases: &[],
        make: || Arc::new(super::qdrant::Qdrant),
        options: &[
            OptionSpec {
                name: "collections",
                kind: OptionKind::Custom(super::qdrant::check_collections),
                help: "collections created under the world's prefix, each with its vector size and distance",
            },
            TIMEOUT,
        ],
        fields: &["prefix"],
        facts: Facts {
            default_url: Some(super::qdrant::DEFAULT_URL),
            // A path is where a proxy serves the API.
            path_names_server: false,
            slice_name: |p, r, w| names::COLLECTION_PREFIX.name(p, r, w),
            ..Facts::SERVER
        },
        schemes: crate::http::SCHEMES,
        check_url: Some(super::qdrant::check_url),
        example_url: "http://127.0.0.1:6333",
        client: client(HTTP, 6333),
    },
    Entry {
        name: "elasticsearch",
        aliases: &["opensearch"],
        make: || Arc::new(super::elasticsearch::Elasticsearch),
        options: &[TIMEOUT],
        fields: &["prefix"],
        facts: Facts {
            default_url: Some(super::elasticsearch::DEFAULT_URL),
            // A path is where a proxy serves the API, not where indices live.
            path_names_server: false,
            slice_name: |p, r, w| names::INDEX_PREFIX.name(p, r, w),
            ..Facts::SERVER
        },
        schemes: crate::http::SCHEMES,
        check_url: Some(super::elasticsearch::check_url),
        example_url: "http://127.0.0.1:9200",
        client: client(HTTP, 9200),
    },
];

/// The built-in adapter `adapter = name` means, if any.
pub fn find(name: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.answers_to(name))
}

/// The implementation `adapter = name` selects: a built-in adapter's own
/// name for any of its aliases (`mariadb` → `mysql`, `valkey` → `redis`),
/// else `name` itself (an external adapter).
pub fn implementation(name: &str) -> &str {
    find(name).map_or(name, |e| e.name)
}

/// Every name a built-in adapter answers to (names, then their aliases).
pub fn names() -> Vec<&'static str> {
    ENTRIES
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_url_option_says_why_and_never_echoes_the_url() {
        let check = |s: &str| OptionKind::HttpUrl.check(&toml::Value::String(s.into()));
        assert_eq!(check("http://127.0.0.1:15672"), Ok(()));
        let e = check("http://guest:hunter2@127.0.0.1:15672").unwrap_err();
        assert!(e.contains("user info") && !e.contains("hunter2"), "{e}");
        let e = check("ftp://x").unwrap_err();
        assert!(e.starts_with("an http://"), "{e}");
    }

    #[test]
    fn every_name_and_alias_finds_the_adapter_that_answers_to_it() {
        for name in names() {
            let e = find(name).unwrap_or_else(|| panic!("{name} is listed but not found"));
            let made = (e.make)();
            // The made adapter is the entry's implementation; aliases share it.
            assert!(
                e.answers_to(made.name()) || made.name() == e.name,
                "{name}: made {}",
                made.name()
            );
        }
        assert!(names().contains(&"sqlite"));
        assert!(find("nosuch").is_none());
        #[cfg(feature = "postgres")]
        assert_eq!(find("postgresql").unwrap().name, "postgres");
        #[cfg(feature = "mysql")]
        assert_eq!(find("mariadb").unwrap().options[0].name, "clone_strategy");
        #[cfg(feature = "redis")]
        assert_eq!(find("valkey").unwrap().fields, &["prefix"]);
        #[cfg(feature = "kafka")]
        assert_eq!(find("redpanda").unwrap().name, "kafka");
        assert_eq!(find("opensearch").unwrap().name, "elasticsearch");
        assert_eq!(find("qdrant").unwrap().fields, &["prefix"]);
    }

    /// A field an adapter fills but tokens cannot name would render as the
    /// literal `${db.database}` (it did, for `database`).
    #[test]
    fn every_field_an_adapter_fills_is_one_a_token_can_name() {
        for e in ENTRIES {
            for f in e.fields {
                assert!(
                    crate::config::render::SLICE_FIELDS.contains(f),
                    "{}: {f}",
                    e.name
                );
            }
        }
    }
}
