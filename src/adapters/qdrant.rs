//! `qdrant`: a collection prefix per world on a Qdrant server the user
//! runs, over its REST API (port 6333).
//!
//! The prefix is `<project>_<world-slug>_` ([`names::COLLECTION_PREFIX`]; the
//! last `_` makes it exact). Provision creates the collections named in
//! `options.collections` under it, each with its vector size and distance:
//!
//! ```toml
//! options = { collections = { docs = { size = 384, distance = "Cosine" } } }
//! ```
//!
//! so world `feat-a` of project `shop` gets `shop_feat-a_docs`.
//! `${SVC.prefix}` gives the prefix and `${SVC.url}` the server.
//! `admin_url` is the REST endpoint; an API key is its password
//! (`http://:KEY@127.0.0.1:6333`), sent in Qdrant's `api-key` header.
//!
//! Teardown lists the collections and deletes each under the prefix by its
//! name, never a pattern. There is no clone: copying a collection means a
//! snapshot and a recovery, which no Qdrant server here could exercise
//! (`capabilities` says no, and `clone_from` builds each world by
//! provision + migrate + seed).

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
pub const DEFAULT_URL: &str = "http://127.0.0.1:6333";
/// The distances a collection may use (Qdrant's own spelling).
pub const DISTANCES: &[&str] = &["Cosine", "Euclid", "Dot", "Manhattan"];
/// The largest vector size Qdrant takes (its `size` limit).
pub const MAX_SIZE: i64 = 65_536;

const SERVER: api::Server = api::Server {
    adapter: "qdrant",
    default_url: DEFAULT_URL,
    auth: Auth::KeyHeader("api-key"),
    unreachable: "check that Qdrant runs and that admin_url names its REST port (6333 by default)",
    slow: "it accepts connections but does not answer (stuck, or not Qdrant's REST port)",
    timeout: Duration::from_secs(30),
    max_body: 16 * 1024 * 1024,
    rule: &names::COLLECTION_PREFIX,
};

/// The Qdrant adapter.
pub struct Qdrant;

/// One collection `options.collections` asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Collection {
    /// Its name after the prefix.
    pub name: String,
    /// Vector size.
    pub size: i64,
    /// Distance (one of [`DISTANCES`]).
    pub distance: String,
}

/// `options.collections` read: `{ name = { size = N, distance = "Cosine" } }`.
///
/// # Errors
/// What is wrong, naming the collection and key.
pub fn collections(v: &toml::Value) -> Result<Vec<Collection>, String> {
    let table = v.as_table().ok_or(
        "a table of collections, such as { docs = { size = 384, distance = \"Cosine\" } }",
    )?;
    table
        .iter()
        .map(|(name, spec)| {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(format!(
                    "a table whose collection names are letters, digits, `_` and `-` (`{name}` is not one)"
                ));
            }
            let size = spec
                .get("size")
                .and_then(toml::Value::as_integer)
                .filter(|n| (1..=MAX_SIZE).contains(n))
                .ok_or_else(|| match spec.get("size") {
                    None => format!(
                        "a table whose collections each give `size`, the vector size (`{name}` gives none)"
                    ),
                    Some(v) => format!(
                        "a table whose collections' `size` is from 1 to {MAX_SIZE} (`{name}` has {v})"
                    ),
                })?;
            let distance = spec
                .get("distance")
                .and_then(toml::Value::as_str)
                .unwrap_or("Cosine");
            if !DISTANCES.contains(&distance) {
                return Err(format!(
                    "a table whose collections' `distance` is one of {} (`{name}` has \"{distance}\")",
                    DISTANCES.join(", ")
                ));
            }
            if let Some(extra) = spec.as_table().and_then(|t| {
                t.keys()
                    .find(|k| !matches!(k.as_str(), "size" | "distance"))
            }) {
                return Err(format!(
                    "a table whose collections give only `size` and `distance` (`{name}` gives `{extra}`)"
                ));
            }
            Ok(Collection {
                name: name.clone(),
                size,
                distance: distance.to_owned(),
            })
        })
        .collect()
}

/// `binky check`'s reading of `options.collections`.
pub(crate) fn check_collections(v: &toml::Value) -> Result<(), String> {
    collections(v).map(drop)
}

