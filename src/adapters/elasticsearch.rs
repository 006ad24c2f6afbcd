//! `elasticsearch` (also `opensearch`): an index prefix per world on a
//! search server the user runs, over its REST API.
//!
//! The prefix is `<project>-<world-slug>-<hash>-` ([`names::INDEX_PREFIX`]:
//! lowercase, `-` joins, so it always ends in a hash of the pair and the
//! last `-` makes it exact). A world's indices are the ones whose names
//! start with it; the app creates them (`${SVC.prefix}` gives the prefix,
//! `${SVC.url}` the server). `admin_url` is the REST endpoint with an
//! account that may create and delete indices, credentials as user info
//! (default `http://127.0.0.1:9200`, no security).
//!
//! Provision makes nothing (an index prefix is a name, not a thing) beyond
//! checking that the server answers and that nothing is under the prefix
//! yet. Teardown lists the indices and data streams under the prefix, then
//! deletes each **by its concrete name**, a page of names per request:
//! servers refuse wildcard deletes (`action.destructive_requires_name`,
//! the default since Elasticsearch 8), and a wildcard would be one typo from
//! a sibling world's data. There is no server-side copy of an index set, so
//! `capabilities` says no clone.

use super::kit::api::{self, Auth, Endpoint};
use super::kit::batch::{Listing, Page};
use super::kit::{
    address::{AdminUrl, encode},
    names,
};
use super::{Adapter, AdapterError, Slice};
use async_trait::async_trait;
use std::time::Duration;

/// The server when a resource has no `admin_url`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9200";
/// Indices deleted per request (their names go in the path).
const BATCH: usize = 50;

const SERVER: api::Server = api::Server {
    adapter: "elasticsearch",
    default_url: DEFAULT_URL,
    auth: Auth::Basic,
    unreachable: "check that the server runs and that admin_url names its REST port (9200 by default)",
    slow: "it accepts connections but does not answer (stuck, or not a search server's REST port)",
    timeout: Duration::from_secs(30),
    max_body: 16 * 1024 * 1024,
    rule: &names::INDEX_PREFIX,
};

/// The Elasticsearch/OpenSearch adapter.
pub struct Elasticsearch;

/// What is under a prefix: indices and data streams, by concrete name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Under {
    /// Index names (hidden and closed ones included).
    pub indices: Vec<String>,
    /// Data stream names.
    pub streams: Vec<String>,
}

