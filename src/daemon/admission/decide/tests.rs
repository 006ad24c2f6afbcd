//! The rules, exhaustively: unit and property tests of the pure decision.
use super::*;
use proptest::prelude::*;

#[test]
fn each_queued_world_shows_its_own_reason() {
    // RAM for one 100 MiB world above the reserve: the head is blocked
    // by nothing, a 1 GiB world behind it by its own size, and a small
    // one behind both only by its turn.
    let mut big = w(2, "");
    big.footprint = 1024 * MIB;
    let queue = vec![w(1, ""), big, w(3, "")];
    let r = Room {
        ram: Some(Ram {
            available: 1000 * MIB,
            reserve: 800 * MIB,
            reserve_pct: 10,
            pending: 0,
            steady: None,
        }),
        ..room(0, &[])
    };
    let got = reasons(&queue, &r);
    assert_eq!(got[0], (0, "being admitted".to_owned()));
    assert_eq!(got[1].0, 1);
    assert!(
        got[1].1.starts_with("waiting for RAM") && got[1].1.contains("1.0 GiB needed"),
        "{got:?}"
    );
    assert_eq!(got[2].0, 2);
    assert!(got[2].1.contains("2 ahead of it"), "{got:?}");
}

const MIB: u64 = 1 << 20;

fn w(ticket: i64, group: &str) -> Waiting {
    Waiting {
        ticket,
        since: ticket,
        caller: format!("caller of {group}"),
        group: group.into(),
        footprint: 100 * MIB,
        resume: false,
    }
}

fn room(max: u32, active: &[(&str, u32)]) -> Room {
    Room {
        max_parallel: max,
        active: active
            .iter()
            .map(|(g, n)| ((format!("caller of {g}"), g.to_string()), *n))
            .collect(),
        ..Room::default()
    }
}

#[test]
fn without_groups_admission_is_fifo() {
    let q = [w(3, ""), w(1, ""), w(2, "")];
    let tickets: Vec<i64> = order(&q, &room(0, &[]))
        .into_iter()
        .map(|i| q[i].ticket)
        .collect();
    assert_eq!(tickets, [1, 2, 3]);
    assert_eq!(decide(&q, &room(0, &[])), Decision::Admit(1));
    assert_eq!(decide(&[], &room(0, &[])), Decision::Idle);
}

#[test]
fn a_small_group_is_not_kept_behind_a_large_backlog() {
    // The case: 8 from A, then 2 from B, max_parallel 2, with
    // A1 and A2 running: when one goes, B1 is next, before A3.
    let q: Vec<Waiting> = (3..=8)
        .map(|i| w(i, "a"))
        .chain([w(9, "b"), w(10, "b")])
        .collect();
    let r = room(2, &[("a", 1)]);
    assert_eq!(q[decide_index(&q, &r)].ticket, 9);
    let names: Vec<i64> = order(&q, &r).into_iter().map(|i| q[i].ticket).collect();
    assert_eq!(names, [9, 3, 10, 4, 5, 6, 7, 8]);
}

#[test]
fn fresh_groups_from_one_caller_do_not_push_another_caller_back() {
    // Caller A queues 200 requests, each in a group of its own; then
    // caller B queues one. A has one world running: B's comes next.
    let mut q: Vec<Waiting> = (1..=200)
        .map(|i| Waiting {
            caller: "a".into(),
            ..w(i, &format!("fresh-{i}"))
        })
        .collect();
    q.push(Waiting {
        caller: "b".into(),
        ..w(201, "")
    });
    let mut r = room(0, &[]);
    r.active.insert(("a".into(), "fresh-0".into()), 1);
    let o = order(&q, &r);
    assert_eq!(q[o[0]].caller, "b", "B is next");
    // With nothing active, B still goes second, not 201st.
    let o = order(&q, &room(0, &[]));
    assert_eq!(q[o[1]].caller, "b");
    // Within A, fresh groups are served oldest first.
    let a: Vec<i64> = o
        .iter()
        .map(|&i| q[i].ticket)
        .filter(|t| *t <= 200)
        .collect();
    assert!(a.windows(2).all(|p| p[0] < p[1]));
}

