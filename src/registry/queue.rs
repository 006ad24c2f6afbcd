//! Queries for admission: the queue of waiting `up`s, the worlds that count
//! against the room, project footprints and suspensions.

use super::{Registry, RegistryError};
use crate::protocol::WorldState;
use rusqlite::{OptionalExtension, params};

/// One queued `up`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueRow {
    /// Arrival order; never reused.
    pub ticket: i64,
    /// Project name.
    pub project: String,
    /// World name.
    pub world: String,
    /// Who asked (`""`: unknown, queued before callers were recorded).
    pub caller: String,
    /// Admission group (`""`: the default one).
    pub group: String,
    /// The `up`'s world reference, as JSON.
    pub request: String,
    /// A path whose filesystem must keep the disk reserve free.
    pub disk_path: String,
    /// When it was queued, unix ms.
    pub enqueued_at: i64,
    /// A suspended world waiting to resume.
    pub resume: bool,
    /// The order key, unix ms: when it first asked (a resume keeps the time
    /// its world was admitted).
    pub since: i64,
}

/// A world that takes room: running, starting, or suspended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActiveRow {
    /// World id.
    pub id: i64,
    /// Project name.
    pub project: String,
    /// World name.
    pub world: String,
    /// Who brought it up (`""`: unknown).
    pub caller: String,
    /// Admission group (`""`: the default one).
    pub group: String,
    /// Where it is.
    pub state: WorldState,
    /// Last admission or resume, unix ms.
    pub admitted_at: Option<i64>,
    /// Since when it is suspended, unix ms.
    pub suspended_at: Option<i64>,
}

/// Now, in unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A ticket to take: who asks for which world.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewTicket<'a> {
    /// Project name.
    pub project: &'a str,
    /// World name.
    pub world: &'a str,
    /// Who asks (`""`: unknown).
    pub caller: &'a str,
    /// Admission group (`""`: the default one).
    pub group: &'a str,
    /// The `up`'s world reference, as JSON.
    pub request: &'a str,
    /// A path whose filesystem must keep the disk reserve free.
    pub disk_path: &'a str,
}

/// How full the queue is for one caller's group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueCounts {
    /// Tickets waiting (not yet admitted), in all.
    pub total: u32,
    /// Of those, the caller's.
    pub caller: u32,
    /// Of those, the caller's in the group.
    pub group: u32,
}

impl Registry {
    /// Queues an `up`, returning its ticket; one already queued keeps its
    /// ticket (and place).
    ///
    /// Also whether this call made the ticket (`false`: the world was
    /// queued already, by another `up` or as a resume, and keeps that
    /// place).
    pub(crate) fn enqueue(&mut self, t: &NewTicket<'_>) -> Result<(i64, bool), RegistryError> {
        self.enqueue_at(t, None)
    }

    /// Queues the resume of a suspended world, in the place its admission
    /// at `since` (unix ms) gives it.
    pub(crate) fn enqueue_resume(
        &mut self,
        t: &NewTicket<'_>,
        since: i64,
    ) -> Result<i64, RegistryError> {
        self.enqueue_at(t, Some(since)).map(|(t, _)| t)
    }

    fn enqueue_at(
        &mut self,
        t: &NewTicket<'_>,
        resume_since: Option<i64>,
    ) -> Result<(i64, bool), RegistryError> {
        let now = now_ms();
        let made = self
            .conn
            .execute(
                "INSERT INTO admission_queue(project, world, caller, grp, request, disk_path, enqueued_at, resume, since)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(project, world) DO NOTHING",
                params![
                    t.project,
                    t.world,
                    t.caller,
                    t.group,
                    t.request,
                    t.disk_path,
                    now,
                    resume_since.is_some(),
                    resume_since.unwrap_or(now)
                ],
            )
            .map_err(|e| self.err(e))?
            == 1;
        self.conn
            .query_row(
                "SELECT ticket FROM admission_queue WHERE project = ?1 AND world = ?2",
                params![t.project, t.world],
                |r| r.get(0),
            )
            .map(|t| (t, made))
            .map_err(|e| self.err(e))
    }

