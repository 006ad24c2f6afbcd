//! `binky dashboard` in a real terminal (tmux drives it: `send-keys` in,
//! `capture-pane` out) and the proxy's web view in headless Chromium
//! (driven over the DevTools protocol), both against a real daemon with
//! real worlds: running, queued, failed.

use crate::harness::*;
use crate::project::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A service that prints what a hostile program would: a screen clear, a
/// window title, a colour that hides text, a bell — and a marker.
const NOISY: &str = "[services.noisy]\ncmd = \"exec python3 -u -c 'import time\\nwhile True:\\n    print(\\\"\\\\x1b[2J\\\\x1b]0;pwned\\\\x07\\\\x1b[8mNOISE\\\\x07\\\", flush=True)\\n    time.sleep(0.3)'\"\n";

/// A tmux server of the test's own, running one command in a window of a
/// given size.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// `binky dashboard` in a `w`×`h` window in `dir`, followed by a line
    /// that says how it exited and whether the terminal is back in
    /// canonical mode. `None` (after a skip) without tmux.
    fn dashboard(home: &Home, dir: &std::path::Path, w: u16, h: u16) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            skip("tmux is not installed (.ci/run installs Debian's tmux)");
            return None;
        }
        let tmp = tempfile::Builder::new()
            .prefix("tm")
            .tempdir_in("/tmp")
            .unwrap();
        let socket = tmp.path().join("s");
        let script = format!(
            "{} dashboard; echo EXITED $?; stty -a | tr ' ;' '\\n\\n' | grep -x -- '-*icanon'; sleep 600",
            binky_exe()
        );
        let out = home
            .program(
                "tmux",
                &[
                    "-S",
                    socket.to_str().unwrap(),
                    "-f",
                    "/dev/null",
                    "new-session",
                    "-d",
                    "-x",
                    &w.to_string(),
                    "-y",
                    &h.to_string(),
                    "-c",
                    dir.to_str().unwrap(),
                    "sh",
                    "-c",
                    &script,
                ],
            )
            // The dashboard must not be told to colour (a terminal is
            // there): its NO_COLOR path is what capture-pane compares.
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Tmux { socket, _dir: tmp })
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", keys]);
    }

    /// Waits (up to 20 s) until the screen shows everything of `needles`.
    fn wait_for(&self, needles: &[&str]) -> String {
        let mut last = String::new();
        let seen = wait_until(Duration::from_secs(20), || {
            last = self.screen();
            needles.iter().all(|n| last.contains(n))
        });
        assert!(seen, "never showed {needles:?}:\n{last}");
        last
    }

    /// The pid of `binky dashboard` in the window.
    fn dashboard_pid(&self) -> u32 {
        let sh: u32 = self
            .tmux(&["display", "-p", "#{pane_pid}"])
            .trim()
            .parse()
            .unwrap();
        let children = std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children")).unwrap();
        children.split_whitespace().next().unwrap().parse().unwrap()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

#[test]
fn the_dashboard_shows_every_world_acts_through_the_daemon_and_gives_the_terminal_back() {
    let home = Home::new();
    let good = Repo::new(&format!(
        "{}{}{NOISY}",
        project_header("dash", 8),
        http_service("web", "")
    ));
    let bad = Repo::new(&format!(
        "{}[services.crash]\ncmd = \"exit 3\"\n",
        project_header("dashbad", 4)
    ));
    home.ok(&["reserve", "--ram", "0", "--disk", "0"]);
    assert_ne!(bad.run(&home, &["up", "broken"]).code(), 0);
    good.ok(&home, &["up", "alpha"]);
    home.ok(&["reserve", "--max-parallel", "1"]);
    good.ok(&home, &["up", "beta", "--no-wait"]);
    let Some(t) = Tmux::dashboard(&home, good.project_dir(), 100, 30) else {
        return;
    };
    let screen = t.wait_for(&["alpha", "queued 1/1", "broken", "failed", "web:", "dashbad"]);
    assert!(
        screen.contains("worlds 1/1"),
        "the admission bar:\n{screen}"
    );

    // Select alpha by filter and follow its logs: what `noisy` prints shows
    // as text; the screen above it stays as drawn, and the title is ours.
    t.keys("/");
    t.keys("alpha");
    t.keys("Enter");
    t.keys("l");
    let screen = t.wait_for(&["logs: dash/alpha", "NOISE"]);
    assert!(screen.contains("^[[2J^[]0;pwned^G^[[8mNOISE^G"), "{screen}");
    assert!(
        screen.lines().next().unwrap().contains("binky worlds"),
        "{screen}"
    );
    assert_ne!(t.tmux(&["display", "-p", "#{pane_title}"]).trim(), "pwned");

    // `enter` shows its services with their URLs.
    t.keys("Enter");
    t.wait_for(&["http://web.alpha.dash.localhost"]);
    t.keys("Enter");

    // `d` downs it through the daemon: the CLI sees it stopped, and the
    // queued world takes its place.
    t.keys("d");
    t.wait_for(&["down dash/alpha: stopped"]);
    let worlds = good.worlds(&home);
    assert_eq!(worlds["alpha"]["state"], "stopped", "{worlds:?}");
    assert!(wait_until(Duration::from_secs(30), || {
        // Between the queue and its row, an admitted world is briefly in
        // neither.
        good.worlds(&home)
            .get("beta")
            .is_some_and(|w| w["state"] == "running")
    }));
    t.keys("Escape");
    t.wait_for(&["beta", "running"]);

    // `x` asks first; anything but `y` keeps the world.
    t.keys("/");
    t.keys("broken");
    t.keys("Enter");
    t.keys("x");
    t.wait_for(&["remove dashbad/broken? y to confirm"]);
    t.keys("n");
    t.wait_for(&["remove cancelled"]);
    assert!(bad.worlds(&home).get("broken").is_some());

    // Smaller, then quit: drawn to fit, then the terminal is as it was.
    t.tmux(&["resize-window", "-x", "80", "-y", "24"]);
    let screen = t.wait_for(&["broken"]);
    assert!(screen.lines().all(|l| l.chars().count() <= 80), "{screen}");
    t.keys("q");
    let screen = t.wait_for(&["EXITED 0", "icanon"]);
    assert!(
        screen.lines().any(|l| l.trim() == "icanon"),
        "raw mode left on:\n{screen}"
    );
    assert_eq!(t.tmux(&["display", "-p", "#{alternate_on}"]).trim(), "0");
}

#[test]
fn a_lost_daemon_is_shown_and_picked_up_and_sigterm_gives_the_terminal_back() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}{}",
        project_header("dsig", 4),
        http_service("web", "")
    ));
    home.ok(&["daemon", "start"]);
    let Some(t) = Tmux::dashboard(&home, repo.project_dir(), 80, 24) else {
        return;
    };
    t.wait_for(&["no worlds yet"]);
    // A daemon that goes away is shown, and picked up when it is back.
    home.ok(&["daemon", "stop"]);
    t.wait_for(&["the daemon stopped: waiting for it to come back"]);
    home.ok(&["daemon", "start"]);
    assert!(
        wait_until(Duration::from_secs(20), || !t
            .screen()
            .contains("the daemon stopped")),
        "{}",
        t.screen()
    );
    repo.ok(&home, &["up", "back"]);
    t.wait_for(&["back", "running"]);
    let pid = t.dashboard_pid();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let screen = t.wait_for(&["EXITED 143", "icanon"]);
    assert!(
        screen.lines().any(|l| l.trim() == "icanon"),
        "raw mode left on:\n{screen}"
    );
    assert_eq!(t.tmux(&["display", "-p", "#{alternate_on}"]).trim(), "0");
}

