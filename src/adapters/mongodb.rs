//! `mongodb`: a database per world on a MongoDB server (or one that speaks
//! its wire protocol) the user runs, through MongoDB's official driver.
//!
//! The database is `<project>_<world-slug>` ([`names::DATABASE`]: at most 63
//! bytes, none of `/\. "$`). `admin_url` is a `mongodb://` URL with an
//! account that may create and drop databases (default
//! `mongodb://127.0.0.1:27017`); a world's address is that URL with the
//! world's database as its path (`${SVC.database}` gives the name alone).
//! A database exists on the server once something is written to it, so a
//! world whose database is still empty is simply made again at its next
//! `up` (there is nothing in it to lose).
//!
//! `clone_from` copies the template server-side where the server can:
//! each collection is created with the template's options (validator,
//! validation level and action, capped size, collation; views with their
//! pipeline), its documents copied by an aggregation ending in `$merge`
//! into the new database, then its indexes re-created from the template's
//! `listIndexes`. A server without `$merge` (MongoDB before 4.2, or a
//! partial implementation of the protocol) gets the documents streamed
//! through the driver in batches instead; the error of the server-side path
//! is kept in the log line that says which path ran.

use super::kit::address::{self, Address, AdminUrl};
use super::kit::{names, owner};
use super::{Adapter, AdapterError, Cloned, Slice};
use async_trait::async_trait;
use mongodb::bson::{Document, RawDocumentBuf, doc};
use mongodb::options::ClientOptions;
use std::time::Duration;

/// The server when a resource has no `admin_url`.
pub const DEFAULT_URL: &str = "mongodb://127.0.0.1:27017";
/// Default wait for the server to be found and each call to answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// Documents per insert when a clone streams them.
const BATCH: usize = 1000;

/// The MongoDB adapter.
pub struct MongoDb;

impl AdminUrl {
    /// This URL as a `mongodb://` server URL; `binky check` refuses a
    /// literal `admin_url` by this same reader.
    ///
    /// # Errors
    /// `mongodb+srv://`, a user or password with a character the driver
    /// wants percent-encoded, or what [`AdminUrl::read`] refuses.
    pub(crate) fn mongodb(&self) -> Result<&Address, String> {
        if let Some(why) = mongodb_problem(self.as_str()) {
            return Err(why);
        }
        self.read(&["mongodb"], DEFAULT_URL)
            .map_err(|e| format!("admin_url {e}"))
    }
}

/// What the driver would refuse in `url` that the URL reader takes.
fn mongodb_problem(url: &str) -> Option<String> {
    if url.starts_with("mongodb+srv://") {
        return Some(
            "admin_url is mongodb+srv://, which needs a DNS SRV lookup this build does not make: write the hosts out as mongodb://host:port"
                .to_owned(),
        );
    }
    // The driver refuses these unencoded in the user info, once `up` has
    // begun; `check` says so first.
    if let Some((user, password)) = address::userinfo(url) {
        let bad = |s: &str| {
            s.contains(['@', ':', '/', '?', '#', '[', ']'])
                || s.match_indices('%').any(|(i, _)| {
                    !s.get(i + 1..i + 3)
                        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                })
        };
        if bad(user) || password.is_some_and(bad) {
            return Some(
                "admin_url's user or password holds a character it must percent-encode (`@` is %40, `:` %3A, `/` %2F, `?` %3F, `#` %23, `[` %5B, `]` %5D, `%` %25)"
                    .to_owned(),
            );
        }
    }
    None
}

/// A connected client and where it points, for messages.
struct Server {
    client: mongodb::Client,
    shown: String,
    /// How long the server may take to be found.
    wait: Duration,
    /// `admin_url` asks for TLS (`tls=true` or `ssl=true`).
    tls: bool,
}

impl Server {
    async fn of(slice: &Slice) -> Result<Server, AdapterError> {
        let url = slice.admin_url_or(DEFAULT_URL);
        let address = url
            .mongodb()
            .map_err(|e| AdapterError::new(format!("mongodb: {e}")).redacted(slice))?;
        let shown = address.host_port();
        let wait = slice.timeout(DEFAULT_TIMEOUT);
        let mut opts = ClientOptions::parse(url.as_str()).await.map_err(|e| {
            AdapterError::new(format!("mongodb at {shown}: admin_url: {e}")).redacted(slice)
        })?;
        opts.server_selection_timeout = Some(wait);
        opts.connect_timeout = Some(wait.min(Duration::from_secs(10)));
        opts.app_name = Some("binky".to_owned());
        let client = mongodb::Client::with_options(opts)
            .map_err(|e| AdapterError::new(format!("mongodb at {shown}: {e}")).redacted(slice))?;
        let tls = ["tls", "ssl"]
            .iter()
            .any(|k| address.query_value(k).as_deref() == Some("true"));
        Ok(Server {
            client,
            shown,
            wait,
            tls,
        })
    }

