//! The SQLite registry: the daemon's durable state.
//!
//! The daemon is its only writer. Every multi-row change is one transaction.
//! The schema is migrated in place (rusqlite_migration, `user_version`); a
//! registry from a newer Binky, a corrupt file or a file locked by another
//! process is reported and never overwritten.

mod ports;

/// One port a world needs: `(service, name)`, name `""` for the primary
/// port. The key of the port table; [`crate::ports`] allocates by it.
pub(crate) type PortKey = (String, String);
mod queue;
mod schema;
mod sleep;
mod slices;
mod spares;
mod worlds;

pub(crate) use queue::{ActiveRow, NewTicket, QueueRow, now_ms};
pub(crate) use sleep::SleeperRow;
pub(crate) use slices::{OrphanSlice, SliceKey, SliceRow};
pub(crate) use spares::{SpareRow, SpareState};
pub(crate) use worlds::{NewWorld, RecordedProcess, VerifyRun, WorldBrief, WorldRow};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod settings;
mod status;
pub(crate) use settings::Setting;
#[cfg(test)]
pub(crate) use settings::default_settings;

/// The state enums are stored as their words (`as_str`), so the registry's
/// text, the wire and the output agree.
macro_rules! state_column {
    ($($t:ty),+) => {$(
        impl rusqlite::ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }
        impl rusqlite::types::FromSql for $t {
            fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                v.as_str()?
                    .parse()
                    .map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
            }
        }
    )+};
}
state_column!(
    crate::protocol::WorldState,
    crate::protocol::ServiceState,
    crate::protocol::SliceState,
    crate::protocol::ServiceKind,
    crate::protocol::Intent,
    crate::protocol::VerifyOutcome
);

/// How long a statement waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the registry cannot be used. Each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The file exists but is not an SQLite database (or is damaged).
    #[error(
        "the registry {path} is not a readable SQLite database ({detail}); it was left untouched. Move it aside to start with an empty registry: mv {path} {path}.broken"
    )]
    Corrupt {
        /// The registry path.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// Another process holds a lock on it.
    #[error(
        "the registry {path} is locked by another process ({detail}); close whatever has it open (an sqlite3 shell?) and retry"
    )]
    Locked {
        /// The registry path.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// Written by a newer Binky.
    #[error(
        "the registry {path} was written by a newer binky (schema {found}, this binky knows {known}); upgrade binky, or point BINKY_HOME elsewhere"
    )]
    TooNew {
        /// The registry path.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest this build knows.
        known: i64,
    },
    /// Any other SQLite failure.
    #[error("registry {path}: {source}")]
    Sqlite {
        /// The registry path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: rusqlite::Error,
    },
}

/// An open registry.
pub(crate) struct Registry {
    conn: Connection,
    path: PathBuf,
}

