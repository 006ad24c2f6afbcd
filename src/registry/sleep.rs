//! Queries for idle sleep: how long each world may idle, which running
//! worlds may sleep, and putting one to sleep.

use super::queue::now_ms;
use super::{Registry, RegistryError};
use crate::protocol::{ServiceKind, ServiceState, WorldState};

use rusqlite::{OptionalExtension, params};

/// A running world that sleeps after `idle_after_ms` without a request or
/// CPU use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SleeperRow {
    /// World id.
    pub id: i64,
    /// Project name.
    pub project: String,
    /// World name.
    pub world: String,
    /// How long it may idle, ms (at least 1).
    pub idle_after_ms: u64,
    /// When it was last admitted or woken, unix ms: it is never idle for
    /// longer than it has run.
    pub admitted_at: Option<i64>,
}

impl Registry {
    /// Records how long world `id` may idle before it sleeps, as its `up`
    /// worked it out (`effective_ms`, `None`: never), and the
    /// `--idle-after` behind it (`override_ms`: `None` the project's, 0 off).
    pub(crate) fn set_idle(
        &self,
        id: i64,
        override_ms: Option<u64>,
        effective_ms: Option<u64>,
    ) -> Result<(), RegistryError> {
        let ms = |v: Option<u64>| v.map(|m| m.min(i64::MAX as u64) as i64);
        self.conn
            .execute(
                "UPDATE worlds SET idle_override_ms = ?2, idle_after_ms = ?3 WHERE id = ?1",
                params![id, ms(override_ms), ms(effective_ms)],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// The `--idle-after` world `id` was last given, ms (0: off); `None`:
    /// the project's `idle_after` applies.
    pub(crate) fn idle_override(&self, id: i64) -> Result<Option<u64>, RegistryError> {
        self.conn
            .query_row(
                "SELECT idle_override_ms FROM worlds WHERE id = ?1",
                [id],
                |r| r.get::<_, Option<i64>>(0),
            )
            .optional()
            .map(|v| v.flatten().map(|m| m.max(0) as u64))
            .map_err(|e| self.err(e))
    }

    /// Who brought world `id` up and its admission group (`""` each when
    /// unknown): what a wake-up's `up` asks with.
    pub(crate) fn world_caller(&self, id: i64) -> Result<(String, String), RegistryError> {
        self.conn
            .query_row(
                "SELECT COALESCE(caller, ''), COALESCE(grp, '') FROM worlds WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.err(e))
    }

    /// Running worlds that may sleep (those with an idle time), oldest
    /// admission first.
    pub(crate) fn sleepers(&self) -> Result<Vec<SleeperRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT w.id, p.name, w.name, w.idle_after_ms, w.admitted_at
                 FROM worlds w JOIN projects p ON p.id = w.project_id
                 WHERE w.state = ?1 AND w.intent IS NULL AND w.idle_after_ms IS NOT NULL
                 ORDER BY COALESCE(w.admitted_at, 0), w.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![WorldState::Running], |r| {
                Ok(SleeperRow {
                    id: r.get(0)?,
                    project: r.get(1)?,
                    world: r.get(2)?,
                    idle_after_ms: r.get::<_, i64>(3)?.max(1) as u64,
                    admitted_at: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Records world `id` as sleeping since now, its process services
    /// `sleeping` (so the proxy's routes, rebuilt from them after a
    /// restart, still wake it). One transaction.
    pub(crate) fn set_sleeping(&mut self, id: i64) -> Result<(), RegistryError> {
        let path = self.path.clone();
        let err = |e| super::classify(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "UPDATE worlds SET state = ?2, intent = NULL, error = NULL, slept_at = ?3,
               updated_at = unixepoch() WHERE id = ?1",
            params![id, WorldState::Sleeping, now_ms()],
        )
        .map_err(err)?;
        tx.execute(
            "UPDATE services SET state = ?2, pid = NULL, start_time = NULL, pgid = NULL,
               updated_at = unixepoch() WHERE world_id = ?1 AND kind = ?3",
            params![id, ServiceState::Sleeping, ServiceKind::Process],
        )
        .map_err(err)?;
        tx.commit().map_err(err)
    }
}
