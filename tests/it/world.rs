//! The main job: `up`, `down`, `reload`, `remove`, `status`, `env`, `logs`
//! against real git repositories and real processes.

use crate::harness::*;
use crate::project::*;
use std::collections::HashSet;
use std::time::Duration;

fn two_services(name: &str) -> String {
    format!(
        "{}{}{}",
        project_header(name, 40),
        http_service("api", ""),
        http_service(
            "web",
            "depends_on = [\"api\"]\nenv = { API = \"${api.local_url}\" }"
        )
    )
}

fn ports_of(world: &serde_json::Value) -> Vec<u64> {
    world["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["port"].as_u64())
        .collect()
}

#[test]
fn up_prints_services_status_down_and_up_again_keeps_ports() {
    let home = Home::new();
    let repo = Repo::new(&two_services("acme"));
    let out = repo.ok(&home, &["up", "login-fix"]);
    let text = out.stdout();
    assert!(text.contains("✓ up: login-fix (2 service(s))"), "{out}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("api  pid ")),
        "{out}"
    );
    let w = &repo.worlds(&home)["login-fix"];
    assert_eq!(w["state"], "running");
    let ports = ports_of(w);
    assert_eq!(ports.len(), 2);
    // The service really listens where Binky says.
    for p in &ports {
        assert!(std::net::TcpStream::connect(("127.0.0.1", *p as u16)).is_ok());
    }
    let status = repo.ok(&home, &["status"]).stdout();
    assert!(
        status.starts_with("acme\n  login-fix  [running]\n"),
        "{status}"
    );
    // up again: a fast no-op with the same pids.
    let pids = |w: &serde_json::Value| -> Vec<u64> {
        w["services"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["pid"].as_u64())
            .collect()
    };
    let before = pids(w);
    repo.ok(&home, &["up", "login-fix"]);
    assert_eq!(pids(&repo.worlds(&home)["login-fix"]), before);
    // down stops the processes and keeps ports.
    repo.ok(&home, &["down", "login-fix"]);
    let w = &repo.worlds(&home)["login-fix"];
    assert_eq!(w["state"], "stopped");
    for p in &ports {
        assert!(wait_until(Duration::from_secs(5), || {
            std::net::TcpStream::connect(("127.0.0.1", *p as u16)).is_err()
        }));
    }
    repo.ok(&home, &["up", "login-fix"]);
    assert_eq!(ports_of(&repo.worlds(&home)["login-fix"]), ports);
    // reload: same ports, new processes.
    let before = pids(&repo.worlds(&home)["login-fix"]);
    let out = repo.ok(&home, &["reload", "login-fix"]);
    assert!(out.stdout().contains("✓ reloaded: login-fix"), "{out}");
    let w = &repo.worlds(&home)["login-fix"];
    assert_eq!(ports_of(w), ports);
    assert_ne!(pids(w), before);
}

#[test]
fn two_worlds_share_no_port_and_env_names_them() {
    let home = Home::new();
    let repo = Repo::new(&two_services("acme"));
    repo.ok(&home, &["up", "a"]);
    repo.ok(&home, &["up", "b"]);
    let worlds = repo.worlds(&home);
    let pa: HashSet<u64> = ports_of(&worlds["a"]).into_iter().collect();
    let pb: HashSet<u64> = ports_of(&worlds["b"]).into_iter().collect();
    assert_eq!(pa.len() + pb.len(), 4);
    assert!(pa.is_disjoint(&pb));
    let env = repo.ok(&home, &["env", "a"]).json();
    let web = env["services"]["web"].as_str().unwrap();
    assert!(web.starts_with("http://web.a.acme.localhost"), "{env}");
    let dotenv = repo.ok(&home, &["env", "a", "--dotenv"]).stdout();
    assert!(
        dotenv.contains("WEB_URL='http://web.a.acme.localhost"),
        "{dotenv}"
    );
    assert!(dotenv.contains("BINKY_WORLD='a'"), "{dotenv}");
}

#[test]
fn fifteen_worlds_from_fifteen_clients_are_all_healthy_on_distinct_ports() {
    let home = Home::new();
    // Exactly 30 ports: 15 worlds × 2 services. A 16th world must not fit.
    let (lo, hi) = free_range(30);
    let toml = format!(
        "[project]\nname = \"swarm\"\nport_range = [{lo}, {hi}]\n{}{}",
        http_service("api", ""),
        http_service("web", "depends_on = [\"api\"]")
    );
    let repo = Repo::new(&toml);
    let children: Vec<_> = (0..15)
        .map(|i| {
            repo.cmd(&home, &["up", &format!("race-{i}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = Out(c.wait_with_output().unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
    let worlds = repo.worlds(&home);
    assert_eq!(worlds.len(), 15);
    let mut all = HashSet::new();
    for (name, w) in &worlds {
        assert_eq!(w["state"], "running", "{name}");
        for p in ports_of(w) {
            assert!(all.insert(p), "port {p} handed out twice");
        }
    }
    assert_eq!(all.len(), 30);
    // No service log mentions EADDRINUSE.
    for entry in walk(&home.file("logs")) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(
            !text.contains("Address already in use"),
            "{}",
            entry.display()
        );
    }
    let out = repo.run(&home, &["up", "one-too-many"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains(&format!("port range {lo}–{hi} exhausted for project swarm")),
        "{out}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn the_same_name_upped_twice_at_once_is_one_world() {
    let home = Home::new();
    let repo = Repo::new(&two_services("acme"));
    // Each `up` waits 3 s between its admission and the world's lock, so
    // two sent within that window are both inside the daemon at once.
    home.start_daemon_with(&[("BINKY_TEST_PAUSE", "up:admitted=3000")]);
    let first = std::time::Instant::now();
    let children: Vec<_> = (0..2)
        .map(|_| {
            repo.cmd(&home, &["up", "twin", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let apart = first.elapsed();
    assert!(
        apart < Duration::from_secs(2),
        "the two `up`s were sent {apart:?} apart: they may not have overlapped"
    );
    let outs: Vec<serde_json::Value> = children
        .into_iter()
        .map(|c| {
            let out = Out(c.wait_with_output().unwrap());
            assert_eq!(out.code(), 0, "{out}");
            out.json()
        })
        .collect();
    assert_eq!(outs[0]["world"]["services"], outs[1]["world"]["services"]);
    assert!(outs.iter().any(|o| o["noop"] == true));
    assert_eq!(repo.worlds(&home).len(), 1);
    let git_worktrees = git(&repo.main, &["worktree", "list"]);
    assert_eq!(git_worktrees.lines().count(), 2, "{git_worktrees}");
}

#[test]
fn depends_on_order_is_observed() {
    let home = Home::new();
    // web refuses to start unless api already answers on its port.
    let toml = format!(
        "{}{}[services.web]\ncmd = \"python3 -c 'import socket,os; socket.create_connection((\\\"127.0.0.1\\\", int(os.environ[\\\"BINKY_PORT_API\\\"])))' && exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"web\"\ndepends_on = [\"api\"]\nhealth = {{ http = \"/\", timeout = \"20s\", interval = \"50ms\" }}\n",
        project_header("order", 10),
        // api takes a moment before it listens.
        "[services.api]\ncmd = \"sleep 0.5 && exec python3 -m http.server ${self.port} --bind 127.0.0.1\"\nurl = \"api\"\nhealth = { http = \"/\", timeout = \"20s\", interval = \"50ms\" }\n",
    );
    let repo = Repo::new(&toml);
    let out = repo.ok(&home, &["up", "x"]);
    let api = out.stdout().find("api  pid").unwrap();
    let web = out.stdout().find("web  pid").unwrap();
    assert!(api < web, "{out}");
    assert_eq!(repo.worlds(&home)["x"]["state"], "running");
}

#[test]
fn a_health_timeout_fails_cleanly_with_the_log_tail() {
    let home = Home::new();
    let toml = format!(
        "{}[services.slow]\ncmd = \"echo booting-but-never-listening; exec sleep 600\"\nurl = \"slow\"\nhealth = {{ http = \"/\", timeout = \"1s\", interval = \"100ms\" }}\n",
        project_header("hc", 5)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "x"]);
    assert_eq!(out.code(), 1, "{out}");
    let err = out.stderr();
    assert!(
        err.contains("service `slow` failed to start: not healthy"),
        "{out}"
    );
    assert!(err.contains("booting-but-never-listening"), "{out}");
    assert!(err.contains("binky logs x slow"), "{out}");
    let w = &repo.worlds(&home)["x"];
    assert_eq!(w["state"], "failed");
    assert_eq!(w["services"][0]["state"], "unhealthy");
}

#[test]
fn a_probe_less_service_that_exits_at_once_fails_up_but_a_clean_one_shot_does_not() {
    let home = Home::new();
    let toml = format!(
        "{}[services.quick]\ncmd = \"echo last-words-$BINKY_WORLD; exit 3\"\nurl = \"quick\"\n[services.after]\ncmd = \"exec sleep 600\"\nurl = \"after\"\ndepends_on = [\"quick\"]\n",
        project_header("nq", 12)
    );
    let repo = Repo::new(&toml);
    // Several times: the log tail in the error must not race the log writer.
    for world in ["x", "x2", "x3", "x4", "x5"] {
        let out = repo.run(&home, &["up", world]);
        assert_eq!(out.code(), 1, "{out}");
        assert!(
            out.stderr()
                .contains("exited with code 3 before it became ready"),
            "{out}"
        );
        assert!(
            out.stderr().contains(&format!("| last-words-{world}")),
            "the error lacks the log tail: {out}"
        );
    }
    assert_eq!(repo.worlds(&home)["x"]["state"], "failed");
    // The service the failure kept from starting is stopped behind the
    // proxy too: a 502 page, not a 503 promising a retry.
    let page = repo.run(&home, &["curl", "x", "after", "-i"]);
    assert!(page.stdout().starts_with("HTTP/1.1 502"), "{page}");
    assert!(page.stdout().contains("after is stopped"), "{page}");
    // A command that finishes its work and exits 0 is not a failure.
    let toml = format!(
        "{}[services.once]\ncmd = \"echo done\"\nrestart = \"no\"\n",
        project_header("nq1", 5)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "y"]);
}

#[test]
fn up_notes_uncommitted_binky_toml_edits_the_world_does_not_see() {
    let home = Home::new();
    let toml = format!("{}{}", project_header("edits", 4), http_service("web", ""));
    let repo = Repo::new(&toml);
    // Committed and unchanged: no note.
    let out = repo.ok(&home, &["up", "a"]);
    assert!(!out.stderr().contains("uncommitted"), "{out}");
    // An uncommitted edit in the checkout: the new world runs the committed
    // file and says so.
    std::fs::write(
        repo.project.join("binky.toml"),
        format!("{toml}\n[services.extra]\ncmd = \"exec sleep 600\"\n"),
    )
    .unwrap();
    let out = repo.ok(&home, &["up", "b"]);
    assert!(
        out.stderr()
            .contains("has uncommitted changes this world does not see"),
        "{out}"
    );
    assert!(out.stderr().contains("binky reload b"), "{out}");
    let services = repo.worlds(&home)["b"]["services"].clone();
    assert_eq!(services.as_array().unwrap().len(), 1, "{services}");
}

#[test]
fn a_service_that_ignores_its_port_is_named_with_the_port_it_uses() {
    let home = Home::new();
    let fixed = free_port();
    let toml = format!(
        "{}[services.dev]\ncmd = \"exec python3 -m http.server {fixed} --bind 127.0.0.1\"\nurl = \"dev\"\nhealth = {{ http = \"/\", timeout = \"3s\", interval = \"100ms\" }}\n",
        project_header("s1", 5)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "x"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("nothing listens on its assigned port"),
        "{out}"
    );
    assert!(
        out.stderr().contains(&format!("listen on {fixed}")),
        "{out}"
    );
    assert!(out.stderr().contains("${self.port}"), "{out}");
}

#[test]
fn restarts_back_off_then_give_up() {
    let home = Home::new();
    let toml = format!(
        "{}[services.flaky]\ncmd = \"sleep 0.5; exit 3\"\nrestart = {{ policy = \"on-failure\", backoff = \"100ms\", max_backoff = \"200ms\", max_failures = 3, failure_window = \"60s\" }}\n",
        project_header("flaky", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    assert!(
        wait_until(Duration::from_secs(15), || home
            .events()
            .iter()
            .any(|e| e["event"] == "gave_up")),
        "no gave_up event: {:?}",
        home.events()
    );
    let restarting = home
        .events()
        .iter()
        .filter(|e| e["event"] == "restarting")
        .count();
    assert_eq!(restarting, 2);
    let w = &repo.worlds(&home)["x"];
    assert_eq!(w["state"], "failed");
    assert_eq!(w["services"][0]["state"], "failed");
    assert_eq!(w["services"][0]["restarts"], 2);
}

#[test]
fn down_kills_a_tree_that_ignores_sigterm() {
    let home = Home::new();
    let marker = format!("MARK{}", std::process::id());
    let toml = format!(
        "{}[services.stubborn]\ncmd = \"python3 -c 'import signal,subprocess,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); subprocess.Popen([\\\"python3\\\", \\\"-c\\\", \\\"import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)\\\", \\\"{marker}\\\"]); time.sleep(600)' {marker}\"\nstop_timeout = \"1s\"\n",
        project_header("tree", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    assert!(wait_until(Duration::from_secs(10), || pids_with(&marker)
        .len()
        >= 2));
    repo.ok(&home, &["down", "x"]);
    assert!(
        wait_until(Duration::from_secs(5), || pids_with(&marker).is_empty()),
        "survivors: {:?}",
        pids_with(&marker)
    );
}

#[test]
fn remove_refuses_a_dirty_worktree_then_force_removes_everything() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}{}",
        project_header("rm", 4),
        http_service("web", "")
    ));
    repo.ok(&home, &["up", "feature/x"]);
    let path = repo.worlds(&home)["feature/x"]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(format!("{path}/scratch.txt"), "wip").unwrap();
    let out = repo.run(&home, &["remove", "feature/x"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("?? scratch.txt"), "{out}");
    assert!(out.stderr().contains("--force"), "{out}");
    assert!(std::path::Path::new(&path).exists());
    let port = ports_of(&repo.worlds(&home)["feature/x"])[0];
    repo.ok(&home, &["remove", "feature/x", "--force"]);
    assert!(!std::path::Path::new(&path).exists());
    assert!(repo.worlds(&home).is_empty());
    assert!(git(&repo.main, &["branch", "--list", "feature/x"]).contains("feature/x"));
    assert_eq!(git(&repo.main, &["worktree", "list"]).lines().count(), 1);
    assert!(wait_until(Duration::from_secs(5), || {
        std::net::TcpStream::connect(("127.0.0.1", port as u16)).is_err()
    }));
    let m = home.ok(&["metrics"]).json();
    assert_eq!(m["port_reservations"], 0);
}

#[test]
fn odd_branch_names_get_distinct_valid_slugs() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}{}",
        project_header("names", 20),
        http_service("web", "")
    ));
    let names = [
        "feature/Login-Page",
        "fix/ÜBER_bug.v2",
        "日本語",
        "ctd-1744-improve-visibility-of-later-and-undated-notifications-in-the-inbox-view",
        "feat-x",
        "feat/x",
    ];
    for n in names {
        repo.ok(&home, &["up", n]);
    }
    let worlds = repo.worlds(&home);
    let mut slugs = HashSet::new();
    for n in names {
        let w = &worlds[n];
        let slug = w["slug"].as_str().unwrap();
        assert!(slugs.insert(slug.to_owned()), "slug {slug} twice");
        assert!(slug.len() <= 40 && !slug.is_empty());
        assert!(
            slug.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        // Flat: every worktree sits directly in the root.
        let path = std::path::Path::new(w["path"].as_str().unwrap());
        assert_eq!(path.parent().unwrap(), repo.worktree_root());
        let env = repo.ok(&home, &["env", n]).json();
        let host = env["services"]["web"]
            .as_str()
            .unwrap()
            .trim_start_matches("http://");
        let host = host.split(':').next().unwrap();
        assert!(
            host.split('.').all(|l| !l.is_empty() && l.len() <= 63),
            "{host}"
        );
    }
    repo.ok(&home, &["remove", "feature/Login-Page"]);
    let after = repo.worlds(&home);
    assert_eq!(after.len(), names.len() - 1);
    assert!(!after.contains_key("feature/Login-Page"));
}

#[test]
fn a_port_held_on_ipv6_loopback_only_is_skipped() {
    let home = Home::new();
    let (lo, hi) = free_range(6);
    let holder = match std::net::TcpListener::bind(("::1", lo)) {
        Ok(l) => l,
        Err(e) => {
            skip(&format!(
                "cannot bind [::1]:{lo} ({e}); no IPv6 loopback here"
            ));
            return;
        }
    };
    let toml = format!(
        "[project]\nname = \"p1\"\nport_range = [{lo}, {hi}]\n{}",
        http_service("web", "")
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "a"]);
    let port = ports_of(&repo.worlds(&home)["a"])[0];
    assert_ne!(port, lo as u64);
    assert!(
        home.events()
            .iter()
            .any(|e| e["event"] == "port_skipped" && e["port"] == lo),
        "{:?}",
        home.events()
    );
    drop(holder);
}

#[test]
fn logs_roll_at_restart_and_logs_command_prefixes_services() {
    let home = Home::new();
    // Writes 6 MiB at start, then serves.
    let toml = format!(
        "{}[services.chatty]\ncmd = \"python3 -c 'import sys; sys.stdout.write((\\\"x\\\" * 1023 + \\\"\\\\n\\\") * 6144)' && echo ready && exec sleep 600\"\n",
        project_header("logs", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    let dir = home.file("logs/logs/x");
    let log = dir.join("chatty.log");
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("ready")
    }));
    repo.ok(&home, &["reload", "x"]);
    let rolled = dir.join("chatty.log.1");
    assert!(rolled.exists(), "no rolled generation");
    assert!(std::fs::metadata(&rolled).unwrap().len() >= 5 * 1024 * 1024);
    let out = repo.ok(&home, &["logs", "x", "-n", "1"]);
    assert!(
        out.stdout().lines().all(|l| l.starts_with("chatty |")),
        "{out}"
    );
}

#[test]
fn a_project_in_a_subfolder_runs_in_the_same_subfolder_of_its_worktree() {
    let home = Home::new();
    let toml = format!(
        "{}[services.where]\ncmd = \"pwd > where.txt; exec sleep 600\"\n",
        project_header("mono", 2)
    );
    let repo = Repo::with("apps/shop", &toml, &[("README.md", "shop")]);
    repo.ok(&home, &["up", "feat"]);
    let path = repo.worlds(&home)["feat"]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let expected = std::path::Path::new(&path).join("apps/shop");
    assert!(wait_until(Duration::from_secs(5), || expected
        .join("where.txt")
        .exists()));
    let cwd = std::fs::read_to_string(expected.join("where.txt")).unwrap();
    assert_eq!(cwd.trim(), expected.display().to_string());
}

#[test]
fn a_deleted_worktree_is_recreated_and_its_slice_reused() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nmigrate = \"python3 -c 'import os,sqlite3; c=sqlite3.connect(os.environ[\\\"BINKY_SLICE_URL\\\"][9:]); c.execute(\\\"create table t(x)\\\"); c.commit()'\"\n",
        project_header("w2", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "feat-a"]);
    let path = repo.worlds(&home)["feat-a"]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let db = home.file("slices/sqlite/w2_feat-a.sqlite3");
    // Mark the slice so re-provisioning would be visible.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("insert into t values (42)", []).unwrap();
    drop(conn);
    std::fs::remove_dir_all(&path).unwrap();
    let out = repo.ok(&home, &["up", "feat-a"]);
    assert!(
        out.stderr().contains("was missing and has been re-created"),
        "{out}"
    );
    assert!(std::path::Path::new(&path).join("binky.toml").exists());
    let conn = rusqlite::Connection::open(&db).unwrap();
    let v: i64 = conn.query_row("select x from t", [], |r| r.get(0)).unwrap();
    assert_eq!(v, 42, "the slice was re-provisioned");
}

#[test]
fn a_branch_checked_out_in_the_main_worktree_fails_before_anything_is_made() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n",
        project_header("w2b", 2)
    );
    let repo = Repo::new(&toml);
    git(&repo.main, &["switch", "-q", "-c", "feat-b"]);
    let out = repo.run(&home, &["up", "feat-b"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("checked out in the main worktree"),
        "{out}"
    );
    assert!(
        out.stderr().contains(&repo.main.display().to_string()),
        "{out}"
    );
    assert!(repo.worlds(&home).is_empty());
    assert!(!home.file("slices/sqlite/w2b_feat-b.sqlite3").exists());
}

#[test]
fn logs_interleave_services_by_time() {
    let home = Home::new();
    let toml = format!(
        // Each line waits for the one before it (a flag file), so the order
        // is the same however late either service starts; the pauses keep
        // the millisecond stamps apart.
        "{}[services.a]\ncmd = \"echo a1; touch a1; until [ -e b1 ]; do sleep 0.02; done; sleep 0.05; echo a2; touch a2; exec sleep 600\"\n[services.b]\ncmd = \"until [ -e a1 ]; do sleep 0.02; done; sleep 0.05; echo b1; touch b1; until [ -e a2 ]; do sleep 0.02; done; sleep 0.05; echo b2; exec sleep 600\"\n",
        project_header("il", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    let dir = home.file("logs/il/x");
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(dir.join("b.log"))
            .unwrap_or_default()
            .contains("b2")
    }));
    let out = repo.ok(&home, &["logs", "x"]);
    let (marks, lines): (Vec<String>, Vec<String>) = out
        .stdout()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .partition(|l| l.contains("=== binky:"));
    assert_eq!(lines, vec!["a | a1", "b | b1", "a | a2", "b | b2"], "{out}");
    // Each start is marked, before that run's output.
    let mut marks = marks;
    marks.sort();
    assert_eq!(
        marks,
        vec![
            "a | === binky: a starting ===",
            "b | === binky: b starting ==="
        ],
        "{out}"
    );
    let only_b = repo.ok(&home, &["logs", "x", "b", "-n", "1"]);
    assert_eq!(only_b.stdout().trim(), "b | b2");
}

#[test]
fn dotenv_quoting_is_exact_in_bash_zsh_and_sh() {
    // (as written in binky.toml, the value a shell must end up with)
    let values = [
        ("plain", "plain"),
        ("with spaces  and\ttabs", "with spaces  and\ttabs"),
        (
            "dollar $HOME $${X} $(whoami) `id`",
            "dollar $HOME ${X} $(whoami) `id`",
        ),
        ("quotes ' \" '' \"\"", "quotes ' \" '' \"\""),
        ("back\\slash\\n", "back\\slash\\n"),
        ("multi\nline\n", "multi\nline\n"),
        ("ünïcödé ☃", "ünïcödé ☃"),
        ("", ""),
    ];
    let mut toml = format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n[env]\n",
        project_header("quote", 2)
    );
    for (i, (written, _)) in values.iter().enumerate() {
        toml.push_str(&format!("V{i} = {}\n", toml::Value::from(*written)));
    }
    let home = Home::new();
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "w"]);
    // What `binky env` prints, read back by each shell: as variables
    // (--dotenv), and as the environment of a program started after it
    // (--export).
    let dotenv = repo.ok(&home, &["env", "w", "--dotenv"]).stdout();
    let export = repo.ok(&home, &["env", "w", "--export"]).stdout();
    let mut ran = 0;
    for shell in ["bash", "zsh", "sh"] {
        let Some(path) = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(shell))
            .find(|p| p.exists())
        else {
            skip(&format!("{shell} is not installed"));
            continue;
        };
        ran += 1;
        for (i, (_, want)) in values.iter().enumerate() {
            for (script, prog) in [
                (&dotenv, format!("eval \"$(cat)\"; printf '%s' \"$V{i}\"")),
                (
                    &export,
                    format!("eval \"$(cat)\"; awk 'BEGIN {{ printf \"%s\", ENVIRON[\"V{i}\"] }}'"),
                ),
            ] {
                let mut child = std::process::Command::new(&path)
                    .args(["-c", &prog])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(script.as_bytes())
                    .unwrap();
                let out = child.wait_with_output().unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    *want,
                    "{shell} value {i} of:\n{script}"
                );
            }
        }
    }
    assert!(ran >= 2, "at least bash and sh must be present");
}

