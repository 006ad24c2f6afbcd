//! `kafka` (also `redpanda`): a topic prefix per world on a Kafka-protocol
//! broker the user runs, driven through the Kafka admin API (rskafka, pure
//! Rust: no librdkafka build).
//!
//! A world's slice is the prefix `<project>-<world-slug>-<hash>-`, the hash
//! being six hex digits of project and slug: `-` joins the two and may sit
//! inside either (`shop` + `feat-a` and `shop-feat` + `a`), so without it
//! two projects' worlds could share a prefix. Project and slug are DNS
//! labels, so a prefix holds only `a-z`, `0-9` and `-`: never `.` or `_`,
//! which Kafka treats as one character (they collide in its metric names). The topics in
//! `options.topics` are created under the prefix at provision; a wanted
//! topic that exists already, or differs from an existing one only by `.`
//! versus `_`, fails `up` naming the topic it collides with.
//!
//! A slice also has a marker topic,
//! `_binky-slice-<prefix>` (no project name starts with `_`, so no world's
//! prefix covers a marker): a slice exists while its marker does, and a
//! world's topics are those under its prefix that are not under a longer
//! prefix with a marker of its own. A prefix without a marker is not a
//! slice, and teardown leaves its topics alone (a failed `up` that refused
//! existing topics never deletes them). Teardown deletes exactly the
//! world's topics, then
//! lists the topics again until they are gone and fails, naming what is
//! left, when the broker keeps them (topic deletion disabled): it never
//! takes "marked for deletion" for deleted. The marker goes last, so a
//! failed teardown can be run again.
//!
//! `${SVC.url}` is the bootstrap servers (`127.0.0.1:9092`, comma-separated
//! when several), as Kafka clients take them; `${SVC.prefix}` is the prefix.
//! A broker has no server-side copy of a topic, so `capabilities().clone`
//! is false.

use super::kit::address;
use super::kit::address::AdminUrl;
use super::kit::owner::{self, Found};
use super::{Adapter, AdapterError, Slice};
use async_trait::async_trait;
use rskafka::client::error::{Error as KafkaError, ProtocolError};
use rskafka::client::{Client, ClientBuilder};
use std::time::{Duration, Instant};

/// The broker when a resource has no `admin_url`.
pub const DEFAULT_URL: &str = "kafka://127.0.0.1:9092";
/// Kafka's default port, when a server in `admin_url` names none.
pub const DEFAULT_PORT: u16 = 9092;
/// Default wait for one admin call, and for the broker to delete a world's
/// topics at teardown.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Kafka's longest topic name, bytes.
pub const MAX_TOPIC: usize = 249;
/// The longest prefix: a project name (a DNS label, 63 bytes), a world slug,
/// a six-digit hash and three `-`.
pub const MAX_PREFIX: usize = super::kit::names::TOPIC_PREFIX.max_len;
/// The longest name in `options.topics`, so that every world's topic fits.
pub const MAX_TOPIC_SUFFIX: usize = MAX_TOPIC - MAX_PREFIX;
/// How a slice's marker topic starts (the kit's spelling).
const MARKER: &str = "_binky-slice-";
/// Longest rskafka retries a lost or refused connection before giving up
/// (its default is forever): a dead broker fails fast, whatever the timeout.
const RETRY_FOR: Duration = Duration::from_secs(5);
/// How often teardown lists the topics again while the broker deletes them.
const RELIST: Duration = Duration::from_millis(200);

/// The Kafka adapter.
pub struct Kafka;

impl AdminUrl {
    /// The bootstrap servers this URL names (`kafka://h1:9092,h2:9092`, a
    /// list no URL parser takes whole) as `host:port`; `binky check`
    /// refuses a literal `admin_url` by this same reader.
    ///
    /// # Errors
    /// Another scheme, credentials (SASL is not supported), a path, or a
    /// server without a host or with a bad port.
    pub(crate) fn bootstrap(&self) -> Result<Vec<String>, String> {
        // Credentials first: the list reader would take them as a host's.
        if address::userinfo(self.as_str()).is_some() {
            return Err("admin_url holds credentials, but the kafka adapter does not support SASL yet: use a listener without authentication".into());
        }
        address::parse_list(self.as_str(), "kafka", DEFAULT_URL)
            .map_err(|e| format!("admin_url {e}"))
    }
}

