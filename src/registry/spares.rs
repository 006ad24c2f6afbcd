//! The `spares` table: clones of a golden template made ahead of time,
//! which an `up` takes by renaming (issue 51). Each is recorded before the
//! server sees it, so whatever ends its making or its taking leaves a row
//! `gc` can sweep.

use super::{Registry, RegistryError};
use crate::adapters::server::Server;
use rusqlite::params;

/// Where a spare is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpareState {
    /// Recorded; the server may or may not have it yet.
    Making,
    /// Made, and free for an `up` to take.
    Ready,
    /// An `up` is renaming it into a world's slice.
    Taking,
}

impl SpareState {
    fn as_str(self) -> &'static str {
        match self {
            SpareState::Making => "making",
            SpareState::Ready => "ready",
            SpareState::Taking => "taking",
        }
    }

    fn parse(s: &str) -> SpareState {
        match s {
            "ready" => SpareState::Ready,
            "taking" => SpareState::Taking,
            // Anything else is not known to be whole.
            _ => SpareState::Making,
        }
    }
}

/// A spare's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpareRow {
    /// Adapter name.
    pub adapter: String,
    /// The spare's name on the server (`adapters::golden::spare_name`).
    pub name: String,
    /// Its project.
    pub project: String,
    /// Its resource service.
    pub service: String,
    /// The golden template it is a clone of.
    pub template: String,
    /// That template's key when the spare was made.
    pub template_key: String,
    /// The key the template's schema was migrated at then.
    pub migrated: Option<String>,
    /// The server it is made on.
    pub server: Option<Server>,
    /// Where it is in its life.
    pub state: SpareState,
    /// The disk it took, bytes, when measured.
    pub bytes: Option<u64>,
}

const COLUMNS: &str = "adapter, name, project, service, template, template_key, migrated, server, server_credentials, state, bytes";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SpareRow> {
    let address: Option<String> = r.get(7)?;
    let credentials: Option<String> = r.get(8)?;
    let state: String = r.get(9)?;
    let bytes: Option<i64> = r.get(10)?;
    Ok(SpareRow {
        adapter: r.get(0)?,
        name: r.get(1)?,
        project: r.get(2)?,
        service: r.get(3)?,
        template: r.get(4)?,
        template_key: r.get(5)?,
        migrated: r.get(6)?,
        server: address.map(|address| Server {
            address,
            credentials: credentials.unwrap_or_default(),
        }),
        state: SpareState::parse(&state),
        bytes: bytes.and_then(|b| u64::try_from(b).ok()),
    })
}

impl Registry {
    /// Records spare `s` as [`SpareState::Making`], before the server sees
    /// it.
    ///
    /// # Errors
    /// The registry cannot be written, or a spare of that name is recorded.
    pub(crate) fn record_spare(&self, s: &SpareRow) -> Result<(), RegistryError> {
        self.conn
            .execute(
                &format!(
                    "INSERT INTO spares({COLUMNS}, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, NULL, unixepoch())"
                ),
                params![
                    s.adapter,
                    s.name,
                    s.project,
                    s.service,
                    s.template,
                    s.template_key,
                    s.migrated,
                    s.server.as_ref().map(|v| &v.address),
                    s.server.as_ref().map(|v| &v.credentials),
                    SpareState::Making.as_str(),
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Marks spare `name` ready, with the disk it took.
    ///
    /// # Errors
    /// The registry cannot be written.
    pub(crate) fn spare_ready(
        &self,
        adapter: &str,
        name: &str,
        bytes: Option<u64>,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE spares SET state = 'ready', bytes = ?3 WHERE adapter = ?1 AND name = ?2",
                params![adapter, name, bytes.and_then(|b| i64::try_from(b).ok())],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Claims the oldest ready spare of `template` made at `key` (it
    /// becomes [`SpareState::Taking`], so no other `up` takes it), if any.
    ///
    /// # Errors
    /// The registry cannot be written.
    pub(crate) fn claim_spare(
        &self,
        adapter: &str,
        template: &str,
        key: &str,
    ) -> Result<Option<SpareRow>, RegistryError> {
        self.conn
            .query_row(
                &format!(
                    "UPDATE spares SET state = 'taking' WHERE id = (
                       SELECT id FROM spares WHERE adapter = ?1 AND template = ?2 AND template_key = ?3 AND state = 'ready'
                       ORDER BY id LIMIT 1)
                     RETURNING {COLUMNS}"
                ),
                params![adapter, template, key],
                row,
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(self.err(e)),
            })
    }

    /// Forgets spare `name` (dropped, or renamed into a world's slice), and
    /// the password of its user.
    ///
    /// # Errors
    /// The registry cannot be written.
    pub(crate) fn delete_spare(&self, adapter: &str, name: &str) -> Result<(), RegistryError> {
        self.delete_with_secret(("spares", "name"), adapter, name)
    }

    /// Gives world slice `slice`, which has no password yet, the password
    /// of spare `spare`'s user (made with the spare, which a world takes
    /// by renaming): the world's user is then the spare's, password and
    /// all, with nothing to set on the server. Nothing is written where
    /// the spare has no password or the slice has one already (a user may
    /// exist with it).
    ///
    /// # Errors
    /// The registry cannot be written.
    pub(crate) fn give_spare_secret(
        &self,
        adapter: &str,
        spare: &str,
        slice: &str,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO slice_secrets(adapter, slice, secret)
                 SELECT adapter, ?3, secret FROM slice_secrets WHERE adapter = ?1 AND slice = ?2",
                params![adapter, spare, slice],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Every spare recorded, oldest first.
    ///
    /// # Errors
    /// The registry cannot be read.
    pub(crate) fn spares(&self) -> Result<Vec<SpareRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM spares ORDER BY id"))
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map([], row).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare(name: &str, key: &str) -> SpareRow {
        SpareRow {
            adapter: "postgres".into(),
            name: name.into(),
            project: "shop".into(),
            service: "db".into(),
            template: "shop_golden_golden_abc".into(),
            template_key: key.into(),
            migrated: Some("m".into()),
            server: Some(Server {
                address: "postgres://127.0.0.1:5432".into(),
                credentials: "fp".into(),
            }),
            state: SpareState::Making,
            bytes: None,
        }
    }

    #[test]
    fn a_spare_is_claimed_once_only_when_ready_and_of_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::open(&dir.path().join("r.db")).unwrap();
        r.record_spare(&spare("s1", "k1")).unwrap();
        r.record_spare(&spare("s2", "k1")).unwrap();
        // Still being made: not handed out.
        assert_eq!(
            r.claim_spare("postgres", "shop_golden_golden_abc", "k1")
                .unwrap(),
            None
        );
        r.spare_ready("postgres", "s2", Some(7)).unwrap();
        // Another key's template: never.
        assert_eq!(
            r.claim_spare("postgres", "shop_golden_golden_abc", "k2")
                .unwrap(),
            None
        );
        let got = r
            .claim_spare("postgres", "shop_golden_golden_abc", "k1")
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.name.as_str(), got.state, got.bytes),
            ("s2", SpareState::Taking, Some(7))
        );
        assert_eq!(got.server, spare("s2", "k1").server);
        assert_eq!(
            r.claim_spare("postgres", "shop_golden_golden_abc", "k1")
                .unwrap(),
            None
        );
        r.delete_spare("postgres", "s2").unwrap();
        let left: Vec<String> = r.spares().unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(left, ["s1"]);
    }
}
