//! The daemon's subscription as the CLI offers it: `binky events` (past
//! and live, one world or all, across a daemon restart) and `binky status
//! --watch`, against a real daemon and real processes.

use crate::harness::*;
use crate::project::*;
use std::time::Duration;

fn one_service(name: &str) -> String {
    format!("{}{}", project_header(name, 8), http_service("web", ""))
}

/// The `event` field of each JSON line `text` holds for world `world`.
fn kinds_of(text: &str, world: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["worktree"] == world)
        .map(|v| v["event"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn events_follow_an_up_in_order_and_a_world_filter_keeps_only_its_own() {
    let home = Home::new();
    let repo = Repo::new(&one_service("evt"));
    home.ok(&["daemon", "start"]);
    let follower = Watched::spawn_stdout(repo.cmd(&home, &["events", "-f", "--json", "-n", "0"]));
    // Live before anything happens: the daemon has answered the
    // subscription once `status` (a second connection) is served.
    assert!(wait_until(Duration::from_secs(10), || {
        repo.run(&home, &["status"]).code() == 0
    }));
    repo.ok(&home, &["up", "alpha"]);
    repo.ok(&home, &["up", "beta"]);
    repo.ok(&home, &["down", "alpha"]);
    assert!(
        follower.wait_for("\"down\"", Duration::from_secs(10)),
        "{}",
        follower.text()
    );
    let text = follower.kill();
    // Each world's events arrive in the order they happened.
    let alpha = kinds_of(&text, "alpha");
    let order = ["admitted", "up_started", "started", "ready", "up", "down"];
    let seen: Vec<&str> = alpha
        .iter()
        .map(String::as_str)
        .filter(|k| order.contains(k))
        .collect();
    assert_eq!(seen, order, "{text}");
    assert!(kinds_of(&text, "beta").contains(&"up".to_owned()), "{text}");
    // Every line is an event with a time.
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect(l);
        assert!(v["ts"].as_str().is_some_and(|t| t.ends_with('Z')), "{l}");
    }

    // The past, filtered: the newest of alpha's own, beta's never.
    let out = repo.ok(&home, &["events", "--world", "alpha", "-n", "2", "--json"]);
    let past: Vec<String> = out.stdout().lines().map(str::to_owned).collect();
    assert_eq!(kinds_of(&out.stdout(), "alpha"), ["up", "down"], "{out}");
    assert_eq!(past.len(), 2, "{out}");
    // Plain text names the world and the event.
    let out = repo.ok(&home, &["events", "-n", "50"]);
    assert!(
        out.stdout()
            .lines()
            .any(|l| l.contains(" ready ") && l.contains("evt/beta web")),
        "{out}"
    );
    // A world of no project here is refused, not taken as "all".
    let out = home.run(&["events", "--world", "alpha"]);
    assert_ne!(out.code(), 0, "{out}");
    // A world with no events says so (a typo is not a quiet world).
    let out = repo.ok(&home, &["events", "--world", "alphaa"]);
    assert!(out.stdout().is_empty(), "{out}");
    assert!(
        out.stderr().contains("no events of world `alphaa`"),
        "{out}"
    );
    // -p alone: every world of that project, no other project's.
    let other = Repo::new(&one_service("evo"));
    other.ok(&home, &["up", "gamma"]);
    let project = repo.project.display().to_string();
    let out = home.ok(&["-p", &project, "events", "-n", "100", "--json"]);
    let projects: std::collections::BTreeSet<String> = out
        .stdout()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["project"].to_string())
        .collect();
    assert_eq!(
        projects.into_iter().collect::<Vec<_>>(),
        ["\"evt\""],
        "{out}"
    );
    other.ok(&home, &["remove", "gamma"]);
    for w in ["alpha", "beta"] {
        repo.ok(&home, &["remove", w]);
    }
}

