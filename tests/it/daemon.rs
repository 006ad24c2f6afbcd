//! The daemon's lifecycle, transport and state (issue: "The daemon").

use crate::harness::*;
use binky::protocol::codec::{read_frame, write_frame};
use binky::protocol::{Hello, Reply, Request, Response, VERSION, Welcome};
use std::io::BufReader;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

#[test]
fn any_command_starts_the_daemon_and_it_detaches() {
    let home = Home::new();
    assert!(home.daemon_pid().is_none());
    let out = home.ok(&["status"]);
    assert!(out.stdout().contains("no worlds yet"), "{out}");
    let pid = home.daemon_pid().expect("daemon running after status");
    // Its own session: closing the terminal that started it cannot hang it up.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let session: u32 = fields[3].parse().unwrap();
    assert_eq!(session, pid, "daemon leads its own session");
    let status = home.ok(&["daemon", "status", "--json"]).json();
    assert_eq!(status["running"], true);
    assert_eq!(status["pid"], pid);
    assert_eq!(status["version"], VERSION);
    assert!(home.file("daemon.log").exists());
    assert!(home.events().iter().any(|e| e["event"] == "daemon_started"));
}

#[test]
fn second_start_says_running_and_exits_zero() {
    let home = Home::new();
    let first = home.ok(&["daemon", "start"]);
    assert!(first.stdout().contains("daemon started"), "{first}");
    let pid = home.daemon_pid().unwrap();
    let second = home.ok(&["daemon", "start"]);
    assert!(
        second
            .stdout()
            .contains(&format!("already running (pid {pid}")),
        "{second}"
    );
    assert_eq!(home.daemon_pid(), Some(pid));
    // Running the daemon directly while one holds the lock fails clearly.
    let direct = home.run(&["daemon", "run"]);
    assert_eq!(direct.code(), 1, "{direct}");
    assert!(direct.stderr().contains("another binky daemon"), "{direct}");
    assert_eq!(
        home.daemon_pid(),
        Some(pid),
        "the first daemon is untouched"
    );
}

#[test]
fn stop_removes_socket_and_exits() {
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    let pid = home.daemon_pid().unwrap();
    let out = home.ok(&["daemon", "stop"]);
    assert!(out.stdout().contains("daemon stopped"), "{out}");
    assert!(wait_until(Duration::from_secs(5), || !alive(pid)));
    assert!(!home.file("binky.sock").exists());
    let st = home.run(&["daemon", "status"]);
    assert_eq!(st.code(), 1);
    assert!(st.stdout().contains("not running"));
    // Stopping again is fine.
    assert!(
        home.ok(&["daemon", "stop"])
            .stdout()
            .contains("not running")
    );
}

#[test]
fn stale_lock_and_socket_from_a_killed_daemon_are_recovered() {
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    let pid = home.daemon_pid().unwrap();
    kill9(pid);
    assert!(wait_until(Duration::from_secs(5), || !alive(pid)));
    assert!(home.file("binky.sock").exists(), "socket left behind");
    assert!(home.file("daemon.lock").exists(), "lock file left behind");
    let out = home.ok(&["status"]);
    assert!(out.stdout().contains("no worlds yet"), "{out}");
    let new_pid = home.daemon_pid().unwrap();
    assert_ne!(new_pid, pid);
}

#[cfg(unix)]
#[test]
fn a_socket_file_with_nothing_behind_it_is_replaced() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    // A socket bound and closed: the file remains, nothing listens.
    drop(UnixListener::bind(home.file("binky.sock")).unwrap());
    assert!(home.file("binky.sock").exists());
    home.ok(&["status"]);
    assert!(home.daemon_pid().is_some());
}

#[cfg(unix)]
#[test]
fn socket_and_folder_are_private() {
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(home.path()), 0o700);
    assert_eq!(mode(&home.file("binky.sock")), 0o600);
    assert_eq!(mode(&home.file("registry.db")), 0o600);
}

