//! The `slices` table: each world's slices with the server each lives on,
//! the slices an interrupted operation left behind (what `gc` sweeps), and
//! the key credentials are fingerprinted under.

use super::{Registry, RegistryError};
use crate::adapters::server::Server;
use crate::protocol::{SliceState, WorldState};
use rusqlite::params;

/// A slice's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceRow {
    /// The resource service's name.
    pub service: String,
    /// Adapter name.
    pub adapter: String,
    /// Slice name.
    pub slice: String,
    /// Where it is.
    pub state: SliceState,
    /// The key its schema was last migrated at (see
    /// `adapters::golden::migrate_key`); `None` before the first migrate.
    pub migrated_key: Option<String>,
    /// The server it was made on; `None` for a slice of no server (sqlite)
    /// or one recorded before schema v7.
    pub server: Option<Server>,
    /// The golden template it was cloned from and that template's key
    /// (`adapters::golden::key`); `None` when it was not cloned.
    pub template: Option<(String, String)>,
}

/// A live slice cloned from a golden template (see
/// [`Registry::cloned_slices`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClonedSlice {
    /// Its project's name.
    pub project: String,
    /// Its world's name.
    pub world: String,
    /// The resource service's name.
    pub service: String,
    /// The key of the template it was cloned from.
    pub template_key: String,
    /// The key its schema was last migrated at (see [`SliceRow`]).
    pub migrated_key: Option<String>,
}

/// A slice `gc` may sweep (see [`Registry::orphan_slices`]).
#[derive(Debug, Clone)]
pub(crate) struct OrphanSlice {
    /// Its project's name.
    pub project: String,
    /// The resource service's name.
    pub service: String,
    /// Adapter name.
    pub adapter: String,
    /// Slice name.
    pub slice: String,
    /// `Provisioning` or `Teardown` (never `Live`).
    pub state: SliceState,
    /// The world it was made for, when that world is still recorded.
    pub world_id: Option<i64>,
    /// The server it was made on (see [`SliceRow::server`]).
    pub server: Option<Server>,
}

/// Which slice a [`Registry::set_slice`] records: its world (`None` for
/// none), project, resource service, adapter and name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SliceKey<'a> {
    /// The world it is made for.
    pub world_id: Option<i64>,
    /// Its project's name.
    pub project: &'a str,
    /// The resource service's name.
    pub service: &'a str,
    /// Adapter name.
    pub adapter: &'a str,
    /// Slice name.
    pub slice: &'a str,
}

/// A recorded server from its two columns.
pub(super) fn server_from(address: Option<String>, credentials: Option<String>) -> Option<Server> {
    Some(Server {
        address: address?,
        credentials: credentials.unwrap_or_default(),
    })
}

