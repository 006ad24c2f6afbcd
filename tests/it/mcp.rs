//! `binky mcp` driven by a real MCP client nobody here wrote: the official
//! Python SDK (`pip install mcp`), installed by .ci/run.

use crate::harness::*;
use crate::project::*;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

#[test]
fn the_official_python_sdk_drives_up_env_verify_down() {
    if !mcp_sdk() {
        return;
    }
    if !crate::adapters::pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let _cleanup = crate::cleanup::Cleanup {
        prefix: "agents_agent-1".into(),
        mysql: false,
    };
    // `talker` prints the token the daemon knows is a secret, and more.
    // `db`'s admin URL has a password, which no agent may ever be handed.
    let toml = format!(
        "{}{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.MCP_PG_ADMIN}}\"\n[services.talker]\ncmd = \"echo token is $API_TOKEN; echo second line; exec sleep 600\"\n[services.notes]\nadapter = \"sqlite\"\nseed = \"python3 notes.py\"\n\n[env]\nAPI_TOKEN = \"${{env.MCP_TEST_TOKEN}}\"\nECHO_BASE = \"${{echo.url}}\"\n[agents]\nverify = [\"test -n \\\"$ECHO_URL\\\"\", \"test ! -e fail-now\"]\n",
        project_header("agents", 4),
        http_service("echo", "")
    );
    let notes = "import os, sqlite3\ndb = sqlite3.connect(os.environ['NOTES_URL'].removeprefix('sqlite://'))\ndb.execute('CREATE TABLE notes (text TEXT)')\ndb.execute(\"INSERT INTO notes VALUES ('seeded')\")\ndb.commit()\n";
    let repo = Repo::with("", &toml, &[("notes.py", notes)]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp_client.py");
    // The client starts `binky mcp` itself, with this home's environment.
    let mut py = home.program("python3", &[script]);
    py.arg(binky_exe()).arg(&repo.project);
    py.env("MCP_TEST_TOKEN", "mcp-secret-token");
    py.env(
        "MCP_PG_ADMIN",
        "postgresql://postgres:McpAdminPw-77@127.0.0.1:5432/postgres",
    );
    let out = Out(py.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let v = out.json();
    assert_eq!(v["server"], "binky");
    // [env] over MCP: a value from the user's shell is never handed out.
    assert!(!out.stdout().contains("mcp-secret-token"), "{v}");
    // The world's database through its own role, never the admin's.
    assert!(!out.stdout().contains("McpAdminPw-77"), "{v}");
    let db = v["env"]["structured"]["services"]["db"]
        .as_str()
        .unwrap_or("");
    assert!(db.starts_with("postgresql://agents_agent-1:"), "{v}");
    let vars = &v["env"]["structured"]["env"];
    assert!(vars["API_TOKEN"].is_null(), "{v}");
    assert!(
        vars["ECHO_BASE"]
            .as_str()
            .unwrap_or("")
            .starts_with("http://echo.agent-1.agents.localhost"),
        "{v}"
    );
    // status: every world by project.
    let st = &v["status"]["structured"]["projects"][0];
    assert_eq!(st["name"], "agents", "{v}");
    assert_eq!(st["worlds"][0]["name"], "agent-1", "{v}");
    assert_eq!(st["worlds"][0]["state"], "running", "{v}");
    // A failing check is a tool error, with each check's result.
    let failing = &v["verify_failing"];
    assert_eq!(failing["isError"], true, "{v}");
    assert_eq!(failing["structured"]["passed"], false, "{v}");
    let checks = failing["structured"]["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2, "{v}");
    assert_eq!(checks[1]["command"], "test ! -e fail-now", "{v}");
    assert_ne!(checks[1]["exit_code"], 0, "{v}");
    // A down error names the world and says what to do.
    assert_eq!(v["down_missing"]["isError"], true, "{v}");
    let dm = v["down_missing"]["text"].as_str().unwrap();
    assert!(dm.contains("no-such-world") && dm.contains("hint"), "{v}");
    assert_eq!(
        v["tools"],
        serde_json::json!([
            "down", "env", "logs", "remove", "reset", "status", "up", "verify"
        ])
    );
    // reset: only a resource, and the seeded data back after the agent
    // deleted it.
    assert_eq!(v["reset_not_a_resource"]["isError"], true, "{v}");
    assert!(
        v["reset_not_a_resource"]["text"]
            .as_str()
            .unwrap()
            .contains("`echo` is not a resource"),
        "{v}"
    );
    assert_eq!(v["reset"]["isError"], false, "{v}");
    assert_eq!(v["reset"]["structured"]["world"]["state"], "running", "{v}");
    assert_eq!(v["notes_after_reset"], serde_json::json!(["seeded"]), "{v}");
    // remove: there is no `force` over MCP (refused, not ignored); a dirty
    // worktree is refused, and the hint never offers forcing it; a clean
    // one is removed.
    let forced = v["remove_forced"].to_string();
    assert!(forced.contains("unknown field `force`"), "{v}");
    assert_eq!(v["remove_dirty"]["isError"], true, "{v}");
    let dirty = v["remove_dirty"]["text"].as_str().unwrap();
    assert!(dirty.contains("fail-now"), "{v}");
    assert!(!dirty.contains("--force"), "{v}");
    assert_eq!(v["remove"]["isError"], false, "{v}");
    assert_eq!(
        v["remove"]["structured"]["world"]["state"], "removed",
        "{v}"
    );
    assert_eq!(v["worktree_after_remove"], false, "{v}");
    // logs: the service's own words, the secret masked.
    let talker: Vec<&str> = v["logs"]["structured"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert!(talker.contains(&"token is ***"), "{v}");
    assert!(talker.contains(&"second line"), "{v}");
    assert!(!v["logs"].to_string().contains("mcp-secret-token"), "{v}");
    // With the cursor, only what was printed since.
    let since = v["logs_since"]["structured"]["lines"].as_array().unwrap();
    assert!(!since.is_empty(), "{v}");
    let text = |l: &serde_json::Value| l["text"].as_str().unwrap().to_owned();
    assert!(since.iter().all(|l| l["service"] == "echo"), "{v}");
    assert!(
        since.iter().any(|l| text(l).contains("GET /cursor-marker")),
        "{v}"
    );
    // Not the health probe's requests from before the cursor.
    assert!(!since.iter().any(|l| text(l).contains("GET / ")), "{v}");
    assert_eq!(v["logs_bad_cursor"]["isError"], true, "{v}");
    assert!(
        v["logs_bad_cursor"]["text"]
            .as_str()
            .unwrap()
            .contains("cursor"),
        "{v}"
    );
    // `name` defaults to a bound server's world, so no field is required.
    assert!(v["up_schema"]["required"].is_null(), "{v}");
    assert_eq!(v["up"]["isError"], false, "{v}");
    assert_eq!(v["up"]["structured"]["world"]["state"], "running");
    assert!(
        !v["progress"].as_array().unwrap().is_empty(),
        "no progress notifications: {v}"
    );
    let echo = v["env"]["structured"]["services"]["echo"].as_str().unwrap();
    assert!(
        echo.starts_with("http://echo.agent-1.agents.localhost"),
        "{v}"
    );
    assert_eq!(v["verify"]["isError"], false, "{v}");
    assert_eq!(v["verify"]["structured"]["passed"], true);
    assert_eq!(v["missing"]["isError"], true);
    // An agent branches on the kind, never on the words.
    assert_eq!(v["missing"]["structured"]["kind"], "not_found", "{v}");
    assert!(
        v["missing"]["text"]
            .as_str()
            .unwrap()
            .contains("no world `no-such-world`"),
        "{v}"
    );
    // An unknown tool is a well-formed error (JSON-RPC or isError), not a crash.
    let unknown = v["unknown_tool"].to_string().to_lowercase();
    assert!(
        unknown.contains("not found") || v["unknown_tool"]["isError"] == true,
        "{v}"
    );
    assert!(
        v["bad_args"].to_string().contains("unknown field `nme`"),
        "{v}"
    );
    assert_eq!(v["down"]["structured"]["world"]["state"], "stopped");
    assert_eq!(v["alive"], 8);
}

/// The queue over MCP: `up` with `wait: false` returns the queued place at
/// once with the group kept; a waiting `up` sends progress while queued;
/// `down` of a queued world takes it out of the queue.
#[test]
fn mcp_up_queues_with_wait_false_and_a_group_and_reports_progress_while_queued() {
    if !mcp_sdk() {
        return;
    }
    let home = Home::new();
    let toml = format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("mcpq", 2)
    );
    let repo = Repo::new(&toml);
    home.max_parallel_only(1);
    repo.ok(&home, &["up", "q-1"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp_queue.py");
    let mut py = home.program("python3", &[script]);
    py.arg(binky_exe()).arg(&repo.project);
    let out = Out(py.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let v = out.json();
    let queued = &v["no_wait"]["structured"]["world"];
    assert_eq!(v["no_wait"]["isError"], false, "{v}");
    assert_eq!(queued["state"], "queued", "{v}");
    assert_eq!(queued["group"], "orch", "{v}");
    assert_eq!(queued["queue"]["position"], 1, "{v}");
    let listed = v["status_queued"]["structured"]["projects"][0]["worlds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "q-2")
        .cloned()
        .unwrap_or_else(|| panic!("q-2 not in status: {v}"));
    assert_eq!(listed["state"], "queued", "{v}");
    assert_eq!(listed["group"], "orch", "{v}");
    assert_eq!(v["saw_queued"], true, "no queued progress: {v}");
    assert!(
        v["progress_while_queued"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m.as_str().is_some_and(|m| m.contains("max_parallel 1"))),
        "the progress says why: {v}"
    );
    assert_eq!(v["down_queued"]["isError"], false, "{v}");
    assert!(
        v["down_queued"]["text"].as_str().unwrap().contains("queue")
            || v["down_queued"]["structured"]["left_queue"] == true,
        "{v}"
    );
    assert_eq!(v["waited"]["isError"], false, "{v}");
    assert_eq!(
        v["waited"]["structured"]["world"]["state"], "running",
        "{v}"
    );
    let worlds = repo.worlds(&home);
    assert!(!worlds.contains_key("q-2"), "{worlds:?}");
    assert_eq!(worlds["q-3"]["state"], "running");
    assert_eq!(worlds["q-1"]["state"], "stopped");
    let withdrawn: Vec<_> = home
        .events()
        .into_iter()
        .filter(|e| e["event"] == "admission_withdrawn")
        .collect();
    assert_eq!(withdrawn.len(), 1, "{withdrawn:?}");
    assert_eq!(withdrawn[0]["worktree"], "q-2", "{withdrawn:?}");
}

#[test]
fn malformed_input_gets_an_error_and_the_server_keeps_serving() {
    let home = Home::new();
    let mut child = home
        .cmd(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    writeln!(stdin, "{init}").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).expect("stdout carries JSON-RPC only");
    assert_eq!(v["id"], 1);
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(stdin, "this is not json").unwrap();
    // One byte past the bound on an MCP message: refused by size, with
    // its own id, before anything parses it.
    let head = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"status","arguments":{"project":""#;
    let tail = r#""}}}"#;
    let pad = "p".repeat((1 << 20) + 1 - head.len() - tail.len());
    writeln!(stdin, "{head}{pad}{tail}").unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list"}}"#).unwrap();
    // The garbage gets JSON-RPC's parse error (id null), and tools/list is
    // still answered — in either order: the two replies are written by
    // different tasks. Lines are read on a thread so a missing one fails
    // the test in 10 s instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while stdout.read_line(&mut line).is_ok_and(|n| n > 0) {
            if tx.send(std::mem::take(&mut line)).is_err() {
                break;
            }
        }
    });
    let (mut got_list, mut got_parse_error, mut got_too_big) = (false, false, false);
    while !(got_list && got_parse_error && got_too_big) {
        let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(10)) else {
            break;
        };
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON on stdout");
        if v["id"].is_null() && v["error"]["code"] == -32700 {
            got_parse_error = true;
        }
        if v["id"] == 3 {
            assert_eq!(v["error"]["code"], -32600, "{v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("message of 1048577 bytes refused"),
                "{v}"
            );
            got_too_big = true;
        }
        if v["id"] == 2 {
            assert_eq!(v["result"]["tools"].as_array().unwrap().len(), 8);
            got_list = true;
        }
    }
    assert!(
        got_parse_error,
        "no -32700 parse error for a malformed line"
    );
    assert!(got_too_big, "no error for a message past the bound");
    assert!(got_list, "server stopped answering after malformed input");
    drop(stdin);
    let _ = child.wait();
}

#[test]
fn the_mcp_inspector_cli_lists_the_eight_tools() {
    let inspector = std::env::var("BINKY_TEST_MCP_INSPECTOR").unwrap_or_else(|_| {
        format!(
            "{}/.cache/binky-npm/node_modules/.bin/mcp-inspector",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    if !std::path::Path::new(&inspector).exists() {
        skip(&format!(
            "MCP Inspector not installed at {inspector} (.ci/run installs it from npm)"
        ));
        return;
    }
    let home = Home::new();
    let mut c = home.program(&inspector, &["--cli"]);
    c.args([binky_exe(), "mcp", "--method", "tools/list"]);
    let out = Out(c.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let v = out.json();
    let mut names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "down", "env", "logs", "remove", "reset", "status", "up", "verify"
        ]
    );
}