pub(crate) fn classify(path: &Path, e: rusqlite::Error) -> RegistryError {
    use rusqlite::ErrorCode::*;
    let code = e.sqlite_error_code();
    let detail = e.to_string();
    match code {
        Some(NotADatabase) | Some(DatabaseCorrupt) => RegistryError::Corrupt {
            path: path.to_path_buf(),
            detail,
        },
        Some(DatabaseBusy) | Some(DatabaseLocked) => RegistryError::Locked {
            path: path.to_path_buf(),
            detail,
        },
        _ => RegistryError::Sqlite {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

impl Registry {
    /// Opens (creating if absent) and migrates the registry at `path`.
    ///
    /// # Errors
    /// [`RegistryError`]: corrupt, locked, too new, or another SQLite error.
    pub(crate) fn open(path: &Path) -> Result<Self, RegistryError> {
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| classify(path, e))?;
        // Reading the header first: a non-database file fails here, before
        // anything could write to it.
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| classify(path, e))?;
        let known = schema::LATEST;
        if version > known {
            return Err(RegistryError::TooNew {
                path: path.to_path_buf(),
                found: version,
                known,
            });
        }
        conn.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .map_err(|e| classify(path, e))?;
        // secure_delete: freed pages are zeroed, so a removed world's
        // texts do not linger in the file (the workload is tiny).
        conn.execute_batch(
            "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON;",
        )
        .map_err(|e| classify(path, e))?;
        schema::migrations()
            .to_latest(&mut conn)
            .map_err(|e| match e {
                rusqlite_migration::Error::RusqliteError { err, .. } => classify(path, err),
                other => RegistryError::Corrupt {
                    path: path.to_path_buf(),
                    detail: other.to_string(),
                },
            })?;
        // Keep the database private even under a permissive umask.
        for suffix in ["", "-wal", "-shm"] {
            let p = PathBuf::from(format!("{}{suffix}", path.display()));
            let _ = crate::platform::make_private_file(&p);
        }
        Ok(Registry {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// A second connection to the registry at `path`, which another one
    /// already opened and migrated, for reads only (`PRAGMA query_only`):
    /// in WAL mode it reads the last committed state while a write is in
    /// progress.
    ///
    /// # Errors
    /// [`RegistryError`]: the file cannot be opened, or a newer binky wrote
    /// it.
    pub(crate) fn open_reader(path: &Path) -> Result<Self, RegistryError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| classify(path, e))?;
        conn.execute_batch("PRAGMA query_only=ON; PRAGMA foreign_keys=ON;")
            .map_err(|e| classify(path, e))?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| classify(path, e))?;
        if version > schema::LATEST {
            return Err(RegistryError::TooNew {
                path: path.to_path_buf(),
                found: version,
                known: schema::LATEST,
            });
        }
        Ok(Registry {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, e: rusqlite::Error) -> RegistryError {
        classify(&self.path, e)
    }

    /// The first column of the one row `sql` returns, or `None` when it
    /// returns none.
    fn one<T: rusqlite::types::FromSql>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Option<T>, RegistryError> {
        self.conn
            .query_row(sql, params, |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The schema version in the file.
    #[cfg(test)]
    pub(crate) fn schema_version(&self) -> Result<i64, RegistryError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// Records the session of a daemon that is about to start processes
    /// (`sid`, its own pid).
    pub(crate) fn record_session(&self, sid: u32, pid: u32) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO daemon_sessions(sid, pid) VALUES (?1, ?2)",
                params![sid, pid],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Session ids of daemons (this one included) that started processes.
    pub(crate) fn sessions(&self) -> Result<Vec<u32>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare("SELECT sid FROM daemon_sessions")
            .map_err(|e| self.err(e))?;
        stmt.query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e))
    }

    /// Forgets a session no process lives in any more.
    pub(crate) fn forget_session(&self, sid: u32) -> Result<(), RegistryError> {
        self.conn
            .execute("DELETE FROM daemon_sessions WHERE sid = ?1", [sid])
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// `(pid, start time)` of every process the registry records: services
    /// and `verify` commands in flight.
    pub(crate) fn recorded_processes(&self) -> Result<Vec<(u32, u64)>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT pid, start_time FROM services WHERE pid IS NOT NULL AND start_time IS NOT NULL
                 UNION ALL
                 SELECT verify_pid, verify_start_time FROM worlds WHERE verify_pid IS NOT NULL AND verify_start_time IS NOT NULL",
            )
            .map_err(|e| self.err(e))?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e))
    }

    /// Registers a project (or updates its root), returning its id.
    pub(crate) fn upsert_project(&mut self, name: &str, root: &str) -> Result<i64, RegistryError> {
        self.conn
            .query_row(
                "INSERT INTO projects(name, root, created_at) VALUES (?1, ?2, unixepoch())
                 ON CONFLICT(name) DO UPDATE SET root = excluded.root
                 RETURNING id",
                params![name, root],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// A project's id by name.
    pub(crate) fn project_id(&self, name: &str) -> Result<Option<i64>, RegistryError> {
        self.one("SELECT id FROM projects WHERE name = ?1", [name])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid() {
        schema::migrations().validate().unwrap();
    }

    #[test]
    fn settings_round_trip_and_status_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Registry::open(&dir.path().join("r.db")).unwrap();
        assert_eq!(r.settings().unwrap(), default_settings());
        r.set_settings(&[Setting::RamReservePct(15.0), Setting::ProxyPort(8080)])
            .unwrap();
        let s = r.settings().unwrap();
        assert_eq!(s.ram_reserve_pct, 15.0);
        assert_eq!(s.proxy_port, 8080);
        assert!(r.status(None).unwrap().projects.is_empty());
        assert_eq!(r.schema_version().unwrap(), schema::LATEST);
    }

    /// A stored value that does not parse is an error (for the log), and
    /// the default stands in; every setting survives its own round trip.
    #[test]
    fn a_bad_stored_setting_is_refused_by_its_parser_and_the_default_stands() {
        assert!(Setting::parse("proxy_port", "99999").is_err());
        assert!(Setting::parse("ram_reserve_pct", "ten").is_err());
        assert_eq!(Setting::parse("colour", "blue"), Ok(None));
        for s in [
            Setting::RamReservePct(12.5),
            Setting::DiskReserveGb(0.0),
            Setting::MaxParallel(3),
            Setting::ProxyPort(8080),
            Setting::HttpsPort(8443),
        ] {
            assert_eq!(Setting::parse(s.key(), &s.value()), Ok(Some(s)));
        }
        let dir = tempfile::tempdir().unwrap();
        let mut r = Registry::open(&dir.path().join("r.db")).unwrap();
        r.set_settings(&[Setting::MaxParallel(3)]).unwrap();
        r.conn
            .execute_batch(
                "INSERT INTO settings(key, value) VALUES ('proxy_port', 'eighty'), ('colour', 'blue')",
            )
            .unwrap();
        let s = r.settings().unwrap();
        assert_eq!(s.proxy_port, default_settings().proxy_port);
        assert_eq!(s.max_parallel, 3);
    }

    /// Verify results recorded before v9 keep what they said: the
    /// migration reads their outcome once from their words, and status
    /// then reads only the columns.
    #[test]
    fn old_verify_results_keep_their_outcome_through_v9() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.db");
        {
            let mut c = Connection::open(&p).unwrap();
            schema::migrations().to_version(&mut c, 8).unwrap();
            c.execute_batch(
                "INSERT INTO projects(id, name, root, created_at) VALUES (1, 'shop', '/r', 0);
                 INSERT INTO worlds(id, project_id, name, slug, path, state, created_at, updated_at)
                   VALUES (1, 1, 'a', 'a', '/a', 'stopped', 0, 0),
                          (2, 1, 'b', 'b', '/b', 'stopped', 0, 0),
                          (3, 1, 'c', 'c', '/c', 'stopped', 0, 0);
                 INSERT INTO verify_results(world_id, passed, duration_ms, commit_sha, started_at, detail)
                   VALUES (1, 1, 5, 'abcdef0123456789', 0, '2/2 passed'),
                          (2, 0, 5, 'abcdef0123456789', 0, '1/2 passed, with uncommitted changes'),
                          (3, 0, 0, NULL, 0, 'interrupted by a daemon restart; run `binky verify` again');",
            )
            .unwrap();
        }
        let r = Registry::open(&p).unwrap();
        let verify: Vec<_> = r.status(None).unwrap().projects[0]
            .worlds
            .iter()
            .map(|w| (w.name.clone(), w.verify.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            verify,
            [
                ("a", "passed at abcdef012345"),
                ("b", "failed at abcdef012345 plus uncommitted changes"),
                ("c", "interrupted"),
            ]
            .map(|(w, v)| (w.to_owned(), v.to_owned()))
        );
        // A new result is read from its columns, whatever its words say.
        let run = |outcome, dirty, detail, from_branch| VerifyRun {
            outcome,
            dirty,
            duration_ms: 1,
            commit: None,
            detail,
            from_branch,
        };
        r.record_verify(
            3,
            &run(
                crate::protocol::VerifyOutcome::Failed,
                true,
                "interrupted, so to speak",
                false,
            ),
        )
        .unwrap();
        let c = r.status(None).unwrap().projects[0].worlds[2].verify.clone();
        assert_eq!(c.as_deref(), Some("failed plus uncommitted changes"));
        // The branch's own checks are said to be so.
        r.record_verify(
            3,
            &run(
                crate::protocol::VerifyOutcome::Passed,
                false,
                "1/1 passed",
                true,
            ),
        )
        .unwrap();
        let c = r.status(None).unwrap().projects[0].worlds[2].verify.clone();
        assert_eq!(c.as_deref(), Some("passed (the branch's own checks)"));
    }

    #[test]
    fn corrupt_file_is_reported_and_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.db");
        let junk = b"this is not a database, it is a shopping list\n".repeat(100);
        std::fs::write(&p, &junk).unwrap();
        let err = Registry::open(&p).err().expect("must fail");
        assert!(matches!(err, RegistryError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("left untouched"));
        assert_eq!(std::fs::read(&p).unwrap(), junk);
    }
}