#[cfg(unix)]
#[test]
fn a_connection_from_another_user_is_refused() {
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    // The system python (not a per-user install another uid cannot run).
    let tools = ["/usr/bin/setpriv", "/usr/bin/python3"];
    if !is_root || !tools.iter().all(|t| std::path::Path::new(t).exists()) {
        skip(&format!("needs root, {tools:?} to connect as another user"));
        return;
    }
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    // Open the folder and socket up so only the daemon's uid check stands
    // between the other user and the API.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        home.file("binky.sock"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let script = format!(
        "import socket,json\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\ns.settimeout(5)\ntry:\n  s.sendall(json.dumps({{'protocol':1,'version':{:?}}}).encode()+b'\\n')\n  print(repr(s.recv(4096)))\nexcept (ConnectionResetError, BrokenPipeError):\n  print('reset')",
        home.file("binky.sock").display().to_string(),
        VERSION
    );
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        matches!(stdout.trim(), "b''" | "reset"),
        "the daemon must close without a welcome, got {stdout}"
    );
    assert!(
        home.events()
            .iter()
            .any(|e| e["event"] == "connection_refused"),
        "refusal recorded"
    );
    // The owner is still served.
    home.ok(&["status"]);
}

/// A stand-in for a daemon of another version: answers the handshake with
/// version 9.9.9 and records the requests it gets.
fn fake_old_daemon(home: &Home) -> std::thread::JoinHandle<Vec<Request>> {
    std::fs::create_dir_all(home.path()).unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let listener = UnixListener::bind(home.file("binky.sock")).unwrap();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        // Serve two connections: enough for one CLI call each in the test.
        for _ in 0..2 {
            let (stream, _) = listener.accept().unwrap();
            let mut w = stream.try_clone().unwrap();
            let mut r = BufReader::new(stream);
            let _hello: Hello = read_frame(&mut r).unwrap().unwrap();
            write_frame(
                &mut w,
                &Welcome {
                    protocol: 1,
                    version: "9.9.9".into(),
                    pid: 4242,
                },
            )
            .unwrap();
            while let Ok(Some(req)) = read_frame::<_, Request>(&mut r) {
                seen.push(req);
                write_frame(&mut w, &Reply::Ok(Response::Done)).unwrap();
            }
        }
        seen
    })
}