#[test]
fn a_watched_file_change_restarts_the_service() {
    let home = Home::new();
    let toml = format!(
        "{}[services.w]\ncmd = \"echo started; exec sleep 600\"\nwatch = [\"src/**/*.txt\"]\n",
        project_header("watch", 2)
    );
    let repo = Repo::with("", &toml, &[("src/a.txt", "1")]);
    repo.ok(&home, &["up", "x"]);
    let pid = |repo: &Repo| repo.worlds(&home)["x"]["services"][0]["pid"].as_u64();
    let first = pid(&repo).unwrap();
    let path = repo.worlds(&home)["x"]["path"].as_str().unwrap().to_owned();
    // A file that does not match is ignored, a matching one restarts the
    // service: written one after the other, the restart names only the
    // matching one (a match on the other would name it, or restart twice).
    std::fs::write(format!("{path}/src/other.md"), "x").unwrap();
    std::fs::write(format!("{path}/src/a.txt"), "2").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || pid(&repo)
            .is_some_and(|p| p != first)),
        "no restart after a watched change"
    );
    let restarts: Vec<serde_json::Value> = home
        .events()
        .into_iter()
        .filter(|e| e["event"] == "watch_restart")
        .map(|e| e["changed"].clone())
        .collect();
    assert_eq!(restarts, [serde_json::json!(["src/a.txt"])], "{restarts:?}");
}

