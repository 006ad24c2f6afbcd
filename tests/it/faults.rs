//! Fault injection: the daemon aborts (as `kill -9` would) at a named point
//! of `up`, `down`, `reload`, `remove`, `verify` and golden template building
//! (`BINKY_TEST_FAULT`); after a
//! restart, status must tell the truth, ports and slices must be consistent,
//! no process may run twice or be orphaned, and `up` must work again.

use crate::harness::*;
use crate::project::*;
use std::time::Duration;

fn fixture() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/echo.py"
    ))
    .unwrap()
}

/// What the world looked like after the restart, for the report.
/// Seeds the sqlite slice named by `$DB_URL` with one row, so a world's
/// data shows whether its slice was built (or cloned) completely.
const SEED: &str = "import os, sqlite3\nc = sqlite3.connect(os.environ['DB_URL'].removeprefix('sqlite://'))\nc.execute('create table t(x)')\nc.execute('insert into t values (42)')\nc.commit()\n";

fn seeded_value(path: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('select x from t').fetchone()[0])",
        ])
        .arg(path)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn run_point(point: &str, op: &[&str]) -> String {
    let home = Home::new();
    let marker = format!("FAULT{}x{}", std::process::id(), point.replace(':', "_"));
    // The database is cloned from a golden template, so template building is
    // on the path of every `up` here.
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nclone_from = \"main\"\nseed = \"python3 seed.py\"\n[services.web]\ncmd = \"exec python3 echo.py {marker}\"\nurl = \"web\"\ndepends_on = [\"db\"]\nhealth = {{ tcp = \"localhost:${{self.port}}\", timeout = \"20s\", interval = \"50ms\" }}\n",
        project_header("fault", 4)
    );
    let repo = Repo::with("", &toml, &[("echo.py", &fixture()), ("seed.py", SEED)]);
    if op[0] != "up" {
        repo.ok(&home, &["up", "x"]);
        home.ok(&["daemon", "stop"]);
    }
    // A daemon that will abort at `point`.
    let started = Out(home
        .cmd(&["daemon", "start"])
        .env("BINKY_TEST_FAULT", point)
        .output()
        .unwrap());
    assert_eq!(started.code(), 0, "{started}");
    let crashed = home.daemon_pid().unwrap();
    let out = repo.run(&home, op);
    assert_ne!(
        out.code(),
        0,
        "{point}: the operation should have been cut short\n{out}"
    );
    // The CLI says whether the command took effect and that it may run again.
    assert!(
        out.stderr().contains("the daemon stopped before answering")
            && out.stderr().contains("again"),
        "{point}: {out}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || !alive(crashed)),
        "{point}: daemon did not die"
    );

    // Restart (the next command starts a normal daemon) and check the truth.
    // A restart may be bringing a service back right now, so the check waits
    // (bounded) for status and the process table to agree.
    let mut report = String::new();
    let mut problem = String::new();
    let consistent = wait_until(Duration::from_secs(10), || {
        let worlds = repo.worlds(&home);
        let procs = pids_with(&marker);
        problem.clear();
        if procs.len() > 1 {
            problem = format!("duplicate processes {procs:?}");
            return false;
        }
        let Some(w) = worlds.get("x") else {
            report = "no world".into();
            if !procs.is_empty() {
                problem = format!("processes {procs:?} of a world the registry forgot");
            }
            return procs.is_empty();
        };
        // A crash before the services were recorded leaves the world
        // with none listed: then no process of it may run.
        let Some(web) = w["services"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == "web")
        else {
            report = format!("world {} with no services listed", w["state"]);
            if !procs.is_empty() {
                problem = format!("processes {procs:?} of a world with no services listed");
            }
            return procs.is_empty();
        };
        if web["state"] == "running" {
            let pid = web["pid"].as_u64().unwrap_or(0) as u32;
            if !alive(pid) || !procs.contains(&pid) {
                problem = format!("status says running with pid {pid}, processes {procs:?}");
                return false;
            }
        }
        if let [p] = procs.as_slice()
            && web["pid"].as_u64() != Some(*p as u64)
        {
            problem = format!("a live process {p} that status does not know: {web}");
            return false;
        }
        report = format!(
            "world {} ({}), web {}",
            w["state"].as_str().unwrap(),
            w["error"]
                .as_str()
                .map(|e| e.lines().next().unwrap_or(""))
                .unwrap_or("-"),
            web["state"].as_str().unwrap_or("?")
        );
        true
    });
    assert!(consistent, "{point}: {problem}");
    // Slices: a live row has its file; gc sweeps anything half-made.
    let gc = repo.run(&home, &["gc"]);
    assert_eq!(gc.code(), 0, "{point}: gc after the crash failed:\n{gc}");
    // `up` again works and runs exactly one copy.
    repo.ok(&home, &["up", "x"]);
    assert_eq!(repo.worlds(&home)["x"]["state"], "running");
    assert!(
        wait_until(Duration::from_secs(5), || pids_with(&marker).len() == 1),
        "{point}: {:?}",
        pids_with(&marker)
    );
    // The world's slice is complete, and so is the template it came from.
    assert_eq!(
        seeded_value(&home.file("slices/sqlite/fault_x.sqlite3")).as_deref(),
        Some("42"),
        "{point}"
    );
    let template = home.cloned_from("x", "db");
    assert!(template.starts_with("fault_golden_main_"), "{template}");
    assert!(
        home.file(&format!("golden/sqlite/{template}")).exists(),
        "{point}"
    );
    // And it can be removed cleanly.
    repo.ok(&home, &["remove", "x", "--force"]);
    assert!(wait_until(Duration::from_secs(5), || pids_with(&marker).is_empty()));
    assert!(!home.file("slices/sqlite/fault_x.sqlite3").exists());
    assert_eq!(home.ok(&["metrics"]).json()["port_reservations"], 0);
    eprintln!("FAULT {point}: after restart: {report}");
    report
}