/// The order by definition: repeatedly, the caller with the fewest
/// active worlds (ties: its chosen group's oldest request), its group
/// with the fewest (ties: oldest request), that group's oldest request.
/// Quadratic; the fast [`order`] must agree with it.
fn order_by_definition(queue: &[Waiting], room: &Room) -> Vec<usize> {
    let mut active = room.active.clone();
    let mut left: Vec<usize> = (0..queue.len()).collect();
    let mut out = Vec::new();
    let caller_n = |a: &BTreeMap<Slot, u32>, c: &str| {
        a.iter()
            .filter(|((k, _), _)| k == c)
            .map(|(_, n)| *n)
            .sum::<u32>()
    };
    while !left.is_empty() {
        // Each caller's chosen request: its best group's oldest.
        let choice = |c: &str| {
            left.iter()
                .copied()
                .filter(|&i| queue[i].caller == c)
                .min_by_key(|&i| {
                    let q = &queue[i];
                    let g = active
                        .get(&(q.caller.clone(), q.group.clone()))
                        .copied()
                        .unwrap_or(0);
                    (g, q.since, q.ticket)
                })
                .expect("the caller waits")
        };
        let pick = left
            .iter()
            .map(|&i| choice(&queue[i].caller))
            .min_by_key(|&i| {
                (
                    caller_n(&active, &queue[i].caller),
                    queue[i].since,
                    queue[i].ticket,
                )
            })
            .expect("left is not empty");
        left.retain(|&i| i != pick);
        let q = &queue[pick];
        *active
            .entry((q.caller.clone(), q.group.clone()))
            .or_default() += 1;
        out.push(pick);
    }
    out
}

fn decide_index(q: &[Waiting], r: &Room) -> usize {
    match decide(q, r) {
        Decision::Admit(i) => i,
        d => panic!("{d:?}"),
    }
}

#[test]
fn room_is_parallelism_ram_and_disk() {
    let q = [w(1, "")];
    assert_eq!(
        decide(&q, &room(2, &[("", 2)])),
        Decision::Wait(Blocker::MaxParallel { limit: 2 })
    );
    let mut r = room(0, &[("", 50)]);
    r.ram = Some(Ram {
        available: 1000 * MIB,
        reserve: 850 * MIB,
        reserve_pct: 15,
        pending: 0,
        steady: None,
    });
    assert_eq!(decide(&q, &r), Decision::Admit(0));
    // An admitted world not yet settled counts with its footprint.
    r.ram.as_mut().unwrap().pending = 100 * MIB;
    let Decision::Wait(b) = decide(&q, &r) else {
        panic!()
    };
    assert_eq!(
        b.to_string(),
        "waiting for RAM: 0.9 GiB available, 0.8 GiB kept in reserve (15 %), 0.1 GiB needed"
    );
    r.ram = None;
    r.disks = vec![Disk {
        path: "/home".into(),
        free: 3_200_000_000,
        reserve: 5_000_000_000,
    }];
    let Decision::Wait(b) = decide(&q, &r) else {
        panic!()
    };
    assert_eq!(b.to_string(), "disk: 3.2 GB free under /home, 5.0 GB kept");
}

#[test]
fn a_resume_keeps_its_worlds_place() {
    // Suspended world (admitted at 5) and two requests queued after it.
    let mut r = w(9, "");
    r.since = 5;
    r.resume = true;
    let q = [w(7, ""), w(8, ""), r];
    assert_eq!(decide(&q, &room(0, &[])), Decision::Admit(2));
}

#[test]
fn a_resume_needs_the_margin_too() {
    let mut q = [w(1, "")];
    let mut r = room(0, &[]);
    r.resume_margin = 100 * MIB;
    r.ram = Some(Ram {
        available: 1150 * MIB,
        reserve: 1000 * MIB,
        reserve_pct: 10,
        pending: 0,
        steady: None,
    });
    assert_eq!(decide(&q, &r), Decision::Admit(0));
    q[0].resume = true;
    // Not known to have lasted yet: a resume waits.
    assert_eq!(decide(&q, &r), Decision::Wait(Blocker::Settling));
    // Lasted, but without the margin.
    r.ram.as_mut().unwrap().steady = Some(1150 * MIB);
    assert!(matches!(
        decide(&q, &r),
        Decision::Wait(Blocker::Ram { .. })
    ));
    // The lowest of the lasting readings decides, not the newest.
    r.ram.as_mut().unwrap().available = 2000 * MIB;
    assert!(matches!(
        decide(&q, &r),
        Decision::Wait(Blocker::Ram { .. })
    ));
    r.ram.as_mut().unwrap().steady = Some(1200 * MIB);
    assert_eq!(decide(&q, &r), Decision::Admit(0));
}