    /// `e` as an adapter error: a server that could not be reached is
    /// environmental; never a credential (the caller redacts).
    fn error(&self, what: &str, e: &mongodb::error::Error) -> AdapterError {
        use mongodb::error::ErrorKind;
        let tls = if self.tls {
            "; admin_url asks for TLS (tls=true): check that the server speaks it"
        } else {
            ""
        };
        match &*e.kind {
            ErrorKind::ServerSelection { .. } => AdapterError::environmental(format!(
                "mongodb at {}: {what}: cannot reach the server (none answered within {:?}); check that it runs and that admin_url names it, or raise options.timeout{tls}",
                self.shown, self.wait
            )),
            ErrorKind::Io(io) => AdapterError::environmental(format!(
                "mongodb at {}: {what}: cannot reach the server ({}); check that it runs and that admin_url names it{tls}",
                self.shown,
                first_line(&io.to_string())
            )),
            ErrorKind::Authentication { message, .. } => AdapterError::new(format!(
                "mongodb at {}: {what}: the server refused the credentials in admin_url ({})",
                self.shown,
                first_line(message)
            )),
            kind => AdapterError::new(format!(
                "mongodb at {}: {what}: {}",
                self.shown,
                first_line(&kind.to_string())
            )),
        }
    }

    async fn has(&self, db: &str) -> Result<bool, mongodb::error::Error> {
        let names = self
            .client
            .list_database_names()
            .filter(doc! {"name": db})
            .await?;
        Ok(names.iter().any(|n| n == db))
    }
}

/// The first line of a driver error, at most 300 characters: some carry a
/// whole topology description.
fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

fn check_ours(server: &str, slice: &Slice) -> Result<(), AdapterError> {
    owner::check_name("mongodb", server, &names::DATABASE, &slice.name)
}

/// The `create` command that makes collection `name` as the template's
/// `listCollections` entry `spec` describes: its `options` kept whole
/// (validator, capped, collation, a view's `viewOn` and `pipeline`).
pub fn create_command(name: &str, spec: &Document) -> Document {
    let mut cmd = doc! {"create": name};
    if let Ok(opts) = spec.get_document("options") {
        for (k, v) in opts {
            cmd.insert(k.clone(), v.clone());
        }
    }
    cmd
}

/// The `createIndexes` entries for a template's `listIndexes` answer:
/// every index but `_id_` (made with the collection), each without the
/// fields the server fills in itself (`v`, `ns`).
pub fn index_specs(listed: &[Document]) -> Vec<Document> {
    listed
        .iter()
        .filter(|i| i.get_str("name").ok() != Some("_id_"))
        .map(|i| {
            let mut i = i.clone();
            i.remove("v");
            i.remove("ns");
            i
        })
        .collect()
}

/// How a clone copied the documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPath {
    /// Server-side, by `$merge`.
    Merge,
    /// Through the driver, in batches.
    Stream,
}

impl MongoDb {
    async fn copy(
        &self,
        s: &Server,
        from: &str,
        to: &str,
    ) -> Result<CopyPath, mongodb::error::Error> {
        let src = s.client.database(from);
        let dst = s.client.database(to);
        let mut cursor = src.run_cursor_command(doc! {"listCollections": 1}).await?;
        let mut specs = Vec::new();
        while cursor.advance().await? {
            specs.push(cursor.deserialize_current()?);
        }
        let mut path = CopyPath::Merge;
        // Views last: one may be on a collection made here.
        specs.sort_by_key(|c: &Document| c.get_str("type").ok() == Some("view"));
        for spec in &specs {
            let Ok(name) = spec.get_str("name") else {
                continue;
            };
            if name.starts_with("system.") {
                continue;
            }
            dst.run_command(create_command(name, spec)).await?;
            if spec.get_str("type").ok() == Some("view") {
                continue;
            }
            if path == CopyPath::Merge {
                let merge = doc! {
                    "aggregate": name,
                    "pipeline": [{"$merge": {"into": {"db": to, "coll": name}, "whenMatched": "keepExisting", "whenNotMatched": "insert"}}],
                    "cursor": {},
                    "bypassDocumentValidation": true,
                };
                if src.run_command(merge).await.is_err() {
                    path = CopyPath::Stream;
                }
            }
            if path == CopyPath::Stream {
                stream(&src, &dst, name).await?;
            }
            let mut cursor = src.run_cursor_command(doc! {"listIndexes": name}).await?;
            let mut listed = Vec::new();
            while cursor.advance().await? {
                listed.push(cursor.deserialize_current()?);
            }
            let specs = index_specs(&listed);
            if !specs.is_empty() {
                dst.run_command(doc! {"createIndexes": name, "indexes": specs})
                    .await?;
            }
        }
        Ok(path)
    }
}

/// Copies collection `name`'s documents from `src` to `dst` in batches of
/// [`BATCH`], through the driver.
async fn stream(
    src: &mongodb::Database,
    dst: &mongodb::Database,
    name: &str,
) -> Result<(), mongodb::error::Error> {
    let from = src.collection::<RawDocumentBuf>(name);
    let to = dst.collection::<RawDocumentBuf>(name);
    // Whatever an interrupted `$merge` wrote is replaced.
    to.delete_many(doc! {}).await?;
    let mut cursor = from.find(doc! {}).batch_size(BATCH as u32).await?;
    let mut batch = Vec::with_capacity(BATCH);
    while cursor.advance().await? {
        batch.push(cursor.current().to_owned());
        if batch.len() == BATCH {
            to.insert_many(std::mem::take(&mut batch))
                .bypass_document_validation(true)
                .await?;
        }
    }
    if !batch.is_empty() {
        to.insert_many(batch)
            .bypass_document_validation(true)
            .await?;
    }
    Ok(())
}

