//! Admission as a pure function: the queue and the room in, a decision out.
//! No clock, no I/O, so the rules are tested exhaustively (unit and property
//! tests below) and the daemon only gathers the figures.
//!
//! The rules (issue "Admission"):
//! - **Fair across callers, then across a caller's groups, FIFO within
//!   one.** A *caller* is who asks (one `binky mcp` server, or the shell a
//!   CLI runs in); each group belongs to the caller that queued into it.
//!   The next request comes from the caller with the fewest active worlds
//!   (running, starting, or admitted and not yet settled); among its
//!   groups, from the one with the fewest; ties go to the oldest request;
//!   within a group the oldest goes first. A group never waits behind
//!   another's whole backlog, and a caller that invents a group per request
//!   only reorders its own requests: it never pushes another caller back.
//! - **Room** is all of: fewer than `max_parallel` active worlds (0 is no
//!   limit); available RAM, less what admitted-but-unsettled worlds are
//!   expected to take, covering the reserve plus the request's footprint
//!   (plus a margin for a resume, so a world just suspended is not resumed
//!   by the memory its own suspension freed); free disk above the reserve on
//!   every filesystem checked.
//! - **No overtaking.** When the next request does not fit, nobody is
//!   admitted: a smaller request behind it would otherwise starve it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One request waiting for admission (a queued `up`, or a suspended world
/// waiting to resume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// Unique; breaks ties of `since`.
    pub ticket: i64,
    /// When it first asked (any monotonic unit): lower is older. A resume
    /// keeps its world's original place.
    pub since: i64,
    /// Who is asking: one MCP server, or one shell's CLI (`""`: unknown).
    pub caller: String,
    /// The caller's group (`--group`); `""` is the default group.
    pub group: String,
    /// RAM the world is expected to take, bytes.
    pub footprint: u64,
    /// A suspended world's resume: needs [`Room::resume_margin`] on top.
    pub resume: bool,
}

/// What the machine has now, as the daemon measured it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Room {
    /// Most worlds active at once; 0 is unlimited.
    pub max_parallel: u32,
    /// Active worlds (running, starting, admitted) per caller and group.
    pub active: BTreeMap<Slot, u32>,
    /// RAM, when the machine reports it (Linux `MemAvailable`).
    pub ram: Option<Ram>,
    /// Filesystems that must keep their disk reserve free.
    pub disks: Vec<Disk>,
    /// Extra RAM a resume needs beyond its footprint, bytes (hysteresis).
    pub resume_margin: u64,
}

/// Whom an active world counts for: (caller, group).
pub(crate) type Slot = (String, String);

/// Available RAM against the reserve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ram {
    /// Available now, bytes (bounded by the daemon's cgroup limit).
    pub available: u64,
    /// Kept free, bytes.
    pub reserve: u64,
    /// The reserve as a percentage, for messages.
    pub reserve_pct: u32,
    /// Expected footprints of worlds admitted but not yet settled: their
    /// memory is not yet gone from `available`, bytes.
    pub pending: u64,
    /// The lowest reading of the last few seconds, once there are enough
    /// of them ([`super::steady::Trend::steady`]): what a resume is judged
    /// on, since its headroom must have lasted. `None`: not yet known, and a
    /// resume waits.
    pub steady: Option<u64>,
}

/// One filesystem's free space against the disk reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Disk {
    /// A path on it (`BINKY_HOME`, the worktree root), for messages.
    pub path: String,
    /// Free bytes for an unprivileged user.
    pub free: u64,
    /// Bytes kept free.
    pub reserve: u64,
}