#[test]
fn a_follower_survives_a_daemon_restart_and_a_stuck_one_never_holds_up_the_daemon() {
    let home = Home::new();
    let repo = Repo::new(&one_service("evr"));
    home.ok(&["daemon", "start"]);
    // A subscriber that never reads: its socket fills, the daemon must
    // carry on regardless.
    let mut stuck = std::os::unix::net::UnixStream::connect(home.file("binky.sock"))
        .expect("the daemon's socket");
    stuck_subscribe(&mut stuck);
    let follower = Watched::spawn(repo.cmd(&home, &["events", "-f", "-n", "0"]));
    let out = Watched::spawn_stdout(repo.cmd(&home, &["events", "-f", "--json", "-n", "0"]));
    // Each follower is counted once the daemon holds its subscription:
    // what happens after that reaches it.
    let followers = |n: u64| {
        wait_until(Duration::from_secs(20), || {
            home.ok(&["daemon", "status", "--json"]).json()["followers"] == n
        })
    };
    assert!(followers(3), "{}", home.ok(&["daemon", "status"]));
    for _ in 0..3 {
        repo.ok(&home, &["up", "w"]);
        repo.ok(&home, &["down", "w"]);
    }
    // A follower that has seen nothing of w yet: after the restart it
    // must not replay w's history.
    let late = Watched::spawn_stdout(repo.cmd(
        &home,
        &["events", "-f", "--json", "-n", "0", "--world", "w"],
    ));
    assert!(followers(4), "{}", home.ok(&["daemon", "status"]));
    assert!(wait_until(Duration::from_secs(10), || {
        home.events().iter().filter(|e| e["event"] == "up").count() == 3
    }));
    home.ok(&["daemon", "stop"]);
    assert!(
        follower.wait_for("waiting for it to come back", Duration::from_secs(10)),
        "{}",
        follower.text()
    );
    repo.ok(&home, &["up", "w"]);
    assert!(
        wait_until(Duration::from_secs(15), || kinds_of(&out.text(), "w")
            .iter()
            .filter(|k| *k == "up")
            .count()
            == 4),
        "{}",
        out.text()
    );
    let text = out.kill();
    assert!(text.contains("\"daemon_stopped\""), "{text}");
    assert!(text.contains("\"daemon_started\""), "{text}");
    assert!(
        wait_until(Duration::from_secs(15), || kinds_of(&late.text(), "w")
            .contains(&"up".to_owned())),
        "{}",
        late.text()
    );
    let late = late.kill();
    assert_eq!(
        kinds_of(&late, "w")
            .iter()
            .filter(|k| *k == "up" || *k == "down")
            .count(),
        1,
        "history replayed: {late}"
    );
    follower.kill();
    drop(stuck);
    repo.ok(&home, &["remove", "w"]);
}

/// Sends hello and a subscription on `s`, and reads nothing after.
fn stuck_subscribe(s: &mut std::os::unix::net::UnixStream) {
    use binky::protocol::{Hello, Request, Subscription, codec::encode};
    use std::io::Write;
    s.write_all(&encode(&Hello::current()).unwrap()).unwrap();
    let sub = Request::Subscribe(Subscription {
        world: None,
        tail: Subscription::MAX_TAIL,
        logs: None,
    });
    s.write_all(&encode(&sub).unwrap()).unwrap();
}

#[test]
fn status_watch_redraws_when_a_world_changes() {
    let home = Home::new();
    let repo = Repo::new(&one_service("evw"));
    let watch = Watched::spawn_stdout(repo.cmd(&home, &["status", "--watch"]));
    assert!(
        watch.wait_for("no worlds yet", Duration::from_secs(10)),
        "{}",
        watch.text()
    );
    repo.ok(&home, &["up", "w"]);
    assert!(
        watch.wait_for("w  [running]", Duration::from_secs(10)),
        "{}",
        watch.text()
    );
    repo.ok(&home, &["down", "w"]);
    assert!(
        watch.wait_for("w  [stopped]", Duration::from_secs(10)),
        "{}",
        watch.text()
    );
    // A stopped daemon stays stopped: the watcher waits for it.
    home.ok(&["daemon", "stop"]);
    assert!(!wait_until(Duration::from_secs(2), || {
        home.run(&["daemon", "status"]).code() == 0
    }));
    let text = watch.kill();
    // An unknown project is refused as plain `status` refuses it, not
    // watched forever.
    let mut c = home.cmd(&["-p", "nosuch", "status", "--watch"]);
    let mut child = c
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ended = wait_until(Duration::from_secs(10), || {
        child.try_wait().unwrap().is_some()
    });
    let _ = child.kill();
    assert!(ended, "status -p nosuch --watch kept running");
    assert_eq!(child.wait().unwrap().code(), Some(1));
    // Not a terminal: each drawing is headed by a separator line, and
    // drawings come on change only (three changes here, a few drawings).
    let drawings = text.lines().filter(|l| l.starts_with("--- ")).count();
    assert!((3..=8).contains(&drawings), "{text}");
    repo.ok(&home, &["remove", "w"]);
}