    /// The ticket of `project`/`world`, if it is queued (admitted or not).
    pub(crate) fn ticket_of(
        &self,
        project: &str,
        world: &str,
    ) -> Result<Option<i64>, RegistryError> {
        self.one(
            "SELECT ticket FROM admission_queue WHERE project = ?1 AND world = ?2",
            params![project, world],
        )
    }

    /// Whether `ticket` waits in the queue, not yet admitted.
    pub(crate) fn queued(&self, ticket: i64) -> Result<bool, RegistryError> {
        self.one::<i64>(
            "SELECT 1 FROM admission_queue WHERE ticket = ?1 AND admitted = 0",
            params![ticket],
        )
        .map(|r| r.is_some())
    }

    /// How many tickets wait, in all, for `caller` and for its `group`: what
    /// the queue's caps are checked against (one indexed count).
    pub(crate) fn queue_counts(
        &self,
        caller: &str,
        group: &str,
    ) -> Result<QueueCounts, RegistryError> {
        self.conn
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(caller = ?1), 0), COALESCE(SUM(caller = ?1 AND grp = ?2), 0)
                 FROM admission_queue WHERE admitted = 0",
                params![caller, group],
                |r| {
                    Ok(QueueCounts {
                        total: r.get(0)?,
                        caller: r.get(1)?,
                        group: r.get(2)?,
                    })
                },
            )
            .map_err(|e| self.err(e))
    }

    /// Records who brought world `project`/`world` up, for fairness while
    /// it runs.
    pub(crate) fn set_world_caller(
        &mut self,
        project: &str,
        world: &str,
        caller: &str,
    ) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE worlds SET caller = ?3
                 WHERE name = ?2 AND project_id = (SELECT id FROM projects WHERE name = ?1)",
                params![project, world, caller],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Takes `ticket` out of the queue; whether it was there.
    pub(crate) fn dequeue(&mut self, ticket: i64) -> Result<bool, RegistryError> {
        self.conn
            .execute(
                "DELETE FROM admission_queue WHERE ticket = ?1",
                params![ticket],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }

    /// Takes `project`/`world` out of the queue; its ticket, if it was there.
    pub(crate) fn dequeue_world(
        &mut self,
        project: &str,
        world: &str,
    ) -> Result<Option<i64>, RegistryError> {
        self.one(
            "DELETE FROM admission_queue WHERE project = ?1 AND world = ?2 RETURNING ticket",
            params![project, world],
        )
    }

    /// Marks `ticket` admitted: it leaves the queue's order but keeps its
    /// row until its `up` settles ([`Registry::dequeue`]), so a daemon that
    /// dies in between loses no request.
    pub(crate) fn mark_admitted(&mut self, ticket: i64) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE admission_queue SET admitted = 1 WHERE ticket = ?1",
                params![ticket],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Puts every admitted ticket back in the queue, in its place: at start,
    /// no `up` is under way, so one marked admitted was cut short by a crash.
    pub(crate) fn readmit_all(&mut self) -> Result<usize, RegistryError> {
        self.conn
            .execute(
                "UPDATE admission_queue SET admitted = 0 WHERE admitted = 1",
                [],
            )
            .map_err(|e| self.err(e))
    }

    /// The queue (tickets not yet admitted), oldest first.
    pub(crate) fn queue(&self) -> Result<Vec<QueueRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT ticket, project, world, caller, grp, request, disk_path, enqueued_at, resume, since
                 FROM admission_queue WHERE admitted = 0 ORDER BY since, ticket",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(QueueRow {
                    ticket: r.get(0)?,
                    project: r.get(1)?,
                    world: r.get(2)?,
                    caller: r.get(3)?,
                    group: r.get(4)?,
                    request: r.get(5)?,
                    disk_path: r.get(6)?,
                    enqueued_at: r.get(7)?,
                    resume: r.get(8)?,
                    since: r.get(9)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Worlds running, starting or suspended, oldest admission first.
    pub(crate) fn active_worlds(&self) -> Result<Vec<ActiveRow>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT w.id, p.name, w.name, COALESCE(w.caller, ''), COALESCE(w.grp, ''), w.state, w.admitted_at, w.suspended_at
                 FROM worlds w JOIN projects p ON p.id = w.project_id
                 WHERE w.state IN (?1, ?2, ?3)
                 ORDER BY COALESCE(w.admitted_at, 0), w.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(
                params![
                    WorldState::Running,
                    WorldState::Starting,
                    WorldState::Suspended
                ],
                |r| {
                    Ok(ActiveRow {
                        id: r.get(0)?,
                        project: r.get(1)?,
                        world: r.get(2)?,
                        caller: r.get(3)?,
                        group: r.get(4)?,
                        state: r.get(5)?,
                        admitted_at: r.get(6)?,
                        suspended_at: r.get(7)?,
                    })
                },
            )
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Records that world `id` was admitted (or resumed) now.
    pub(crate) fn set_admitted(&mut self, id: i64) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE worlds SET admitted_at = ?2, suspended_at = NULL WHERE id = ?1",
                params![id, now_ms()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Records world `id` as suspended since now, for `why`.
    pub(crate) fn set_suspended(&mut self, id: i64, why: &str) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE worlds SET state = ?2, intent = NULL, error = ?3, suspended_at = ?4,
                   updated_at = unixepoch() WHERE id = ?1",
                params![id, WorldState::Suspended, why, now_ms()],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// The project's learned footprint (peak RSS of its last running
    /// world), bytes.
    pub(crate) fn footprint(&self, project: &str) -> Result<Option<u64>, RegistryError> {
        self.conn
            .query_row(
                "SELECT footprint_bytes FROM projects WHERE name = ?1",
                params![project],
                |r| r.get::<_, Option<i64>>(0),
            )
            .optional()
            .map(|v| v.flatten().map(|b| b.max(0) as u64))
            .map_err(|e| self.err(e))
    }

    /// Every project's learned footprint, bytes, by project name (those
    /// never measured are left out).
    pub(crate) fn footprints(&self) -> Result<Vec<(String, u64)>, RegistryError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT name, footprint_bytes FROM projects
                 WHERE footprint_bytes IS NOT NULL ORDER BY name",
            )
            .map_err(|e| self.err(e))?;
        st.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
        })
        .and_then(|rows| rows.collect())
        .map_err(|e| self.err(e))
    }

    /// Stores the project's footprint, bytes.
    pub(crate) fn set_footprint(&mut self, project: &str, bytes: u64) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE projects SET footprint_bytes = ?2 WHERE name = ?1",
                params![project, i64::try_from(bytes).unwrap_or(i64::MAX)],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::{NewTicket, QueueCounts};
    use crate::registry::Registry;

    #[test]
    fn the_queue_keeps_arrival_order_and_one_place_per_world() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Registry::open(&dir.path().join("r.db")).unwrap();
        let t = |world, group| NewTicket {
            project: "p",
            world,
            caller: "c",
            group,
            request: "{}",
            disk_path: "/",
        };
        let (a, made) = r.enqueue(&t("a", "")).unwrap();
        assert!(made);
        let (b, _) = r.enqueue(&t("b", "g")).unwrap();
        assert!(b > a);
        assert_eq!(r.enqueue(&t("a", "")).unwrap(), (a, false));
        assert_eq!(
            r.queue_counts("c", "g").unwrap(),
            QueueCounts {
                total: 2,
                caller: 2,
                group: 1
            }
        );
        assert_eq!(r.queue_counts("other", "g").unwrap().caller, 0);
        let q = r.queue().unwrap();
        assert_eq!(
            q.iter().map(|q| q.world.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(q[1].group, "g");
        assert_eq!(r.dequeue_world("p", "a").unwrap(), Some(a));
        assert!(!r.dequeue(a).unwrap());
        assert!(r.dequeue(b).unwrap());
        // A ticket is never reused.
        assert!(r.enqueue(&t("a", "")).unwrap().0 > b);
        r.upsert_project("p", "/p").unwrap();
        assert_eq!(r.footprint("p").unwrap(), None);
        r.set_footprint("p", 300 << 20).unwrap();
        assert_eq!(r.footprint("p").unwrap(), Some(300 << 20));
        assert_eq!(r.footprints().unwrap(), [("p".to_owned(), 300 << 20)]);
    }
}
