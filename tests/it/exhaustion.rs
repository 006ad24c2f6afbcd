//! Nobody can exhaust the daemon's descriptors through the proxy: a capped
//! number of client connections, silent ones closed, another user never
//! crowding the daemon's own out, and the control socket always answering.

use crate::harness::*;
use crate::project::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Starts this home's daemon with at most `open_files` descriptors (soft
/// and hard, as `ulimit -n` sets them) and `extra` environment.
fn start_limited(home: &Home, open_files: u32, extra: &[(&str, &str)]) {
    let c = home.cmd(&["daemon", "start"]);
    let exe = binky_exe();
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(format!(
            "ulimit -n {open_files} && exec \"$0\" daemon start"
        ))
        .arg(exe);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    for (k, v) in extra {
        sh.env(k, v);
    }
    let out = Out(sh.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
}

fn proxy_port(home: &Home) -> u16 {
    home.ok(&["config", "--json"]).json()["proxy_port"]
        .as_u64()
        .unwrap() as u16
}

#[test]
fn thousands_of_idle_connections_leave_the_control_socket_answering() {
    let home = Home::new();
    start_limited(&home, 256, &[]);
    let port = proxy_port(&home);
    // Far more than the descriptors the daemon has.
    let mut idle = Vec::new();
    for _ in 0..600 {
        if let Ok(c) = TcpStream::connect(("127.0.0.1", port)) {
            idle.push(c);
        }
    }
    assert!(idle.len() > 300, "could open only {}", idle.len());
    let t0 = std::time::Instant::now();
    let st = home.run(&["status"]);
    assert_eq!(st.code(), 0, "{st}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "status took {:?}",
        t0.elapsed()
    );
    home.ok(&["metrics"]);
    // Said once, not once a connection.
    let log = std::fs::read_to_string(home.file("daemon.log")).unwrap();
    let said = log.matches("proxy refusing new connections").count();
    assert_eq!(said, 1, "{log}");
    // Once they go, the proxy serves again.
    drop(idle);
    assert!(wait_until(Duration::from_secs(5), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok_and(|mut c| {
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: nothing.localhost\r\n\r\n");
            let mut buf = [0u8; 12];
            c.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.1 404")
        })
    }));
}

#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let home = Home::new();
    start_limited(&home, 4096, &[("BINKY_TEST_HEADER_TIMEOUT_MS", "300")]);
    let port = proxy_port(&home);
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut partial = TcpStream::connect(("127.0.0.1", port)).unwrap();
    partial.write_all(b"GET / HTTP/1.1\r\nHost: x").unwrap();
    for c in [&mut silent, &mut partial] {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t0 = std::time::Instant::now();
        let mut buf = Vec::new();
        let _ = c.read_to_end(&mut buf);
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the connection stayed open {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn another_user_cannot_crowd_the_daemons_own_user_out_of_the_proxy() {
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let tools = ["/usr/bin/setpriv", "/usr/bin/python3"];
    if !is_root || !tools.iter().all(|t| std::path::Path::new(t).exists()) {
        skip(&format!("needs root, {tools:?} to connect as another user"));
        return;
    }
    let home = Home::new();
    let toml = format!("{}{}", project_header("crowd", 1), http_service("web", ""));
    let repo = Repo::new(&toml);
    start_limited(&home, 1024, &[]);
    repo.ok(&home, &["up", "x"]);
    let port = proxy_port(&home);
    // Another user opens as many connections as it can and holds them.
    let script = format!(
        "import socket, sys, time\nheld = []\nfor _ in range(2000):\n    try:\n        held.append(socket.create_connection(('127.0.0.1', {port}), timeout=2))\n    except OSError:\n        break\nprint(len(held), flush=True)\ntime.sleep(30)\n"
    );
    let mut other = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(other.stdout.as_mut().unwrap());
        r.read_line(&mut first).unwrap();
    }
    // The other user holds every connection it could open (it said how
    // many): ours come now, in the middle of the crowd.
    let host = format!("web.x.crowd.localhost:{port}");
    let mut served = 0;
    for _ in 0..20 {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut buf = Vec::new();
        let _ = c.read_to_end(&mut buf);
        if buf.starts_with(b"HTTP/1.1 200") {
            served += 1;
        }
    }
    let _ = other.kill();
    let _ = other.wait();
    assert_eq!(
        served,
        20,
        "the other user (holding {}) crowded us out",
        first.trim()
    );
    repo.ok(&home, &["remove", "x", "--force"]);
}