/// Why the next request waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// `max_parallel` worlds are active.
    MaxParallel {
        /// The limit.
        limit: u32,
    },
    /// A resume waits for its headroom to have lasted: too few readings
    /// yet.
    Settling,
    /// Not enough RAM above the reserve.
    Ram {
        /// The measurement.
        ram: Ram,
        /// What the next world needs (its footprint, plus the margin for a
        /// resume), bytes.
        needs: u64,
    },
    /// A filesystem is at its disk reserve.
    Disk(Disk),
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocker::MaxParallel { limit } => write!(f, "max_parallel {limit} reached"),
            Blocker::Settling => write!(
                f,
                "waiting for free RAM to last {} s before resuming",
                super::steady::SUSTAIN / 1000
            ),
            Blocker::Ram { ram, needs } => {
                let (available, reserve) =
                    super::steady::apart(ram.available.saturating_sub(ram.pending), ram.reserve);
                write!(
                    f,
                    "waiting for RAM: {available} available, {reserve} kept in reserve ({} %), {} needed",
                    ram.reserve_pct,
                    gib(*needs)
                )
            }
            Blocker::Disk(d) => write!(
                f,
                "disk: {:.1} GB free under {}, {:.1} GB kept",
                d.free as f64 / 1e9,
                d.path,
                d.reserve as f64 / 1e9
            ),
        }
    }
}

/// `n` bytes as GiB with one decimal.
pub(crate) fn gib(n: u64) -> String {
    format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Admit the request at this index of the queue.
    Admit(usize),
    /// Admit nobody yet, for this reason.
    Wait(Blocker),
    /// The queue is empty.
    Idle,
}

/// The order the queue would be admitted in if room came one world at a
/// time: indices into `queue`. Each admission counts against its caller
/// and group, so callers (and a caller's groups) alternate by how many
/// worlds they have active.
///
/// O(n log n): each caller's groups, and the callers, sit in ordered sets
/// keyed by (active, oldest waiting), so a pick is a first element, not a
/// scan (with thousands queued this runs on every look at the room).
pub(crate) fn order(queue: &[Waiting], room: &Room) -> Vec<usize> {
    // Per (caller, group): its requests oldest first.
    let mut slots: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    let mut sorted: Vec<usize> = (0..queue.len()).collect();
    sorted.sort_by_key(|&i| (queue[i].since, queue[i].ticket));
    for &i in sorted.iter().rev() {
        let q = &queue[i];
        slots.entry((&q.caller, &q.group)).or_default().push(i);
    }
    // Each Vec now holds its slot's requests newest first: `pop` is the oldest.
    let key = |i: usize| (queue[i].since, queue[i].ticket);
    let mut slot_active: HashMap<(&str, &str), u32> = HashMap::new();
    let mut caller_active: HashMap<&str, u32> = HashMap::new();
    for ((c, g), n) in &room.active {
        *slot_active.entry((c.as_str(), g.as_str())).or_default() += n;
        *caller_active.entry(c.as_str()).or_default() += n;
    }
    // A caller's groups by (active, oldest request), and the callers by
    // (active, their best group's oldest request).
    type Entry<'a> = (u32, (i64, i64), &'a str);
    let mut groups: HashMap<&str, BTreeSet<Entry<'_>>> = HashMap::new();
    for (&(c, g), reqs) in &slots {
        let n = slot_active.get(&(c, g)).copied().unwrap_or(0);
        groups.entry(c).or_default().insert((
            n,
            key(*reqs.last().expect("a slot holds a request")),
            g,
        ));
    }
    let best = |set: &BTreeSet<Entry<'_>>| set.first().map(|e| e.1);
    let mut callers: BTreeSet<Entry<'_>> = groups
        .iter()
        .map(|(c, set)| {
            let n = caller_active.get(c).copied().unwrap_or(0);
            (n, best(set).expect("a caller has a group"), *c)
        })
        .collect();
    let mut out = Vec::with_capacity(queue.len());
    while let Some((cn, _, c)) = callers.pop_first() {
        let set = groups.get_mut(c).expect("a listed caller has groups");
        let (gn, _, g) = set.pop_first().expect("a listed caller has a group");
        let reqs = slots.get_mut(&(c, g)).expect("a listed group has requests");
        out.push(reqs.pop().expect("a listed group has a request"));
        if let Some(&next) = reqs.last() {
            set.insert((gn + 1, key(next), g));
        }
        if let Some(b) = best(set) {
            callers.insert((cn + 1, b, c));
        }
    }
    out
}

