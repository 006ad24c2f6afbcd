//! Container images, to `binky init`: which are servers an adapter
//! slices (and which adapter name to write), which are tools for one (an
//! admin UI, a coordinator). It sits beside the adapter catalog: a test
//! checks every adapter it names is one `catalog::ENTRIES` has.

/// What a container image is, to `binky init`: a server an adapter
/// slices, or a tool that works on one (an admin UI, a coordinator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageIs {
    /// A server: the adapter name to write, the server's own name, and
    /// what the image adds to the plain server (an extension the user's
    /// server needs too).
    Server {
        /// The `adapter = "…"` to write (a name or alias in [`ENTRIES`](super::catalog::ENTRIES)).
        adapter: &'static str,
        /// The server's name, for comments.
        server: &'static str,
        /// An extension the image bundles, which a server the user runs
        /// must have as well.
        adds: Option<&'static str>,
    },
    /// A tool for a server (an admin UI, a coordinator), not the server:
    /// no world needs one of its own.
    Tool {
        /// What it is, as a phrase ("an admin UI for PostgreSQL").
        what: &'static str,
    },
}

/// One line of [`IMAGES`]: image repositories and what they are.
#[derive(Debug, Clone, Copy)]
pub struct ImageRule {
    /// Repository names as compose writes them, matched against the end of
    /// an image's path (`postgres` matches `docker.io/library/postgres`
    /// and `bitnami/postgres`; `redpandadata/console` only that path).
    pub repos: &'static [&'static str],
    /// What they are.
    pub is: ImageIs,
}

const fn server(adapter: &'static str, name: &'static str) -> ImageIs {
    ImageIs::Server {
        adapter,
        server: name,
        adds: None,
    }
}

const fn tool(what: &'static str) -> ImageIs {
    ImageIs::Tool { what }
}

/// The images `binky init` knows, beside the adapters they map onto; a
/// test checks every adapter named here is in [`ENTRIES`](super::catalog::ENTRIES). Vendor builds
/// (Bitnami, Percona, Redis Stack, KeyDB, Dragonfly) are listed by their
/// repository names.
pub const IMAGES: &[ImageRule] = &[
    ImageRule {
        repos: &["postgres", "postgresql", "postgresql-repmgr"],
        is: server("postgres", "PostgreSQL"),
    },
    ImageRule {
        repos: &["postgis"],
        is: ImageIs::Server {
            adapter: "postgres",
            server: "PostgreSQL",
            adds: Some("PostGIS (`CREATE EXTENSION postgis`)"),
        },
    },
    ImageRule {
        repos: &["pgvector"],
        is: ImageIs::Server {
            adapter: "postgres",
            server: "PostgreSQL",
            adds: Some("pgvector (`CREATE EXTENSION vector`)"),
        },
    },
    ImageRule {
        repos: &["timescaledb", "timescaledb-ha"],
        is: ImageIs::Server {
            adapter: "postgres",
            server: "PostgreSQL",
            adds: Some("TimescaleDB (`CREATE EXTENSION timescaledb`)"),
        },
    },
    ImageRule {
        repos: &["mysql", "mysql-server"],
        is: server("mysql", "MySQL"),
    },
    ImageRule {
        repos: &["mariadb", "mariadb-galera"],
        is: server("mariadb", "MariaDB"),
    },
    ImageRule {
        repos: &["percona", "percona-server"],
        is: server("percona", "Percona Server"),
    },
    ImageRule {
        repos: &[
            "mongo",
            "mongodb",
            "mongodb-community-server",
            "mongodb-enterprise-server",
        ],
        is: server("mongodb", "MongoDB"),
    },
    ImageRule {
        repos: &[
            "redis",
            "redis-stack",
            "redis-stack-server",
            "keydb",
            "dragonfly",
        ],
        is: server("redis", "Redis"),
    },
    ImageRule {
        repos: &["valkey"],
        is: server("valkey", "Valkey"),
    },
    ImageRule {
        repos: &["rabbitmq"],
        is: server("rabbitmq", "RabbitMQ"),
    },
    ImageRule {
        repos: &["kafka", "kafka-native", "cp-kafka", "cp-server"],
        is: server("kafka", "Kafka"),
    },
    ImageRule {
        repos: &["redpanda"],
        is: server("redpanda", "Redpanda"),
    },
    ImageRule {
        repos: &["minio"],
        is: server("minio", "MinIO"),
    },
    ImageRule {
        repos: &["qdrant"],
        is: server("qdrant", "Qdrant"),
    },
    ImageRule {
        repos: &["elasticsearch"],
        is: server("elasticsearch", "Elasticsearch"),
    },
    ImageRule {
        repos: &["opensearch"],
        is: server("opensearch", "OpenSearch"),
    },
    ImageRule {
        repos: &["clickhouse-server", "clickhouse"],
        is: server("clickhouse", "ClickHouse"),
    },
    ImageRule {
        repos: &["pgadmin4", "pgadmin"],
        is: tool("an admin UI for PostgreSQL"),
    },
    ImageRule {
        repos: &["adminer"],
        is: tool("an admin UI for SQL databases"),
    },
    ImageRule {
        repos: &["phpmyadmin"],
        is: tool("an admin UI for MySQL"),
    },
    ImageRule {
        repos: &["redis-commander", "redisinsight"],
        is: tool("an admin UI for Redis"),
    },
    ImageRule {
        repos: &["mongo-express"],
        is: tool("an admin UI for MongoDB"),
    },
    ImageRule {
        repos: &[
            "kafka-ui",
            "kafdrop",
            "akhq",
            "redpandadata/console",
            "cp-enterprise-control-center",
        ],
        is: tool("an admin UI for Kafka"),
    },
    ImageRule {
        repos: &["zookeeper", "cp-zookeeper"],
        is: tool("Kafka's coordinator, which a Kafka server you run already has"),
    },
    ImageRule {
        repos: &["cp-schema-registry"],
        is: tool("Kafka's schema registry"),
    },
    ImageRule {
        repos: &["kibana"],
        is: tool("a UI for Elasticsearch"),
    },
    ImageRule {
        repos: &["opensearch-dashboards"],
        is: tool("a UI for OpenSearch"),
    },
    ImageRule {
        repos: &["mc"],
        is: tool("MinIO's command-line client"),
    },
];

