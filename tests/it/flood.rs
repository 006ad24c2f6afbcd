//! No caller can starve the others: the queue's caps, each at its edge;
//! a flood of queued `up`s from one MCP caller (each in a group of its own)
//! that leaves the daemon's work flat and another caller's world first in
//! line; and an oversized MCP message refused at once.

use crate::admission::sleeper;
use crate::harness::*;
use crate::project::*;
use std::time::Duration;

/// `binky ARGS` in the project folder run in a session of its own: the
/// daemon sees another caller than this test's other commands (a caller is
/// the session a client runs in, as a terminal's is).
fn from_another_session(repo: &Repo, home: &Home, args: &[&str]) -> Out {
    let mut c = home.program("setsid", &["-w", binky_exe()]);
    c.args(args).current_dir(repo.project_dir());
    Out(c.output().unwrap())
}

/// `binky ARGS` through wrappers a script uses (`sh -c`, `timeout`): still
/// this test's session, so the same caller.
fn through_wrappers(repo: &Repo, home: &Home, args: &[&str]) -> Out {
    let mut c = home.program(
        "sh",
        &["-c", "timeout 60 \"$0\" \"$@\"; exit $?", binky_exe()],
    );
    c.args(args).current_dir(repo.project_dir());
    Out(c.output().unwrap())
}

#[test]
fn the_queue_caps_refuse_at_their_edges_and_keep_room_for_another_caller() {
    let home = Home::new();
    let repo = sleeper("caps");
    home.max_parallel_only(1);
    // queue_per_group must lie within half of queue_max, so one caller can
    // fill a group and another still finds room.
    let out = home.run(&["reserve", "--queue-max", "5", "--queue-per-group", "3"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains(
            "--queue-per-group 3 is out of range: it must be from 1 to half of queue_max (5)"
        ),
        "{out}"
    );
    let out = home.run(&["reserve", "--queue-max", "0"]);
    assert!(
        out.stderr().contains("--queue-max 0 is out of range"),
        "{out}"
    );
    home.ok(&["reserve", "--queue-max", "5", "--queue-per-group", "2"]);
    let config = home.ok(&["config", "--json"]).json();
    assert_eq!(config["queue_max"], 5, "{config}");
    assert_eq!(config["queue_per_group"], 2, "{config}");
    assert!(home.ok(&["config"]).stdout().contains("queue max      5"));
    repo.ok(&home, &["up", "running"]);
    let up = |w: &str, group: Option<&str>| {
        let mut args = vec!["up", w, "--no-wait"];
        if let Some(g) = group {
            args.extend(["--group", g]);
        }
        repo.run(&home, &args)
    };
    // Per group: 2 queued, the third refused.
    assert_eq!(up("g1", Some("g")).code(), 0);
    assert_eq!(up("g2", Some("g")).code(), 0);
    let out = up("g3", Some("g"));
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("group `g` already has 2 worlds queued (queue_per_group 2)"),
        "{out}"
    );
    // Per caller: at most queue_max - queue_per_group = 3 places in all,
    // however the commands are wrapped (a wrapper is still this session).
    assert_eq!(up("d1", None).code(), 0);
    let out = through_wrappers(&repo, &home, &["up", "d2", "--no-wait", "--group", "h"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("this caller already has 3 worlds queued"),
        "{out}"
    );
    // Another caller still finds room, up to queue_max in all.
    let out = from_another_session(&repo, &home, &["up", "o1", "--no-wait"]);
    assert_eq!(out.code(), 0, "{out}");
    let out = from_another_session(&repo, &home, &["up", "o2", "--no-wait"]);
    assert_eq!(out.code(), 0, "{out}");
    let out = from_another_session(&repo, &home, &["up", "o3", "--no-wait"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("the admission queue is full: 5 worlds wait (queue_max 5)"),
        "{out}"
    );
    // A refused `up` made and stored nothing; a queued world's own `up`
    // again is no new request and is never refused.
    let worlds = repo.worlds(&home);
    for w in ["g3", "d2", "o3"] {
        assert!(!worlds.contains_key(w), "{w}: {worlds:?}");
    }
    assert_eq!(up("g1", Some("g")).code(), 0);
    assert_eq!(home.ok(&["metrics"]).json()["queue_length"], 5);
}

/// The flood, scaled down: one `--machine` MCP server queues 200
/// `up`s with `wait: false`, each in a fresh group, and sends a 5 MB
/// message. The message is refused at once, the daemon's passes over the
/// queue stay at one per tick (not one per waiter), and another caller's
/// world is admitted first when room frees.
#[test]
fn a_flood_from_one_caller_leaves_the_daemon_idle_and_another_caller_first() {
    if !mcp_sdk() {
        return;
    }
    let home = Home::new();
    let repo = sleeper("flood");
    home.max_parallel_only(1);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp_flood.py");
    let mut py = home.program("python3", &[script]);
    py.arg(binky_exe()).arg(repo.project_dir()).arg("200");
    let out = Out(py.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let v = out.json();
    assert_eq!(v["first"]["structured"]["world"]["state"], "running", "{v}");
    assert_eq!(v["queued"], 200, "{v}");
    // The 5 MB message: refused by size, and the server went on serving.
    let big = v["huge"].to_string();
    assert!(
        big.contains("binky mcp reads at most 1048576 bytes"),
        "{big}"
    );
    assert_eq!(v["after_huge"]["isError"], false, "{v}");
    // A group past its bound is refused before anything is stored.
    assert_eq!(v["long_group"]["isError"], true, "{v}");
    assert!(
        v["long_group"]["text"]
            .as_str()
            .unwrap()
            .contains("at most 64 characters"),
        "{v}"
    );
    assert_eq!(home.ok(&["metrics"]).json()["queue_length"], 200);

    // Another caller, after all 200: first in line, since the flooder has
    // a world running and it has none.
    let out = from_another_session(&repo, &home, &["up", "other", "--no-wait", "--json"]);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(out.json()["world"]["queue"]["position"], 1, "{out}");
    // status lists the first 200 never made, in admission order (`other`
    // among them), and counts the rest.
    let st = home.ok(&["status", "--json"]).json();
    assert_eq!(
        st["projects"][0]["queued_unlisted"],
        1,
        "{}",
        st["projects"][0]["worlds"].as_array().unwrap().len()
    );
    assert!(
        home.ok(&["status"])
            .stdout()
            .contains("… and 1 more queued")
    );
    // Nothing changes now: no pass over the queue at all, only a quick look
    // at the room each second (the old daemon looked 201 times a second,
    // each time over the whole queue).
    let looks = || {
        home.ok(&["metrics"]).json()["admission_passes"]
            .as_u64()
            .unwrap()
    };
    let (before, t) = (looks(), std::time::Instant::now());
    let statuses: Vec<Duration> = (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            home.ok(&["status", "--json"]);
            t.elapsed()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let passes = looks() - before;
    assert!(
        passes <= 2,
        "{passes} passes in {:?} with 201 queued: the daemon's work grows with the queue (status took {statuses:?})",
        t.elapsed()
    );
    // Room for one more: the other caller's world goes first, ahead of
    // 200 older requests, since the flooder has a world running.
    home.ok(&["reserve", "--max-parallel", "2"]);
    assert!(
        wait_until(Duration::from_secs(30), || repo
            .worlds(&home)
            .get("other")
            .is_some_and(|w| w["state"] == "running")),
        "{:?}",
        repo.worlds(&home).get("other")
    );
    assert_eq!(home.ok(&["metrics"]).json()["queue_length"], 200);
}