/// A page in headless Chromium, driven over the DevTools protocol.
struct Browser {
    child: std::process::Child,
    _profile: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    id: u64,
}

impl Browser {
    fn open(url: &str) -> Option<Browser> {
        let Some(chromium) = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            skip("chromium is not installed (.ci/run installs Debian's chromium)");
            return None;
        };
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.path().display()),
                url,
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Chromium writes the port it chose here. The file exists before
        // its first line does (CI once read it empty), so wait for the port.
        let file = profile.path().join("DevToolsActivePort");
        let mut port: Option<u16> = None;
        assert!(
            wait_until(Duration::from_secs(30), || {
                port = std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|t| t.lines().next()?.trim().parse().ok());
                port.is_some()
            }),
            "chromium never listened"
        );
        let port = port.unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut page = None;
        assert!(wait_until(Duration::from_secs(20), || {
            let list = http_json(port, "/json/list");
            page = list.as_array().and_then(|a| {
                a.iter()
                    .find(|p| p["type"] == "page")
                    .and_then(|p| p["webSocketDebuggerUrl"].as_str().map(str::to_owned))
            });
            page.is_some()
        }));
        let ws = rt
            .block_on(tokio_tungstenite::connect_async(page.unwrap()))
            .unwrap()
            .0;
        Some(Browser {
            child,
            _profile: profile,
            rt,
            ws,
            id: 0,
        })
    }

    /// `expression`'s value in the page, as a string.
    fn eval(&mut self, expression: &str) -> String {
        use futures_util::{SinkExt, StreamExt};
        self.id += 1;
        let id = self.id;
        let msg = serde_json::json!({
            "id": id,
            "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": true},
        });
        let ws = &mut self.ws;
        let answer = async {
            ws.send(tokio_tungstenite::tungstenite::Message::text(
                msg.to_string(),
            ))
            .await
            .unwrap();
            loop {
                let m = ws.next().await.unwrap().unwrap();
                let v: serde_json::Value =
                    serde_json::from_str(m.to_text().unwrap_or("{}")).unwrap_or_default();
                if v["id"] == id {
                    return match &v["result"]["result"]["value"] {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                }
            }
        };
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), answer).await })
            .unwrap_or_else(|_| panic!("chromium did not answer {expression}"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` on 127.0.0.1:`port` as JSON (Chromium's DevTools list).
fn http_json(port: u16, path: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return serde_json::Value::Null;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    // HTTP/1.1: Chromium's DevTools server does not answer 1.0.
    let _ = write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = c.read_to_string(&mut text);
    text.split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or_default()
}

/// One request to the proxy: the status and the body.
fn proxy_get(port: u16, request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    let _ = c.read_to_string(&mut text);
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (
        status,
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    )
}

#[test]
fn the_web_view_lists_the_worlds_live_and_answers_only_its_own_names() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}{}",
        project_header("webv", 8),
        http_service("web", "")
    ));
    repo.ok(&home, &["up", "alpha"]);
    repo.ok(&home, &["up", "beta"]);
    let port = home.ok(&["config", "--json"]).json()["proxy_port"]
        .as_u64()
        .unwrap() as u16;

    // A page elsewhere that rebinds its name to 127.0.0.1 sends its own
    // Host: no table for it, and no list of what runs here.
    let (status, body) = proxy_get(
        port,
        &format!("GET / HTTP/1.0\r\nHost: rebind.example:{port}\r\n\r\n"),
    );
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("alpha"), "{body}");
    assert!(
        body.contains(&format!("http://binky.localhost:{port}/")),
        "{body}"
    );
    // Read-only.
    let (status, _) = proxy_get(
        port,
        &format!("POST / HTTP/1.0\r\nHost: binky.localhost:{port}\r\nContent-Length: 0\r\n\r\n"),
    );
    assert_eq!(status, 405);
    // localhost with no world host is the page too.
    let (status, body) = proxy_get(
        port,
        &format!("GET / HTTP/1.0\r\nHost: localhost:{port}\r\n\r\n"),
    );
    assert_eq!(status, 200);
    assert!(body.contains("alpha") && body.contains("beta"), "{body}");

    let Some(mut b) = Browser::open(&format!("http://binky.localhost:{port}/")) else {
        return;
    };
    let table =
        "document.getElementById('worlds') ? document.getElementById('worlds').innerText : ''";
    let mut text = String::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            text = b.eval(table);
            text.contains("alpha") && text.contains("beta")
        }),
        "{text}"
    );
    assert!(wait_until(Duration::from_secs(10), || b
        .eval("document.getElementById('live').textContent")
        == "live"));
    // Each URL is a link.
    let links = b.eval("[...document.querySelectorAll('a')].map(a => a.href).join(' ')");
    assert!(links.contains("http://web.alpha.webv.localhost"), "{links}");
    // The page follows the daemon: beta goes down, the page says so.
    repo.ok(&home, &["down", "beta"]);
    let row = "[...document.querySelectorAll('tr')].map(r => r.innerText).find(t => t.startsWith('beta')) || ''";
    assert!(
        wait_until(Duration::from_secs(20), || {
            text = b.eval(row);
            text.contains("stopped")
        }),
        "{text}"
    );
}