#[test]
fn the_newest_suspendable_world_is_suspended() {
    let running = [
        Active {
            world: 1,
            since: 10,
            suspendable: true,
        },
        Active {
            world: 2,
            since: 30,
            suspendable: false,
        },
        Active {
            world: 3,
            since: 20,
            suspendable: true,
        },
    ];
    assert_eq!(newest_suspendable(&running), Some(3));
    assert_eq!(newest_suspendable(&running[1..2]), None);
}

fn queue_strategy() -> impl Strategy<Value = Vec<Waiting>> {
    prop::collection::vec((0..4u8, 1..400u64), 0..24).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (g, mib))| Waiting {
                ticket: i as i64,
                since: i as i64,
                caller: format!("c{}", g % 2),
                group: format!("g{g}"),
                footprint: mib * MIB,
                resume: false,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn the_fast_order_is_the_order_by_definition(
        queue in queue_strategy(),
        active in prop::collection::vec((0..2u8, 0..4u8, 0..3u32), 0..4),
    ) {
        let mut r = Room::default();
        for (c, g, n) in active {
            r.active.insert((format!("c{c}"), format!("g{g}")), n);
        }
        prop_assert_eq!(order(&queue, &r), order_by_definition(&queue, &r));
    }

    /// Admitting one at a time as `decide` says, with worlds never
    /// leaving: never past max_parallel, never past the RAM reserve,
    /// FIFO within each group, and every group served while there is
    /// room (no starvation).
    #[test]
    fn admissions_respect_the_limits_and_order(
        queue in queue_strategy(),
        max in 0..6u32,
        avail_mib in 0..4000u64,
        reserve_mib in 0..2000u64,
    ) {
        let mut q = queue.clone();
        let mut r = Room {
            max_parallel: max,
            ram: Some(Ram { available: avail_mib * MIB, reserve: reserve_mib * MIB, reserve_pct: 10, pending: 0, steady: Some(avail_mib * MIB) }),
            ..Room::default()
        };
        let mut admitted: Vec<Waiting> = Vec::new();
        while let Decision::Admit(i) = decide(&q, &r) {
            let a = q.remove(i);
            *r.active.entry((a.caller.clone(), a.group.clone())).or_default() += 1;
            r.ram.as_mut().unwrap().pending += a.footprint;
            admitted.push(a);
        }
        let total: u32 = r.active.values().sum();
        prop_assert!(max == 0 || total <= max);
        let ram = r.ram.unwrap();
        prop_assert!(admitted.is_empty() || ram.available >= ram.pending + ram.reserve);
        for g in admitted.iter().map(|a| &a.group) {
            let mine: Vec<i64> = admitted.iter().filter(|a| &a.group == g).map(|a| a.ticket).collect();
            prop_assert!(mine.windows(2).all(|p| p[0] < p[1]), "FIFO in {g}: {mine:?}");
            // Nobody of the group still waiting is older than one admitted.
            let newest = *mine.last().unwrap();
            prop_assert!(q.iter().filter(|w| &w.group == g).all(|w| w.ticket > newest));
        }
        // Fairness: an admitted caller never has two more active than
        // a caller left waiting (it got its turn first), and within one
        // caller the same holds for its groups.
        let per_caller = |c: &str| r.active.iter().filter(|((k, _), _)| k == c).map(|(_, n)| n).sum::<u32>();
        for w in &q {
            let theirs = per_caller(&w.caller);
            for ((c, _), _) in r.active.iter() {
                let n = per_caller(c);
                prop_assert!(n <= theirs + 1, "{c} has {n}, {} waits with {theirs}", w.caller);
            }
            let slot = r.active.get(&(w.caller.clone(), w.group.clone())).copied().unwrap_or(0);
            for ((c, g), n) in &r.active {
                if *c == w.caller {
                    prop_assert!(*n <= slot + 1, "{g} has {n}, {} waits with {slot}", w.group);
                }
            }
        }
    }
}