impl Registry {
    /// Records a slice's state (creating its row). `server`: where it is
    /// being made (provision); `None` keeps the server already recorded.
    ///
    /// # Errors
    /// The registry cannot be written; the slice's name is empty (no slice
    /// has one: a slice is a world's, named by the daemon's `slice_name`).
    pub(crate) fn set_slice(
        &self,
        at: &SliceKey<'_>,
        state: SliceState,
        server: Option<&Server>,
    ) -> Result<(), RegistryError> {
        if at.slice.is_empty() {
            return Err(self.err(rusqlite::Error::InvalidParameterName(
                "a slice with an empty name".into(),
            )));
        }
        self.conn
            .execute(
                "INSERT INTO slices(world_id, project, service, adapter, slice, state, created_at, server, server_credentials)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, unixepoch(), ?7, ?8)
                 ON CONFLICT(adapter, slice) DO UPDATE SET state = excluded.state, world_id = excluded.world_id,
                   server = COALESCE(excluded.server, slices.server),
                   server_credentials = COALESCE(excluded.server_credentials, slices.server_credentials)",
                params![
                    at.world_id,
                    at.project,
                    at.service,
                    at.adapter,
                    at.slice,
                    state,
                    server.map(|s| &s.address),
                    server.map(|s| &s.credentials)
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Records the key a slice's schema is now migrated at.
    pub(crate) fn set_slice_migrated(
        &self,
        adapter: &str,
        slice: &str,
        key: &str,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE slices SET migrated_key = ?3 WHERE adapter = ?1 AND slice = ?2",
                params![adapter, slice, key],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Records the golden template a slice was cloned from, with the
    /// template's key; `None` clears it (the slice was built without one).
    pub(crate) fn set_slice_template(
        &self,
        adapter: &str,
        slice: &str,
        template: Option<(&str, &str)>,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE slices SET template = ?3, template_key = ?4 WHERE adapter = ?1 AND slice = ?2",
                params![adapter, slice, template.map(|t| t.0), template.map(|t| t.1)],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Every slice cloned from a golden template, in one query (`status`
    /// asks on every call): its project, world, resource service and the
    /// template's key.
    pub(crate) fn cloned_slices(&self) -> Result<Vec<ClonedSlice>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT p.name, w.name, s.service, s.template_key, s.migrated_key FROM slices s
                 JOIN worlds w ON s.world_id = w.id JOIN projects p ON w.project_id = p.id
                 WHERE s.template_key IS NOT NULL AND s.state = 'live'",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ClonedSlice {
                    project: r.get(0)?,
                    world: r.get(1)?,
                    service: r.get(2)?,
                    template_key: r.get(3)?,
                    migrated_key: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// The project that recorded slice `slice` of `adapter`, if any.
    pub(crate) fn slice_owner(
        &self,
        adapter: &str,
        slice: &str,
    ) -> Result<Option<String>, RegistryError> {
        self.one(
            "SELECT project FROM slices WHERE adapter = ?1 AND slice = ?2",
            params![adapter, slice],
        )
    }

    /// The slices of a world.
    pub(crate) fn slices_of(&self, world_id: i64) -> Result<Vec<SliceRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT service, adapter, slice, state, migrated_key, server, server_credentials, template, template_key FROM slices WHERE world_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([world_id], |r| {
                Ok(SliceRow {
                    service: r.get(0)?,
                    adapter: r.get(1)?,
                    slice: r.get(2)?,
                    state: r.get(3)?,
                    migrated_key: r.get(4)?,
                    server: server_from(r.get(5)?, r.get(6)?),
                    template: r
                        .get::<_, Option<String>>(7)?
                        .zip(r.get::<_, Option<String>>(8)?),
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Slices `gc` may sweep: not live, and their world gone or idle (no
    /// verb under way, not starting) — what an interrupted provision or
    /// teardown left.
    pub(crate) fn orphan_slices(&self) -> Result<Vec<OrphanSlice>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT s.project, s.service, s.adapter, s.slice, s.state, s.world_id, s.server, s.server_credentials FROM slices s
                 WHERE s.state <> ?1 AND (s.world_id IS NULL
                   OR NOT EXISTS (SELECT 1 FROM worlds w WHERE w.id = s.world_id)
                   OR EXISTS (SELECT 1 FROM worlds w WHERE w.id = s.world_id AND w.intent IS NULL AND w.state <> ?2))",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![SliceState::Live, WorldState::Starting], |r| {
                Ok(OrphanSlice {
                    project: r.get(0)?,
                    service: r.get(1)?,
                    adapter: r.get(2)?,
                    slice: r.get(3)?,
                    state: r.get(4)?,
                    world_id: r.get(5)?,
                    server: server_from(r.get(6)?, r.get(7)?),
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

impl Registry {
    /// The random key credentials are fingerprinted under (made by schema
    /// v7, never shown).
    pub(crate) fn fingerprint_key(&self) -> Result<String, RegistryError> {
        self.conn
            .query_row("SELECT key FROM fingerprint_key WHERE id = 1", [], |r| {
                r.get(0)
            })
            .map_err(|e| self.err(e))
    }
}

impl Registry {
    /// Forgets a slice, and the password of its login user.
    ///
    /// A password dropped here is gone from every file of the registry:
    /// `secure_delete` zeroes its cell in the page written to the WAL, and
    /// a checkpoint that truncates the WAL then writes that page over the
    /// database file's copy and empties the WAL of every older frame that
    /// held it (a plain checkpoint leaves old frames in the WAL file, and
    /// leaves the database file's copy until it runs at all).
    pub(crate) fn delete_slice(&self, adapter: &str, slice: &str) -> Result<(), RegistryError> {
        self.delete_with_secret(("slices", "slice"), adapter, slice)
    }

    /// Deletes the row of `name` from `table` (its name in `column`) with
    /// the password kept under that name, in one transaction: a slice or a
    /// spare is never forgotten with its password kept, or the other way
    /// round. Then the WAL is scrubbed (see [`delete_slice`](Self::delete_slice)).
    ///
    /// # Errors
    /// The registry cannot be written.
    pub(super) fn delete_with_secret(
        &self,
        (table, column): (&str, &str),
        adapter: &str,
        name: &str,
    ) -> Result<(), RegistryError> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        let mut secrets = 0;
        for (table, column) in [(table, column), ("slice_secrets", "slice")] {
            secrets = tx
                .execute(
                    &format!("DELETE FROM {table} WHERE adapter = ?1 AND {column} = ?2"),
                    params![adapter, name],
                )
                .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        if secrets > 0
            && let Err(e) = self.scrub_wal()
        {
            // The slice is forgotten all the same; the next drop (or the
            // daemon's last close of the registry) checkpoints again.
            tracing::warn!(error = %e, "could not empty the registry's WAL after dropping a password");
        }
        Ok(())
    }

    /// Checkpoints the WAL into the database file and truncates it, so
    /// nothing deleted before survives in either file. The daemon is the
    /// registry's only user, so no reader holds the checkpoint back.
    ///
    /// # Errors
    /// The checkpoint failed, or was held back by another connection (the
    /// WAL may then still hold what was deleted).
    fn scrub_wal(&self) -> Result<(), RegistryError> {
        let busy: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if busy != 0 {
            return Err(self.err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                Some("another connection held the WAL checkpoint back".into()),
            )));
        }
        Ok(())
    }

    /// The password kept for slice `slice`'s own login user on `adapter`'s
    /// server, if one was made ([`make_slice_secret`](Self::make_slice_secret)).
    /// Only reads: every verb that names a slice asks, and only the one
    /// that is about to make the user may write (a `gc --dry-run` or an
    /// `env` writes nothing).
    ///
    /// # Errors
    /// The registry cannot be read.
    pub(crate) fn slice_secret(
        &self,
        adapter: &str,
        slice: &str,
    ) -> Result<Option<String>, RegistryError> {
        self.one(
            "SELECT secret FROM slice_secrets WHERE adapter = ?1 AND slice = ?2",
            params![adapter, slice],
        )
    }

    /// The password of slice `slice`'s own login user on `adapter`'s
    /// server: made (48 random hex digits, from SQLite's CSPRNG) the first
    /// time, the same one after that until the slice is forgotten
    /// ([`delete_slice`](Self::delete_slice)). Called by what makes the
    /// user, before it reaches the server: the registry records the
    /// intent, and the user made with this password is known as Binky's
    /// whatever happens next.
    ///
    /// # Errors
    /// The registry cannot be written or read; `slice` is empty (no slice
    /// has an empty name).
    pub(crate) fn make_slice_secret(
        &self,
        adapter: &str,
        slice: &str,
    ) -> Result<String, RegistryError> {
        if slice.is_empty() {
            return Err(self.err(rusqlite::Error::InvalidParameterName(
                "a password for a slice with an empty name".into(),
            )));
        }
        if let Some(s) = self.slice_secret(adapter, slice)? {
            return Ok(s);
        }
        self.conn
            .execute(
                "INSERT OR IGNORE INTO slice_secrets(adapter, slice, secret) VALUES (?1, ?2, lower(hex(randomblob(24))))",
                params![adapter, slice],
            )
            .map_err(|e| self.err(e))?;
        self.slice_secret(adapter, slice)?
            .ok_or_else(|| self.err(rusqlite::Error::QueryReturnedNoRows))
    }

    /// The passwords of world `world_id`'s own login users (one per slice
    /// whose adapter makes users), as stored: what is the world's own
    /// among the credentials its addresses carry.
    ///
    /// # Errors
    /// The registry cannot be read.
    pub(crate) fn world_secrets(&self, world_id: i64) -> Result<Vec<String>, RegistryError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT ss.secret FROM slice_secrets ss
                 JOIN slices s ON s.adapter = ss.adapter AND s.slice = ss.slice
                 WHERE s.world_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        st.query_map(params![world_id], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(slice: &str) -> SliceKey<'_> {
        SliceKey {
            world_id: None,
            project: "shop",
            service: "db",
            adapter: "mysql",
            slice,
        }
    }

    /// Asking for a password only reads; the one that makes it is the one
    /// about to make the user. No slice and no password has an empty name.
    #[test]
    fn passwords_are_made_only_when_asked_to_and_never_for_an_empty_name() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::open(&dir.path().join("r.db")).unwrap();
        assert_eq!(r.slice_secret("mysql", "shop_a").unwrap(), None);
        assert_eq!(r.slice_secret("mysql", "shop_a").unwrap(), None);
        let made = r.make_slice_secret("mysql", "shop_a").unwrap();
        assert_eq!(made.len(), 48);
        assert_eq!(r.make_slice_secret("mysql", "shop_a").unwrap(), made);
        assert_eq!(r.slice_secret("mysql", "shop_a").unwrap(), Some(made));
        assert!(r.make_slice_secret("mysql", "").is_err());
        assert!(
            r.set_slice(&key(""), SliceState::Provisioning, None)
                .is_err()
        );
        assert_eq!(r.slice_secret("mysql", "").unwrap(), None);
    }

    /// A forgotten slice's password is in no file of the registry: not in
    /// the database's pages (freed or not), not in the WAL.
    #[test]
    fn a_forgotten_password_is_in_no_file_of_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        let r = Registry::open(&path).unwrap();
        let mut made = Vec::new();
        for i in 0..40 {
            let name = format!("shop_w{i}");
            r.set_slice(&key(&name), SliceState::Live, None).unwrap();
            made.push(r.make_slice_secret("mysql", &name).unwrap());
        }
        let held = |secret: &str| -> Vec<String> {
            ["", "-wal", "-shm"]
                .iter()
                .filter(|s| {
                    std::fs::read(format!("{}{s}", path.display()))
                        .unwrap_or_default()
                        .windows(secret.len())
                        .any(|w| w == secret.as_bytes())
                })
                .map(|s| format!("r.db{s}"))
                .collect()
        };
        assert!(!held(&made[7]).is_empty(), "the test reads the wrong files");
        r.delete_slice("mysql", "shop_w7").unwrap();
        assert_eq!(held(&made[7]), Vec::<String>::new());
        assert!(!held(&made[8]).is_empty());
        assert_eq!(r.slice_secret("mysql", "shop_w7").unwrap(), None);
    }
}
