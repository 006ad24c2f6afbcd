//! Verbs that start a world's processes (`up`, `reload`, `reset`) and the
//! admission queue: a world that holds a slot never queues behind itself,
//! a withdrawn verb ends and makes nothing, and a withdrawal that lands
//! between an admission and the world's lock is one decision with it.
//! SQLite slices, so these run wherever Python does.

use crate::harness::*;
use crate::project::*;
use std::time::Duration;

/// Migrate and seed for a SQLite slice: a table `t`, seeded with three rows.
const MIGRATE: &str = "import os, sqlite3\nc = sqlite3.connect(os.environ['DB_URL'].removeprefix('sqlite://'))\nc.execute('create table if not exists t(x)')\nc.commit()\n";
const SEED: &str = "import os, sqlite3\nc = sqlite3.connect(os.environ['DB_URL'].removeprefix('sqlite://'))\nc.executemany('insert into t values (?)', [(1,), (2,), (3,)])\nc.commit()\n";

/// The rows of table `t` in the SQLite file behind `url`.
fn rows(url: &str) -> String {
    python(
        "import sqlite3, sys\nprint(sqlite3.connect(sys.argv[1]).execute('select count(*) from t').fetchone()[0])",
        &[url.strip_prefix("sqlite://").unwrap_or(url)],
    )
    .trim()
    .to_owned()
}

/// Empties table `t` behind `url`: the world's data "went wrong".
fn spoil(url: &str) {
    python(
        "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.execute('delete from t')\nc.commit()",
        &[url.strip_prefix("sqlite://").unwrap_or(url)],
    );
}

/// A project with a SQLite slice `db` (migrated and seeded) and the
/// services `extra` (binky.toml text).
fn project(name: &str, extra: &str) -> Repo {
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nmigrate = \"python3 migrate.py\"\nseed = \"python3 seed.py\"\n{extra}",
        project_header(name, 8)
    );
    Repo::with("", &toml, &[("migrate.py", MIGRATE), ("seed.py", SEED)])
}

