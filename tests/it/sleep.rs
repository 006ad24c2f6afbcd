//! Idle sleep against a real daemon: a world with `idle_after` sleeps when
//! nothing asks it anything, gives its memory back, and wakes on a proxied
//! GET or WebSocket (the real answer, never a 503), on `up` and on
//! `verify`; a worker with `sleep = false` or a process using CPU keeps it
//! awake; a sleeping world stays asleep (and wakes) across a daemon restart.

use crate::harness::*;
use crate::project::*;
use crate::proxy::{connect, proxy_port, request_response};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// The echo fixture behind the proxy, in a project whose worlds sleep
/// after `idle` (plus `extra` TOML after the echo service).
fn echo_sleeper(idle: &str, extra: &str) -> Repo {
    echo_sleeper_with("zz", idle, extra, &[])
}

/// [`echo_sleeper`] for project `project`, with more files in the checkout.
fn echo_sleeper_with(project: &str, idle: &str, extra: &str, files: &[(&str, &str)]) -> Repo {
    echo_started_by(project, idle, "exec python3 echo.py", extra, files)
}

/// [`echo_sleeper_with`], the echo service started by `cmd`.
fn echo_started_by(
    project: &str,
    idle: &str,
    cmd: &str,
    extra: &str,
    files: &[(&str, &str)],
) -> Repo {
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/echo.py"
    ))
    .unwrap();
    let toml = format!(
        "{}idle_after = \"{idle}\"\n[services.echo]\ncmd = \"{cmd}\"\nurl = \"echo\"\nhealth = {{ tcp = \"localhost:${{self.port}}\", timeout = \"20s\", interval = \"50ms\" }}\n{extra}",
        project_header(project, 10)
    );
    let mut all = vec![("echo.py", fixture.as_str())];
    all.extend_from_slice(files);
    Repo::with("", &toml, &all)
}

