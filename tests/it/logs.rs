//! Service and daemon logs: rotation by rename, rolling by size, `logs -f`.

use crate::harness::*;
use crate::project::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

/// Prints `tick N` every 50 ms, forever.
const TICKER: &str = "import itertools, time\nfor i in itertools.count():\n    print('tick', i, flush=True)\n    time.sleep(0.05)\n";

/// 7 MiB at once, then quiet: no restart happens.
const CHATTY: &str = "import sys, time\nfor i in range(70000):\n    print('x' * 100)\nsys.stdout.flush()\ntime.sleep(600)\n";

#[test]
fn a_log_moved_away_by_logrotate_is_reopened_and_followed_by_name() {
    let home = Home::new();
    let toml = format!(
        "{}[services.tick]\ncmd = \"exec python3 tick.py\"\n",
        project_header("rotate", 1)
    );
    let repo = Repo::with("", &toml, &[("tick.py", TICKER)]);
    repo.ok(&home, &["up", "x"]);
    let log = home.file("logs/rotate/x/tick.log");
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("tick 3"))
    }));
    // Follow it first, as `logs -f` in another terminal would.
    let mut follow = repo
        .cmd(&home, &["logs", "x", "tick", "-f", "-n", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .map(Reaped)
        .unwrap();
    let mut lines = BufReader::new(follow.0.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("tick"), "{first}");
    // logrotate's default `create` mode: rename, nothing else.
    std::fs::rename(&log, home.file("logs/rotate/x/tick.log.1")).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("tick"))),
        "no new tick.log within ten seconds of the rename"
    );
    let out = repo.ok(&home, &["logs", "x", "tick", "-n", "1"]);
    assert!(out.stdout().contains("tick"), "{out}");
    // `logs -f` carries on in the new file: numbers keep rising past the
    // rename, with none lost at the switch.
    consecutive_ticks(&mut lines, None, Duration::from_secs(3));
    drop(follow);
    repo.ok(&home, &["remove", "x", "--force"]);
}

/// Reads `tick N` lines for `for_how_long`, asserting each is the one
/// after the last; returns the last number.
fn consecutive_ticks(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    mut last: Option<u64>,
    for_how_long: Duration,
) -> Option<u64> {
    let deadline = std::time::Instant::now() + for_how_long;
    while std::time::Instant::now() < deadline {
        let l = lines.next().unwrap().unwrap();
        let n: u64 = l
            .rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("not a tick: {l:?}"));
        if let Some(p) = last {
            assert_eq!(n, p + 1, "a line was lost or repeated at {l}");
        }
        last = Some(n);
    }
    last
}