#[test]
fn up_at_every_fault_point() {
    for point in [
        "up:worktree",
        "up:ports",
        "up:provisioned",
        "spawn:unrecorded",
        "up:started",
    ] {
        run_point(point, &["up", "x"]);
    }
}

#[test]
fn template_building_at_every_fault_point() {
    // golden:provisioned — the template exists but is not migrated or seeded;
    // golden:built — seeded, its marker not yet written; slice:ready — the
    // world's clone made, the slice not yet recorded live.
    for point in ["golden:provisioned", "golden:built", "slice:ready"] {
        run_point(point, &["up", "x"]);
    }
}

#[test]
fn a_template_build_cut_short_by_a_crash_is_swept_by_gc_once_no_world_needs_it() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nclone_from = \"main\"\nseed = \"python3 seed.py\"\nclone_inputs = [\"seed.py\"]\n",
        project_header("cutshort", 1)
    );
    let repo = Repo::with("", &toml, &[("seed.py", SEED)]);
    // The daemon dies with the template provisioned, before its seed and
    // its finished marker.
    crash_at(&repo, &home, &["up", "x"], "golden:provisioned", &[]);
    let first = home.listed("slices/sqlite");
    assert!(
        matches!(first.as_slice(), [t] if t.starts_with("cutshort_golden_main_")),
        "the fault point is after provisioning: {first:?}"
    );
    // The branch's seed changes, so the next `up` needs another template:
    // the one cut short is no world's now.
    let seed = repo.worktree_root().join("x").join("seed.py");
    std::fs::write(&seed, format!("{SEED}# v2\n")).unwrap();
    repo.ok(&home, &["up", "x"]);
    let second = home.cloned_from("x", "db");
    assert!(
        !first.contains(&format!("{second}.sqlite3")),
        "{first:?} {second}"
    );
    repo.ok(&home, &["remove", "x", "--force"]);
    // gc finds it by the marker its build wrote first, and drops it, its
    // marker and its log, with the second template no world needs either.
    let gc = repo.run(&home, &["gc"]);
    assert_eq!(gc.code(), 0, "{gc}");
    assert_eq!(home.listed("slices/sqlite"), Vec::<String>::new(), "{gc}");
    assert_eq!(home.listed("golden/sqlite"), Vec::<String>::new(), "{gc}");
}