#[test]
fn reading_a_watched_file_never_restarts_the_service() {
    let home = Home::new();
    // The service reads its own watched source as it starts, and again and
    // again while it runs (as a server reading a template would).
    let toml = format!(
        "{}[services.w]\ncmd = \"exec python3 app.py\"\nwatch = [\"app.py\", \"*.txt\"]\n",
        project_header("watchread", 2)
    );
    let app = "import time\nn = 0\nwhile True:\n    open('app.py').read(); open('notes.txt').read()\n    n += 1\n    open('reads', 'w').write(str(n)) if n % 10 == 0 else None\n    time.sleep(0.05)\n";
    let repo = Repo::with("", &toml, &[("app.py", app), ("notes.txt", "n")]);
    repo.ok(&home, &["up", "x"]);
    let pid = |repo: &Repo| repo.worlds(&home)["x"]["services"][0]["pid"].as_u64();
    let first = pid(&repo).unwrap();
    let path = repo.worlds(&home)["x"]["path"].as_str().unwrap().to_owned();
    // Thirty reads of each watched file, counted by the app itself (its
    // counter file is no watched one).
    let reads = || {
        std::fs::read_to_string(format!("{path}/reads"))
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(wait_until(Duration::from_secs(20), || reads() >= 30));
    assert_eq!(pid(&repo), Some(first), "restarted by a read");
    assert!(
        !home.events().iter().any(|e| e["event"] == "watch_restart"),
        "{:?}",
        home.events()
    );
    // A write still restarts it.
    std::fs::write(format!("{path}/notes.txt"), "changed").unwrap();
    assert!(wait_until(Duration::from_secs(10), || pid(&repo)
        .is_some_and(|p| p != first)));
}

#[test]
fn status_dot_lists_only_the_current_project_and_group_is_recorded() {
    let home = Home::new();
    let a = Repo::new(&format!(
        "{}{}",
        project_header("alpha", 2),
        "[services.s]\ncmd = \"exec sleep 600\"\n"
    ));
    let b = Repo::new(&format!(
        "{}{}",
        project_header("beta", 2),
        "[services.s]\ncmd = \"exec sleep 600\"\n"
    ));
    a.ok(&home, &["up", "one", "--group", "agents"]);
    b.ok(&home, &["up", "two"]);
    let all = a.ok(&home, &["status"]).stdout();
    assert!(all.contains("alpha") && all.contains("beta"), "{all}");
    let mine = a.ok(&home, &["status", "."]).stdout();
    assert!(mine.contains("alpha") && !mine.contains("beta"), "{mine}");
    let json = a.ok(&home, &["status", ".", "--json"]).json();
    assert_eq!(json["projects"][0]["worlds"][0]["group"], "agents");
    // By name, from anywhere.
    let by_name = home.ok(&["-p", "beta", "status"]).stdout();
    assert!(
        by_name.contains("beta") && !by_name.contains("alpha"),
        "{by_name}"
    );
}

#[test]
fn up_on_a_failed_world_stops_what_is_left_before_starting_again() {
    let home = Home::new();
    let marker = format!("KEEP{}", std::process::id());
    let toml = format!(
        "{}[services.keep]\ncmd = \"exec python3 -c \'import time; time.sleep(600)\' {marker}\"\n[services.crash]\ncmd = \"sleep 0.6; exit 3\"\nrestart = \"no\"\n",
        project_header("again", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    assert!(wait_until(Duration::from_secs(5), || pids_with(&marker)
        .len()
        == 1));
    assert!(wait_until(Duration::from_secs(5), || {
        repo.worlds(&home)["x"]["services"][1]["state"] == "stopped"
    }));
    repo.ok(&home, &["up", "x"]);
    // Exactly one copy: the old one stopped, the new one running (a
    // process mid-exec can briefly hide its command line, so wait for it).
    assert!(
        wait_until(Duration::from_secs(5), || pids_with(&marker).len() == 1),
        "the old `keep` must be stopped, not duplicated: {:?}",
        pids_with(&marker)
    );
    let recorded = repo.worlds(&home)["x"]["services"][0]["pid"].as_u64();
    assert_eq!(
        pids_with(&marker).first().map(|p| *p as u64),
        recorded,
        "the one copy is the one status records"
    );
    repo.ok(&home, &["down", "x"]);
    assert!(wait_until(Duration::from_secs(5), || pids_with(&marker).is_empty()));
}

#[test]
fn reload_of_an_unknown_world_creates_nothing() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("rl", 2)
    ));
    let out = repo.run(&home, &["reload", "nope"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("no world `nope`"), "{out}");
    assert!(!git(&repo.main, &["branch", "--list", "nope"]).contains("nope"));
}

#[test]
fn a_second_checkout_with_the_same_project_name_is_refused() {
    let home = Home::new();
    let toml = format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("twin", 4)
    );
    let a = Repo::new(&toml);
    let b = Repo::new(&toml);
    a.ok(&home, &["up", "alpha"]);
    let out = b.run(&home, &["up", "alpha"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("already registered at"), "{out}");
    assert_eq!(
        a.worlds(&home)["alpha"]["path"].as_str().unwrap(),
        a.worktree_root().join("alpha").display().to_string()
    );
}

#[test]
fn remove_will_not_delete_a_hand_made_worktree_without_force() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("hand", 2)
    ));
    let mine = repo.main.parent().unwrap().join("my-own-checkout");
    git(
        &repo.main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "manual",
            mine.to_str().unwrap(),
        ],
    );
    std::fs::write(mine.join(".env"), "SECRET=1").unwrap();
    repo.ok(&home, &["up", "manual"]);
    let out = repo.run(&home, &["remove", "manual"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("is not one binky made"), "{out}");
    assert!(mine.join(".env").exists());
    // --force removes the world, never the user's own checkout.
    let out = repo.ok(&home, &["remove", "manual", "--force"]);
    assert!(out.stderr().contains("left in place"), "{out}");
    assert!(mine.join(".env").exists());
    assert!(repo.worlds(&home).is_empty());
}

