//! Stopping process groups: every member gone before a verb returns.

use crate::harness::*;
use crate::project::*;

/// A service whose grandchild ignores SIGTERM, holds the service's port and
/// takes a while to die once killed (it frees a large heap first, and the
/// kernel closes a dying process's sockets only after its memory).
const STUBBORN: &str = r#"
import os, signal, socket, sys, time
port = int(sys.argv[1])
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ballast = bytearray(1536 * 1024 * 1024)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    open("grandchild.pid", "w").write(str(os.getpid()))
    while True:
        time.sleep(1)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
while True:
    time.sleep(1)
"#;

#[test]
fn down_returns_only_once_every_process_of_the_group_is_gone() {
    let home = Home::new();
    let toml = format!(
        "{}[services.web]\ncmd = \"exec python3 stubborn.py ${{self.port}}\"\nurl = \"web\"\nhealth = {{ tcp = \"localhost:${{self.port}}\", timeout = \"30s\" }}\nstop_timeout = \"300ms\"\n",
        project_header("stubborn", 2)
    );
    let repo = Repo::with("", &toml, &[("stubborn.py", STUBBORN)]);
    repo.ok(&home, &["up", "x"]);
    let w = &repo.worlds(&home)["x"];
    let port = w["services"][0]["port"].as_u64().unwrap() as u16;
    let wt = std::path::PathBuf::from(w["path"].as_str().unwrap());
    let grandchild: u32 = std::fs::read_to_string(wt.join("grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    repo.ok(&home, &["down", "x"]);
    // At once: no member left, the port free for the next `up`.
    assert!(!alive(grandchild), "grandchild {grandchild} outlived down");
    let bound = std::net::TcpListener::bind(("127.0.0.1", port));
    assert!(
        bound.is_ok(),
        "port {port} still held after down: {bound:?}"
    );
    drop(bound);
    repo.ok(&home, &["up", "x"]);
    repo.ok(&home, &["remove", "x", "--force"]);
}

#[test]
fn a_probe_answered_by_another_process_is_not_ready() {
    let home = Home::new();
    // The service starts a listener on its own port that leaves its process
    // group and tree (as an orphan of an earlier run would be), then idles.
    let toml = format!(
        "{}[services.web]\ncmd = \"(setsid python3 -m http.server $PORT --bind 127.0.0.1 &); exec sleep 600\"\nurl = \"web\"\nhealth = {{ http = \"/\", timeout = \"3s\", interval = \"100ms\" }}\n",
        project_header("impostor", 1)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "x"]);
    let impostors: Vec<u32> = pids_with("http.server")
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/environ"))
                .is_ok_and(|e| e.contains(&format!("BINKY_HOME={}", home.path().display())))
        })
        .collect();
    for p in &impostors {
        kill9(*p);
    }
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("is answered by another process (pid"),
        "{out}"
    );
    assert!(out.stderr().contains("http.server"), "{out}");
    assert_eq!(impostors.len(), 1, "{impostors:?}");
}

#[test]
fn a_url_service_without_a_probe_is_up_only_once_it_listens_on_its_port() {
    let home = Home::new();
    let elsewhere = free_port();
    let toml = format!(
        "{}[services.web]\ncmd = \"exec python3 -m http.server {elsewhere} --bind 127.0.0.1\"\nurl = \"web\"\n",
        project_header("deaf", 1)
    );
    let repo = Repo::new(&toml);
    home.ok(&["daemon", "stop"]);
    let started = Out(home
        .cmd(&["daemon", "start"])
        .env("BINKY_TEST_LISTEN_TIMEOUT_MS", "1500")
        .output()
        .unwrap());
    assert_eq!(started.code(), 0, "{started}");
    let out = repo.run(&home, &["up", "x"]);
    assert_eq!(out.code(), 1, "{out}");
    let port = repo.worlds(&home)["x"]["services"][0]["port"]
        .as_u64()
        .unwrap();
    assert!(
        out.stderr().contains(&format!(
            "nothing listens on its assigned port {port}, but its processes listen on {elsewhere}; pass ${{self.port}}"
        )),
        "{out}"
    );
    repo.ok(&home, &["remove", "x", "--force"]);
}

/// A server that daemonizes itself: it forks, the child calls `setsid()`
/// (leaving the service's process group and session), holds memory, and
/// the parent exits only when told to stop.
const DAEMONIZES: &str = r#"
import os, signal, sys, time
marker = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ballast = b"x" * (200 << 20)
        open("stray.pid", "w").write(str(os.getpid()))
        sys.argv[0] = marker
        while True:
            time.sleep(1)
    os._exit(0)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
while True:
    time.sleep(1)
"#;

