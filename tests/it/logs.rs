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
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("tick"), "{first}");
    // logrotate's default `create` mode: rename, nothing else.
    std::fs::rename(&log, home.file("logs/rotate/x/tick.log.1")).unwrap();
    assert!(
        wait_until(Duration::from_secs(1), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("tick"))),
        "no new tick.log within a second of the rename"
    );
    let out = repo.ok(&home, &["logs", "x", "tick", "-n", "1"]);
    assert!(out.stdout().contains("tick"), "{out}");
    // `logs -f` carries on in the new file: numbers keep rising past the
    // rename, with none lost at the switch.
    let mut last: Option<u64> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        let l = lines.next().unwrap().unwrap();
        let n: u64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        if let Some(p) = last {
            assert_eq!(n, p + 1, "a line was lost or repeated at {l}");
        }
        last = Some(n);
    }
    let _ = follow.kill();
    let _ = follow.wait();
    repo.ok(&home, &["remove", "x", "--force"]);
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
    std::thread::sleep(Duration::from_millis(300));
    home.ok(&["status"]);
    assert!(
        wait_until(Duration::from_secs(2), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("request"))),
        "the daemon kept writing into the renamed file"
    );
}