#[test]
fn a_tampered_registry_never_makes_remove_delete_outside_binkys_folders() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("tamper", 2)
    ));
    repo.ok(&home, &["up", "x"]);
    repo.ok(&home, &["up", "y"]);
    repo.ok(&home, &["daemon", "stop"]);
    // A plain folder (no .git) the row now points at, and a slug that
    // climbs out of the log folder.
    let victim = tempfile::tempdir().unwrap();
    std::fs::write(victim.path().join("precious.txt"), "keep me").unwrap();
    let unique = format!("victim2-{}", std::process::id());
    let victim2 = home.path().parent().unwrap().join(&unique);
    std::fs::create_dir_all(&victim2).unwrap();
    std::fs::write(victim2.join("precious.txt"), "keep me too").unwrap();
    {
        let c = rusqlite::Connection::open(home.file("registry.db")).unwrap();
        c.execute(
            "UPDATE worlds SET path = ?1 WHERE name = 'x'",
            [victim.path().display().to_string()],
        )
        .unwrap();
        c.execute(
            "UPDATE worlds SET slug = ?1 WHERE name = 'y'",
            [format!("../../../{unique}")],
        )
        .unwrap();
    }
    for w in ["x", "y"] {
        let _ = repo.run(&home, &["remove", w]);
        let _ = repo.run(&home, &["remove", w, "--force"]);
    }
    assert!(
        victim.path().join("precious.txt").exists(),
        "remove deleted a folder outside binky's"
    );
    assert!(
        victim2.join("precious.txt").exists(),
        "remove deleted outside the log folder"
    );
    let _ = std::fs::remove_dir_all(&victim2);
}