#[test]
fn logs_f_carries_on_across_a_daemon_restart_with_no_line_lost_or_repeated() {
    let home = Home::new();
    let toml = format!(
        "{}[services.tick]\ncmd = \"exec python3 tick.py\"\n",
        project_header("relog", 1)
    );
    let repo = Repo::with("", &toml, &[("tick.py", TICKER)]);
    repo.ok(&home, &["up", "x"]);
    // Three ticks first: on a slow machine the newest three lines could
    // still include the `=== binky: tick starting ===` mark.
    let log = home.file("logs/relog/x/tick.log");
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("tick 3"))
    }));
    let mut follow = repo
        .cmd(&home, &["logs", "x", "-f", "-n", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .unwrap();
    let mut lines = BufReader::new(follow.0.stdout.take().unwrap()).lines();
    let last = consecutive_ticks(&mut lines, None, Duration::from_secs(1));
    // The daemon dies; the service (and its log writer) runs on. A new
    // daemon is started by the next command, and the follower carries on
    // from where it was: what was written meanwhile, then live.
    let daemon = home.daemon_pid().unwrap();
    kill9(daemon);
    assert!(wait_until(Duration::from_secs(5), || !alive(daemon)));
    std::thread::sleep(Duration::from_millis(300));
    home.ok(&["daemon", "start"]);
    consecutive_ticks(&mut lines, last, Duration::from_secs(2));
    drop(follow);
    repo.ok(&home, &["remove", "x", "--force"]);
}

#[test]
fn a_log_subscriber_that_never_reads_holds_up_nothing() {
    use binky::protocol::{Hello, LogFollow, Request, Subscription, WorldRef, codec::encode};
    use std::io::Write;
    let home = Home::new();
    let toml = format!(
        "{}[services.chatty]\ncmd = \"exec python3 chatty.py\"\n",
        project_header("stuckl", 2)
    );
    let repo = Repo::with("", &toml, &[("chatty.py", CHATTY)]);
    home.ok(&["daemon", "start"]);
    // Subscribed to x's logs before x prints its 7 MiB, and never read.
    repo.ok(&home, &["up", "x"]);
    let mut stuck = std::os::unix::net::UnixStream::connect(home.file("binky.sock")).unwrap();
    stuck
        .write_all(&encode(&Hello::current()).unwrap())
        .unwrap();
    let sub = Request::Subscribe(Subscription {
        world: Some(WorldRef {
            project_dir: None,
            project: Some("stuckl".into()),
            name: "x".into(),
        }),
        tail: 0,
        logs: Some(LogFollow {
            lines: 1000,
            ..Default::default()
        }),
    });
    stuck.write_all(&encode(&sub).unwrap()).unwrap();
    let log = home.file("logs/stuckl/x/chatty.log.1");
    assert!(wait_until(Duration::from_secs(20), || log.exists()));
    // The daemon serves everyone else as before.
    let started = std::time::Instant::now();
    repo.ok(&home, &["up", "y"]);
    repo.ok(&home, &["status"]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "up took {:?} beside a stuck reader",
        started.elapsed()
    );
    drop(stuck);
    repo.ok(&home, &["remove", "x", "--force"]);
    repo.ok(&home, &["remove", "y", "--force"]);
}

#[test]
fn a_chatty_service_log_rolls_at_five_mib_while_it_runs() {
    let home = Home::new();
    let toml = format!(
        "{}[services.chatty]\ncmd = \"exec python3 chatty.py\"\n",
        project_header("chatty", 1)
    );
    let repo = Repo::with("", &toml, &[("chatty.py", CHATTY)]);
    repo.ok(&home, &["up", "x"]);
    let log = home.file("logs/chatty/x/chatty.log");
    let rolled = home.file("logs/chatty/x/chatty.log.1");
    assert!(
        wait_until(Duration::from_secs(20), || rolled.exists()
            && std::fs::metadata(&log).is_ok()),
        "the log did not roll while written"
    );
    let size = std::fs::metadata(&rolled).unwrap().len();
    assert!(
        (5 * 1024 * 1024..6 * 1024 * 1024).contains(&size),
        "rolled at {size} bytes"
    );
    assert_eq!(repo.worlds(&home)["x"]["services"][0]["restarts"], 0);
    repo.ok(&home, &["remove", "x", "--force"]);
}

#[test]
fn daemon_log_is_reopened_after_a_rename() {
    let home = Home::new();
    let out = Out(home
        .cmd(&["daemon", "start"])
        .env("BINKY_LOG", "debug")
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let log = home.file("daemon.log");
    std::fs::rename(&log, home.file("daemon.log.1")).unwrap();
    // Each request logs a line: the daemon looks at the name now and then,
    // so ask until a line lands in a new file by that name.
    assert!(
        wait_until(Duration::from_secs(10), || {
            home.ok(&["status"]);
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains("request"))
        }),
        "the daemon kept writing into the renamed file"
    );
}

#[test]
fn each_start_is_marked_in_the_log_and_a_failure_quotes_only_its_own_run() {
    let home = Home::new();
    // First run serves; once `flag` exists, a run prints and fails.
    let toml = format!(
        "{}[services.web]\ncmd = \"if [ -e flag ]; then echo second-run-words; exit 3; fi; echo first-run-words; exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"web\"\nrestart = \"no\"\nhealth = {{ http = \"/\", timeout = \"20s\", interval = \"50ms\" }}\n",
        project_header("runs", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    repo.ok(&home, &["down", "x"]);
    std::fs::write(repo.worktree_root().join("x/flag"), "").unwrap();
    let out = repo.run(&home, &["up", "x"]);
    assert_ne!(out.code(), 0, "{out}");
    let err = out.stderr();
    assert!(err.contains("second-run-words"), "{err}");
    assert!(
        !err.contains("first-run-words"),
        "an earlier run quoted:\n{err}"
    );
    // The log keeps both runs, each after a stamped separator.
    let log = std::fs::read_to_string(home.file("logs/runs/x/web.log")).unwrap();
    let marks: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("=== binky: web starting ==="))
        .collect();
    assert_eq!(marks.len(), 2, "{log}");
    for m in marks {
        assert!(
            m.starts_with("20") && m.as_bytes()[10] == b'T',
            "stamped: {m}"
        );
    }
    let first = log.find("first-run-words").unwrap();
    let second = log.find("second-run-words").unwrap();
    let last_mark = log.rfind("=== binky: web starting").unwrap();
    assert!(first < last_mark && last_mark < second, "{log}");
}

#[test]
fn a_failed_migrate_says_its_first_line_and_tail_and_that_the_branch_file_differs() {
    let home = Home::new();
    // The cause comes first, then much noise: both ends are quoted.
    let failing = "echo 'No DATABASE_URL environment variable set'; for i in $(seq 60); do echo noise $i; done; exit 1";
    let toml = |migrate: &str| {
        format!(
            "{}[services.db]\nadapter = \"sqlite\"\nmigrate = \"{migrate}\"\n",
            project_header("mig", 1)
        )
    };
    let repo = Repo::new(&toml(failing));
    git(&repo.main, &["branch", "feature"]);
    // The fix lands on main only; the branch still has the failing command.
    std::fs::write(repo.project.join("binky.toml"), toml("true")).unwrap();
    git(&repo.main, &["commit", "-qam", "fix migrate"]);
    let out = repo.run(&home, &["up", "feature"]);
    assert_ne!(out.code(), 0, "{out}");
    let err = out.stderr();
    let first = err.lines().find(|l| l.contains("migrate failed")).unwrap();
    assert!(
        first.contains("No DATABASE_URL environment variable set"),
        "the first line says the cause: {first}\n{err}"
    );
    assert!(err.contains("noise 60"), "{err}");
    assert!(err.contains("left out"), "{err}");
    assert!(!err.contains("noise 30\n"), "{err}");
    assert!(err.contains("db.log"), "names the log: {err}");
    assert!(
        err.contains("differs from the main checkout"),
        "says the branch's binky.toml is not main's:\n{err}"
    );
    // status: the reason stands alone on its first line.
    let st = repo.worlds(&home);
    let reason = st["feature"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason
            .lines()
            .next()
            .unwrap_or("")
            .contains("No DATABASE_URL"),
        "{:?}",
        st["feature"]
    );
}

#[test]
fn logs_f_ends_saying_so_when_its_world_is_removed() {
    let home = Home::new();
    let toml = format!(
        "{}[services.tick]\ncmd = \"exec python3 tick.py\"\n",
        project_header("gonelog", 1)
    );
    let repo = Repo::with("", &toml, &[("tick.py", TICKER)]);
    repo.ok(&home, &["up", "x"]);
    let mut follow = repo
        .cmd(&home, &["logs", "x", "-f", "-n", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Following: its first line has arrived.
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("tick"));
    repo.ok(&home, &["remove", "x", "--force"]);
    let out = follow.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("world `x` was removed"), "{stderr}");
}

/// A worker refused by its server retries in a loop: its process lives and
/// `status` said only `running`. Now the service carries `log_flood` (its
/// lines in the last 10 s) and the world a note naming it; a service that
/// prints at an ordinary pace carries neither.
#[test]
fn a_service_flooding_its_log_is_flagged_in_status_and_a_ticking_one_is_not() {
    let home = Home::new();
    // 100 lines every 50 ms: about 2,000 a second.
    const RETRY: &str = "import time\nwhile True:\n    print('NOPERM this user has no permissions, retrying\\n' * 100, end='', flush=True)\n    time.sleep(0.05)\n";
    let toml = format!(
        "{}[services.worker]\ncmd = \"exec python3 retry.py\"\n[services.tick]\ncmd = \"exec python3 tick.py\"\n",
        project_header("flood", 1)
    );
    let repo = Repo::with("", &toml, &[("retry.py", RETRY), ("tick.py", TICKER)]);
    repo.ok(&home, &["up", "x"]);
    let mut last = serde_json::Value::Null;
    let flagged = wait_until(Duration::from_secs(20), || {
        last = repo.worlds(&home)["x"].clone();
        last["services"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "worker" && s["log_flood"].as_u64() >= Some(500))
    });
    assert!(flagged, "{last}");
    let tick = last["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tick")
        .unwrap();
    assert!(tick.get("log_flood").is_none(), "{tick}");
    let notes = last["notes"].to_string();
    assert!(
        notes.contains("worker is flooding its log") && notes.contains("binky logs x worker"),
        "{notes}"
    );
    assert!(!notes.contains("tick"), "{notes}");
    // The human status says it under the world.
    let human = repo.ok(&home, &["status"]).stdout();
    assert!(human.contains("worker is flooding its log"), "{human}");
    repo.ok(&home, &["remove", "x", "--force"]);
}

/// Issue 48: a symbolic link planted at a service's log path made Binky
/// append the service's output to the file it names — at the running log
/// writer's next reopen, and at every restart. Now no log is written
/// through a link: the link is replaced by a new file (its target is never
/// touched), the new file says what was found, the daemon warns naming the
/// path, and the service's output goes on in its log.
#[test]
fn a_link_planted_at_a_service_log_is_never_written_through() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "not Binky's\n").unwrap();
    let toml = format!(
        "{}[services.tick]\ncmd = \"exec python3 tick.py\"\n",
        project_header("planted", 1)
    );
    let repo = Repo::with("", &toml, &[("tick.py", TICKER)]);
    repo.ok(&home, &["up", "x"]);
    let log = home.file("logs/planted/x/tick.log");
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("tick 3"))
    }));
    // Put a link in the log's place in one step (as `ln -sf` would race to).
    let plant = || {
        let tmp = home.file("logs/planted/x/.planting");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        std::fs::rename(&tmp, &log).unwrap();
    };
    let replaced = || {
        std::fs::symlink_metadata(&log).is_ok_and(|m| m.is_file())
            && std::fs::read_to_string(&log).is_ok_and(|t| {
                t.contains(&format!("was a symbolic link to {}", victim.display()))
                    && t.lines().last().is_some_and(|l| l.contains("tick"))
            })
    };
    // The running writer notices at its next write.
    plant();
    assert!(
        wait_until(Duration::from_secs(10), replaced),
        "log: {:?}, victim: {:?}",
        std::fs::symlink_metadata(&log).map(|m| m.file_type()),
        std::fs::read_to_string(&victim)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "not Binky's\n");
    // And a start meets the link first in the daemon, which says so.
    repo.ok(&home, &["down", "x"]);
    plant();
    repo.ok(&home, &["up", "x"]);
    assert!(wait_until(Duration::from_secs(10), replaced));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "not Binky's\n");
    let daemon_log = std::fs::read_to_string(home.file("daemon.log")).unwrap();
    assert!(
        daemon_log.contains("a log's name is a symbolic link")
            && daemon_log.contains(&log.display().to_string()),
        "{daemon_log}"
    );
    repo.ok(&home, &["remove", "x", "--force"]);
}
