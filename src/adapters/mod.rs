//! Adapters carve an isolated *slice* (a database, key prefix, bucket…) out of
//! a server the user already runs — or, for `sqlite`, out of nothing at all.
//!
//! Every adapter implements [`Adapter`]: `provision`, `resolve` (the address
//! `${db.url}` renders to), `teardown`, and `clone` where its
//! [`catalog::Facts`] say so. Adapters are found by name with [`by_name`];
//! protocol-compatible names share one implementation.

pub mod catalog;
pub mod clickhouse;
pub mod elasticsearch;
pub mod external;
pub mod golden;
pub mod images;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod kit;
#[cfg(feature = "mongodb")]
pub mod mongodb;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod qdrant;
pub mod rabbitmq;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "s3")]
pub mod s3;
pub mod server;
pub mod sqlite;

use async_trait::async_trait;
use kit::address::AdminUrl;
use std::borrow::Cow;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

/// What an adapter can do beyond the four verbs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Can copy a slice server-side (`clone_from` uses it).
    pub clone: bool,
    /// Can keep spare clones of a golden template and hand one to a world
    /// by renaming it ([`Adapter::make_spare`], [`Adapter::take_spare`];
    /// `options.spares`).
    pub spares: bool,
}

/// What a teardown does about sessions on a slice that Binky did not
/// open. The world's own processes are stopped before any teardown, so
/// what is still connected then is someone else's: a person's open
/// transaction would be lost if it were ended unasked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherSessions {
    /// Wait up to this long for them to close (a stopped service's session
    /// takes a moment to go), then refuse, naming each.
    Wait(std::time::Duration),
    /// End them (`remove --force`, `reset --force`), naming each.
    End,
}

/// How long a teardown waits for sessions it did not open to close before
/// it refuses.
pub const OTHER_SESSIONS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One slice an adapter acts on.
#[derive(Clone)]
pub struct Slice {
    /// The slice's name, already normalised for the backend.
    pub name: String,
    /// The project it belongs to.
    pub project: String,
    /// The rendered `admin_url`, read once where it was rendered (it may
    /// hold a credential; its `Display` never shows one). `None` when the
    /// resource gives none: see [`Slice::admin_url_or`].
    pub admin_url: Option<AdminUrl>,
    /// Adapter options from the config.
    pub options: toml::Table,
    /// A folder the adapter may keep files in (`$BINKY_HOME/slices/<adapter>`).
    pub data_dir: PathBuf,
    /// The `PATH` to find client binaries on (`mysqldump`, external
    /// adapters): the calling CLI's, else the daemon's.
    pub search_path: Option<OsString>,
    /// The password of the slice's own login user, for an adapter that
    /// makes one ([`catalog::Facts::world_users`]): random per slice, kept in the
    /// registry, registered as a secret before any adapter sees it (never
    /// logged or shown). `None` for the others.
    pub secret: Option<String>,
}

impl Slice {
    /// `options.timeout` (a duration such as `"30s"`, as `binky check`
    /// validates it), else `default`.
    pub fn timeout(&self, default: std::time::Duration) -> std::time::Duration {
        self.options
            .get("timeout")
            .and_then(|v| v.as_str())
            .and_then(|s| humantime::parse_duration(s.trim()).ok())
            .unwrap_or(default)
    }

    /// Its `admin_url`, else `default` (the adapter's
    /// [`catalog::Facts::default_url`]).
    pub fn admin_url_or(&self, default: &str) -> Cow<'_, AdminUrl> {
        match &self.admin_url {
            Some(u) => Cow::Borrowed(u),
            None => Cow::Owned(AdminUrl::new(default)),
        }
    }
}

// Hand-written: `secret` is a password (`admin_url`'s `Debug` shows none).
impl std::fmt::Debug for Slice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slice")
            .field("name", &self.name)
            .field("project", &self.project)
            .field("admin_url", &self.admin_url)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// An adapter failure, with what to do about it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AdapterError {
    /// What failed.
    pub message: String,
    /// What kind of failure it is: what the daemon does next is read from
    /// this, never from the message.
    pub kind: AdapterErrorKind,
}

/// What kind of failure an [`AdapterError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterErrorKind {
    /// The server answered, and said no.
    Refused,
    /// A failure of the surroundings, not of the slice (a server that
    /// cannot be reached, a missing client program or grant): a clone may
    /// fall back to provision + migrate + seed.
    Environmental,
    /// A teardown refused because the slice is not one Binky made.
    NotOurs,
}

