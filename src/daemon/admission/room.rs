//! The room now (settings, active and admitted worlds, RAM, disks), one
//! look at it for a ticket, and where each queued ticket stands.

use super::decide::{Decision, Room, Waiting};
use super::tickets::{Admitted, Step};
use super::{Backoff, DEFAULT_FOOTPRINT, DISK_RESERVE_SHARE, RESUME_MARGIN, State, hold};
use crate::daemon::events::EventKind;
use crate::daemon::{Daemon, WorldKey};
use crate::protocol::ApiError;
use crate::registry::QueueRow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Where a queued ticket stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    /// 1-based place in admission order.
    pub position: usize,
    /// How many are queued.
    pub of: usize,
    /// Why the next one waits.
    pub reason: String,
}

impl Standing {
    /// As the wire carries it.
    pub(crate) fn place(&self) -> Box<crate::protocol::QueuePlace> {
        Box::new(crate::protocol::QueuePlace {
            position: self.position as u32,
            of: self.of as u32,
            reason: self.reason.clone(),
        })
    }

    /// `queued: 3rd of 5 — waiting for RAM: …`.
    pub(crate) fn message(&self) -> String {
        format!(
            "queued: {} of {} — {}",
            ordinal(self.position),
            self.of,
            self.reason
        )
    }
}

pub(super) fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The queue as [`decide`](super::decide) sees it, row for row.
pub(super) fn waiting(d: &Daemon, rows: &[QueueRow]) -> Vec<Waiting> {
    let reg = d.registry();
    // One read per project, not per queued world: a swarm is one project.
    let mut footprints: HashMap<&str, u64> = HashMap::new();
    rows.iter()
        .map(|r| Waiting {
            ticket: r.ticket,
            since: r.since,
            group: r.group.clone(),
            footprint: *footprints.entry(&r.project).or_insert_with(|| {
                reg.footprint(&r.project)
                    .ok()
                    .flatten()
                    .unwrap_or(DEFAULT_FOOTPRINT)
            }),
            resume: r.resume,
        })
        .collect()
}

/// The room now: settings, active worlds (recorded plus admitted), RAM and
/// the disks under `BINKY_HOME` and each queued project.
pub(super) fn room(d: &Daemon, st: &State, rows: &[QueueRow]) -> Result<Room, ApiError> {
    let reg = d.registry();
    let s = reg.settings()?;
    let mut active: std::collections::BTreeMap<String, u32> = Default::default();
    for w in reg.active_worlds()? {
        if w.state != crate::protocol::WorldState::Suspended
            && !st.pending.contains_key(&WorldKey::new(w.project, w.world))
        {
            *active.entry(w.group).or_default() += 1;
        }
    }
    drop(reg);
    for (group, _) in st.pending.values() {
        *active.entry(group.clone()).or_default() += 1;
    }
    let ram = crate::platform::memory().map(|m| super::decide::Ram {
        available: m.available,
        reserve: (m.total as f64 * s.ram_reserve_pct / 100.0) as u64,
        reserve_pct: s.ram_reserve_pct.round() as u32,
        steady: st.trend.steady(),
        pending: st.pending.values().map(|(_, f)| f).sum::<u64>()
            + st.settling
                .iter()
                .filter(|(k, _)| !st.pending.contains_key(*k))
                .map(|(_, (_, f))| f)
                .sum::<u64>(),
    });
    let reserve = disk_reserve(d, &s)?;
    let mut paths: Vec<String> = vec![d.paths.home().display().to_string()];
    for r in rows {
        if !paths.contains(&r.disk_path) {
            paths.push(r.disk_path.clone());
        }
    }
    let disks = paths
        .into_iter()
        .filter_map(|path| {
            let (free, size) = crate::platform::disk_space(std::path::Path::new(&path))?;
            Some(super::decide::Disk {
                path,
                free,
                reserve: reserve(size),
            })
        })
        .collect();
    Ok(Room {
        max_parallel: s.max_parallel,
        active,
        ram,
        disks,
        // Above the noise, so a resume is not undone by the next dip.
        resume_margin: RESUME_MARGIN.max(st.trend.band()),
    })
}

/// One look at the room for `ticket`, admitting it when it is next and
/// fits (under the lock, so two tickets never take the same room).
pub(super) fn look(d: &Arc<Daemon>, ticket: i64) -> Result<Step, ApiError> {
    let started = std::time::Instant::now();
    d.admission.looks.fetch_add(1, Ordering::Relaxed);
    let mut st = d.admission.lock();
    let rows = d.registry().queue()?;
    let Some(me) = rows.iter().position(|r| r.ticket == ticket) else {
        return Ok(Step::Gone);
    };
    let queue = waiting(d, &rows);
    let room = room(d, &st, &rows)?;
    let decision = super::decide::decide(&queue, &room);
    if decision == Decision::Admit(me) {
        let row = &rows[me];
        d.registry().mark_admitted(ticket)?;
        crate::faults::point("admission:admitted");
        let key = WorldKey::new(&row.project, &row.world);
        st.pending
            .insert(key.clone(), (row.group.clone(), queue[me].footprint));
        if row.resume {
            let b = st.backoff.entry(key.clone()).or_insert(Backoff {
                hold: hold(),
                resumed: None,
            });
            b.resumed = Some(std::time::Instant::now());
        }
        d.admission.admissions.fetch_add(1, Ordering::Relaxed);
        let name = if row.resume {
            EventKind::Resumed
        } else {
            EventKind::Admitted
        };
        let mut ev = crate::daemon::world::world_event(name, &row.project, &row.world);
        ev.detail = Some(format!(
            "ticket {ticket}, {}; decided in {:.2} ms",
            figures(&room, queue[me].footprint),
            started.elapsed().as_secs_f64() * 1000.0
        ));
        d.event(ev);
        return Ok(Step::Admitted(Admitted {
            d: Arc::clone(d),
            key,
            ticket,
        }));
    }
    let reasons = super::decide::reasons(&queue, &room);
    let position = reasons.iter().position(|(i, _)| *i == me).unwrap_or(0);
    let reason = match (position, decision) {
        // Another ticket is next and fits: it is being admitted.
        (0, Decision::Wait(b)) => b.to_string(),
        (_, _) => reasons
            .get(position)
            .map(|(_, r)| r.clone())
            .unwrap_or_default(),
    };
    Ok(Step::Waiting(Standing {
        position: position + 1,
        of: rows.len(),
        reason,
    }))
}