/// Whether one more world of `needs` bytes fits now; `Err` names what is
/// short. A `resume` is judged on the headroom that lasted
/// ([`Ram::steady`]), a new world on the reading now.
pub(crate) fn fits(room: &Room, needs: u64, resume: bool) -> Result<(), Blocker> {
    let active: u32 = room.active.values().sum();
    if room.max_parallel > 0 && active >= room.max_parallel {
        return Err(Blocker::MaxParallel {
            limit: room.max_parallel,
        });
    }
    if let Some(ram) = room.ram {
        let seen = if resume {
            ram.steady.ok_or(Blocker::Settling)?.min(ram.available)
        } else {
            ram.available
        };
        let free = seen.saturating_sub(ram.pending);
        if free < ram.reserve.saturating_add(needs) {
            return Err(Blocker::Ram { ram, needs });
        }
    }
    if let Some(d) = room.disks.iter().find(|d| d.free <= d.reserve) {
        return Err(Blocker::Disk(d.clone()));
    }
    Ok(())
}

/// The next admission: the first request in [`order`] if it [`fits`].
#[cfg(test)]
pub(crate) fn decide(queue: &[Waiting], room: &Room) -> Decision {
    decide_in(queue, room, &order(queue, room))
}

/// The next admission from an order already computed (what is left of it
/// after earlier admissions of the same pass): its first request if it
/// [`fits`].
pub(crate) fn decide_in(queue: &[Waiting], room: &Room, order: &[usize]) -> Decision {
    let Some(&next) = order.first() else {
        return Decision::Idle;
    };
    let w = &queue[next];
    let needs = w.footprint + if w.resume { room.resume_margin } else { 0 };
    match fits(room, needs, w.resume) {
        Ok(()) => Decision::Admit(next),
        Err(b) => Decision::Wait(b),
    }
}

/// Each request's own reason to wait, in [`order`]: `(index into queue,
/// reason)`. The head waits for what [`decide`] says; one behind it waits
/// for its own shortfall when it would not fit even at the head (its own
/// footprint), else for its turn, since nobody overtakes.
#[cfg(test)]
pub(crate) fn reasons(queue: &[Waiting], room: &Room) -> Vec<(usize, String)> {
    reasons_in(queue, room, &order(queue, room))
}

/// Each request's own reason to wait, for an order already computed
/// (what is left of [`order`] after a pass's admissions): the head waits for
/// its blocker; one behind it for its own shortfall when it would not fit
/// even at the head, else for its turn, since nobody overtakes. Whether a
/// request fits depends only on its footprint and kind, so that is judged
/// once per distinct pair, not once per queued request.
pub(crate) fn reasons_in(queue: &[Waiting], room: &Room, order: &[usize]) -> Vec<(usize, String)> {
    let mut judged: HashMap<(u64, bool), Option<String>> = HashMap::new();
    order
        .iter()
        .enumerate()
        .map(|(place, &i)| {
            let w = &queue[i];
            let needs = w.footprint + if w.resume { room.resume_margin } else { 0 };
            let short = judged
                .entry((needs, w.resume))
                .or_insert_with(|| fits(room, needs, w.resume).err().map(|b| b.to_string()));
            let why = match short {
                Some(b) => b.clone(),
                None if place == 0 => "being admitted".to_owned(),
                None => format!(
                    "room for it now, but {place} ahead of it in admission order go first (no overtaking)"
                ),
            };
            (i, why)
        })
        .collect()
}

/// One world that runs, for choosing whom to suspend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Active {
    /// The world's id.
    pub world: i64,
    /// When it was last admitted or resumed (any monotonic unit): newer is
    /// larger.
    pub since: u64,
    /// Whether it may be suspended now (not resumed within the hold time).
    pub suspendable: bool,
}

/// The newest world of `running` that may be suspended now (past its
/// hold): suspending the last admitted undoes the admission that most
/// likely overran the reserve, and spares the worlds that ran longest.
pub(crate) fn newest_suspendable(running: &[Active]) -> Option<i64> {
    running
        .iter()
        .filter(|a| a.suspendable)
        .max_by_key(|a| (a.since, a.world))
        .map(|a| a.world)
}

#[cfg(test)]
mod tests;
