//! Queries for worlds, their services, processes, routes and verify runs.

use super::{Registry, RegistryError};
use crate::protocol::{Intent, ServiceKind, ServiceState, VerifyOutcome, WorldState};
use rusqlite::{OptionalExtension, params};

/// A world's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorldRow {
    /// Row id.
    pub id: i64,
    /// Owning project id.
    pub project_id: i64,
    /// The branch.
    pub name: String,
    /// DNS-safe slug.
    pub slug: String,
    /// Worktree path.
    pub path: String,
    /// Where it is.
    pub state: WorldState,
    /// The verb in flight.
    pub intent: Option<Intent>,
}

/// A world as `up` records it before making anything.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewWorld<'a> {
    /// Its project's id.
    pub project_id: i64,
    /// The branch, and its DNS-safe slug.
    pub name: &'a crate::slug::WorldName,
    /// Worktree path.
    pub path: &'a str,
    /// The `--group` it was brought up in, if any.
    pub group: Option<&'a str>,
}

impl WorldRow {
    /// Its name and slug as recorded.
    pub(crate) fn world_name(&self) -> crate::slug::WorldName {
        crate::slug::WorldName::recorded(&self.name, &self.slug)
    }
}

impl Registry {
    /// A project's root folder by name.
    pub(crate) fn project_root(&self, name: &str) -> Result<Option<String>, RegistryError> {
        self.one("SELECT root FROM projects WHERE name = ?1", [name])
    }