/// The figures an admission event carries.
pub(super) fn figures(room: &Room, footprint: u64) -> String {
    let active: u32 = room.active.values().sum();
    let mut out = format!("active {active}");
    if room.max_parallel > 0 {
        out.push_str(&format!(" of max_parallel {}", room.max_parallel));
    }
    if let Some(r) = room.ram {
        out.push_str(&format!(
            ", available {}, reserve {}, pending {}",
            super::decide::gib(r.available),
            super::decide::gib(r.reserve),
            super::decide::gib(r.pending)
        ));
    }
    out.push_str(&format!(", footprint {}", super::decide::gib(footprint)));
    out
}

/// Where each queued ticket stands now, for `status`.
pub(super) fn standings(d: &Daemon, rows: &[QueueRow]) -> HashMap<WorldKey, Standing> {
    let st = d.admission.lock();
    if rows.is_empty() {
        return HashMap::new();
    }
    let queue = waiting(d, rows);
    let Ok(room) = room(d, &st, rows) else {
        return HashMap::new();
    };
    super::decide::reasons(&queue, &room)
        .into_iter()
        .enumerate()
        .map(|(pos, (i, reason))| {
            (
                WorldKey::new(&rows[i].project, &rows[i].world),
                Standing {
                    position: pos + 1,
                    of: rows.len(),
                    reason,
                },
            )
        })
        .collect()
}

/// A queued world that was never made: no worktree, no services yet.
pub(crate) fn unmade(name: &str, group: Option<String>) -> crate::protocol::WorldStatus {
    crate::protocol::WorldStatus {
        name: name.to_owned(),
        slug: crate::slug::world_slug(name),
        state: crate::protocol::WorldState::Queued,
        path: String::new(),
        group: group.filter(|g| !g.is_empty()),
        error: None,
        verify: None,
        services: Vec::new(),
        queue: None,
        suspended_since: None,
        created: None,
        usage: None,
        notes: Vec::new(),
    }
}

/// Puts the queue into `report`: a queued world that exists shows as
/// `queued` with its place; one never made is listed with no worktree.
pub(crate) fn fill_queue(
    d: &Daemon,
    report: &mut crate::protocol::StatusReport,
    project: Option<&str>,
) {
    let Ok(rows) = d.registry().queue() else {
        return;
    };
    let places = standings(d, &rows);
    for r in rows {
        if project.is_some_and(|p| p != r.project) {
            continue;
        }
        let place = places
            .get(&WorldKey::new(&r.project, &r.world))
            .map(Standing::place);
        let at = match report.projects.iter().position(|p| p.name == r.project) {
            Some(i) => i,
            None => {
                report.projects.push(crate::protocol::ProjectStatus {
                    name: r.project.clone(),
                    root: r.disk_path.clone(),
                    worlds: Vec::new(),
                });
                report.projects.sort_by(|a, b| a.name.cmp(&b.name));
                report
                    .projects
                    .iter()
                    .position(|p| p.name == r.project)
                    .expect("just added")
            }
        };
        let worlds = &mut report.projects[at].worlds;
        let w = match worlds.iter_mut().find(|w| w.name == r.world) {
            Some(w) => w,
            None => {
                let group = Some(r.group.clone());
                worlds.push(unmade(&r.world, group));
                worlds.sort_by(|a, b| a.name.cmp(&b.name));
                worlds
                    .iter_mut()
                    .find(|w| w.name == r.world)
                    .expect("just added")
            }
        };
        // A resume keeps its world's own state, `suspended`, with the place
        // and reason it waits for now.
        if !r.resume {
            w.state = crate::protocol::WorldState::Queued;
        }
        w.queue = place;
    }
}

/// The disk reserve admission keeps on a filesystem of `size` bytes. The
/// default (5 GB) is a guess made for a large disk: on a small filesystem
/// (a 1 GB /tmp) it would keep every `up` queued for good, so it is at
/// most a tenth of each. A reserve the user set is kept as set.
///
/// # Errors
/// The registry cannot be read.
pub(crate) fn disk_reserve(
    d: &Daemon,
    s: &crate::protocol::Settings,
) -> Result<impl Fn(u64) -> u64 + use<>, ApiError> {
    let reserve = (s.disk_reserve_gb * 1e9) as u64;
    let chosen = d.registry().setting_is_set("disk_reserve_gb")?;
    Ok(move |size: u64| {
        if chosen {
            reserve
        } else {
            reserve.min(size / DISK_RESERVE_SHARE)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standings_read_as_the_issue_writes_them() {
        let s = Standing {
            position: 3,
            of: 5,
            reason: "max_parallel 4 reached".into(),
        };
        assert_eq!(s.message(), "queued: 3rd of 5 — max_parallel 4 reached");
        let o: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            o,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"
            ]
        );
    }
}