impl AdapterError {
    /// A plain failure: the server answered, and said no.
    pub fn new(message: impl Into<String>) -> Self {
        AdapterError {
            message: message.into(),
            kind: AdapterErrorKind::Refused,
        }
    }

    /// Whether the surroundings failed ([`AdapterErrorKind::Environmental`]).
    pub fn is_environmental(&self) -> bool {
        self.kind == AdapterErrorKind::Environmental
    }

    /// A failure of the surroundings, not of the slice: the server cannot be
    /// reached, a client program is missing, a grant is lacking. A clone
    /// may then fall back to provision + migrate + seed.
    pub fn environmental(message: impl Into<String>) -> Self {
        AdapterError {
            message: message.into(),
            kind: AdapterErrorKind::Environmental,
        }
    }

    /// A teardown refused because the slice on the server is not one Binky
    /// made: `found` says what is there instead (no marker, another
    /// owner's). Binky never deletes what it did not make.
    pub fn not_ours(adapter: &str, server: &str, slice: &str, found: &str) -> Self {
        AdapterError {
            kind: AdapterErrorKind::NotOurs,
            ..AdapterError::new(format!(
                "{adapter} at {server}: refusing to delete {slice}: {found}, so Binky did not make it; delete it by hand if it is yours to delete"
            ))
        }
    }

    /// The same error with `slice`'s credentials blanked out of its text:
    /// the whole `admin_url` and its password, raw and percent-decoded. An
    /// adapter (above all an external one, which is sent the URL) may quote
    /// them in an error, and errors reach the terminal, status and logs.
    pub fn redacted(mut self, slice: &Slice) -> Self {
        self.message = crate::secrets::redact_url(
            &self.message,
            slice.admin_url.as_ref().map(AdminUrl::as_str),
        );
        crate::secrets::scrub_in_place(&mut self.message);
        self
    }
}

/// What a clone of a golden template was: how it was made, and what
/// Binky can say of its cost (issue 51: a clone should share the
/// template's blocks where the server and filesystem allow, and say so).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cloned {
    /// How the copy was made, as the `cloned` event and the world's log
    /// say it: `reflink`, `TEMPLATE STRATEGY WAL_LOG`, `copy`, ….
    pub how: String,
    /// `Some(true)`: the copy shares the template's blocks (copy-on-write)
    /// and costs disk only as either side writes. `Some(false)`: every
    /// byte was copied. `None`: the adapter cannot tell (a remote server).
    pub shares_blocks: Option<bool>,
    /// The template's size in bytes (what a full copy costs), when the
    /// server says.
    pub size: Option<u64>,
    /// Where a clone here is a full copy: exactly what would make it
    /// copy-on-write (a server setting, a filesystem), for `binky doctor`.
    pub advice: Option<String>,
}

impl Cloned {
    /// A clone described only by how it was made (an adapter that knows
    /// nothing of its cost).
    pub fn said(how: impl Into<String>) -> Self {
        Cloned {
            how: how.into(),
            ..Cloned::default()
        }
    }
}

/// What an adapter without `capabilities.spares` answers a spare's verb.
fn no_spares(adapter: &str) -> AdapterError {
    AdapterError::new(format!("the {adapter} adapter keeps no spares"))
}

