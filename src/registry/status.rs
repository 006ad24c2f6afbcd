//! What `status` and `metrics` read: every world with its services, ports,
//! last verify result and place in the queue; counts and counters.

use super::{Registry, RegistryError};
use crate::protocol::{ProjectStatus, ServiceStatus, StatusReport, WorldStatus};
use indexmap::IndexMap;
use std::path::PathBuf;

impl Registry {
    /// Every world with its services and ports, grouped by project; only
    /// `project` when given.
    pub(crate) fn status(&self, project: Option<&str>) -> Result<StatusReport, RegistryError> {
        let mut projects = self.status_projects(project)?;
        if projects.is_empty() {
            return Ok(StatusReport::default());
        }
        let mut worlds = self.status_worlds(&projects)?;
        let mut services = self.status_services(&worlds)?;
        self.status_ports(&mut services)?;
        for ((wid, _), s) in services {
            if let Some((_, w)) = worlds.get_mut(&wid) {
                w.services.push(s);
            }
        }
        for (_, (pid, w)) in worlds {
            if let Some(p) = projects.get_mut(&pid) {
                p.worlds.push(w);
            }
        }
        Ok(StatusReport {
            projects: projects.into_values().collect(),
            ..Default::default()
        })
    }

    /// The projects `status` shows (`project` alone when given), by id.
    fn status_projects(
        &self,
        project: Option<&str>,
    ) -> Result<IndexMap<i64, ProjectStatus>, RegistryError> {
        let mut projects: IndexMap<i64, ProjectStatus> = IndexMap::new();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, name, root FROM projects
                 WHERE ?1 IS NULL OR name = ?1 ORDER BY name",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([project], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    ProjectStatus {
                        name: r.get(1)?,
                        root: r.get(2)?,
                        queued_unlisted: 0,
                        spares: None,
                        worlds: Vec::new(),
                    },
                ))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (id, p) = row.map_err(|e| self.err(e))?;
            projects.insert(id, p);
        }
        Ok(projects)
    }

    /// The worlds of `projects` with their last verify result, by id, each
    /// with its project's id; no services yet.
    fn status_worlds(
        &self,
        projects: &IndexMap<i64, ProjectStatus>,
    ) -> Result<IndexMap<i64, (i64, WorldStatus)>, RegistryError> {
        let mut worlds: IndexMap<i64, (i64, WorldStatus)> = IndexMap::new();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, project_id, name, slug, state, path, grp, error,
                   (SELECT outcome
                           || COALESCE(' at ' || substr(commit_sha, 1, 12), '')
                           || CASE WHEN dirty THEN ' plus uncommitted changes' ELSE '' END
                           || CASE WHEN from_branch THEN ' (the branch''s own checks)' ELSE '' END
                      FROM verify_results v WHERE v.world_id = worlds.id
                     ORDER BY v.id DESC LIMIT 1),
                   suspended_at, created_at, slept_at, idle_after_ms
                 FROM worlds ORDER BY name",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    WorldStatus {
                        name: r.get(2)?,
                        slug: r.get(3)?,
                        state: r.get(4)?,
                        path: r.get(5)?,
                        group: r.get(6)?,
                        error: r.get(7)?,
                        verify: r.get(8)?,
                        services: Vec::new(),
                        queue: None,
                        suspended_since: r
                            .get::<_, Option<i64>>(9)?
                            .map(|ms| rfc3339(std::time::Duration::from_millis(ms.max(0) as u64))),
                        created: r
                            .get::<_, Option<i64>>(10)?
                            .map(|s| rfc3339(std::time::Duration::from_secs(s.max(0) as u64))),
                        sleeping_since: r
                            .get::<_, Option<i64>>(11)?
                            .map(|ms| rfc3339(std::time::Duration::from_millis(ms.max(0) as u64))),
                        idle_after_s: r
                            .get::<_, Option<i64>>(12)?
                            .map(|ms| (ms.max(0) as u64).div_ceil(1000)),
                        usage: None,
                        notes: Vec::new(),
                    },
                ))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (id, pid, w) = row.map_err(|e| self.err(e))?;
            if projects.contains_key(&pid) {
                worlds.insert(id, (pid, w));
            }
        }
        Ok(worlds)
    }

    /// The services of `worlds` in start order, by `(world id, name)`; no
    /// ports yet.
    fn status_services(
        &self,
        worlds: &IndexMap<i64, (i64, WorldStatus)>,
    ) -> Result<IndexMap<(i64, String), ServiceStatus>, RegistryError> {
        let mut services: IndexMap<(i64, String), ServiceStatus> = IndexMap::new();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT world_id, name, kind, state, pid, restarts, host FROM services ORDER BY world_id, seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    ServiceStatus {
                        name: r.get(1)?,
                        kind: r.get(2)?,
                        state: r.get(3)?,
                        pid: r.get::<_, Option<u32>>(4)?,
                        port: None,
                        ports: IndexMap::new(),
                        restarts: r.get(5)?,
                        host: r.get(6)?,
                        url: None,
                        log_flood: None,
                    },
                ))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (wid, s) = row.map_err(|e| self.err(e))?;
            if worlds.contains_key(&wid) {
                services.insert((wid, s.name.clone()), s);
            }
        }
        Ok(services)
    }

    /// Fills each service's primary and named ports from the reservations.
    fn status_ports(
        &self,
        services: &mut IndexMap<(i64, String), ServiceStatus>,
    ) -> Result<(), RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT world_id, service, name, port FROM port_reservations ORDER BY port",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u16>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (wid, svc, name, port) = row.map_err(|e| self.err(e))?;
            if let Some(s) = services.get_mut(&(wid, svc)) {
                if name.is_empty() {
                    s.port = Some(port);
                } else {
                    s.ports.insert(name, port);
                }
            }
        }
        Ok(())
    }

    /// World counts by state.
    pub(crate) fn world_counts(&self) -> Result<IndexMap<String, u64>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT state, COUNT(*) FROM worlds GROUP BY state ORDER BY state")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// (services running, total restarts, port reservations).
    pub(crate) fn counters(&self) -> Result<(u64, u64, u64), RegistryError> {
        self.conn
            .query_row(
                "SELECT
                   (SELECT COUNT(*) FROM services WHERE state = ?1),
                   (SELECT COALESCE(SUM(restarts), 0) FROM services),
                   (SELECT COUNT(*) FROM port_reservations)",
                [crate::protocol::ServiceState::Running],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(|e| self.err(e))
    }

    /// Size of the database and its WAL, in bytes.
    pub(crate) fn size_bytes(&self) -> u64 {
        let wal = PathBuf::from(format!("{}-wal", self.path.display()));
        [&self.path, &wal]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// `since_epoch` as RFC 3339, to the second.
fn rfc3339(since_epoch: std::time::Duration) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + since_epoch).to_string()
}