/// The collection names in a `GET /collections` answer under `prefix`.
pub fn under(body: &serde_json::Value, prefix: &str) -> Vec<String> {
    body["result"]["collections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

async fn listed(ep: &Endpoint, prefix: &str) -> Result<Vec<String>, AdapterError> {
    let f = ep.json("GET", "/collections", None).await?;
    if !f.status.is_success() {
        return Err(ep.refused("listing collections", &f, ""));
    }
    Ok(under(&ep.read(&f)?, prefix))
}

async fn delete(ep: &Endpoint, name: &str) -> Result<(), AdapterError> {
    let f = ep
        .json("DELETE", &format!("/collections/{}", encode(name)), None)
        .await?;
    // Qdrant answers 200 `{"result": false}` for a collection not there.
    match api::deleted(f.status.as_u16()) {
        Some(_) => Ok(()),
        None => Err(ep.refused(&format!("deleting collection {name}"), &f, "")),
    }
}

/// The world's collections: Qdrant lists them all at once, so a page is
/// the whole list.
struct Collections<'a> {
    ep: &'a Endpoint,
    prefix: &'a str,
}

impl Listing for Collections<'_> {
    type Name = String;

    async fn page(&mut self) -> Result<Page<String>, AdapterError> {
        Ok(Page {
            names: listed(self.ep, self.prefix).await?,
            more: false,
        })
    }

    async fn delete(&mut self, names: Vec<String>) -> Result<u64, AdapterError> {
        for n in &names {
            delete(self.ep, n).await?;
        }
        Ok(names.len() as u64)
    }
}

#[async_trait]
impl Adapter for Qdrant {
    fn name(&self) -> &str {
        "qdrant"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let ep = Endpoint::owned(SERVER, slice)?;
        let wanted = match slice.options.get("collections") {
            Some(v) => collections(v).map_err(|e| {
                AdapterError::new(format!("qdrant: options.collections must be {e}"))
            })?,
            None => Vec::new(),
        };
        if !listed(&ep, &slice.name)
            .await
            .map_err(|e| e.redacted(slice))?
            .is_empty()
        {
            return Err(AdapterError::new(format!(
                "qdrant at {}: collections under {} already exist",
                ep.host_port(),
                slice.name
            )));
        }
        let mut made: Vec<String> = Vec::new();
        for c in wanted {
            let name = format!("{}{}", slice.name, c.name);
            let body = serde_json::json!({"vectors": {"size": c.size, "distance": c.distance}});
            let made_one = match ep
                .json(
                    "PUT",
                    &format!("/collections/{}", encode(&name)),
                    Some(&body),
                )
                .await
            {
                Ok(f) if f.status.is_success() => Ok(()),
                Ok(f) => Err(ep.refused(&format!("creating collection {name}"), &f, "")),
                Err(e) => Err(e),
            };
            if let Err(e) = made_one {
                // A failed provision leaves nothing: undo what was made.
                for m in &made {
                    let _ = delete(&ep, m).await;
                }
                return Err(e.redacted(slice));
            }
            made.push(name);
        }
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        Ok(Endpoint::of(SERVER, slice)?.address().as_str().to_owned())
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let ep = Endpoint::owned(SERVER, slice)?;
        let mut listing = Collections {
            ep: &ep,
            prefix: &slice.name,
        };
        ep.drain(slice, "collections", &mut listing).await
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let ep = Endpoint::of(SERVER, slice)?;
        Ok(!listed(&ep, &slice.name)
            .await
            .map_err(|e| e.redacted(slice))?
            .is_empty())
    }

    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        vec![("prefix", slice.name.clone())]
    }
}

/// `binky check`'s reading of a literal `admin_url`.
pub(crate) fn check_url(url: &AdminUrl) -> Result<(), String> {
    url.http("http://:API_KEY@127.0.0.1:6333").map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> toml::Value {
        toml::from_str::<toml::Table>(&format!("c = {text}")).unwrap()["c"].clone()
    }

    #[test]
    fn collections_are_read_with_a_default_distance_and_checked() {
        let c = collections(&v(
            r#"{ docs = { size = 384 }, img = { size = 512, distance = "Dot" } }"#,
        ))
        .unwrap();
        assert_eq!(c[0].name, "docs");
        assert_eq!((c[0].size, c[0].distance.as_str()), (384, "Cosine"));
        assert_eq!((c[1].size, c[1].distance.as_str()), (512, "Dot"));
        for (bad, says) in [
            (r#"{ docs = { } }"#, "`docs` gives none"),
            (
                r#"{ docs = { size = 0 } }"#,
                "from 1 to 65536 (`docs` has 0)",
            ),
            (
                r#"{ docs = { size = 3, distance = "cos" } }"#,
                "one of Cosine",
            ),
            (
                r#"{ docs = { size = 3, dims = 3 } }"#,
                "`docs` gives `dims`",
            ),
            (r#"{ "a/b" = { size = 3 } }"#, "`a/b` is not one"),
            (r#"["docs"]"#, "a table of collections"),
        ] {
            let e = collections(&v(bad)).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn only_collections_under_the_exact_prefix_are_taken() {
        let body = serde_json::json!({"result": {"collections": [
            {"name": "shop_feat-a_docs"}, {"name": "shop_feat-a-2_docs"}, {"name": "docs"}
        ]}, "status": "ok", "time": 0.0});
        assert_eq!(under(&body, "shop_feat-a_"), ["shop_feat-a_docs"]);
    }
}