/// The adapter contract.
#[async_trait]
pub trait Adapter: Send + Sync {
    /// The registered name (for an alias such as `mariadb`, the name of the
    /// implementation: `mysql`).
    fn name(&self) -> &str;
    /// What it is and can do, whatever it is asked: a built-in adapter's
    /// are its [`catalog::Entry::facts`], the one place they are written,
    /// and this default reads them there. Any other adapter is a server's
    /// with the defaults ([`catalog::Facts::SERVER`]) unless it says more.
    fn facts(&self) -> catalog::Facts {
        catalog::find(self.name()).map_or(catalog::Facts::SERVER, |e| e.facts)
    }
    /// The name of world `world_slug`'s slice of `project`, within the
    /// backend's limits, by [`catalog::Facts::slice_name`]: a convenience
    /// over [`facts`](Adapter::facts), not a second place to say it.
    fn slice_name(&self, project: &str, resource: Option<&str>, world_slug: &str) -> String {
        (self.facts().slice_name)(project, resource, world_slug)
    }
    /// The start every slice name of `project` has (`<project>_`): `gc`
    /// looks for users Binky left only among names that start so. No
    /// slice's name: a slice is one world's.
    fn slice_prefix(&self, project: &str) -> String {
        format!("{project}_")
    }
    /// The slices whose login user Binky made on `server`'s server outlives
    /// them: their user is there, the rest gone (a teardown interrupted
    /// between the two). `server` is a resource rendered to reach that
    /// server (its `admin_url` and `options`); its name is a project's
    /// [`slice_prefix`](Adapter::slice_prefix), no slice's. `gc` tears each
    /// down, which drops only a user Binky marked as its own. None by
    /// default.
    ///
    /// # Errors
    /// The server cannot be reached or its users read.
    async fn orphan_users(&self, server: &Slice) -> Result<Vec<String>, AdapterError> {
        let _ = server;
        Ok(Vec::new())
    }
    /// Creates the slice. Creating one that exists is an error. Only
    /// `provision`, [`clone_slice`](Adapter::clone_slice) and
    /// [`complete`](Adapter::complete) make anything on a server.
    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError>;
    /// The slice's address (what `${SVC.url}` renders to), as the slice is
    /// now: with the world's own user where it has one, else the admin's
    /// credentials (a world made before it had one).
    ///
    /// Reads only, and never makes, resets or grants anything: every verb
    /// resolves (`env`, `gc`, a restart's re-adoption, a `remove` cut
    /// short), and what a resolve made for a slice already dropped would be
    /// left on the server with no record of it.
    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError>;
    /// Brings a live slice up to what [`provision`](Adapter::provision)
    /// makes today, its data kept: a world's own login user when
    /// `options.acl` was turned on since it was made (its password reset to
    /// the one the daemon keeps, [`Slice::secret`]). Run by `up` and
    /// `reload` on a slice the registry records live, and nowhere else.
    /// Nothing to do by default.
    ///
    /// # Errors
    /// The admin may not make what is asked (users, grants), or a user of
    /// the world's name is there that Binky did not make.
    async fn complete(&self, slice: &Slice) -> Result<(), AdapterError> {
        let _ = slice;
        Ok(())
    }
    /// Destroys the slice; a missing slice is not an error. Sessions on it
    /// that Binky did not open are waited for, never ended
    /// ([`OtherSessions::Wait`] for [`OTHER_SESSIONS_WAIT`]).
    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError>;
    /// [`Adapter::teardown`], choosing what happens to sessions on the
    /// slice that are still open once the world's own processes stopped
    /// (a person's `psql`, an IDE): waited for then refused, or ended
    /// knowingly. Returns the sessions it ended, each described ("pid 123
    /// (user bob, application psql)"). The default is
    /// [`Adapter::teardown`], for servers whose drop ends no session.
    ///
    /// # Errors
    /// As [`Adapter::teardown`]; with [`OtherSessions::Wait`], sessions
    /// still open after the wait (environmental, naming each).
    async fn teardown_with(
        &self,
        slice: &Slice,
        others: OtherSessions,
    ) -> Result<Vec<String>, AdapterError> {
        let _ = others;
        self.teardown(slice).await.map(|()| Vec::new())
    }
    /// Whether the slice exists.
    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError>;
    /// Copies `template` into a new `slice` (only with `facts().capabilities.clone`),
    /// returning how it was copied (`reflink`, `TEMPLATE STRATEGY
    /// FILE_COPY`, …) and what that costs, for the `cloned` event and
    /// `binky doctor`.
    ///
    /// # Errors
    /// The copy failed. An [`AdapterError::environmental`] one (a missing
    /// grant or client program, a busy template) lets the world be built by
    /// provision + migrate + seed instead; any other fails the world's `up`.
    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let _ = (template, slice);
        Err(AdapterError::new(format!(
            "the {} adapter cannot clone",
            self.name()
        )))
    }
    /// Makes `spare`, a clone of `template` kept ready for a world to take
    /// (only with `facts().capabilities.spares`): a copy like
    /// [`Adapter::clone_slice`]'s, but no world's yet, so it is handed to
    /// no world's user.
    ///
    /// # Errors
    /// The copy failed; whatever it left is the caller's to drop.
    async fn make_spare(&self, template: &Slice, spare: &Slice) -> Result<Cloned, AdapterError> {
        let _ = (template, spare);
        Err(no_spares(self.name()))
    }
    /// Makes `spare` (made by [`Adapter::make_spare`] from `template`) the
    /// world's `slice` by renaming it, metadata only, and hands it to the
    /// world's user as a clone is.
    ///
    /// # Errors
    /// The rename or the handover failed. The spare may be gone (renamed)
    /// and the slice half-made: the caller drops both.
    async fn take_spare(
        &self,
        template: &Slice,
        spare: &Slice,
        slice: &Slice,
    ) -> Result<(), AdapterError> {
        let _ = (template, spare, slice);
        Err(no_spares(self.name()))
    }
    /// The folder on this machine that `slice`'s data is kept in (a local
    /// server's data directory, the sqlite adapter's folder), when Binky
    /// can see it: where the disk a clone really took is measured (the
    /// filesystem's free space before and after, not the copy's logical
    /// size). `None` by default, and for a server on another machine.
    async fn data_path(&self, slice: &Slice) -> Option<std::path::PathBuf> {
        let _ = slice;
        None
    }
    /// Drops golden template `template`, which (unlike a world's slice) no
    /// process of Binky's uses between clones: a session someone else holds
    /// on it (a person in `psql`, an IDE) is never ended, and the drop
    /// fails instead. The default is [`Adapter::teardown`].
    ///
    /// # Errors
    /// The server refuses, or another session holds the template
    /// (environmental: it is in use, not wrong).
    async fn drop_template(&self, template: &Slice) -> Result<(), AdapterError> {
        self.teardown(template).await
    }
    /// The slice's adapter-specific token fields (`prefix`, `bucket`), each
    /// listed for the adapter in [`catalog`]; none by default.
    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        let _ = slice;
        Vec::new()
    }
    /// Takes a lock on the server that serialises building, cloning and
    /// dropping `template` across daemons (two `BINKY_HOME`s on one
    /// server); held until the guard drops. Within one daemon a mutex
    /// already does this, so the default is none.
    ///
    /// # Errors
    /// The server cannot be reached; or, without `wait`, another daemon
    /// holds the lock now (with `wait`, after the adapter's own limit).
    async fn lock_template(
        &self,
        template: &Slice,
        wait: bool,
    ) -> Result<Option<TemplateLock>, AdapterError> {
        let _ = (template, wait);
        Ok(None)
    }
}