/// The one spelling Kafka sees for a topic name: `.` and `_` are one
/// character to it.
fn collision_key(topic: &str) -> String {
    topic.replace('.', "_")
}

/// Checks `options.topics`: topic names Kafka accepts under any world's
/// prefix, no two of which collide. The `Err` says what is wrong, for
/// `binky check`.
pub fn check_topics(v: &toml::Value) -> Result<(), String> {
    let Some(names) = v.as_array() else {
        return Err("an array of topic names".into());
    };
    let mut seen: Vec<(String, &str)> = Vec::new();
    for n in names {
        let Some(name) = n.as_str() else {
            return Err("an array of topic names (strings)".into());
        };
        if name.is_empty()
            || name.len() > MAX_TOPIC_SUFFIX
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(format!(
                "topic names of 1 to {MAX_TOPIC_SUFFIX} letters, digits, `.`, `_` and `-`; `{name}` is not one"
            ));
        }
        let key = collision_key(name);
        if let Some((_, other)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(if *other == name {
                format!("distinct topic names; `{name}` is listed twice")
            } else {
                format!(
                    "distinct topic names; `{other}` and `{name}` are one name to Kafka, which treats `.` and `_` alike"
                )
            });
        }
        seen.push((key, name));
    }
    Ok(())
}

fn marker(slice: &Slice) -> String {
    owner::marker('-', &slice.name)
}

/// The world's topics among `topics`: those under its prefix that are not
/// under a longer prefix another slice's marker claims.
fn world_topics(prefix: &str, topics: &[String]) -> Vec<String> {
    let longer: Vec<&str> = topics
        .iter()
        .filter_map(|t| t.strip_prefix(MARKER))
        .filter(|p| p.len() > prefix.len() && p.starts_with(prefix))
        .collect();
    topics
        .iter()
        .filter(|t| t.starts_with(prefix) && !longer.iter().any(|l| t.starts_with(l)))
        .cloned()
        .collect()
}

/// The topics `options.topics` asks for, under the slice's prefix.
fn wanted_topics(slice: &Slice) -> Vec<String> {
    slice
        .options
        .get("topics")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str())
                .map(|t| format!("{}{t}", slice.name))
                .collect()
        })
        .unwrap_or_default()
}