/// The names in a `_cat/indices?format=json&h=index` answer that start
/// with `prefix` (the server matched the wildcard; this keeps only exact
/// prefixes, whatever the server's matching).
pub fn indices_in(body: &serde_json::Value, prefix: &str) -> Vec<String> {
    body.as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["index"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// The names in a `GET _data_stream/<prefix>*` answer that start with
/// `prefix`.
pub fn streams_in(body: &serde_json::Value, prefix: &str) -> Vec<String> {
    body["data_streams"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

async fn under(ep: &Endpoint, prefix: &str) -> Result<Under, AdapterError> {
    let path = format!(
        "/_cat/indices/{}*?format=json&h=index&expand_wildcards=all",
        encode(prefix)
    );
    let f = ep.json("GET", &path, None).await?;
    let indices = match f.status.as_u16() {
        200 => indices_in(&ep.read(&f)?, prefix),
        404 => Vec::new(),
        _ => return Err(ep.refused(&format!("listing the indices under {prefix}"), &f, "")),
    };
    let f = ep
        .json(
            "GET",
            &format!("/_data_stream/{}*?expand_wildcards=all", encode(prefix)),
            None,
        )
        .await?;
    // A server before data streams (Elasticsearch < 7.9) has none: it
    // answers 400 or 404 to the path.
    let streams = match f.status.as_u16() {
        200 => streams_in(&ep.read(&f)?, prefix),
        400 | 404 | 405 => Vec::new(),
        _ => {
            return Err(ep.refused(&format!("listing the data streams under {prefix}"), &f, ""));
        }
    };
    Ok(Under { indices, streams })
}

/// The world's indices and data streams, a page of names at a time.
struct Indices<'a> {
    ep: &'a Endpoint,
    prefix: &'a str,
}

/// One thing to delete.
enum Name {
    Index(String),
    Stream(String),
}

impl Listing for Indices<'_> {
    type Name = Name;

    async fn page(&mut self) -> Result<Page<Name>, AdapterError> {
        let u = under(self.ep, self.prefix).await?;
        // Streams first: a stream's backing indices are not under the
        // prefix (`.ds-…`), and it goes with them.
        let mut names: Vec<Name> = u.streams.into_iter().map(Name::Stream).collect();
        names.extend(u.indices.into_iter().map(Name::Index));
        let more = names.len() > BATCH;
        names.truncate(BATCH);
        Ok(Page { names, more })
    }

    async fn delete(&mut self, names: Vec<Name>) -> Result<u64, AdapterError> {
        let mut indices = Vec::new();
        let mut deleted = 0;
        for n in names {
            match n {
                Name::Stream(s) => {
                    let f = self
                        .ep
                        .json("DELETE", &format!("/_data_stream/{}", encode(&s)), None)
                        .await?;
                    if api::deleted(f.status.as_u16()).is_none() {
                        return Err(self
                            .ep
                            .refused(&format!("deleting data stream {s}"), &f, ""));
                    }
                    deleted += 1;
                }
                Name::Index(i) => indices.push(encode(&i)),
            }
        }
        if !indices.is_empty() {
            // Concrete names, comma-joined: no wildcard for the server to
            // expand.
            let path = format!("/{}?expand_wildcards=none", indices.join(","));
            let f = self.ep.json("DELETE", &path, None).await?;
            if api::deleted(f.status.as_u16()).is_none() {
                return Err(self.ep.refused(
                    &format!("deleting {} indices under {}", indices.len(), self.prefix),
                    &f,
                    "",
                ));
            }
            deleted += indices.len() as u64;
        }
        Ok(deleted)
    }
}

#[async_trait]
impl Adapter for Elasticsearch {
    fn name(&self) -> &str {
        "elasticsearch"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let ep = Endpoint::owned(SERVER, slice)?;
        let f = ep.json("GET", "/", None).await?;
        if !f.status.is_success() {
            return Err(ep.refused("asking who it is", &f, "").redacted(slice));
        }
        if self.exists(slice).await? {
            return Err(AdapterError::new(format!(
                "elasticsearch at {}: indices under {} already exist",
                ep.host_port(),
                slice.name
            )));
        }
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        Ok(Endpoint::of(SERVER, slice)?.address().as_str().to_owned())
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let ep = Endpoint::owned(SERVER, slice)?;
        let mut listing = Indices {
            ep: &ep,
            prefix: &slice.name,
        };
        ep.drain(slice, "indices", &mut listing).await
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let ep = Endpoint::of(SERVER, slice)?;
        let u = under(&ep, &slice.name)
            .await
            .map_err(|e| e.redacted(slice))?;
        Ok(!u.indices.is_empty() || !u.streams.is_empty())
    }

    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        vec![("prefix", slice.name.clone())]
    }
}

/// `binky check`'s reading of a literal `admin_url`.
pub(crate) fn check_url(url: &AdminUrl) -> Result<(), String> {
    url.http("http://user:password@127.0.0.1:9200").map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_under_the_exact_prefix_are_taken() {
        let cat = serde_json::json!([
            {"index": "shop-feat-a-203252-docs"},
            {"index": "shop-feat-a-203252-logs-2026"},
            // What a sloppy wildcard could match: not the world's.
            {"index": "shop-feat-a-2-9a9368-docs"},
            {"index": "other"}
        ]);
        assert_eq!(
            indices_in(&cat, "shop-feat-a-203252-"),
            ["shop-feat-a-203252-docs", "shop-feat-a-203252-logs-2026"]
        );
        let ds = serde_json::json!({"data_streams": [
            {"name": "shop-feat-a-203252-events"}, {"name": "logs-app"}
        ]});
        assert_eq!(
            streams_in(&ds, "shop-feat-a-203252-"),
            ["shop-feat-a-203252-events"]
        );
        assert!(indices_in(&serde_json::json!({}), "x-").is_empty());
    }

    #[test]
    fn prefixes_keep_the_index_name_rules() {
        let p = names::INDEX_PREFIX.name("shop", None, "feat-a");
        assert_eq!(p, "shop-feat-a-203252-");
        assert!(!p.starts_with(['-', '_', '+']));
        assert!(!p.contains(['\\', '/', '*', '?', '"', '<', '>', '|', ' ', ',', '#', ':']));
        assert_eq!(p, p.to_lowercase());
    }
}