    /// The world `name` of a project.
    pub(crate) fn find_world(
        &self,
        project_id: i64,
        name: &str,
    ) -> Result<Option<WorldRow>, RegistryError> {
        self.conn
            .query_row(
                "SELECT id, project_id, name, slug, path, state, intent FROM worlds
                 WHERE project_id = ?1 AND name = ?2",
                params![project_id, name],
                |r| {
                    Ok(WorldRow {
                        id: r.get(0)?,
                        project_id: r.get(1)?,
                        name: r.get(2)?,
                        slug: r.get(3)?,
                        path: r.get(4)?,
                        state: r.get(5)?,
                        intent: r.get(6)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Creates or updates world `w` as `up` begins: state `starting`, intent
    /// `up`, no error; its group kept when `w` names none. Returns its id.
    pub(crate) fn upsert_world(&mut self, w: &NewWorld<'_>) -> Result<i64, RegistryError> {
        let (state, intent) = (WorldState::Starting, Intent::Up);
        self.conn
            .query_row(
                "INSERT INTO worlds(project_id, name, slug, path, state, intent, grp, error, created_at, updated_at, token)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, unixepoch(), unixepoch(), lower(hex(randomblob(16))))
                 ON CONFLICT(project_id, name) DO UPDATE SET
                   slug = excluded.slug, path = excluded.path, state = excluded.state,
                   intent = excluded.intent, grp = COALESCE(excluded.grp, worlds.grp),
                   error = NULL, updated_at = unixepoch(),
                   token = COALESCE(worlds.token, excluded.token)
                 RETURNING id",
                params![w.project_id, w.name.as_str(), w.name.slug(), w.path, state, intent, w.group],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// Sets a world's state, intent and error.
    pub(crate) fn set_world_state(
        &self,
        id: i64,
        state: WorldState,
        intent: Option<Intent>,
        error: Option<&str>,
    ) -> Result<(), RegistryError> {
        // An error may quote a command's output: no secret is stored.
        let error = error.map(crate::secrets::scrub);
        self.conn
            .execute(
                "UPDATE worlds SET state = ?2, intent = ?3, error = ?4, updated_at = unixepoch(),
                   slept_at = CASE WHEN ?2 = 'sleeping' THEN slept_at END
                 WHERE id = ?1",
                params![id, state, intent, error.as_deref()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Makes the world's service rows match `services` (`(name, kind)` in
    /// start order), keeping counters of services that stay. One transaction.
    pub(crate) fn sync_services(
        &mut self,
        world_id: i64,
        services: &[(String, ServiceKind)],
    ) -> Result<(), RegistryError> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction()
            .map_err(|e| super::classify(&path, e))?;
        let names: Vec<&str> = services.iter().map(|(n, _)| n.as_str()).collect();
        {
            let mut stmt = tx
                .prepare("SELECT name FROM services WHERE world_id = ?1")
                .map_err(|e| super::classify(&path, e))?;
            let existing: Vec<String> = stmt
                .query_map([world_id], |r| r.get(0))
                .and_then(|rows| rows.collect())
                .map_err(|e| super::classify(&path, e))?;
            for old in existing.iter().filter(|o| !names.contains(&o.as_str())) {
                tx.execute(
                    "DELETE FROM services WHERE world_id = ?1 AND name = ?2",
                    params![world_id, old],
                )
                .map_err(|e| super::classify(&path, e))?;
            }
        }
        for (seq, (name, kind)) in services.iter().enumerate() {
            tx.execute(
                "INSERT INTO services(world_id, seq, name, kind, state, restarts, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0, unixepoch())
                 ON CONFLICT(world_id, name) DO UPDATE SET seq = excluded.seq, kind = excluded.kind",
                params![world_id, seq as i64, name, kind, ServiceState::Stopped],
            )
            .map_err(|e| super::classify(&path, e))?;
        }
        tx.commit().map_err(|e| super::classify(&path, e))
    }

    /// Records a started process.
    pub(crate) fn service_started(
        &self,
        world_id: i64,
        name: &str,
        pid: u32,
        start_time: Option<u64>,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE services SET pid = ?3, pgid = ?3, start_time = ?4, state = ?5, updated_at = unixepoch()
                 WHERE world_id = ?1 AND name = ?2",
                params![world_id, name, pid, start_time.map(|t| t as i64), ServiceState::Starting],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Sets a service's state (and clears its pid when no process is left).
    pub(crate) fn service_state(
        &self,
        world_id: i64,
        name: &str,
        state: ServiceState,
        exit: Option<&str>,
        has_process: bool,
    ) -> Result<(), RegistryError> {
        let exit = exit.map(crate::secrets::scrub);
        let exit = exit.as_deref();
        self.conn
            .execute(
                "UPDATE services SET
                   -- The supervisor's last word on a process stopped for
                   -- sleep may come after the world is asleep.
                   state = CASE WHEN state = 'sleeping' AND ?3 = 'stopped' THEN state ELSE ?3 END,
                   last_exit = COALESCE(?4, last_exit),
                   pid = CASE WHEN ?5 THEN pid ELSE NULL END,
                   pgid = CASE WHEN ?5 THEN pgid ELSE NULL END,
                   start_time = CASE WHEN ?5 THEN start_time ELSE NULL END,
                   updated_at = unixepoch()
                 WHERE world_id = ?1 AND name = ?2",
                params![world_id, name, state, exit, has_process],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Counts a restart.
    pub(crate) fn service_restarted(&self, world_id: i64, name: &str) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE services SET restarts = restarts + 1 WHERE world_id = ?1 AND name = ?2",
                params![world_id, name],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Resets restart counters at `up`.
    pub(crate) fn reset_restarts(&self, world_id: i64) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE services SET restarts = 0 WHERE world_id = ?1",
                [world_id],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Every project: (id, name, root folder).
    pub(crate) fn projects(&self) -> Result<Vec<(i64, String, String)>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, name, root FROM projects")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// The name of the world of `project_id` whose worktree is `path`.
    pub(crate) fn world_with_path(
        &self,
        project_id: i64,
        path: &str,
    ) -> Result<Option<String>, RegistryError> {
        self.one(
            "SELECT name FROM worlds WHERE project_id = ?1 AND path = ?2",
            rusqlite::params![project_id, path],
        )
    }

    /// The worktree paths of a project's worlds.
    pub(crate) fn world_paths(&self, project_id: i64) -> Result<Vec<String>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT path FROM worlds WHERE project_id = ?1")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([project_id], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// World `id`'s token (see schema v8), if it has one.
    pub(crate) fn world_token(&self, id: i64) -> Result<Option<String>, RegistryError> {
        self.conn
            .query_row("SELECT token FROM worlds WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map(Option::flatten)
            .map_err(|e| self.err(e))
    }

    /// Every world's token, with its id and state.
    pub(crate) fn world_tokens(&self) -> Result<Vec<(i64, String, WorldState)>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, token, state FROM worlds WHERE token IS NOT NULL")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Deletes a world with its services and port reservations (one
    /// transaction, by cascade). The freed pages are zeroed (`secure_delete`)
    /// and the WAL, which still holds their old images, is checkpointed and
    /// truncated, so nothing of the world lingers in the files.
    pub(crate) fn delete_world(&self, id: i64) -> Result<(), RegistryError> {
        self.conn
            .execute("DELETE FROM worlds WHERE id = ?1", [id])
            .map_err(|e| self.err(e))?;
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        Ok(())
    }
}

/// A service process as recorded: with its pid and start time it is the
/// identity `down` and re-adoption check before touching a process.
/// One `verify` run, as [`Registry::record_verify`](super::Registry::record_verify) stores it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VerifyRun<'a> {
    /// How it ended.
    pub outcome: VerifyOutcome,
    /// The worktree held uncommitted changes when it ran.
    pub dirty: bool,
    /// Its wall time, milliseconds.
    pub duration_ms: u64,
    /// The commit HEAD pointed at.
    pub commit: Option<&'a str>,
    /// What the events log says of it (`2/3 passed`…).
    pub detail: &'a str,
    /// It ran the branch's own checks (`--from-branch`).
    pub from_branch: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordedProcess {
    /// Service name.
    pub name: String,
    /// Its pid (which leads its own process group), while it runs.
    pub pid: Option<u32>,
    /// Its start time, clock ticks since boot.
    pub start_time: Option<u64>,
    /// Its state as last recorded.
    pub state: ServiceState,
    /// Why, as last recorded (an exit, a failure, a probe that did not
    /// pass).
    pub last_exit: Option<String>,
}

impl RecordedProcess {
    /// The pid, if that very process still runs: same pid *and* start time,
    /// so a recycled pid is never taken for it (and never pid 0 or 1).
    pub(crate) fn live_pid(&self) -> Option<u32> {
        match (self.pid, self.start_time) {
            (Some(pid), Some(start))
                if pid > 1 && crate::platform::process_start_time(pid) == Some(start) =>
            {
                Some(pid)
            }
            _ => None,
        }
    }
}

/// A world with its project, as `reconcile` walks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorldBrief {
    /// Row id.
    pub id: i64,
    /// Project name.
    pub project: String,
    /// World name.
    pub name: String,
    /// Where it is.
    pub state: WorldState,
    /// The verb in flight when it was recorded, if any.
    pub intent: Option<Intent>,
}

impl Registry {
    /// Every world, with its project's name.
    pub(crate) fn worlds(&self) -> Result<Vec<WorldBrief>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT w.id, p.name, w.name, w.state, w.intent FROM worlds w JOIN projects p ON p.id = w.project_id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(WorldBrief {
                    id: r.get(0)?,
                    project: r.get(1)?,
                    name: r.get(2)?,
                    state: r.get(3)?,
                    intent: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// `(project name, world name)` of a world id.
    pub(crate) fn world_names(
        &self,
        world_id: i64,
    ) -> Result<Option<(String, String)>, RegistryError> {
        self.conn
            .query_row(
                "SELECT p.name, w.name FROM worlds w JOIN projects p ON p.id = w.project_id WHERE w.id = ?1",
                [world_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The processes recorded for a world's services.
    pub(crate) fn world_processes(
        &self,
        world_id: i64,
    ) -> Result<Vec<RecordedProcess>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT name, pid, start_time, state, last_exit FROM services WHERE world_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([world_id], |r| {
                Ok(RecordedProcess {
                    name: r.get(0)?,
                    pid: r.get(1)?,
                    start_time: r.get::<_, Option<i64>>(2)?.map(|t| t as u64),
                    state: r.get(3)?,
                    last_exit: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Marks every process service of a world stopped, forgetting its pid.
    pub(crate) fn processes_stopped(&self, world_id: i64) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE services SET state = ?2, pid = NULL, pgid = NULL, start_time = NULL
                 WHERE world_id = ?1 AND kind = ?3",
                params![world_id, ServiceState::Stopped, ServiceKind::Process],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }
}

/// A route as recorded: `(host, project, world, service, port, state)`.
pub(crate) type RouteRow = (String, String, String, String, u16, ServiceState);

impl Registry {
    /// Records the proxied hostname of a url service.
    pub(crate) fn set_service_host(
        &self,
        world_id: i64,
        name: &str,
        host: &str,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE services SET host = ?3 WHERE world_id = ?1 AND name = ?2",
                params![world_id, name, host],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Every recorded route, for rebuilding the proxy table at start-up.
    pub(crate) fn routes(&self) -> Result<Vec<RouteRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT s.host, p.name, w.name, s.name, r.port,
                        CASE WHEN w.state = 'sleeping' THEN 'sleeping' ELSE s.state END
                 FROM services s
                 JOIN worlds w ON w.id = s.world_id
                 JOIN projects p ON p.id = w.project_id
                 JOIN port_reservations r ON r.world_id = s.world_id AND r.service = s.name AND r.name = ''
                 WHERE s.host IS NOT NULL",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

impl Registry {
    /// Records (or, with `None`, clears) the `verify` command running for a
    /// world: its pid, which leads its own process group, and the process
    /// start time that, with the pid, identifies it.
    pub(crate) fn set_verify_running(
        &self,
        world_id: i64,
        running: Option<(u32, u64)>,
    ) -> Result<(), RegistryError> {
        let (pid, start) = running.map_or((None, None), |(p, s)| (Some(p), Some(s as i64)));
        self.conn
            .execute(
                "UPDATE worlds SET verify_pid = ?2, verify_start_time = ?3 WHERE id = ?1",
                params![world_id, pid, start],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Worlds with a `verify` command recorded as running: (world id, pid,
    /// start time).
    pub(crate) fn verifies_running(&self) -> Result<Vec<(i64, u32, u64)>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, verify_pid, COALESCE(verify_start_time, 0) FROM worlds WHERE verify_pid IS NOT NULL",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Records a `verify` run of world `world_id` (its detail scrubbed of
    /// every secret Binky knows).
    pub(crate) fn record_verify(
        &self,
        world_id: i64,
        run: &VerifyRun<'_>,
    ) -> Result<(), RegistryError> {
        let VerifyRun {
            outcome,
            dirty,
            duration_ms,
            commit,
            detail,
            from_branch,
        } = *run;
        let detail = crate::secrets::scrub(detail);
        let detail = detail.as_ref();
        self.conn
            .execute(
                "INSERT INTO verify_results(world_id, passed, duration_ms, commit_sha, started_at, detail, outcome, dirty, from_branch)
                 VALUES (?1, ?2, ?3, ?4, unixepoch(), ?5, ?6, ?7, ?8)",
                params![
                    world_id,
                    outcome == VerifyOutcome::Passed,
                    duration_ms as i64,
                    commit,
                    detail,
                    outcome,
                    dirty,
                    from_branch
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }
}