/// A positive count option (`partitions`, `replication_factor`), else 1.
fn count(slice: &Slice, key: &str) -> i64 {
    slice
        .options
        .get(key)
        .and_then(|v| v.as_integer())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// An admin connection to the broker.
struct Admin {
    client: Client,
    /// The bootstrap servers, for messages.
    servers: String,
    timeout: Duration,
}

impl Admin {
    async fn connect(slice: &Slice) -> Result<Admin, AdapterError> {
        let servers = slice
            .admin_url_or(DEFAULT_URL)
            .bootstrap()
            .map_err(|e| AdapterError::new(format!("kafka: {e}")).redacted(slice))?;
        let shown = servers.join(",");
        let timeout = slice.timeout(DEFAULT_TIMEOUT);
        // rskafka retries a lost connection forever by default.
        let backoff = rskafka::BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            deadline: Some(timeout.min(RETRY_FOR)),
            ..Default::default()
        };
        let build = ClientBuilder::new(servers)
            .client_id("binky")
            .backoff_config(backoff)
            .build();
        let unreachable = |e: String| {
            AdapterError::environmental(format!(
                "kafka: cannot connect to {shown} (admin_url): {e}; check that the broker runs, that admin_url names it and that it advertises an address this machine reaches"
            ))
        };
        let client = match tokio::time::timeout(timeout, build).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => return Err(unreachable(format!("no answer within {timeout:?}"))),
        };
        Ok(Admin {
            client,
            servers: shown,
            timeout,
        })
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> AdapterError {
        AdapterError::new(format!("kafka at {}: {what}: {e}", self.servers))
    }

    /// Runs one admin call within the timeout.
    async fn within<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, KafkaError>>,
    ) -> Result<Result<T, KafkaError>, AdapterError> {
        tokio::time::timeout(self.timeout, call).await.map_err(|_| {
            self.err(
                what,
                format!(
                    "no answer within {:?}: the broker is gone or slow (raise options.timeout if it is only slow)",
                    self.timeout
                ),
            )
        })
    }

    async fn list(&self) -> Result<Vec<String>, AdapterError> {
        let what = "listing topics";
        let topics = self
            .within(what, self.client.list_topics())
            .await?
            .map_err(|e| self.err(what, e))?;
        Ok(topics.into_iter().map(|t| t.name).collect())
    }

    async fn create(
        &self,
        topic: &str,
        partitions: i64,
        replicas: i64,
    ) -> Result<(), AdapterError> {
        let what = format!("creating topic `{topic}`");
        let controller = self
            .client
            .controller_client()
            .map_err(|e| self.err(&what, e))?;
        let partitions = i32::try_from(partitions).unwrap_or(i32::MAX);
        let replicas = i16::try_from(replicas).unwrap_or(i16::MAX);
        let ms = i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX);
        match self
            .within(
                &what,
                controller.create_topic(topic, partitions, replicas, ms),
            )
            .await?
        {
            Ok(()) => Ok(()),
            Err(KafkaError::ServerError {
                protocol_error: ProtocolError::TopicAlreadyExists,
                ..
            }) => Err(self.err(&what, "it already exists")),
            Err(KafkaError::ServerError {
                protocol_error: ProtocolError::InvalidReplicationFactor,
                ..
            }) => Err(self.err(
                &what,
                format!(
                    "the broker cannot place {replicas} replicas; lower options.replication_factor"
                ),
            )),
            Err(e) => Err(self.err(&what, e)),
        }
    }

    /// Asks the broker to delete `topic`; one it does not know is gone.
    async fn delete(&self, topic: &str) -> Result<(), AdapterError> {
        let what = format!("deleting topic `{topic}`");
        let controller = self
            .client
            .controller_client()
            .map_err(|e| self.err(&what, e))?;
        let ms = i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX);
        match self.within(&what, controller.delete_topic(topic, ms)).await? {
            Ok(())
            | Err(KafkaError::ServerError {
                protocol_error: ProtocolError::UnknownTopicOrPartition,
                ..
            }) => Ok(()),
            Err(KafkaError::ServerError {
                protocol_error: ProtocolError::TopicDeletionDisabled,
                ..
            }) => Err(self.err(
                &what,
                "the broker has topic deletion disabled (delete.topic.enable=false); enable it, or delete the topics by hand",
            )),
            Err(e) => Err(self.err(&what, e)),
        }
    }

    /// Deletes `topics` and lists the topics until none of them is left,
    /// for at most the timeout.
    ///
    /// # Errors
    /// The first refusal, or the names still listed when the time is up.
    async fn delete_all(&self, topics: &[String]) -> Result<(), AdapterError> {
        for t in topics {
            self.delete(t).await?;
        }
        let until = Instant::now() + self.timeout;
        loop {
            let listed = self.list().await?;
            let left: Vec<&String> = topics.iter().filter(|t| listed.contains(t)).collect();
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= until {
                let names: Vec<&str> = left.iter().map(|t| t.as_str()).collect();
                return Err(AdapterError::new(format!(
                    "kafka at {}: the broker still lists {} {:?} after accepting {} deletion: it marked {} for deletion without deleting {} (is delete.topic.enable false?); delete {} by hand, then run `binky gc`",
                    self.servers,
                    names.join(", "),
                    self.timeout,
                    if names.len() == 1 { "its" } else { "their" },
                    if names.len() == 1 { "it" } else { "them" },
                    if names.len() == 1 { "it" } else { "them" },
                    if names.len() == 1 { "it" } else { "them" },
                )));
            }
            tokio::time::sleep(RELIST).await;
        }
    }
}

