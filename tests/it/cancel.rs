//! Cancelling `up`: Ctrl-C in the CLI, `notifications/cancelled` over MCP.

use crate::harness::*;
use crate::project::*;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

/// A world whose web service never becomes healthy (its probe aims at a
/// path that does not exist), after a slice that is provisioned first.
fn slow_world(name: &str, marker: &str) -> Repo {
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n[services.web]\ncmd = \"exec python3 -c 'import http.server as h, sys; h.test(HandlerClass=h.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind=\\\"127.0.0.1\\\")  # {marker}' ${{self.port}}\"\nurl = \"web\"\ndepends_on = [\"db\"]\nhealth = {{ http = \"/never-there\", timeout = \"60s\" }}\n",
        project_header(name, 1)
    );
    Repo::new(&toml)
}

fn assert_cancelled_cleanly(repo: &Repo, home: &Home, marker: &str) {
    let w = &repo.worlds(home)["x"];
    assert_eq!(w["state"], "stopped", "{w}");
    assert!(
        w["error"].as_str().unwrap_or("").contains("cancelled"),
        "{w}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || pids_with(marker).is_empty()),
        "the service it started still runs: {:?}",
        pids_with(marker)
    );
    // The slice it finished is kept, as `down` would keep it.
    let db = w["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "db")
        .unwrap();
    assert_eq!(db["state"], "provisioned", "{w}");
    assert!(home.events().iter().any(|e| e["event"] == "up_cancelled"));
}

/// Starts `up x` of a slow world, sends `binky` signal `sig` once its
/// service runs, and returns what it printed, with the world (checked to be
/// cancelled cleanly) and its home.
fn signal_up(sig: &str) -> (Out, Repo, Home, String) {
    signal_up_with(sig, true)
}

/// [`signal_up`], the daemon started first or (`started` false) by the
/// `up` itself.
fn signal_up_with(sig: &str, started: bool) -> (Out, Repo, Home, String) {
    let home = Home::new();
    let marker = format!("CANCEL{sig}{started}{}", std::process::id());
    let repo = slow_world(&format!("cancel{}", sig.to_lowercase()), &marker);
    if started {
        home.ok(&["daemon", "start"]);
    }
    let child = repo
        .cmd(&home, &["up", "x"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !pids_with(&marker).is_empty()),
        "the service never started"
    );
    let _ = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status();
    let out = Out(child.wait_with_output().unwrap());
    (out, repo, home, marker)
}

#[test]
fn ctrl_c_during_up_cancels_it_in_the_daemon_and_says_so() {
    let (out, repo, home, marker) = signal_up("INT");
    assert_eq!(out.code(), 130, "{out}");
    assert!(out.stderr().contains("cancelling `up x`"), "{out}");
    assert!(out.stderr().contains("was cancelled"), "{out}");
    assert_cancelled_cleanly(&repo, &home, &marker);
    // And it comes up again on demand (here it would wait for its probe
    // again, so only the world's state is checked).
    repo.ok(&home, &["remove", "x", "--force"]);
}

/// The CLI that starts the daemon keeps a thread to reap it; were the
/// signals not blocked there, the kernel would hand it the Ctrl-C, and
/// `up` would die of it with nothing said and nothing cancelled (chaos).
#[test]
fn ctrl_c_cancels_an_up_that_started_the_daemon_itself() {
    let (out, repo, home, marker) = signal_up_with("INT", false);
    assert_eq!(out.code(), 130, "{out}");
    assert!(out.stderr().contains("cancelling `up x`"), "{out}");
    assert_cancelled_cleanly(&repo, &home, &marker);
    repo.ok(&home, &["remove", "x", "--force"]);
}

#[test]
fn sigterm_or_sighup_to_up_cancels_it_too_with_the_signals_exit_status() {
    for (sig, code) in [("TERM", 143), ("HUP", 129)] {
        let (out, repo, home, marker) = signal_up(sig);
        assert_eq!(out.code(), code, "SIG{sig}: {out}");
        assert!(out.stderr().contains("was cancelled"), "SIG{sig}: {out}");
        assert_cancelled_cleanly(&repo, &home, &marker);
        repo.ok(&home, &["remove", "x", "--force"]);
    }
}

#[test]
fn an_mcp_client_cancelling_up_cancels_it_in_the_daemon() {
    let home = Home::new();
    let marker = format!("CANCELMCP{}", std::process::id());
    let repo = slow_world("cancelmcp", &marker);
    let mut child = repo
        .cmd(&home, &["mcp", "--machine"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"raw","version":"0"}}}}}}"#).unwrap();
    stdout.read_line(&mut line).unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"up","arguments":{{"name":"x"}}}}}}"#).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !pids_with(&marker).is_empty()),
        "the service never started"
    );
    writeln!(stdin, r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":2,"reason":"the user changed their mind"}}}}"#).unwrap();
    // Whatever the server answers the cancelled call (MCP lets it say
    // nothing), the daemon stops what `up` started.
    assert!(
        wait_until(Duration::from_secs(10), || repo.worlds(&home)["x"]["state"]
            == "stopped"),
        "{:?}",
        repo.worlds(&home)["x"]
    );
    assert_cancelled_cleanly(&repo, &home, &marker);
    drop(stdin);
    let _ = child.wait();
    repo.ok(&home, &["remove", "x", "--force"]);
}