/// The URL that reaches `slice`'s server: its `admin_url`, else the
/// adapter's default; `None` for a slice of no server.
pub fn server_url(adapter: &dyn Adapter, slice: &Slice) -> Option<AdminUrl> {
    slice
        .admin_url
        .clone()
        .or_else(|| adapter.facts().default_url.map(AdminUrl::new))
}

/// The server `slice` lives on, its credentials fingerprinted under `key`
/// (see [`server`]); `None` for a slice of no server.
pub fn server_of(adapter: &dyn Adapter, slice: &Slice, key: &str) -> Option<server::Server> {
    server_url(adapter, slice).map(|u| server::of(&u, adapter.facts().path_names_server, key))
}

/// A server-side lock on a golden template, released when dropped (for
/// PostgreSQL and MySQL, by closing the session that holds it).
pub type TemplateLock = Box<dyn Send + Sync>;

pub use kit::names::fit_identifier;

pub use crate::platform::find_executable;

/// A slice named `name` of project `shop` on no server, with no options:
/// for unit tests.
#[cfg(test)]
pub(crate) fn test_slice(name: &str) -> Slice {
    Slice {
        name: name.to_owned(),
        project: "shop".into(),
        admin_url: None,
        options: toml::Table::new(),
        data_dir: std::env::temp_dir(),
        search_path: None,
        secret: None,
    }
}

/// The last `lines` lines of a child's stderr, for error messages.
pub(crate) fn stderr_tail(stderr: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(stderr);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The adapter registered as `name`: a built-in one (see [`catalog`]),
/// else an external `binky-adapter-<name>` found on `search_path` (the
/// daemon's `PATH` when `None`). Protocol-compatible names share one
/// implementation: `mariadb` and `percona` are the MySQL adapter.
pub fn by_name(name: &str, search_path: Option<&std::ffi::OsStr>) -> Option<Arc<dyn Adapter>> {
    match catalog::find(name) {
        Some(e) => Some((e.make)()),
        None => {
            external::External::find(name, search_path).map(|e| Arc::new(e) as Arc<dyn Adapter>)
        }
    }
}