fn db_url(repo: &Repo, home: &Home, world: &str) -> String {
    repo.ok(home, &["env", world]).json()["services"]["db"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn service_state(repo: &Repo, home: &Home, world: &str, service: &str) -> String {
    repo.worlds(home)
        .get(world)
        .and_then(|w| {
            w["services"]
                .as_array()?
                .iter()
                .find(|s| s["name"] == service)
                .map(|s| s["state"].as_str().unwrap_or("").to_owned())
        })
        .unwrap_or_default()
}

/// `cmd` run with a deadline: its output, or `None` if it was still
/// running after `limit` (then killed).
fn within(mut cmd: std::process::Command, limit: Duration) -> Option<Out> {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    if wait_until(limit, || waiter.is_finished()) {
        Some(Out(waiter.join().unwrap()))
    } else {
        kill9(pid);
        let _ = waiter.join();
        None
    }
}

/// A world whose service is restarting (in its backoff) holds its slot: at
/// `max_parallel` 1, its `reset`, `reload` and `up` run at once instead of
/// queueing behind the world itself, which waited forever.
#[test]
fn verbs_of_a_world_whose_service_is_restarting_never_queue_behind_it() {
    let home = Home::new();
    let repo = project(
        "ownslot",
        "[services.flaky]\ncmd = \"sleep 1; exit 3\"\nrestart = { policy = \"on-failure\", backoff = \"60s\", max_backoff = \"60s\" }\n",
    );
    home.max_parallel_only(1);
    repo.ok(&home, &["up", "c1"]);
    assert!(
        wait_until(Duration::from_secs(20), || service_state(
            &repo, &home, "c1", "flaky"
        ) == "restarting"),
        "flaky never restarted: {:?}",
        repo.worlds(&home).get("c1")
    );
    let db = db_url(&repo, &home, "c1");
    spoil(&db);
    for args in [&["reset", "c1", "db"][..], &["reload", "c1"], &["up", "c1"]] {
        let out = within(repo.cmd(&home, args), Duration::from_secs(60))
            .unwrap_or_else(|| panic!("`binky {}` queued behind its own world", args.join(" ")));
        assert_eq!(out.code(), 0, "{args:?}: {out}");
        assert!(!out.to_string().contains("queued"), "{args:?}: {out}");
    }
    // The reset really remade the slice.
    assert_eq!(rows(&db), "3");
    assert_eq!(
        repo.worlds(&home)["c1"]["state"],
        "running",
        "{:?}",
        repo.worlds(&home)
    );
    let status = home.ok(&["status", "--json"]);
    assert!(!status.stdout().contains("\"queued\""), "{status}");
}

/// A `reset` waiting in the queue ends when `down` takes its world out of
/// the queue, names itself and its world, and touches nothing: the slice
/// keeps its data and the world stays stopped.
#[test]
fn a_queued_reset_taken_out_by_down_ends_names_itself_and_drops_nothing() {
    let home = Home::new();
    let repo = project(
        "wdrawn",
        "[services.app]\ncmd = \"exec sleep 600\"\ndepends_on = [\"db\"]\n",
    );
    home.max_parallel_only(2);
    repo.ok(&home, &["up", "c2"]);
    let db = db_url(&repo, &home, "c2");
    repo.ok(&home, &["down", "c2"]);
    spoil(&db);
    home.max_parallel_only(1);
    repo.ok(&home, &["up", "c1"]);
    let reset = Watched::spawn(repo.cmd(&home, &["reset", "c2", "db"]));
    assert!(
        reset.wait_for("queued", Duration::from_secs(20)),
        "{}",
        reset.text()
    );
    repo.ok(&home, &["down", "c2"]);
    let (code, text) = reset.finish();
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("the queued `reset` of c2") && text.contains("taken out of the queue"),
        "{text}"
    );
    // Nothing was dropped or started.
    assert_eq!(rows(&db), "0");
    assert_eq!(repo.worlds(&home)["c2"]["state"], "stopped");
    // The slot c1 holds was never given to c2.
    assert_eq!(repo.worlds(&home)["c1"]["state"], "running");
}

/// `remove --force` landing after an `up` was admitted but before it took
/// the world's lock: either the remove finds what the `up` made and
/// removes it, or the `up` finds its ticket withdrawn and makes nothing.
/// Before, the remove answered "queued and never made" and the world came
/// up afterwards with its slices.
#[test]
fn remove_force_right_after_an_admission_leaves_no_world_behind() {
    let home = Home::new();
    let repo = project(
        "admrm",
        "[services.app]\ncmd = \"exec sleep 600\"\ndepends_on = [\"db\"]\n",
    );
    home.start_daemon_with(&[("BINKY_TEST_PAUSE", "up:admitted=3000")]);
    home.max_parallel_only(4);
    let up = Watched::spawn(repo.cmd(&home, &["up", "w"]));
    assert!(
        wait_until(Duration::from_secs(20), || home
            .events()
            .iter()
            .any(|e| e["event"] == "admitted" && e["worktree"] == "w")),
        "never admitted: {}",
        up.text()
    );
    let rm = repo.run(&home, &["remove", "w", "--force"]);
    assert_eq!(rm.code(), 0, "{rm}");
    let (code, text) = up.finish();
    // However the two met, no world, worktree, slice or process is left.
    let worlds = repo.worlds(&home);
    if code == 0 {
        // The `up` ran first; the remove then removed its world.
        assert!(!worlds.contains_key("w"), "{worlds:?}\n{text}");
    } else {
        assert!(
            text.contains("the queued `up` of w") && text.contains("it made nothing"),
            "{text}"
        );
    }
    assert!(!worlds.contains_key("w"), "{worlds:?}\n{text}\n{rm}");
    let left: Vec<_> = walk(&home.path().join("slices"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("sqlite3"))
        .collect();
    assert!(left.is_empty(), "slices left: {left:?}");
    let wt = repo.worktree_root().join("w");
    assert!(!wt.exists(), "{} left", wt.display());
    // The slot is free: another world is admitted at once.
    home.max_parallel_only(1);
    let other = repo.run(&home, &["up", "v"]);
    assert_eq!(other.code(), 0, "{other}");
    assert!(!other.to_string().contains("queued"), "{other}");
}

/// Every file under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Two verbs of one world waiting on its one ticket (`up` and `reload`):
/// one claims the admission, the other runs after it on the same room.
/// When the first fails, that room is gone — another world took the slot —
/// and the second is admitted anew, queueing behind it. Before, it went on
/// regardless and started the world above `max_parallel` (chaos seed 2).
#[test]
fn a_verb_that_shared_a_failed_verbs_admission_is_admitted_anew() {
    let home = Home::new();
    let flags = tempfile::tempdir().unwrap();
    let flag = flags.path().join("fail-b");
    let toml = format!(
        "{}[services.app]\ncmd = \"if [ -e {dir}/fail-$BINKY_WORLD ]; then rm {dir}/fail-$BINKY_WORLD; exit 3; fi; exec sleep 600\"\n",
        project_header("shared", 8),
        dir = flags.path().display()
    );
    let repo = Repo::new(&toml);
    home.max_parallel_only(1);
    repo.ok(&home, &["up", "b"]);
    repo.ok(&home, &["down", "b"]);
    repo.ok(&home, &["up", "a"]);
    // b's next start fails, once.
    std::fs::write(&flag, "").unwrap();
    let queued = |w: &Watched| {
        assert!(
            w.wait_for("queued", Duration::from_secs(20)),
            "{}",
            w.text()
        );
    };
    let mut up_b = Watched::spawn(repo.cmd(&home, &["up", "b"]));
    queued(&up_b);
    let mut reload_b = Watched::spawn(repo.cmd(&home, &["reload", "b"]));
    queued(&reload_b);
    let up_c = Watched::spawn(repo.cmd(&home, &["up", "c"]));
    queued(&up_c);
    // The slot goes to b's ticket; b's first start fails, and c takes it.
    repo.ok(&home, &["down", "a"]);
    let (code, text) = up_c.finish();
    assert_eq!(code, 0, "{text}");
    let state = |w: &str| {
        repo.worlds(&home)
            .get(w)
            .and_then(|w| w["state"].as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    // One of b's verbs failed with its start; the other waits for room.
    let (failed, waiting) = loop {
        if up_b.finished() {
            break (up_b, reload_b);
        }
        if reload_b.finished() {
            break (reload_b, up_b);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (code, text) = failed.finish();
    assert_ne!(code, 0, "{text}");
    assert!(!flag.exists(), "b's failing start ran");
    assert!(
        wait_until(Duration::from_secs(20), || matches!(
            state("b").as_str(),
            "queued" | "running" | "starting"
        )),
        "{}",
        state("b")
    );
    assert_eq!(state("b"), "queued", "{}", waiting.text());
    assert_eq!(state("c"), "running");
    // Room again: the waiting verb brings b up.
    repo.ok(&home, &["down", "c"]);
    let (code, text) = waiting.finish();
    assert_eq!(code, 0, "{text}");
    assert_eq!(state("b"), "running");
}