#[test]
fn verify_interrupted_by_a_crash_leaves_no_orphan() {
    let home = Home::new();
    let marker = format!("VERIFYFAULT{}", std::process::id());
    let toml = format!(
        "{}[services.web]\ncmd = \"exec python3 echo.py web{marker}\"\nurl = \"web\"\n[agents]\nverify = [\"test -z \\\"$SLOW\\\" || exec python3 -c 'import time; time.sleep(300)' {marker}\"]\n",
        project_header("vfault", 2)
    );
    let repo = Repo::with("", &toml, &[("echo.py", &fixture())]);
    repo.ok(&home, &["up", "x"]);
    let web_pid = repo.worlds(&home)["x"]["services"][0]["pid"].clone();
    home.ok(&["daemon", "stop"]);
    let started = Out(home
        .cmd(&["daemon", "start"])
        .env("BINKY_TEST_FAULT", "verify:running")
        .output()
        .unwrap());
    assert_eq!(started.code(), 0, "{started}");
    let crashed = home.daemon_pid().unwrap();
    let out = Out(repo
        .cmd(&home, &["verify", "x"])
        .env("SLOW", "1")
        .output()
        .unwrap());
    assert_ne!(out.code(), 0, "{out}");
    assert!(wait_until(Duration::from_secs(5), || !alive(crashed)));
    // The verify command outlived the daemon that started it (a pyenv shim
    // may show as a second, short-lived process while it execs python).
    let sleeper = || {
        pids_with(&marker)
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("sleep"))
            })
            .collect::<Vec<_>>()
    };
    // Keep the pid the wait saw: a second look could catch the process
    // mid-exec with its command line briefly hidden.
    let mut orphan = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            orphan = sleeper();
            orphan.len() == 1
        }),
        "the verify command should still run: {:?}\nverify said:\n{out}",
        sleeper()
    );
    // ...until the next daemon starts: it stops it and says so.
    let worlds = repo.worlds(&home);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(orphan[0])),
        "verify process {} orphaned",
        orphan[0]
    );
    assert_eq!(worlds["x"]["verify"], "interrupted", "{:?}", worlds["x"]);
    assert_eq!(worlds["x"]["state"], "running");
    assert_eq!(worlds["x"]["services"][0]["pid"], web_pid);
    // And verify works again.
    repo.ok(&home, &["verify", "x"]);
    assert!(
        repo.worlds(&home)["x"]["verify"]
            .as_str()
            .unwrap()
            .starts_with("passed")
    );
    repo.ok(&home, &["remove", "x", "--force"]);
}

#[test]
fn down_reload_and_remove_at_every_fault_point() {
    run_point("down:intent", &["down", "x"]);
    run_point("reload:stopped", &["reload", "x"]);
    run_point("remove:stopped", &["remove", "x", "--force"]);
    run_point("remove:torn_down", &["remove", "x", "--force"]);
}

#[test]
fn a_daemon_that_dies_starting_fails_the_verb_said_of_its_world() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n",
        project_header("diestart", 1)
    );
    let repo = Repo::new(&toml);
    // The daemon this `reset` starts aborts before it serves.
    let fault = [("BINKY_TEST_FAULT", "daemon:start")];
    let out = repo.run_with(&home, &["reset", "x"], &fault);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("`reset` of x: the daemon exited during start-up"),
        "{out}"
    );
    let json = repo.run_with(&home, &["up", "x", "--json"], &fault);
    assert!(
        json.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("`up` of x: the daemon exited during start-up"),
        "{json}"
    );
    // Nothing was made: the next daemon brings x up from nothing.
    repo.ok(&home, &["up", "x"]);
    repo.ok(&home, &["remove", "x", "--force"]);
}

/// `gc` reads the slices it may sweep, then sweeps each under its world's
/// lock and only if it still may: an `up` that claimed the slice again in
/// between (a queue a new daemon carried on) keeps it. Before, gc tore down
/// the slice the `up` had just made and forgot its record, and the next
/// `up` refused the slice as "not made by this Binky" (chaos seed 2).
#[test]
fn gc_never_sweeps_a_slice_an_up_claimed_after_the_list_was_read() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nseed = \"python3 seed.py\"\n",
        project_header("gcrace", 1)
    );
    let repo = Repo::with("", &toml, &[("seed.py", SEED)]);
    // The slice of x is left in `teardown` by a remove cut short: gc's to sweep.
    up_then_crash_removing(&repo, &home, "x", &[]);
    let slice = home.file("slices/sqlite/gcrace_x.sqlite3");
    assert!(slice.exists());
    // A daemon whose gc waits 3 s between its list and its sweep.
    home.start_daemon_with(&[("BINKY_TEST_PAUSE", "gc:listed=3000")]);
    let gc = Watched::spawn(repo.cmd(&home, &["gc", "--json"]));
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(home.file("daemon.log"))
                .is_ok_and(|l| l.contains("point=\"gc:listed\""))
        }),
        "gc never listed"
    );
    // Meanwhile x is brought up again: its slice is made afresh, live.
    repo.ok(&home, &["up", "x"]);
    let (code, text) = gc.finish();
    assert_eq!(code, 0, "{text}");
    let w = &repo.worlds(&home)["x"];
    assert_eq!(w["state"], "running", "{w}\n{text}");
    assert_eq!(w["services"][0]["state"], "provisioned", "{w}\n{text}");
    assert_eq!(
        seeded_value(&slice).as_deref(),
        Some("42"),
        "gc swept the slice x's up had made:\n{text}"
    );
    // And gc finds nothing of it to sweep now.
    let again = repo.run(&home, &["gc", "--dry-run"]);
    assert!(!again.stdout().contains("gcrace_x"), "{again}");
    repo.ok(&home, &["remove", "x", "--force"]);
    assert!(!slice.exists());
}