#[test]
fn a_killed_daemon_comes_back_and_re_adopts_its_services() {
    let home = Home::new();
    let toml = format!(
        "{}{}[services.worker]\ncmd = \"exec sleep 600\"\nrestart = {{ policy = \"on-failure\", backoff = \"100ms\" }}\n",
        project_header("adopt", 6),
        http_service("web", "")
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    let before = repo.worlds(&home)["x"].clone();
    let pid_of = |w: &serde_json::Value, svc: &str| -> Option<u64> {
        w["services"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == svc)
            .unwrap()["pid"]
            .as_u64()
    };
    let web = pid_of(&before, "web").unwrap();
    let worker = pid_of(&before, "worker").unwrap();
    let daemon = home.daemon_pid().unwrap();
    kill9(daemon);
    assert!(wait_until(Duration::from_secs(5), || !alive(daemon)));
    // While the daemon is away, one service dies.
    kill9(worker as u32);
    assert!(wait_until(Duration::from_secs(5), || !alive(worker as u32)));
    // The next command starts a daemon that re-adopts web (same pid) and
    // restarts the dead worker per its policy.
    let after = &repo.worlds(&home)["x"];
    assert_eq!(after["state"], "running", "{after}");
    assert_eq!(
        pid_of(after, "web"),
        Some(web),
        "web adopted, not restarted"
    );
    assert!(home.events().iter().any(|e| e["event"] == "adopted"));
    assert!(
        wait_until(Duration::from_secs(10), || {
            let w = &repo.worlds(&home)["x"];
            let s = w["services"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == "worker")
                .unwrap()
                .clone();
            s["state"] == "running" && s["pid"].as_u64().is_some_and(|p| p != worker)
        }),
        "worker not restarted: {}",
        repo.worlds(&home)["x"]
    );
    // A later crash of an adopted process is noticed (pidfd) and restarted.
    kill9(web as u32);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let w = &repo.worlds(&home)["x"];
            pid_of(w, "web").is_some_and(|p| p != web) && w["services"][0]["state"] == "running"
        }),
        "adopted web not restarted after its crash: {}",
        repo.worlds(&home)["x"]
    );
    // And down stops everything, adopted or not: no duplicate, no orphan.
    repo.ok(&home, &["down", "x"]);
    assert!(home.recorded_groups().is_empty());
}

