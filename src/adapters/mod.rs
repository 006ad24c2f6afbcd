//! Adapters carve an isolated *slice* (a database, key prefix, bucket…) out of
//! a server the user already runs — or, for `sqlite`, out of nothing at all.
//!
//! Every adapter implements [`Adapter`]: `provision`, `resolve` (the address
//! `${db.url}` renders to), `teardown`, `capabilities`, and `clone` where the
//! capability says so. Adapters are found by name with [`by_name`];
//! protocol-compatible names share one implementation.

pub mod golden;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sqlite;

use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;

/// What an adapter can do beyond the four verbs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Can copy a slice server-side (`clone_from` uses it).
    pub clone: bool,
}

/// One slice an adapter acts on.
#[derive(Clone)]
pub struct Slice {
    /// The slice's name, already normalised for the backend.
    pub name: String,
    /// The project it belongs to.
    pub project: String,
    /// Rendered `admin_url` (may hold a credential: never logged).
    pub admin_url: Option<String>,
    /// Adapter options from the config.
    pub options: toml::Table,
    /// A folder the adapter may keep files in (`$BINKY_HOME/slices/<adapter>`).
    pub data_dir: PathBuf,
}

// Hand-written: `admin_url` may carry a password.
impl std::fmt::Debug for Slice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slice")
            .field("name", &self.name)
            .field("project", &self.project)
            .field("admin_url", &self.admin_url.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// An adapter failure, with what to do about it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AdapterError {
    /// What failed.
    pub message: String,
    /// Environmental (missing client, missing grant): a clone may fall back
    /// to provision + migrate + seed.
    pub environmental: bool,
}

impl AdapterError {
    /// A plain failure.
    pub fn new(message: impl Into<String>) -> Self {
        AdapterError {
            message: message.into(),
            environmental: false,
        }
    }
}

/// The adapter contract.
#[async_trait]
pub trait Adapter: Send + Sync {
    /// The registered name.
    fn name(&self) -> &'static str;
    /// What it supports.
    fn capabilities(&self) -> Capabilities;
    /// The slice name for `<project>_<world-slug>`, within backend limits.
    fn slice_name(&self, project: &str, world_slug: &str) -> String {
        format!("{project}_{world_slug}")
    }
    /// Creates the slice. Creating one that exists is an error.
    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError>;
    /// The slice's address (what `${SVC.url}` renders to).
    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError>;
    /// Destroys the slice; a missing slice is not an error.
    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError>;
    /// Whether the slice exists.
    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError>;
    /// Copies `template` into a new `slice` (only with `capabilities().clone`).
    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<(), AdapterError> {
        let _ = (template, slice);
        Err(AdapterError::new(format!(
            "the {} adapter cannot clone",
            self.name()
        )))
    }
}

/// Built-in adapter names in this build (features select the drivers).
pub const BUILT_IN: &[&str] = &[
    "sqlite",
    #[cfg(feature = "postgres")]
    "postgres",
];

/// The adapter registered as `name`.
pub fn by_name(name: &str) -> Option<Arc<dyn Adapter>> {
    match name {
        "sqlite" => Some(Arc::new(sqlite::Sqlite)),
        #[cfg(feature = "postgres")]
        "postgres" => Some(Arc::new(postgres::Postgres)),
        _ => None,
    }
}