#[async_trait]
impl Adapter for Kafka {
    fn name(&self) -> &str {
        "kafka"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let admin = Admin::connect(slice).await?;
        let existing = admin.list().await?;
        let marker = marker(slice);
        if existing.contains(&marker) {
            return Err(admin.err(
                "provision",
                format!(
                    "the slice {} already exists (its marker topic {marker} does)",
                    slice.name
                ),
            ));
        }
        let wanted = wanted_topics(slice);
        for t in &wanted {
            let key = collision_key(t);
            if let Some(other) = existing.iter().find(|e| collision_key(e) == key) {
                let why = if other == t {
                    "it exists already and Binky did not make it; delete it, or rename the topic in options.topics".to_owned()
                } else {
                    format!(
                        "it collides with the existing topic `{other}`: Kafka treats `.` and `_` alike; rename it in options.topics"
                    )
                };
                return Err(admin.err(&format!("creating topic `{t}`"), why));
            }
        }
        let stale = world_topics(&slice.name, &existing);
        if !stale.is_empty() {
            return Err(admin.err(
                "provision",
                format!(
                    "topics under the world's prefix {} exist already: {}; a world that was never torn down left them? delete them, then run `binky up` again",
                    slice.name,
                    stale.join(", ")
                ),
            ));
        }
        let (partitions, replicas) = (
            count(slice, "partitions"),
            count(slice, "replication_factor"),
        );
        // The marker first: a crash after it leaves a slice `gc` can see.
        admin.create(&marker, 1, replicas).await?;
        let mut made = Vec::new();
        for t in &wanted {
            if let Err(e) = admin.create(t, partitions, replicas).await {
                let _ = admin.delete_all(&made).await;
                let _ = admin.delete_all(std::slice::from_ref(&marker)).await;
                return Err(e);
            }
            made.push(t.clone());
        }
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        slice
            .admin_url_or(DEFAULT_URL)
            .bootstrap()
            .map(|s| s.join(","))
            .map_err(|e| AdapterError::new(format!("kafka: {e}")).redacted(slice))
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let server = slice
            .admin_url_or(DEFAULT_URL)
            .bootstrap()
            .map_or_else(|_| "the broker".to_owned(), |s| s.join(","));
        owner::check_name(
            "kafka",
            &server,
            &super::kit::names::TOPIC_PREFIX,
            &slice.name,
        )?;
        let admin = Admin::connect(slice).await?;
        let topics = admin.list().await?;
        let marker = marker(slice);
        let world = world_topics(&slice.name, &topics);
        // No marker, no slice: topics under the prefix that Binky did not
        // make (the ones a failed provision refused) are not its to delete.
        let found = if topics.contains(&marker) {
            Found::Ours
        } else if world.is_empty() {
            Found::Gone
        } else {
            Found::Unmarked(format!("the topics {} lie under it", world.join(", ")))
        };
        if !owner::guard("kafka", &admin.servers, &slice.name, found)? {
            return Ok(());
        }
        admin.delete_all(&world).await?;
        admin.delete_all(&[marker]).await
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let admin = Admin::connect(slice).await?;
        Ok(admin.list().await?.contains(&marker(slice)))
    }

    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        vec![("prefix", slice.name.clone())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_urls_list_bootstrap_servers() {
        assert_eq!(
            AdminUrl::new("kafka://127.0.0.1:9092").bootstrap().unwrap(),
            ["127.0.0.1:9092"]
        );
        assert_eq!(
            AdminUrl::new("kafka://a:1,b,[::1]:3/").bootstrap().unwrap(),
            ["a:1", "b:9092", "[::1]:3"]
        );
        for bad in [
            "127.0.0.1:9092",
            "http://h:1",
            "kafka://u:p@h:1",
            "kafka://h:1/x",
            "kafka://h:0",
            "kafka://h:99999",
            "kafka://:1",
            "kafka://h:1,,",
        ] {
            assert!(AdminUrl::new(bad).bootstrap().is_err(), "{bad}");
        }
        let e = AdminUrl::new("kafka://admin:Hunter2@h:1")
            .bootstrap()
            .unwrap_err();
        assert!(!e.contains("Hunter2"), "{e}");
        let e = AdminUrl::new("kafka://admin:Hunter2")
            .bootstrap()
            .unwrap_err();
        assert!(!e.contains("Hunter2"), "{e}");
    }

    #[test]
    fn prefixes_hold_no_dot_or_underscore_and_markers_sit_outside_them() {
        let p = Kafka.slice_name("shop", None, "feat-a");
        assert!(p.starts_with("shop-feat-a-") && p.ends_with('-'), "{p}");
        assert_eq!(p.len(), "shop-feat-a-".len() + 7, "{p}");
        assert!(!p.contains(['.', '_']));
        // `-` joins project and slug and may sit inside either.
        assert_ne!(p, Kafka.slice_name("shop-feat", None, "a"));
        assert!(MARKER.starts_with('_'));
        // The longest project and branch still leave room for any name
        // `binky check` lets into options.topics.
        let slug = crate::slug::world_slug(&"Very-Long-Branch/".repeat(10));
        let longest = Kafka.slice_name(&"p".repeat(63), None, &slug);
        assert!(longest.len() <= MAX_PREFIX, "{longest}");
        assert!(longest.len() + MAX_TOPIC_SUFFIX <= MAX_TOPIC);
    }

    #[test]
    fn a_world_owns_its_prefix_but_not_a_longer_worlds() {
        let topics: Vec<String> = [
            "shop-feat-a-orders",
            "shop-feat-a-2-orders",
            "_binky-slice-shop-feat-a-2-",
            "_binky-slice-shop-feat-a-",
            "shop-feat-b-orders",
            "shop-feat-a-2x",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            world_topics("shop-feat-a-", &topics),
            ["shop-feat-a-orders", "shop-feat-a-2x"]
        );
        assert_eq!(
            world_topics("shop-feat-a-2-", &topics),
            ["shop-feat-a-2-orders"]
        );
        // Without feat-a-2's marker, its leftovers are feat-a's to sweep.
        let orphaned: Vec<String> = topics
            .iter()
            .filter(|t| !t.ends_with("a-2-") || !t.starts_with('_'))
            .cloned()
            .collect();
        assert!(world_topics("shop-feat-a-", &orphaned).contains(&"shop-feat-a-2-orders".into()));
    }

    #[test]
    fn topic_options_are_checked_for_names_and_collisions() {
        let v = |s: &str| s.parse::<toml::Table>().unwrap()["t"].clone();
        assert!(check_topics(&v("t = [\"orders\", \"order.events\", \"a-b\"]")).is_ok());
        let e = check_topics(&v("t = [\"order.events\", \"order_events\"]")).unwrap_err();
        assert!(e.contains("`order.events` and `order_events`"), "{e}");
        let e = check_topics(&v("t = [\"orders\", \"orders\"]")).unwrap_err();
        assert!(e.contains("`orders` is listed twice"), "{e}");
        assert!(check_topics(&v("t = [\"a b\"]")).is_err());
        assert!(check_topics(&v("t = [\"\"]")).is_err());
        let longest = format!("t = [\"{}\"]", "x".repeat(MAX_TOPIC_SUFFIX));
        assert!(check_topics(&v(&longest)).is_ok());
        let over = format!("t = [\"{}\"]", "x".repeat(MAX_TOPIC_SUFFIX + 1));
        assert!(check_topics(&v(&over)).is_err());
        assert!(check_topics(&v("t = [1]")).is_err());
        assert!(check_topics(&v("t = \"orders\"")).is_err());
    }
}