#[test]
fn verify_runs_checks_with_coordinates_records_and_fails_cleanly() {
    let home = Home::new();
    let toml = format!(
        "{}{}[agents]\nverify = [\"echo web=$WEB_URL port=$BINKY_PORT_WEB\", \"test -n \\\"$WEB_URL\\\"\", \"echo failing >&2; printf 'x\\\\r\\\\033]0;t\\\\007\\\\n'; exit 4\", \"echo never-runs\"]\n",
        project_header("vf", 4),
        http_service("web", "")
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    let out = repo.run(&home, &["verify", "x"]);
    assert_eq!(out.code(), 1, "{out}");
    let text = out.stdout();
    assert!(text.contains("web=http://web.x.vf.localhost"), "{out}");
    assert!(
        text.contains("failing"),
        "stderr of a check streams too: {out}"
    );
    assert!(
        !text.contains("never-runs"),
        "stops at the first failure: {out}"
    );
    // What a check prints is shown, never acted on by the terminal.
    assert!(text.contains("x^M"), "{out}");
    assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
    assert!(text.contains("✗ verify failed: x at "), "{out}");
    let all = repo.run(&home, &["verify", "x", "--keep-going", "--json"]);
    let v = all.json();
    assert_eq!(v["passed"], false);
    assert_eq!(v["checks"].as_array().unwrap().len(), 4);
    assert_eq!(v["checks"][2]["exit_code"], 4);
    let commit = git(&repo.main, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(v["commit"], commit.as_str());
    let st = repo.worlds(&home)["x"].clone();
    assert_eq!(st["verify"], format!("failed at {}", &commit[..12]));
}

#[test]
fn a_branch_that_exists_only_on_origin_gets_a_tracking_branch() {
    let home = Home::new();
    let toml = format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\nhealth = {{ cmd = \"test -f binky.toml\", timeout = \"5s\", interval = \"50ms\" }}\n",
        project_header("origin", 2)
    );
    let repo = Repo::new(&toml);
    // A clone whose origin has a branch the clone has never checked out.
    git(&repo.main, &["branch", "remote-only"]);
    let clone = repo.main.parent().unwrap().join("clone");
    git(
        repo.main.parent().unwrap(),
        &[
            "clone",
            "-q",
            repo.main.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    assert!(!git(&clone, &["branch", "--list", "remote-only"]).contains("remote-only"));
    let out = Out(home
        .cmd(&["up", "remote-only"])
        .current_dir(&clone)
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let upstream = git(
        &clone,
        &["rev-parse", "--abbrev-ref", "remote-only@{upstream}"],
    );
    assert_eq!(upstream.trim(), "origin/remote-only");
    // The cmd health probe passed inside the worktree.
    let st = Out(home
        .cmd(&["status", "--json"])
        .current_dir(&clone)
        .output()
        .unwrap())
    .json();
    assert_eq!(
        st["projects"][0]["worlds"][0]["services"][0]["state"],
        "running"
    );
}

#[test]
fn json_callers_get_errors_as_json_on_stdout() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("je", 2)
    ));
    let out = repo.run(&home, &["up", "a..b", "--json"]);
    assert_eq!(out.code(), 1, "{out}");
    let v = out.json();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a valid git branch name"),
        "{v}"
    );
    assert!(v["error"]["hint"].is_string());
    // Scripts branch on the kind, never on the words.
    assert_eq!(v["error"]["kind"], "invalid_input", "{v}");
    // Said once, as data: not again as text on stderr.
    assert!(!out.stderr().contains("error:"), "{out}");
    // Refused before admission: no `admitted` is left without its end.
    assert!(
        !home.events().iter().any(|e| e["worktree"] == "a..b"),
        "{:?}",
        home.events()
    );
    let out = repo.run(&home, &["down", "nope", "--json"]);
    // Named by its verb and world, as every lifecycle failure is.
    assert_eq!(
        out.json()["error"]["message"],
        "`down` of nope: no world `nope` in project je"
    );
    assert_eq!(out.json()["error"]["kind"], "not_found", "{out}");
    assert!(!out.stderr().contains("error:"), "{out}");
    // `env` prints JSON by default: its errors too.
    let out = repo.run(&home, &["env", "nope"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.json()["error"]["message"].is_string(), "{out}");
    assert!(!out.stderr().contains("error:"), "{out}");
    // A `-p` that names no project is refused before the daemon is asked:
    // as JSON too, still a usage error (2).
    let nowhere = tempfile::tempdir().unwrap();
    let p = nowhere.path().display().to_string();
    for args in [
        &["-p", p.as_str(), "env", "x"][..],
        &["-p", p.as_str(), "up", "x", "--json"][..],
        &["-p", p.as_str(), "down", "x", "--json"][..],
    ] {
        let out = repo.run(&home, args);
        assert_eq!(out.code(), 2, "{args:?}: {out}");
        let v = out.json();
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("holds no binky.toml")),
            "{args:?}: {v}"
        );
        assert!(v["error"]["hint"].is_string(), "{v}");
        assert!(!out.stderr().contains("error:"), "{args:?}: {out}");
    }
    // `status --json` too: a project name nobody knows (1), and `.` where
    // there is no project (2).
    let out = repo.run(&home, &["-p", "nosuch", "status", "--json"]);
    assert_eq!(out.code(), 1, "{out}");
    assert_eq!(
        out.json()["error"]["message"],
        "no project named `nosuch` is known to this daemon"
    );
    assert_eq!(out.json()["error"]["kind"], "not_found", "{out}");
    let mut c = home.cmd(&["status", ".", "--json"]);
    c.current_dir(nowhere.path());
    let out = Out(c.output().unwrap());
    assert_eq!(out.code(), 2, "{out}");
    assert!(out.json()["error"]["message"].is_string(), "{out}");
    assert!(!out.stderr().contains("error:"), "{out}");
}

#[test]
fn a_project_path_that_holds_no_binky_toml_is_an_error_naming_it() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("strictp", 1)
    ));
    // From inside the project, `-p` pointing elsewhere never falls back to
    // the project around the current folder.
    for p in ["../../../etc", "/etc", "no/such/place"] {
        for args in [
            &["-p", p, "up", "x"][..],
            &["-p", p, "status"][..],
            &["-p", p, "check"][..],
        ] {
            let out = repo.run(&home, args);
            assert_eq!(out.code(), 2, "{args:?}: {out}");
            assert!(out.stderr().contains(p), "{args:?}: {out}");
        }
    }
    assert!(repo.worlds(&home).is_empty());
    // The project's own folder, or its binky.toml, is fine.
    let toml = repo.project.join("binky.toml");
    let out = home.run(&["-p", toml.to_str().unwrap(), "check"]);
    assert_eq!(out.code(), 0, "{out}");
}

