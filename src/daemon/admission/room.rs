//! The room now (settings, active and admitted worlds, RAM, disks), the
//! pass that admits what fits and publishes where the rest stand, and the
//! queue as `status` shows it.

use super::decide::{Decision, Room, Waiting, decide_in};
use super::{
    Backoff, Board, DEFAULT_FOOTPRINT, DISK_RESERVE_SHARE, Glance, RESUME_MARGIN, State, hold,
};
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
    d.registry(|reg| waiting_in(reg, rows))
}

fn waiting_in(reg: &crate::registry::Registry, rows: &[QueueRow]) -> Vec<Waiting> {
    // One read per project, not per queued world: a swarm is one project.
    let mut footprints: HashMap<&str, u64> = HashMap::new();
    rows.iter()
        .map(|r| Waiting {
            ticket: r.ticket,
            since: r.since,
            caller: r.caller.clone(),
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

/// The disks admission checks: `BINKY_HOME`'s and each queued project's.
fn disk_paths(d: &Daemon, rows: &[QueueRow]) -> Vec<String> {
    let mut paths: Vec<String> = vec![d.paths.home().display().to_string()];
    for r in rows {
        if !paths.contains(&r.disk_path) {
            paths.push(r.disk_path.clone());
        }
    }
    paths
}

/// The room now: settings, active worlds (recorded plus admitted), RAM and
/// the disks at `paths` ([`disk_paths`]).
pub(super) fn room(d: &Daemon, st: &State, paths: &[String]) -> Result<Room, ApiError> {
    let (s, worlds) = d.registry(|reg| {
        Ok::<_, crate::registry::RegistryError>((reg.settings()?, reg.active_worlds()?))
    })?;
    let mut active: std::collections::BTreeMap<super::decide::Slot, u32> = Default::default();
    for w in worlds {
        if w.state != crate::protocol::WorldState::Suspended
            && !st.pending.contains_key(&WorldKey::new(w.project, w.world))
        {
            *active.entry((w.caller, w.group)).or_default() += 1;
        }
    }
    for (slot, _) in st.pending.values() {
        *active.entry(slot.clone()).or_default() += 1;
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
    let disks = paths
        .iter()
        .filter_map(|path| {
            let (free, size) = crate::platform::disk_space(std::path::Path::new(path))?;
            Some(super::decide::Disk {
                path: path.clone(),
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

/// One pass: looks at the room and admits, in admission order, every
/// ticket that fits (under the lock, so two passes never take the same
/// room), leaving each for its waiting `up` to claim; then publishes where
/// every other ticket stands. Returns how many still wait.
///
/// Its cost is one read of the queue and O(n log n) in the queued tickets,
/// however many `up`s wait on them.
///
/// # Errors
/// The registry cannot be read or written.
pub(super) fn pass(d: &Daemon) -> Result<usize, ApiError> {
    let started = std::time::Instant::now();
    d.admission.looks.fetch_add(1, Ordering::Relaxed);
    d.admission.passes.fetch_add(1, Ordering::Relaxed);
    let mut st = d.admission.lock();
    let rows = d.registry(|r| r.queue())?;
    if rows.is_empty() {
        st.glance = None;
        d.admission.board.send_if_modified(|b| {
            let had = !b.standings.is_empty();
            if had {
                *b = Arc::new(Board {
                    admitted: b.admitted,
                    ..Board::default()
                });
            }
            had
        });
        return Ok(0);
    }
    let queue = waiting(d, &rows);
    let paths = disk_paths(d, &rows);
    let mut room = room(d, &st, &paths)?;
    let order = super::decide::order(&queue, &room);
    let mut admitted = 0;
    // `order` already counts each admission against its caller and group,
    // so what is left of it is the order after them.
    while let Decision::Admit(i) = decide_in(&queue, &room, &order[admitted..]) {
        let w = &queue[i];
        admit(d, &mut st, &rows[i], w, &room, started)?;
        *room
            .active
            .entry((w.caller.clone(), w.group.clone()))
            .or_default() += 1;
        if let Some(ram) = room.ram.as_mut() {
            ram.pending += w.footprint;
        }
        admitted += 1;
    }
    let rest = &order[admitted..];
    let of = rest.len();
    st.glance = Some(glance_of(&queue, rest, &room, paths));
    let standings: HashMap<i64, Standing> = super::decide::reasons_in(&queue, &room, rest)
        .into_iter()
        .enumerate()
        .map(|(pos, (i, reason))| {
            (
                rows[i].ticket,
                Standing {
                    position: pos + 1,
                    of,
                    reason,
                },
            )
        })
        .collect();
    // Published under the lock, so two passes never publish out of order.
    let next = Board {
        standings,
        admitted: d.admission.admissions.load(Ordering::Relaxed),
        rows: rest.iter().map(|&i| rows[i].clone()).collect(),
    };
    d.admission.board.send_if_modified(|b| {
        if **b == next {
            return false;
        }
        *b = Arc::new(next);
        true
    });
    drop(st);
    Ok(of)
}

/// What the queue left waiting needs of the room, and what the room said.
fn glance_of(queue: &[Waiting], rest: &[usize], room: &Room, disks: Vec<String>) -> Glance {
    let mut needs: Vec<(u64, bool)> = rest
        .iter()
        .map(|&i| {
            let w = &queue[i];
            (
                w.footprint + if w.resume { room.resume_margin } else { 0 },
                w.resume,
            )
        })
        .collect();
    needs.sort_unstable();
    needs.dedup();
    let seen = judge(room, &needs);
    Glance { disks, needs, seen }
}

/// Whether each of `needs` fits `room`, and why not.
fn judge(room: &Room, needs: &[(u64, bool)]) -> Vec<Option<String>> {
    needs
        .iter()
        .map(|&(n, resume)| {
            super::decide::fits(room, n, resume)
                .err()
                .map(|b| b.to_string())
        })
        .collect()
}

/// A tick's quick look: whether a pass could change anything now. Nothing
/// but the room changes between wakes (every change to the queue or to the
/// worlds wakes a pass), so when each distinct need the queue holds fits
/// or falls short exactly as at the last pass, for the same reason, the
/// pass would admit nobody and publish the same board. It reads memory,
/// the disks and the settings, never the queue: with thousands queued an
/// idle daemon stays idle.
pub(super) fn worth_a_pass(d: &Daemon) -> bool {
    d.admission.looks.fetch_add(1, Ordering::Relaxed);
    let st = d.admission.lock();
    let Some(g) = &st.glance else {
        return true;
    };
    let Ok(room) = room(d, &st, &g.disks) else {
        return true;
    };
    // Resumes are judged on readings that must have lasted: look properly.
    if g.needs.iter().any(|(_, resume)| *resume) {
        return true;
    }
    judge(&room, &g.needs) != g.seen
}

/// Admits queued `row` (under the admission lock `st`): marked admitted in
/// the registry, counted as pending with its footprint, left for its `up`
/// to claim, and announced.
fn admit(
    d: &Daemon,
    st: &mut State,
    row: &QueueRow,
    w: &Waiting,
    room: &Room,
    started: std::time::Instant,
) -> Result<(), ApiError> {
    d.registry(|r| r.mark_admitted(row.ticket))?;
    crate::faults::point("admission:admitted");
    let key = WorldKey::new(&row.project, &row.world);
    st.pending.insert(
        key.clone(),
        ((row.caller.clone(), row.group.clone()), w.footprint),
    );
    st.unclaimed.insert(row.ticket, key.clone());
    if row.resume {
        let b = st.backoff.entry(key).or_insert(Backoff {
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
        "ticket {}, {}; decided in {:.2} ms",
        row.ticket,
        figures(room, w.footprint),
        started.elapsed().as_secs_f64() * 1000.0
    ));
    d.event(ev);
    Ok(())
}

/// Where `ticket` stands on the board the last pass published, if it
/// waits.
pub(super) fn standing(d: &Daemon, ticket: i64) -> Option<Standing> {
    d.admission.board.borrow().standings.get(&ticket).cloned()
}

/// Why world `world` of `project` waits in the queue, as the last pass
/// left the board; `None` when it is not queued.
pub(crate) fn queued_why(d: &Daemon, project: &str, world: &str) -> Option<String> {
    let board = d.admission.board.borrow();
    let row = board
        .rows
        .iter()
        .find(|r| r.project == project && r.world == world)?;
    board.standings.get(&row.ticket).map(Standing::message)
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
        sleeping_since: None,
        idle_after_s: None,
        created: None,
        usage: None,
        notes: Vec::new(),
    }
}

/// Puts the queue into `report`: a queued world that exists shows as
/// `queued` with its place; one never made is listed with no worktree
/// (appended: the caller sorts), the first `limit` of a project in
/// admission order, the rest counted in
/// [`ProjectStatus::queued_unlisted`](crate::protocol::ProjectStatus::queued_unlisted).
/// It reads the board the last pass left (no look at the room, no read of
/// the queue), and finds projects and worlds through an index, so
/// thousands queued cost one walk.
pub(crate) fn fill_queue(
    d: &Daemon,
    report: &mut crate::protocol::StatusReport,
    project: Option<&str>,
    limit: usize,
) {
    let board = Arc::clone(&d.admission.board.borrow());
    if board.rows.is_empty() {
        return;
    }
    let mut projects: HashMap<String, usize> = report
        .projects
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.clone(), i))
        .collect();
    let mut worlds: HashMap<(usize, String), usize> = HashMap::new();
    for (pi, p) in report.projects.iter().enumerate() {
        for (wi, w) in p.worlds.iter().enumerate() {
            worlds.insert((pi, w.name.clone()), wi);
        }
    }
    let mut listed: HashMap<usize, usize> = HashMap::new();
    for r in board.rows.iter() {
        if project.is_some_and(|p| p != r.project) {
            continue;
        }
        let place = board.standings.get(&r.ticket).map(Standing::place);
        let pi = *projects.entry(r.project.clone()).or_insert_with(|| {
            report.projects.push(crate::protocol::ProjectStatus {
                name: r.project.clone(),
                root: r.disk_path.clone(),
                queued_unlisted: 0,
                spares: None,
                worlds: Vec::new(),
            });
            report.projects.len() - 1
        });
        let wi = match worlds.get(&(pi, r.world.clone())) {
            Some(&wi) => wi,
            None => {
                let n = listed.entry(pi).or_default();
                if *n >= limit {
                    report.projects[pi].queued_unlisted += 1;
                    continue;
                }
                *n += 1;
                let list = &mut report.projects[pi].worlds;
                list.push(unmade(&r.world, Some(r.group.clone())));
                worlds.insert((pi, r.world.clone()), list.len() - 1);
                list.len() - 1
            }
        };
        let w = &mut report.projects[pi].worlds[wi];
        // A resume keeps its world's own state, `suspended`, with the place
        // and reason it waits for now.
        if !r.resume {
            w.state = crate::protocol::WorldState::Queued;
        }
        w.queue = place;
    }
}

/// The share of the last 10 s stalled on memory (PSI `some avg10`, %) from
/// which no spare is made: a machine that waits on memory at all has no
/// room to spare.
const SPARE_STALL_PCT: f64 = 1.0;

/// Whether there is room now to make a spare clone that takes `bytes` of
/// disk in `folder` (issue 51): spares are made only with room to spare,
/// so nothing waits in the admission queue, available memory (less what
/// admitted worlds will take) is above the reserve with no memory stall,
/// and `folder`'s filesystem keeps its disk reserve with the spare on it,
/// as a world's would. A folder Binky cannot see (a server elsewhere) is
/// not checked.
///
/// # Errors
/// What is short, in words.
pub(crate) fn room_for_spare(
    d: &Daemon,
    folder: Option<&std::path::Path>,
    bytes: u64,
) -> Result<(), String> {
    let queued = d.registry(|r| r.queue()).map_err(|e| e.to_string())?.len();
    if queued > 0 {
        return Err(format!("{queued} up(s) wait for room"));
    }
    let s = d.registry(|r| r.settings()).map_err(|e| e.to_string())?;
    if let Some((free, size)) = folder.and_then(crate::platform::disk_space) {
        let reserve = disk_reserve(d, &s).map_err(|e| e.to_string())?(size);
        if free.saturating_sub(bytes) < reserve {
            return Err(format!(
                "{} would fall below the disk reserve",
                folder.map(|f| f.display().to_string()).unwrap_or_default()
            ));
        }
    }
    {
        let st = d.admission.lock();
        if let Some(m) = crate::platform::memory() {
            let reserve = (m.total as f64 * s.ram_reserve_pct / 100.0) as u64;
            let pending: u64 = st.pending.values().map(|(_, f)| f).sum();
            if m.available.saturating_sub(pending) < reserve {
                return Err("memory is below the reserve".into());
            }
        }
    }
    if crate::platform::memory_pressure_avg10().is_some_and(|p| p >= SPARE_STALL_PCT) {
        return Err("the machine stalls on memory (PSI)".into());
    }
    Ok(())
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
    let chosen = d.registry(|r| r.setting_is_set("disk_reserve_gb"))?;
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