/// What image `reference` is, by [`IMAGES`]: the registry host, a tag
/// and a digest do not hide the match (`docker.io/library/postgres:16`,
/// `bitnami/redis@sha256:…`, `localhost:5000/qdrant/qdrant:v1`).
pub fn image(reference: &str) -> Option<&'static ImageRule> {
    let path = image_path(reference);
    IMAGES.iter().find(|r| {
        r.repos
            .iter()
            .any(|repo| path == *repo || path.ends_with(&format!("/{repo}")))
    })
}

/// An image reference's repository path, lowercased, with no registry
/// host, tag or digest.
fn image_path(reference: &str) -> String {
    let r = reference.trim().to_ascii_lowercase();
    let r = r.split('@').next().unwrap_or_default();
    let mut parts: Vec<&str> = r.split('/').collect();
    // A tag follows the last `:` of the last part (a registry's port is
    // in the first part).
    if let Some(last) = parts.last_mut() {
        *last = last.split(':').next().unwrap_or_default();
    }
    if parts.len() > 1
        && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost")
    {
        parts.remove(0);
    }
    if parts.len() > 1 && parts[0] == "library" {
        parts.remove(0);
    }
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "all-adapters")]
    use crate::adapters::catalog::find;

    #[test]
    fn images_map_past_registries_tags_and_digests() {
        let adapter = |r: &str| match image(r).map(|x| x.is) {
            Some(ImageIs::Server { adapter, .. }) => adapter,
            Some(ImageIs::Tool { .. }) => "tool",
            None => "none",
        };
        assert_eq!(adapter("postgres:16-alpine"), "postgres");
        assert_eq!(
            adapter("docker.io/library/postgres:16@sha256:abcd"),
            "postgres"
        );
        assert_eq!(adapter("bitnami/postgresql:latest"), "postgres");
        assert_eq!(adapter("postgis/postgis:16-3.4"), "postgres");
        assert_eq!(adapter("ghcr.io/acme/redis-stack-server"), "redis");
        assert_eq!(adapter("localhost:5000/qdrant/qdrant:v1.9"), "qdrant");
        assert_eq!(
            adapter("docker.elastic.co/elasticsearch/elasticsearch:8.14.0"),
            "elasticsearch"
        );
        assert_eq!(adapter("docker.elastic.co/kibana/kibana:8.14.0"), "tool");
        assert_eq!(adapter("opensearchproject/opensearch-dashboards:2"), "tool");
        assert_eq!(adapter("redpandadata/console"), "tool");
        assert_eq!(
            adapter("docker.redpanda.com/redpandadata/redpanda:v24"),
            "redpanda"
        );
        assert_eq!(adapter("confluentinc/cp-kafka:7.6.0"), "kafka");
        assert_eq!(adapter("clickhouse/clickhouse-server:24.8"), "clickhouse");
        assert_eq!(adapter("mongo:7"), "mongodb");
        assert_eq!(adapter("percona/percona-server:8.0"), "percona");
        assert_eq!(adapter("acme/api:${TAG}"), "none");
        assert_eq!(
            adapter("postgres-exporter"),
            "none",
            "a whole name, not a prefix"
        );
    }

    #[test]
    fn every_image_maps_onto_an_adapter_this_catalog_has() {
        for r in IMAGES {
            if let ImageIs::Server { adapter, .. } = r.is {
                #[cfg(feature = "all-adapters")]
                assert!(find(adapter).is_some(), "{adapter} of {:?}", r.repos);
                assert!(!adapter.is_empty());
            }
        }
    }
}