#[async_trait]
impl Adapter for MongoDb {
    fn name(&self) -> &str {
        "mongodb"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let s = Server::of(slice).await?;
        check_ours(&s.shown, slice)?;
        let there = s
            .has(&slice.name)
            .await
            .map_err(|e| s.error("listing databases", &e).redacted(slice))?;
        if there {
            return Err(AdapterError::new(format!(
                "mongodb at {}: the database {} already exists",
                s.shown, slice.name
            )));
        }
        // A database is made by its first write: nothing to do yet but to
        // know the server lets this account in (the listing above).
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let url = slice.admin_url_or(DEFAULT_URL);
        let a = url
            .mongodb()
            .map_err(|e| AdapterError::new(format!("mongodb: {e}")).redacted(slice))?;
        // The admin's own database (`/admin`) was where it authenticates:
        // keep that as `authSource` so the world's URL still logs in.
        let mut u = url::Url::parse(&a.with_database(&slice.name))
            .map_err(|e| AdapterError::new(format!("mongodb: {e}")))?;
        let auth_db = a.database();
        let has_source = u.query_pairs().any(|(k, _)| k == "authSource");
        if !a.user().is_empty() && !has_source {
            let source = if auth_db.is_empty() {
                "admin"
            } else {
                &auth_db
            };
            u.query_pairs_mut().append_pair("authSource", source);
        }
        Ok(u.into())
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let s = Server::of(slice).await?;
        check_ours(&s.shown, slice)?;
        s.client.database(&slice.name).drop().await.map_err(|e| {
            s.error(&format!("dropping database {}", slice.name), &e)
                .redacted(slice)
        })
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let s = Server::of(slice).await?;
        s.has(&slice.name)
            .await
            .map_err(|e| s.error("listing databases", &e).redacted(slice))
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let s = Server::of(slice).await?;
        check_ours(&s.shown, slice)?;
        let started = std::time::Instant::now();
        match self.copy(&s, &template.name, &slice.name).await {
            Ok(path) => {
                tracing::info!(
                    template = %template.name,
                    slice = %slice.name,
                    path = ?path,
                    took_ms = started.elapsed().as_millis() as u64,
                    "mongodb clone"
                );
                Ok(Cloned::said(match path {
                    CopyPath::Merge => "$merge on the server",
                    CopyPath::Stream => "streamed through binky",
                }))
            }
            Err(e) => {
                let _ = s.client.database(&slice.name).drop().await;
                Err(s
                    .error(
                        &format!("cloning {} into {}", template.name, slice.name),
                        &e,
                    )
                    .redacted(slice))
            }
        }
    }

    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        vec![("database", slice.name.clone())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_options_and_indexes_are_carried_whole() {
        let spec = doc! {"name": "users", "type": "collection", "options": {
            "validator": {"$jsonSchema": {"required": ["name"]}},
            "validationLevel": "strict",
        }};
        assert_eq!(
            create_command("users", &spec),
            doc! {"create": "users", "validator": {"$jsonSchema": {"required": ["name"]}}, "validationLevel": "strict"}
        );
        let listed = [
            doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"},
            doc! {"v": 2, "key": {"email": 1}, "name": "email_1", "unique": true, "ns": "t.users"},
        ];
        assert_eq!(
            index_specs(&listed),
            [doc! {"key": {"email": 1}, "name": "email_1", "unique": true}]
        );
    }

    #[test]
    fn admin_urls_are_checked_as_up_reads_them() {
        assert!(
            AdminUrl::new("mongodb://u:p@127.0.0.1:27017/admin")
                .mongodb()
                .is_ok()
        );
        let e = AdminUrl::new("mongodb+srv://u:secret@cluster.example")
            .mongodb()
            .unwrap_err();
        assert!(e.contains("DNS SRV"), "{e}");
        assert!(!e.contains("secret"));
        assert!(AdminUrl::new("postgres://h").mongodb().is_err());
        for bad in [
            "mongodb://user:p@ss@127.0.0.1:27017/",
            "mongodb://us:er:p@127.0.0.1/",
            "mongodb://u:100%@127.0.0.1/",
        ] {
            let e = AdminUrl::new(bad).mongodb().unwrap_err();
            assert!(e.contains("percent-encode"), "{bad}: {e}");
            assert!(!e.contains("ss@") && !e.contains("100%@"), "{e}");
        }
        assert!(
            AdminUrl::new("mongodb://u:p%40ss%25@127.0.0.1/")
                .mongodb()
                .is_ok()
        );
        assert_eq!(address::shown("mongodb://u:p@h:27018/x"), "h:27018");
    }
}