#[test]
fn env_prints_only_exposed_services_in_their_documented_forms() {
    let home = Home::new();
    let toml = format!(
        "{}{}[services.metrics]\ncmd = \"exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nports = [\"admin\"]\n[services.db]\nadapter = \"sqlite\"\n[services.hidden]\ncmd = \"exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"hidden\"\n[agents]\nexpose = [\"web\", \"metrics\", \"db\"]\n",
        project_header("expo", 8),
        http_service("web", "")
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    let env = repo.ok(&home, &["env", "x"]).json();
    let mut keys: Vec<&str> = env["services"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, ["db", "metrics", "web"], "{env}");
    assert!(
        env["services"]["web"]
            .as_str()
            .unwrap()
            .starts_with("http://web.x.expo.localhost")
    );
    let port = repo.worlds(&home)["x"]["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "metrics")
        .unwrap()["port"]
        .as_u64()
        .unwrap();
    assert_eq!(
        env["services"]["metrics"],
        format!("http://localhost:{port}")
    );
    assert!(
        env["services"]["db"]
            .as_str()
            .unwrap()
            .starts_with("sqlite://")
    );
    let dotenv = repo.ok(&home, &["env", "x", "--dotenv"]).stdout();
    assert!(
        dotenv.contains(&format!("METRICS_URL='http://localhost:{port}'")),
        "{dotenv}"
    );
    assert!(!dotenv.contains("HIDDEN_URL"), "{dotenv}");
    // Shell-evaluated, the values come back exactly.
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            "eval \"$(cat)\"; printf '%s|%s' \"$DB_URL\" \"$BINKY_WORLD\"",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(dotenv.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}|x", env["services"]["db"].as_str().unwrap())
    );
}

#[test]
fn doctor_prints_hosts_lines_for_running_worlds_when_localhost_does_not_resolve() {
    // The system resolver is made to answer each way in a mount namespace
    // of its own (its nsswitch.conf and hosts bound over the machine's), so
    // every machine checks both answers, not the one its resolver gives.
    if !std::process::Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        skip("unshare -rm is refused here (no unprivileged user namespaces)");
        return;
    }
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}{}",
        project_header("doc", 4),
        http_service("web", "")
    ));
    home.ok(&["daemon", "start"]);
    let dir = tempfile::tempdir().unwrap();
    let nss = dir.path().join("nsswitch.conf");
    std::fs::write(&nss, "hosts: files\n").unwrap();
    let doctor = |hosts: &str| {
        let file = dir.path().join("hosts");
        std::fs::write(&file, hosts).unwrap();
        let mut c = home.program("unshare", &["-rm", "sh", "-c"]);
        c.arg(r#"mount --bind "$1" /etc/nsswitch.conf && mount --bind "$2" /etc/hosts && shift 2 && exec "$@""#)
            .arg("sh")
            .arg(&nss)
            .arg(&file)
            .args([binky_exe(), "doctor", "--json"])
            .current_dir(&repo.project);
        let out = Out(c.output().unwrap());
        assert_eq!(out.code(), 0, "{out}");
        let v = out.json();
        let find = |name: &str| {
            v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("no {name} check: {v}"))
                .clone()
        };
        assert_eq!(find("daemon")["status"], "ok", "{v}");
        assert_eq!(find("proxy")["status"], "ok", "{v}");
        find("*.localhost")
    };
    // No world yet: the one way to fix it, as a whole sentence.
    let alone = doctor("127.0.0.1 localhost\n");
    let fix = alone["fix"].as_str().unwrap();
    assert!(
        !fix.contains("either") && !fix.contains("/etc/hosts:"),
        "{alone}"
    );
    repo.ok(&home, &["up", "x"]);
    let resolving = doctor("127.0.0.1 localhost\n127.0.0.1 binky-doctor-probe.localhost\n");
    assert_eq!(resolving["status"], "ok", "{resolving}");
    assert!(resolving.get("fix").is_none(), "{resolving}");
    let not = doctor("127.0.0.1 localhost\n");
    assert_eq!(not["status"], "warn", "{not}");
    let fix = not["fix"].as_str().unwrap();
    assert!(fix.contains("127.0.0.1 web.x.doc.localhost"), "{not}");
    assert!(fix.contains("nss-myhostname"), "{not}");
    // The human form lists the same checks.
    let human = repo.ok(&home, &["doctor"]).stdout();
    assert!(
        human.contains("daemon") && human.contains("proxy") && human.contains("*.localhost"),
        "{human}"
    );
}

#[test]
fn gc_sweeps_what_a_crash_left_and_never_touches_live_worlds() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("gcp", 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "live"]);
    let root = repo.worktree_root();
    // A worktree no world owns, and a registration whose folder is gone.
    git(
        &repo.main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "stray",
            root.join("stray").to_str().unwrap(),
        ],
    );
    git(
        &repo.main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "gone",
            root.join("gone").to_str().unwrap(),
        ],
    );
    std::fs::remove_dir_all(root.join("gone")).unwrap();
    // A slice an interrupted up left half-made, and a marker of a project
    // nobody knows.
    let ghost = home.file("slices/sqlite/gcp_ghost.sqlite3");
    std::fs::write(&ghost, b"").unwrap();
    rusqlite::Connection::open(home.file("registry.db"))
        .unwrap()
        .execute(
            "INSERT INTO slices(world_id, project, service, adapter, slice, state, created_at)
             VALUES (NULL, 'gcp', 'db', 'sqlite', 'gcp_ghost', 'provisioning', 0)",
            [],
        )
        .unwrap();
    let marker = home.file("golden/sqlite/nobody_golden_golden");
    std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
    std::fs::write(&marker, "k").unwrap();

    let dry = repo.ok(&home, &["gc", "--dry-run", "--json"]).json();
    let kinds: Vec<&str> = dry
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "slice").count(), 1, "{dry}");
    assert!(
        kinds.contains(&"worktree")
            && kinds.contains(&"registration")
            && kinds.contains(&"golden_marker"),
        "{dry}"
    );
    assert!(
        ghost.exists() && root.join("stray").exists() && marker.exists(),
        "dry run changed something"
    );

    let out = repo.ok(&home, &["gc"]);
    assert!(out.stdout().contains("swept"), "{out}");
    assert!(!ghost.exists());
    assert!(!root.join("stray").exists());
    assert!(!marker.exists());
    assert!(!git(&repo.main, &["worktree", "list"]).contains("gone"));
    // The live world is untouched.
    assert_eq!(repo.worlds(&home)["live"]["state"], "running");
    assert!(home.file("slices/sqlite/gcp_live.sqlite3").exists());
    assert!(root.join("live").exists());
    assert_eq!(repo.ok(&home, &["gc"]).stdout().trim(), "nothing to sweep");
}

#[test]
fn small_things_from_the_trial_status_width_dirty_verify_and_no_empty_root() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n[agents]\nverify = [\"true\"]\n",
        project_header("smalls", 1)
    );
    let repo = Repo::new(&toml);
    let long = format!("feature/{}", "very-long-branch-name-".repeat(7));
    repo.ok(&home, &["up", &long]);
    repo.ok(&home, &["up", "x"]);
    // One long branch does not widen every row: names are cut with an
    // ellipsis (the JSON keeps them whole).
    let status = repo.ok(&home, &["status"]).stdout();
    for line in status.lines().filter(|l| l.contains('[')) {
        assert!(line.chars().count() <= 60, "{line:?}");
    }
    assert!(status.contains('…'), "{status}");
    assert!(repo.worlds(&home).contains_key(&long));
    // A verify of a worktree with changes says so, and records it.
    let wt = std::path::PathBuf::from(repo.worlds(&home)["x"]["path"].as_str().unwrap());
    std::fs::write(wt.join("scratch.txt"), "not committed").unwrap();
    let out = repo.ok(&home, &["verify", "x"]);
    assert!(out.stderr().contains("uncommitted changes"), "{out}");
    assert!(out.stderr().contains("scratch.txt"), "{out}");
    let json = repo.ok(&home, &["verify", "x", "--json"]).json();
    assert_eq!(json["uncommitted"][0], "?? scratch.txt", "{json}");
    let v = repo.worlds(&home)["x"]["verify"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(v.ends_with("plus uncommitted changes"), "{v}");
    // The last world removed leaves no empty <repo>.worktrees behind.
    repo.ok(&home, &["remove", "x", "--force"]);
    assert!(
        repo.worktree_root().exists(),
        "another world is still there"
    );
    repo.ok(&home, &["remove", &long]);
    assert!(
        !repo.worktree_root().exists(),
        "an empty worktree root is left"
    );
}