/// A process started outside Binky that carries `env`; stopped when dropped.
struct Outsider(std::process::Child);

impl Outsider {
    fn start(marker: &str, env: &[(&str, &str)]) -> Outsider {
        Outsider(
            std::process::Command::new("sh")
                .args(["-c", &format!("exec sleep 600 # {marker}")])
                .envs(env.iter().copied())
                .spawn()
                .unwrap(),
        )
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Outsider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue: a service's child that called `setsid()` was missing from the
/// world's footprint and kept running after `binky down`. Now it is found
/// by the world's token whatever group or session it moved to, counted,
/// and stopped by down, suspend's stop and remove — and across a daemon
/// restart; a process without the world's own token is never touched.
#[test]
fn a_child_that_leaves_its_group_is_counted_and_stopped_with_its_world() {
    let home = Home::new();
    let marker = format!("STRAY{}", std::process::id());
    let toml = format!(
        "{}[services.app]\ncmd = \"exec python3 daemonizes.py {marker}\"\n",
        project_header("strays", 1)
    );
    let repo = Repo::with("", &toml, &[("daemonizes.py", DAEMONIZES)]);
    home.start_daemon_with(&[("BINKY_SAMPLE_INTERVAL", "250ms")]);
    home.ok(&["reserve", "--ram", "0", "--disk", "0"]);
    repo.ok(&home, &["up", "w"]);
    let wt = std::path::PathBuf::from(repo.worlds(&home)["w"]["path"].as_str().unwrap().to_owned());
    let stray_pid = || -> Option<u32> {
        std::fs::read_to_string(wt.join("stray.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        stray_pid().is_some()
    }));
    let stray = stray_pid().unwrap();
    let service = repo.worlds(&home)["w"]["services"][0]["pid"]
        .as_u64()
        .unwrap() as u32;
    let sid = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap()
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(3)
            .unwrap()
            .to_owned()
    };
    assert_ne!(
        sid(stray),
        sid(service),
        "the stray left the service's session"
    );
    // Outsiders: the world's names without its token (a shell that ran
    // `eval "$(binky env w --export)"`), and a token that is not the world's.
    let home_var = home.path().display().to_string();
    let mut plain = Outsider::start(&marker, &[("BINKY_HOME", &home_var), ("BINKY_WORLD", "w")]);
    let mut forged = Outsider::start(
        &marker,
        &[
            ("BINKY_HOME", &home_var),
            ("BINKY_WORLD_TOKEN", "0123456789abcdef"),
        ],
    );
    // Counted: the world's footprint holds the stray's 200 MiB.
    assert!(
        wait_until(std::time::Duration::from_secs(20), || {
            home.ok(&["metrics"]).json()["footprints"]["strays"]
                .as_u64()
                .is_some_and(|f| f >= 190 << 20)
        }),
        "{}",
        home.ok(&["metrics"]).json()
    );
    // Across a daemon restart, and stopped by down.
    home.ok(&["daemon", "stop"]);
    assert!(alive(stray), "a daemon stop stops no service");
    repo.ok(&home, &["down", "w"]);
    assert!(!alive(stray), "down left the stray running");
    assert!(
        plain.alive() && forged.alive(),
        "a process that is not the world's was stopped"
    );
    // And by remove.
    repo.ok(&home, &["up", "w"]);
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        stray_pid().is_some_and(|p| p != stray && alive(p))
    }));
    let second = stray_pid().unwrap();
    repo.ok(&home, &["remove", "w", "--force"]);
    assert!(!alive(second), "remove left the stray running");
    assert!(plain.alive() && forged.alive());
    assert!(
        pids_with(&marker)
            .iter()
            .all(|p| *p != stray && *p != second)
    );
}

/// A service that leaves a child behind outside its process group and
/// session (`setsid()` then a second fork, as a self-daemonizing server
/// does); each such child appends its pid to `strays.txt`.
const LEAVES_A_CHILD: &str = r#"
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open("strays.txt", "a") as f:
            f.write(f"{os.getpid()}\n")
        while True:
            time.sleep(1)
    os._exit(0)
while True:
    time.sleep(1)
"#;