fn world(repo: &Repo, home: &Home, w: &str) -> serde_json::Value {
    repo.worlds(home)
        .get(w)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

fn state(repo: &Repo, home: &Home, w: &str) -> String {
    world(repo, home, w)["state"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// Waits (well past the idle time) for world `w` to sleep.
fn wait_asleep(repo: &Repo, home: &Home, w: &str) {
    assert!(
        wait_until(Duration::from_secs(30), || state(repo, home, w)
            == "sleeping"),
        "{w} never slept: {}",
        world(repo, home, w)
    );
}

fn echo_pid(repo: &Repo, home: &Home, w: &str) -> Option<u32> {
    world(repo, home, w)["services"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "echo")?["pid"]
        .as_u64()
        .map(|p| p as u32)
}

fn get(port: u16, host: &str) -> (u16, String) {
    let mut c = connect(port);
    write!(c, "GET /hello HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let (status, _, body) = request_response(&mut c);
    (status, body)
}

fn events_named(home: &Home, name: &str) -> Vec<serde_json::Value> {
    home.events()
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

#[test]
fn an_idle_world_sleeps_gives_back_its_memory_and_a_get_wakes_it_with_the_real_answer() {
    let home = Home::new();
    let repo = echo_sleeper("2s", "");
    repo.ok(&home, &["up", "nap"]);
    let port = proxy_port(&home);
    let host = "echo.nap.zz.localhost";
    assert_eq!(get(port, host).0, 200);
    let pid = echo_pid(&repo, &home, "nap").expect("echo runs");
    assert_eq!(world(&repo, &home, "nap")["idle_after_s"], 2);
    wait_asleep(&repo, &home, "nap");
    // Its process is gone (its memory with it), its ports and files kept.
    assert!(
        wait_until(Duration::from_secs(10), || !alive(pid)),
        "echo still runs"
    );
    let w = world(&repo, &home, "nap");
    assert!(w["sleeping_since"].is_string(), "{w}");
    assert_eq!(w["services"][0]["state"], "sleeping", "{w}");
    assert_eq!(w["services"][0]["port"], w["services"][0]["port"]);
    let slept = events_named(&home, "slept");
    assert_eq!(slept.len(), 1, "{slept:?}");
    assert!(
        slept[0]["detail"].as_str().unwrap().starts_with("idle for"),
        "{slept:?}"
    );
    let human = repo.ok(&home, &["status"]).stdout();
    assert!(human.contains("sleeping since"), "{human}");
    // `env` answers and says it sleeps; it does not wake it.
    let env = repo.ok(&home, &["env", "nap"]);
    assert!(env.stderr().contains("is sleeping"), "{env}");
    assert!(env.json()["services"].is_object(), "{env}");
    assert_eq!(state(&repo, &home, "nap"), "sleeping");

    // The first request wakes it and gets the service's own answer.
    let (status, body) = get(port, host);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect(&body);
    assert_eq!(answer["path"], "/hello");
    assert_eq!(answer["world"], "nap");
    assert_eq!(state(&repo, &home, "nap"), "running");
    let new_pid = echo_pid(&repo, &home, "nap").unwrap();
    assert_ne!(new_pid, pid);
    let woke = events_named(&home, "woke");
    assert_eq!(woke.len(), 1, "{woke:?}");
    assert_eq!(woke[0]["detail"], "a request to its URL");

    // Asleep again, `up` wakes it too and keeps its idle time.
    wait_asleep(&repo, &home, "nap");
    let up = repo.ok(&home, &["up", "nap", "--json"]).json();
    assert_eq!(up["world"]["state"], "running", "{up}");
    assert_eq!(up["world"]["idle_after_s"], 2, "{up}");
    let woke = events_named(&home, "woke");
    assert_eq!(woke.len(), 2, "{woke:?}");
    assert_eq!(woke[1]["detail"], "`up`");
}

#[test]
fn a_websocket_upgrade_wakes_a_sleeping_world_and_keeps_it_awake_while_open() {
    let home = Home::new();
    let repo = echo_sleeper("2s", "");
    repo.ok(&home, &["up", "ws"]);
    let port = proxy_port(&home);
    wait_asleep(&repo, &home, "ws");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
        let mut req = format!("ws://127.0.0.1:{port}/hmr")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("Host", "echo.ws.zz.localhost".parse().unwrap());
        let (mut ws, resp) = tokio_tungstenite::connect_async(req)
            .await
            .expect("the handshake wakes the world");
        assert_eq!(resp.status(), 101);
        ws.send(Message::text("ping")).await.unwrap();
        let got = ws.next().await.unwrap().unwrap();
        assert_eq!(got.into_text().unwrap().as_str(), "ping");
        // Open and quiet for twice its idle time: still awake.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(state(&repo, &home, "ws"), "running");
        ws.send(Message::text("still here")).await.unwrap();
        let got = ws.next().await.unwrap().unwrap();
        assert_eq!(got.into_text().unwrap().as_str(), "still here");
        ws.close(None).await.unwrap();
    });
    // Closed, it sleeps again.
    wait_asleep(&repo, &home, "ws");
}

#[test]
fn a_worker_with_sleep_false_or_a_busy_process_keeps_its_world_awake() {
    let home = Home::new();
    let repo = echo_sleeper(
        "1s",
        "[services.worker]\ncmd = \"exec sleep 600\"\nsleep = false\n",
    );
    repo.ok(&home, &["up", "work"]);
    let w = world(&repo, &home, "work");
    assert!(w["idle_after_s"].is_null(), "a worker: never sleeps: {w}");

    // A process that keeps a core a fifth busy (a build, a queue drained)
    // is not idle, whatever the proxy saw.
    let busy = "import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 0.02: pass\n    time.sleep(0.08)\n";
    let repo2 = echo_sleeper_with(
        "zb",
        "1s",
        "[services.busy]\ncmd = \"exec python3 busy.py\"\n",
        &[("busy.py", busy)],
    );
    repo2.ok(&home, &["up", "busy"]);
    // And a control beside them that does sleep, so the check is known to run.
    let repo3 = echo_sleeper_with("zc", "1s", "", &[]);
    repo3.ok(&home, &["up", "calm"]);
    wait_asleep(&repo3, &home, "calm");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(state(&repo, &home, "work"), "running");
    assert_eq!(state(&repo2, &home, "busy"), "running");
}

#[test]
fn a_sleeping_world_stays_asleep_across_a_daemon_restart_and_wakes_after_it() {
    let home = Home::new();
    let repo = echo_sleeper("2s", "[agents]\nverify = [\"curl -sf $ECHO_URL/ok\"]\n");
    repo.ok(&home, &["up", "rest"]);
    wait_asleep(&repo, &home, "rest");
    home.ok(&["daemon", "stop"]);
    home.ok(&["daemon", "start"]);
    assert_eq!(state(&repo, &home, "rest"), "sleeping");
    let port = proxy_port(&home);
    let (status, body) = get(port, "echo.rest.zz.localhost");
    assert_eq!(status, 200, "{body}");
    assert_eq!(state(&repo, &home, "rest"), "running");
    // `verify` of a sleeping world wakes it before its checks run.
    wait_asleep(&repo, &home, "rest");
    let v = repo.run(&home, &["verify", "rest"]);
    assert_eq!(v.code(), 0, "{v}");
    assert!(v.stdout().contains("rest was sleeping; waking it"), "{v}");
}

#[test]
fn idle_after_is_checked_where_it_is_written() {
    let home = Home::new();
    let repo = echo_sleeper("10ms", "");
    let out = repo.run(&home, &["check"]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stdout().contains("idle_after") || out.stderr().contains("idle_after"),
        "{out}"
    );
    let repo = echo_sleeper("20m", "");
    let bad = repo.run(&home, &["up", "x", "--idle-after", "soon"]);
    assert_ne!(bad.code(), 0, "{bad}");
    assert!(
        bad.stderr()
            .contains("--idle-after `soon` is not a duration"),
        "{bad}"
    );
    assert!(repo.worlds(&home).get("x").is_none(), "nothing made");
    let up = repo
        .ok(&home, &["up", "x", "--idle-after", "off", "--json"])
        .json();
    assert!(up["world"]["idle_after_s"].is_null(), "{up}");
    let up = repo
        .ok(&home, &["up", "x", "--idle-after", "default", "--json"])
        .json();
    assert_eq!(up["world"]["idle_after_s"], 1200, "{up}");
}

#[test]
fn a_wake_up_queued_for_room_gets_a_page_that_says_so_and_retries() {
    let home = Home::new();
    home.max_parallel_only(1);
    let repo = echo_sleeper("2s", "");
    repo.ok(&home, &["up", "first"]);
    wait_asleep(&repo, &home, "first");
    // Its slot was freed: another world takes it, and stays awake.
    repo.ok(&home, &["up", "second", "--idle-after", "off"]);
    let port = proxy_port(&home);
    let mut c = connect(port);
    write!(c, "GET / HTTP/1.1\r\nHost: echo.first.zz.localhost\r\n\r\n").unwrap();
    let (status, headers, body) = request_response(&mut c);
    assert_eq!(status, 503, "{headers}{body}");
    assert!(body.contains("waits for room"), "{body}");
    assert!(body.contains("max_parallel"), "{body}");
    let lower = headers.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 2"), "{headers}");
    assert!(lower.contains("refresh: 2"), "{headers}");
    // Room made, the retry gets the service's own answer.
    repo.ok(&home, &["down", "second"]);
    assert!(
        wait_until(Duration::from_secs(30), || get(
            port,
            "echo.first.zz.localhost"
        )
        .0 == 200),
        "{}",
        world(&repo, &home, "first")
    );
}

#[test]
fn a_request_in_flight_or_a_stream_keeps_its_world_awake() {
    let home = Home::new();
    let repo = echo_sleeper("1s", "");
    repo.ok(&home, &["up", "busy"]);
    let port = proxy_port(&home);
    // echo's /sse sends an event a second, three in all: three times the
    // idle time, with no other request meanwhile.
    let mut c = connect(port);
    write!(
        c,
        "GET /sse HTTP/1.1\r\nHost: echo.busy.zz.localhost\r\n\r\n"
    )
    .unwrap();
    let mut all = String::new();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(c);
    while !all.contains("data: event 2") {
        let mut line = String::new();
        if lines.read_line(&mut line).unwrap() == 0 {
            break;
        }
        all.push_str(&line);
    }
    for i in 0..3 {
        assert!(
            all.contains(&format!("data: event {i}")),
            "cut short: {all}"
        );
    }
    assert!(
        events_named(&home, "slept").is_empty(),
        "slept under a stream"
    );
    // Done, it sleeps.
    wait_asleep(&repo, &home, "busy");
}

#[test]
fn a_world_that_starts_slower_than_its_idle_time_answers_the_request_that_woke_it() {
    let home = Home::new();
    let repo = echo_started_by("zs", "1s", "sleep 2 && exec python3 echo.py", "", &[]);
    repo.ok(&home, &["up", "slow"]);
    wait_asleep(&repo, &home, "slow");
    let (status, body) = get(proxy_port(&home), "echo.slow.zs.localhost");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_wake_up_that_fails_leaves_the_world_failed_with_the_reason_on_its_page() {
    let home = Home::new();
    let repo = echo_sleeper("1s", "");
    repo.ok(&home, &["up", "broke"]);
    wait_asleep(&repo, &home, "broke");
    let path = world(&repo, &home, "broke")["path"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(Path::new(&path).join("binky.toml"), "[project\n").unwrap();
    let (status, body) = get(proxy_port(&home), "echo.broke.zz.localhost");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("waking failed"), "{body}");
    let w = world(&repo, &home, "broke");
    assert_eq!(w["state"], "failed", "{w}");
    assert!(
        w["error"].as_str().unwrap().contains("waking failed"),
        "{w}"
    );
    assert_eq!(events_named(&home, "woke").len(), 1, "woken once");
}