/// What `migrate` and `seed` see, and when `migrate` runs again: `seed`
/// gets the project's `[env]`; a service's own `env` wins over `[env]`; the
/// migrate key of a resource with `clone_inputs` is those files' contents
/// (an uncommitted edit moves it, a commit elsewhere does not); two
/// resources are keyed apart; `up` of a stopped world catches up as
/// `reload` does, and `seed` never runs twice.
#[test]
fn migrate_keys_follow_each_resources_inputs_and_seed_sees_the_env() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("runs.log");
    let log = log.display();
    let toml = format!(
        r#"{header}[env]
GREETING = "from-env"
[services.a]
adapter = "sqlite"
migrate = "echo \"migrate a $(cat a.sql)\" >> {log}"
seed = "echo \"seed a $GREETING\" >> {log}"
clone_inputs = ["a.sql"]
[services.b]
adapter = "filestore"
migrate = "echo \"migrate b $(cat b.sql)\" >> {log}"
clone_inputs = ["b.sql"]
[services.s]
cmd = "echo \"$GREETING\" > s.txt; exec sleep 600"
env = {{ GREETING = "own" }}
depends_on = ["a", "b"]
"#,
        header = project_header("mkeys", 2)
    );
    let repo = Repo::with("", &toml, &[("a.sql", "1"), ("b.sql", "1")]);
    let home = Home::new();
    // b on an adapter of its own (two sqlite resources would share a slice):
    // the example external one.
    let bin = tempfile::tempdir().unwrap();
    link_example_adapter(bin.path(), "filestore");
    let path = path_with(bin.path());
    let ok = |args: &[&str]| {
        let out = repo.run_with(&home, args, &[("PATH", &path)]);
        assert_eq!(out.code(), 0, "binky {args:?}: {out}");
        out
    };
    let runs = || -> Vec<String> {
        std::fs::read_to_string(logs.path().join("runs.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    ok(&["up", "w"]);
    let mut seen = runs();
    seen.sort();
    assert_eq!(seen, ["migrate a 1", "migrate b 1", "seed a from-env"]);
    let tree = std::path::PathBuf::from(repo.worlds(&home)["w"]["path"].as_str().unwrap());
    let s_txt = tree.join("s.txt");
    assert!(wait_until(Duration::from_secs(20), || s_txt.exists()));
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&s_txt).is_ok_and(|t| t.trim() == "own")
    }));
    // A commit that touches neither input moves no key.
    std::fs::write(tree.join("other.txt"), "x").unwrap();
    git(&tree, &["add", "other.txt"]);
    git(&tree, &["commit", "-qm", "other"]);
    ok(&["reload", "w"]);
    assert_eq!(runs().len(), 3, "{:?}", runs());
    // An edit of a's input, uncommitted: a migrates again, b does not.
    std::fs::write(tree.join("a.sql"), "2").unwrap();
    let reload = ok(&["reload", "w"]);
    assert_eq!(runs()[3..], ["migrate a 2"], "{reload}");
    // A stopped world catches up on `up`, as on `reload`.
    ok(&["down", "w"]);
    std::fs::write(tree.join("b.sql"), "2").unwrap();
    let up = ok(&["up", "w"]);
    assert_eq!(runs()[4..], ["migrate b 2"], "{up}");
    assert!(
        format!("{}{}", up.stdout(), up.stderr()).contains("b: running migrate to catch up"),
        "{up}"
    );
}

/// A one-shot job that finished with status 0 leaves its world running;
/// `up` of it again changes nothing: no healthy service is restarted.
#[test]
fn up_of_a_running_world_whose_one_shot_job_finished_is_a_noop() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.job]\ncmd = \"sleep 1; echo done\"\n[services.srv]\ncmd = \"exec sleep 600\"\n",
        project_header("oneshot", 2)
    ));
    repo.ok(&home, &["up", "w"]);
    let pid_of = |w: &serde_json::Value, name: &str| {
        w["services"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| (s["state"].clone(), s["pid"].clone()))
            .unwrap()
    };
    let mut before = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(10), || {
            before = repo.worlds(&home)["w"].clone();
            pid_of(&before, "job").0 == "stopped"
        }),
        "{before}"
    );
    assert_eq!(before["state"], "running", "{before}");
    let again = repo.ok(&home, &["up", "w", "--json"]).json();
    assert_eq!(again["noop"], true, "{again}");
    let after = repo.worlds(&home)["w"].clone();
    assert_eq!(pid_of(&after, "srv"), pid_of(&before, "srv"), "{after}");
    repo.ok(&home, &["remove", "w", "--force"]);
}

/// The orchestrator's gate is not the graded branch's to change (issue 49):
/// `verify` runs the `[agents] verify` committed on the main checkout's
/// branch, in the world, says so and says when the world's own list
/// differs; `--from-branch` runs the branch's own, recorded as such. An
/// `up` of a branch whose `binky.toml` differs says what it changes.
#[test]
fn verify_runs_the_main_checkouts_committed_checks_not_the_branchs() {
    let home = Home::new();
    let toml = format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n[agents]\nverify = [\"test -e made-by-the-work\"]\n",
        project_header("gate", 2)
    );
    let repo = Repo::new(&toml);
    // The agent's branch edits its own checks so that they pass, and adds
    // a service.
    git(&repo.main, &["checkout", "-q", "-b", "agent"]);
    let edited = toml.replace("test -e made-by-the-work", "true")
        + "[services.extra]\ncmd = \"exec sleep 600\"\n";
    std::fs::write(repo.project_dir().join("binky.toml"), &edited).unwrap();
    git(&repo.main, &["commit", "-qam", "my checks pass now"]);
    git(&repo.main, &["checkout", "-q", "main"]);
    let up = repo.ok(&home, &["up", "agent"]);
    let said = format!("{}{}", up.stdout(), up.stderr());
    assert!(
        said.contains("branch `agent`'s binky.toml differs from main's")
            && said.contains("services.extra (added)")
            && said.contains("agents (verify)"),
        "{up}"
    );
    // The committed check runs, in the world's worktree, and fails.
    let out = repo.run(&home, &["verify", "agent"]);
    assert_eq!(out.code(), 1, "{out}");
    let text = out.stdout();
    assert!(
        text.contains("checks from the main checkout's binky.toml (as committed on main)"),
        "{out}"
    );
    assert!(text.contains("$ test -e made-by-the-work"), "{out}");
    assert!(
        text.contains("the world's own [agents] verify differs") && text.contains("--from-branch"),
        "{out}"
    );
    let v = repo.run(&home, &["verify", "agent", "--json"]).json();
    assert_eq!(v["from_branch"], false, "{v}");
    assert_eq!(v["branch_checks_differ"], true, "{v}");
    // An uncommitted edit of main's file changes nothing: what is
    // committed counts.
    std::fs::write(repo.project_dir().join("binky.toml"), &edited).unwrap();
    assert_eq!(repo.run(&home, &["verify", "agent"]).code(), 1);
    git(&repo.main, &["checkout", "--", "binky.toml"]);
    // The work the check asks for, in the world: it passes.
    let wt = std::path::PathBuf::from(repo.worlds(&home)["agent"]["path"].as_str().unwrap());
    std::fs::write(wt.join("made-by-the-work"), "").unwrap();
    let out = repo.ok(&home, &["verify", "agent"]);
    assert!(out.stdout().contains("✓ verify passed: agent at "), "{out}");
    assert!(!out.stdout().contains("own checks"), "{out}");
    // The branch's own checks, asked for: run, and labelled everywhere.
    std::fs::remove_file(wt.join("made-by-the-work")).unwrap();
    let out = repo.ok(&home, &["verify", "agent", "--from-branch"]);
    assert!(out.stdout().contains("$ true"), "{out}");
    assert!(out.stdout().contains("(the branch's own checks)"), "{out}");
    let st = repo.worlds(&home)["agent"].clone();
    assert!(
        st["verify"]
            .as_str()
            .unwrap()
            .ends_with("(the branch's own checks)"),
        "{st}"
    );
}