#[test]
fn version_mismatch_is_an_instruction_not_a_decode_error() {
    let home = Home::new();
    let fake = fake_old_daemon(&home);
    let out = home.run(&["status"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("the running daemon is version 9.9.9"),
        "{out}"
    );
    assert!(out.stderr().contains("binky daemon stop"), "{out}");
    // And the instruction works: stop is understood across versions.
    let stop = home.run(&["daemon", "stop"]);
    let seen = fake.join().unwrap();
    assert_eq!(seen, vec![Request::Shutdown], "{stop}");
}

#[test]
fn daemon_answers_an_old_client_with_the_instruction() {
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    let stream = UnixStream::connect(home.file("binky.sock")).unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    write_frame(
        &mut w,
        &Hello {
            protocol: 1,
            version: "0.0.1".into(),
        },
    )
    .unwrap();
    let welcome: Welcome = read_frame(&mut r).unwrap().unwrap();
    assert_eq!(welcome.version, VERSION);
    write_frame(
        &mut w,
        &Request::Status {
            project: None,
            usage: false,
        },
    )
    .unwrap();
    match read_frame::<_, Reply>(&mut r).unwrap().unwrap() {
        Reply::Err(e) => {
            assert!(
                e.message
                    .contains(&format!("the running daemon is version {VERSION}"))
            );
            assert!(e.hint.unwrap().contains("binky daemon stop"));
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // Malformed frames get an error and the connection stays usable.
    use std::io::Write;
    w.write_all(b"{\"verb\": \"no_such_verb\"}\n").unwrap();
    assert!(matches!(
        read_frame::<_, Reply>(&mut r).unwrap().unwrap(),
        Reply::Err(_)
    ));
    write_frame(&mut w, &Request::Ping).unwrap();
    assert_eq!(
        read_frame::<_, Reply>(&mut r).unwrap().unwrap(),
        Reply::Ok(Response::Done)
    );
}

#[test]
fn fifty_concurrent_clients_are_all_answered() {
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    let children: Vec<_> = (0..50)
        .map(|_| {
            home.cmd(&["status", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = Out(c.wait_with_output().unwrap());
        assert_eq!(out.code(), 0, "{out}");
        assert_eq!(out.json()["projects"], serde_json::json!([]));
    }
}

#[test]
fn concurrent_auto_starts_yield_one_daemon() {
    let home = Home::new();
    let children: Vec<_> = (0..8)
        .map(|_| {
            home.cmd(&["status"])
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
    let started = home
        .events()
        .iter()
        .filter(|e| e["event"] == "daemon_started")
        .count();
    assert_eq!(started, 1, "exactly one daemon started");
}

#[test]
fn corrupt_registry_is_a_clear_error_and_is_not_overwritten() {
    let home = Home::new();
    std::fs::create_dir_all(home.path()).unwrap();
    let junk = b"definitely not sqlite\n".repeat(300);
    std::fs::write(home.file("registry.db"), &junk).unwrap();
    let out = home.run(&["status"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("not a readable SQLite database"),
        "{out}"
    );
    assert!(out.stderr().contains("daemon.log"), "{out}");
    assert!(
        std::fs::read(home.file("registry.db")).unwrap() == junk,
        "the corrupt registry was modified"
    );
    assert!(home.daemon_pid().is_none());
}

#[test]
fn locked_registry_is_a_clear_error_and_is_not_overwritten() {
    let home = Home::new();
    // Create a real registry first, then stop the daemon.
    home.ok(&["reserve", "--ram", "12"]);
    home.ok(&["daemon", "stop"]);
    // Another process takes an exclusive lock and holds it.
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1],isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('locked',flush=True)\nsys.stdin.read()",
            home.file("registry.db").to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    // Reads still work under WAL; a write must wait, then fail clearly.
    let out = home.run(&["reserve", "--ram", "20"]);
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("locked by another process"), "{out}");
    // Once released, everything works: the old value survived and the
    // refused write left no trace.
    let cfg = home.ok(&["config", "--json"]).json();
    assert_eq!(cfg["ram_reserve_pct"], 12.0);
}

#[test]
fn settings_validate_and_persist_across_restarts() {
    let home = Home::new();
    let cfg = home.ok(&["config", "--json"]).json();
    assert_eq!(cfg["ram_reserve_pct"], 10.0);
    assert_eq!(cfg["disk_reserve_gb"], 5.0);
    home.ok(&["reserve", "--ram", "15", "--disk", "5"]);
    let bad = home.run(&["reserve", "--ram", "95"]);
    assert_eq!(bad.code(), 1);
    assert!(bad.stderr().contains("0 to 90"), "{bad}");
    assert_eq!(home.run(&["reserve", "--disk", "-1"]).code(), 1);
    let p = free_port();
    home.ok(&["port", "--proxy", &p.to_string()]);
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().port();
    let out = home.run(&["port", "--https", &taken.to_string()]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("in use"), "{out}");
    assert_eq!(home.run(&["port", "--proxy", "70000"]).code(), 1);
    home.ok(&["daemon", "stop"]);
    let cfg = home.ok(&["config", "--json"]).json();
    assert_eq!(cfg["ram_reserve_pct"], 15.0);
    assert_eq!(cfg["proxy_port"], p);
    let text = home.ok(&["config"]).stdout();
    assert!(text.contains("ram reserve    15 %"), "{text}");
}

#[test]
fn metrics_is_one_json_object_with_the_documented_fields() {
    let home = Home::new();
    let m = home.ok(&["metrics"]).json();
    for key in [
        "version",
        "uptime_secs",
        "worlds",
        "services_running",
        "restarts",
        "queue_length",
        "port_reservations",
        "proxy",
        "registry_bytes",
        "rss_bytes",
        "cpu_percent",
    ] {
        assert!(m.get(key).is_some(), "metrics lacks {key}: {m}");
    }
    assert!(m["rss_bytes"].as_u64().unwrap() > 0);
    assert!(m["registry_bytes"].as_u64().unwrap() > 0);
    assert_eq!(m["services_running"], 0, "{m}");
    assert_eq!(m["port_reservations"], 0, "{m}");
    // The figures follow what runs: a world of two services with ports,
    // and one request through the proxy.
    let repo = crate::project::Repo::new(&format!(
        "{}{}{}",
        crate::project::project_header("metrics", 4),
        crate::project::http_service("web", ""),
        "[services.side]\ncmd = \"exec sleep 600\"\nports = [\"admin\"]\n"
    ));
    repo.ok(&home, &["up", "x"]);
    let port = home.ok(&["config", "--json"]).json()["proxy_port"]
        .as_u64()
        .unwrap() as u16;
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(
        &mut c,
        b"GET / HTTP/1.0\r\nHost: web.x.metrics.localhost\r\n\r\n",
    )
    .unwrap();
    let mut reply = String::new();
    let _ = std::io::Read::read_to_string(&mut c, &mut reply);
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    let m = home.ok(&["metrics"]).json();
    assert_eq!(m["services_running"], 2, "{m}");
    // web's port, side's primary and its named one.
    assert_eq!(m["port_reservations"], 3, "{m}");
    assert_eq!(m["worlds"]["running"], 1, "{m}");
    assert!(m["proxy"]["requests"].as_u64().unwrap() >= 1, "{m}");
    assert!(m["proxy"]["bytes"].as_u64().unwrap() > 0, "{m}");
}

#[test]
fn events_never_carry_settings_values_and_rotate_lines_are_json() {
    let home = Home::new();
    home.ok(&["reserve", "--ram", "33"]);
    let events = home.events();
    assert!(events.iter().any(|e| e["event"] == "settings_changed"));
    for e in &events {
        assert!(e["ts"].is_string());
        if e["event"] == "settings_changed" {
            let mut without_ts = e.clone();
            without_ts.as_object_mut().unwrap().remove("ts");
            assert!(!without_ts.to_string().contains("33"), "value leaked: {e}");
        }
    }
}

/// Issue (states that change by themselves): after a daemon restart a
/// service that never became healthy was re-adopted as `running`, and one
/// its failed `up` never started changed state. Both keep what they were.
#[test]
fn a_restart_keeps_an_unhealthy_service_unhealthy_and_a_never_started_one_as_it_was() {
    let home = Home::new();
    let toml = format!(
        "{}[services.a]\ncmd = \"exec sleep 600\"\nports = [\"p\"]\nhealth = {{ tcp = \"127.0.0.1:${{self.ports.p}}\", timeout = \"1s\", interval = \"100ms\" }}\n[services.b]\ncmd = \"exec sleep 600\"\ndepends_on = [\"a\"]\nenv = {{ NEEDS = \"${{env.ONLY_IN_THIS_SHELL}}\" }}\n",
        crate::project::project_header("keepstate", 2)
    );
    let repo = crate::project::Repo::new(&toml);
    let up = repo.run_with(&home, &["up", "w"], &[("ONLY_IN_THIS_SHELL", "x")]);
    assert_eq!(up.code(), 1, "{up}");
    let states = || -> Vec<(String, String)> {
        repo.worlds(&home)["w"]["services"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_owned(),
                    s["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let before = states();
    assert_eq!(
        before,
        [
            ("a".into(), "unhealthy".into()),
            ("b".into(), "stopped".into())
        ]
    );
    let a_pid = repo.worlds(&home)["w"]["services"][0]["pid"]
        .as_u64()
        .unwrap();
    // A graceful restart, then a kill -9 one: the same answer each time.
    home.ok(&["daemon", "stop"]);
    assert_eq!(states(), before, "after a daemon restart");
    kill9(home.daemon_pid().unwrap());
    assert_eq!(states(), before, "after kill -9 and a restart");
    assert_eq!(
        repo.worlds(&home)["w"]["services"][0]["pid"].as_u64(),
        Some(a_pid),
        "the process itself is adopted"
    );
    assert_eq!(repo.worlds(&home)["w"]["state"], "failed");
    repo.ok(&home, &["down", "w"]);
    assert!(!alive(a_pid as u32));
}
