//! No value from outside binky.toml — here a world (branch) name — can
//! change the shape of a command Binky runs.

use crate::harness::*;
use crate::project::*;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

/// Names that would run `touch <marker>` if rendered into a shell command.
fn attacks(marker: &str) -> Vec<String> {
    vec![
        format!("feat;touch${{IFS}}{marker};y"),
        format!("feat/$(touch${{IFS}}{marker})"),
        format!("feat`touch${{IFS}}{marker}`"),
        format!("feat|touch${{IFS}}{marker}"),
        format!("feat&&touch${{IFS}}{marker}"),
        format!("feat'$(touch${{IFS}}{marker})'"),
        format!("feat\"$(touch${{IFS}}{marker})\""),
        "feat*".to_owned(),
        format!("feat\ntouch {marker}"),
        format!("feat>{marker}"),
    ]
}

/// A project whose every command renders `${worktree.name}`.
fn everywhere(marker: &str) -> Repo {
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nmigrate = \"echo migrating ${{worktree.name}}\"\nseed = \"echo seeding ${{worktree.name}}\"\n[services.web]\ncmd = \"echo world=${{worktree.name}}; exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"web\"\ndepends_on = [\"db\"]\nhealth = {{ cmd = \"echo ${{worktree.name}} && true\" }}\n[agents]\nverify = [\"echo ${{worktree.name}}\"]\n# {marker}\n",
        project_header("inject", 1)
    );
    Repo::new(&toml)
}

#[test]
fn a_world_name_with_shell_metacharacters_is_refused_by_the_cli() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let m = marker.display().to_string();
    let repo = everywhere(&m);
    for name in attacks(&m) {
        for verb in ["up", "reload"] {
            let out = repo.run(&home, &[verb, "--", &name]);
            assert_ne!(out.code(), 0, "{name:?}: {out}");
            if verb == "up" {
                assert!(
                    out.stderr()
                        .contains("world names may hold letters, digits and"),
                    "{name:?}: {out}"
                );
            }
        }
        assert!(!marker.exists(), "{name:?} ran a command");
    }
    assert!(repo.worlds(&home).is_empty());
    assert!(!repo.worktree_root().exists());
    // A name within the rules works, and every command saw it as data.
    repo.ok(&home, &["up", "feat/x+1@2"]);
    repo.ok(&home, &["verify", "feat/x+1@2"]);
    assert!(!marker.exists());
    repo.ok(&home, &["remove", "feat/x+1@2", "--force"]);
}

#[test]
fn a_world_name_with_shell_metacharacters_is_refused_over_mcp() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let m = marker.display().to_string();
    let repo = everywhere(&m);
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
    for (i, name) in attacks(&m).into_iter().enumerate() {
        let id = 10 + i;
        let call = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "up", "arguments": {"name": name}}
        });
        writeln!(stdin, "{call}").unwrap();
        let reply = loop {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "server closed");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                break v;
            }
        };
        assert_eq!(reply["result"]["isError"], true, "{name:?}: {reply}");
        assert!(
            reply
                .to_string()
                .contains("world names may hold letters, digits and"),
            "{name:?}: {reply}"
        );
        assert!(!marker.exists(), "{name:?} ran a command over MCP");
    }
    drop(stdin);
    let _ = child.wait();
    assert!(repo.worlds(&home).is_empty());
}