/// Issue 48: a service's `setsid()` child outlived the service's restart
/// (by its restart policy) and `binky reset`, so two copies ran against the
/// new data; only `down` stopped them. A restart and a reset now stop every
/// process the old instance started, found as `down` finds them.
#[test]
fn a_restart_or_a_reset_stops_what_the_old_instance_started_outside_its_group() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n\n[services.app]\ncmd = \"exec python3 leaves.py\"\ndepends_on = [\"db\"]\nrestart = {{ policy = \"on-failure\", backoff = \"100ms\" }}\n",
        project_header("leaves", 2)
    );
    let repo = Repo::with("", &toml, &[("leaves.py", LEAVES_A_CHILD)]);
    repo.ok(&home, &["up", "w"]);
    let world = &repo.worlds(&home)["w"];
    let wt = std::path::PathBuf::from(world["path"].as_str().unwrap());
    let strays = || -> Vec<u32> {
        std::fs::read_to_string(wt.join("strays.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let app = || -> serde_json::Value {
        repo.worlds(&home)["w"]["services"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == "app").cloned())
            .unwrap_or_default()
    };
    let app_pid = || app()["pid"].as_u64().map(|p| p as u32);
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        strays().len() == 1
    }));
    let first = strays()[0];
    assert!(alive(first));
    // The restart policy: the service dies, and starts again.
    kill9(app_pid().unwrap());
    assert!(
        wait_until(std::time::Duration::from_secs(20), || strays().len() == 2),
        "the service did not start again: {:?}",
        strays()
    );
    assert!(
        !alive(first),
        "pid {first}, left by the instance before the restart, still runs beside the new one"
    );
    // `reset` of the world running whole (in place, not a reload): the
    // users of the slice restart on a fresh one.
    let second = strays()[1];
    assert!(alive(second));
    assert!(
        wait_until(std::time::Duration::from_secs(20), || app()["state"]
            == "running"),
        "{}",
        app()
    );
    repo.ok(&home, &["reset", "w", "db"]);
    assert!(
        wait_until(std::time::Duration::from_secs(20), || strays().len() == 3),
        "{:?}",
        strays()
    );
    assert!(
        !alive(second),
        "pid {second}, left by the instance before the reset, still runs beside the new one"
    );
    let third = strays()[2];
    assert!(alive(third));
    repo.ok(&home, &["down", "w"]);
    assert!(!alive(third), "down left pid {third} running");
    repo.ok(&home, &["remove", "w", "--force"]);
}

/// A service that leaves a `setsid()` child (as [`LEAVES_A_CHILD`]), then
/// fails before it is ready while `fail-once` is in its folder.
const LEAVES_A_CHILD_THEN_FAILS_ONCE: &str = r#"
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open("strays.txt", "a") as f:
            f.write(f"{os.getpid()}\n")
        while True:
            time.sleep(1)
    os._exit(0)
if os.path.exists("fail-once"):
    time.sleep(0.3)
    sys.exit(3)
while True:
    time.sleep(1)
"#;

/// A failed world keeps its processes for inspection, and a daemon that
/// restarts keeps them too; the next `up` starts the service afresh. What
/// the failed instance left outside its group never runs beside the new
/// one (chaos seed 2: a service ran twice).
#[test]
fn an_up_after_a_failure_and_a_daemon_restart_stops_what_the_failed_instance_left() {
    let home = Home::new();
    let toml = format!(
        "{}[services.app]\ncmd = \"exec python3 fails.py\"\nhealth = {{ cmd = \"test -e strays.txt && ! test -e fail-once\", timeout = \"20s\" }}\n",
        project_header("failsonce", 2)
    );
    let repo = Repo::with("", &toml, &[("fails.py", LEAVES_A_CHILD_THEN_FAILS_ONCE)]);
    // The worktree is made by the first `up`; the flag goes in before it.
    repo.ok(&home, &["up", "w"]);
    let wt = std::path::PathBuf::from(repo.worlds(&home)["w"]["path"].as_str().unwrap());
    repo.ok(&home, &["down", "w"]);
    std::fs::remove_file(wt.join("strays.txt")).unwrap();
    std::fs::write(wt.join("fail-once"), "").unwrap();
    let strays = || -> Vec<u32> {
        std::fs::read_to_string(wt.join("strays.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let out = repo.run(&home, &["up", "w"]);
    assert_ne!(out.code(), 0, "{out}");
    assert_eq!(repo.worlds(&home)["w"]["state"], "failed");
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        strays().len() == 1
    }));
    let first = strays()[0];
    assert!(alive(first), "the failed instance's child is kept");
    std::fs::remove_file(wt.join("fail-once")).unwrap();
    kill9(home.daemon_pid().unwrap());
    repo.ok(&home, &["up", "w"]);
    assert!(
        wait_until(std::time::Duration::from_secs(10), || strays().len() == 2),
        "{:?}",
        strays()
    );
    assert!(
        wait_until(std::time::Duration::from_secs(10), || !alive(first)),
        "pid {first}, left by the failed instance, still runs beside the new one"
    );
    let second = strays()[1];
    assert!(alive(second));
    repo.ok(&home, &["remove", "w", "--force"]);
    assert!(!alive(second), "remove left pid {second} running");
}
