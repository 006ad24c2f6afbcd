//! Agent hosts wired to Binky (issue 52 §1): Claude Code's worktree hooks
//! driven with the payload shapes its versions send, and `binky up` with
//! no name inside a worktree someone else made.

use crate::harness::*;
use crate::project::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// `binky hook claude <action>` in `dir` with `stdin` as its input.
fn hook(home: &Home, dir: &Path, action: &str, stdin: &str) -> Out {
    let mut c = home.cmd(&["hook", "claude", action]);
    c.current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    Out(child.wait_with_output().unwrap())
}

fn running(repo: &Repo, home: &Home, world: &str) -> bool {
    wait_until(Duration::from_secs(60), || {
        repo.worlds(home)
            .get(world)
            .is_some_and(|w| w["state"] == "running")
    })
}

/// A worktree made by hand (`git worktree add`), on new branch `branch`.
fn worktree_add(repo: &Repo, branch: &str, at: &Path) {
    git(
        &repo.main,
        &["worktree", "add", "-q", "-b", branch, at.to_str().unwrap()],
    );
}

fn branch_at(path: &Path) -> String {
    git(path, &["branch", "--show-current"]).trim().to_owned()
}

#[test]
fn claudes_worktree_hooks_make_a_world_print_its_path_and_remove_it_only_when_clean() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}{}",
        project_header("hookc", 4),
        http_service("web", "")
    ));
    let project = repo.project_dir().display().to_string();

    // The runtime's shape: `name`, with fields binky does not read.
    let payload = serde_json::json!({
        "session_id": "abc123",
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": project,
        "hook_event_name": "WorktreeCreate",
        "name": "agent-a1",
    });
    let out = hook(
        &home,
        repo.project_dir(),
        "worktree-create",
        &payload.to_string(),
    );
    assert_eq!(out.code(), 0, "{out}");
    // Only the path on stdout: Claude Code reads it as the worktree.
    let printed = out.stdout();
    assert_eq!(printed.lines().count(), 1, "{out}");
    let path = PathBuf::from(printed.trim_end());
    assert!(path.is_absolute() && path.is_dir(), "{out}");
    assert_eq!(branch_at(&path), "agent-a1");
    assert!(
        running(&repo, &home, "agent-a1"),
        "{:?}",
        repo.worlds(&home)
    );
    assert_eq!(
        repo.worlds(&home)["agent-a1"]["path"].as_str().unwrap(),
        path.display().to_string()
    );

    // The documented shape, run from elsewhere: `worktree_name`, the
    // project found from `cwd`, unknown fields ignored.
    let payload = serde_json::json!({
        "hook_event_name": "WorktreeCreate",
        "worktree_name": "agent-b2",
        "base_path": "/nowhere/.worktrees",
        "source_ref": "main",
        "cwd": project,
        "future": {"nested": [1, 2]},
    });
    let out = hook(
        &home,
        Path::new("/"),
        "worktree-create",
        &payload.to_string(),
    );
    assert_eq!(out.code(), 0, "{out}");
    let b = PathBuf::from(out.stdout().trim_end());
    assert_eq!(branch_at(&b), "agent-b2");
    assert!(!Path::new("/nowhere").exists());
    // Recorded by the background `up`: counted below once it is there.
    assert!(
        running(&repo, &home, "agent-b2"),
        "{:?}",
        repo.worlds(&home)
    );

    // Bad input: a clear error, a non-zero exit, nothing made.
    let before = repo.worlds(&home).len();
    for (input, says) in [
        ("agent-c3", "not JSON"),
        ("[\"agent-c3\"]", "not an object"),
        (&*format!("{{\"cwd\": \"{project}\"}}"), "`name`"),
        ("{\"name\": \"-x\"}", "-x"),
        (
            "{\"name\": \"x\", \"cwd\": \"/no/such/dir\"}",
            "/no/such/dir",
        ),
        ("{\"name\": \"x\", \"cwd\": \"relative\"}", "`cwd`"),
        ("{\"name\": 5}", "not a string"),
    ] {
        let out = hook(&home, repo.project_dir(), "worktree-create", input);
        assert_ne!(out.code(), 0, "{input}: {out}");
        assert!(out.stdout().is_empty(), "{input}: {out}");
        assert!(out.stderr().contains(says), "{input}: {out}");
    }
    assert_eq!(repo.worlds(&home).len(), before);

    // A branch whose own binky.toml cannot be read fails the hook, which
    // says why, rather than the world failing unseen in the background.
    git(&repo.main, &["switch", "-q", "-c", "no-toml"]);
    git(&repo.main, &["rm", "-q", "binky.toml"]);
    git(&repo.main, &["commit", "-qm", "no config here"]);
    git(&repo.main, &["switch", "-q", "main"]);
    let out = hook(
        &home,
        repo.project_dir(),
        "worktree-create",
        &serde_json::json!({ "name": "no-toml", "cwd": project }).to_string(),
    );
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.stdout().is_empty(), "{out}");
    assert!(out.stderr().contains("binky.toml"), "{out}");

    // Remove: never forced. Uncommitted work keeps the world, and says so.
    std::fs::write(path.join("notes.txt"), "work in progress").unwrap();
    let remove = serde_json::json!({
        "hook_event_name": "WorktreeRemove",
        "worktree_path": path.display().to_string(),
        "session_id": "abc123",
    })
    .to_string();
    let out = hook(&home, Path::new("/"), "worktree-remove", &remove);
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("kept"), "{out}");
    assert!(path.join("notes.txt").is_file());
    assert!(repo.worlds(&home).contains_key("agent-a1"));
    std::fs::remove_file(path.join("notes.txt")).unwrap();
    let out = hook(&home, Path::new("/"), "worktree-remove", &remove);
    assert_eq!(out.code(), 0, "{out}");
    assert!(!path.exists());
    assert!(!repo.worlds(&home).contains_key("agent-a1"));

    // A worktree that is no world's is left alone.
    let theirs = repo.worktree_root().join("theirs");
    worktree_add(&repo, "theirs", &theirs);
    let out = hook(
        &home,
        Path::new("/"),
        "worktree-remove",
        &serde_json::json!({ "worktree_path": theirs.display().to_string() }).to_string(),
    );
    assert_ne!(out.code(), 0, "{out}");
    assert!(theirs.is_dir(), "{out}");

    // The world is the folder's, whatever the agent checked out there since.
    git(&b, &["switch", "-q", "-c", "agent-b2-moved"]);
    let out = hook(
        &home,
        Path::new("/"),
        "worktree-remove",
        &serde_json::json!({ "worktree_path": b.display().to_string() }).to_string(),
    );
    assert_eq!(out.code(), 0, "{out}");
    assert!(!repo.worlds(&home).contains_key("agent-b2"));
}

#[test]
fn up_with_no_name_attaches_a_world_to_the_worktree_it_runs_in() {
    let home = Home::new();
    let repo = Repo::with(
        "svc",
        &format!("{}{}", project_header("hookn", 4), http_service("web", "")),
        &[],
    );
    // A worktree another host made, outside binky's worktree root.
    let elsewhere = tempfile::tempdir().unwrap();
    let wt = elsewhere.path().join("their-wt");
    worktree_add(&repo, "feat-n", &wt);
    let mut c = home.cmd(&["up"]);
    c.current_dir(wt.join("svc"));
    let out = Out(c.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout().contains("feat-n"), "{out}");
    let world = &repo.worlds(&home)["feat-n"];
    assert_eq!(
        world["path"].as_str().unwrap(),
        wt.canonicalize().unwrap().display().to_string()
    );
    assert_eq!(world["state"], "running");

    // Not in a world's worktree: said, exit 2, nothing made.
    let out = repo.run(&home, &["up"]);
    assert_eq!(out.code(), 2, "{out}");
    assert!(out.stderr().contains("main worktree"), "{out}");
    git(&wt, &["switch", "-q", "--detach"]);
    let mut c = home.cmd(&["up"]);
    c.current_dir(&wt);
    let out = Out(c.output().unwrap());
    assert_eq!(out.code(), 2, "{out}");
    assert!(out.stderr().contains("detached HEAD"), "{out}");
    assert_eq!(repo.worlds(&home).len(), 1);
    git(&wt, &["switch", "-q", "feat-n"]);
    // The folder is the host's: `remove` will not delete it, and `--force`
    // removes the world and leaves it.
    let out = repo.run(&home, &["remove", "feat-n"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("not one binky made"), "{out}");
    repo.ok(&home, &["remove", "feat-n", "--force"]);
    assert!(wt.join("svc").join("binky.toml").is_file());
    assert!(repo.worlds(&home).is_empty());
}

#[test]
fn hook_install_merges_into_claudes_settings_and_never_clobbers() {
    let home = Home::new();
    let repo = Repo::new(&project_header("hooki", 2));
    let settings = repo.main.join(".claude").join("settings.json");

    // Nothing there: --dry-run prints both hooks and writes nothing.
    let out = repo.run(&home, &["hook", "claude", "install", "--dry-run"]);
    assert_eq!(out.code(), 0, "{out}");
    assert!(
        out.stdout().contains("binky hook claude worktree-create"),
        "{out}"
    );
    assert!(!settings.exists());

    // The agents guide shows exactly what it writes.
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/agents.md"))
            .unwrap();
    let shown = guide
        .split("### Claude Code")
        .nth(1)
        .and_then(|s| s.split("```json\n").nth(1))
        .and_then(|s| s.split("\n```").next())
        .expect("the guide's Claude Code settings example");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(shown).unwrap(),
        out.json(),
        "docs/src/agents.md shows other settings than `install` writes"
    );

    // The user's settings are kept, key by key, in their order.
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let theirs = "{\n  \"model\": \"opus\",\n  \"hooks\": {\n    \"PreToolUse\": [{\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"lint\"}]}]\n  },\n  \"env\": {\"Z\": \"1\", \"A\": \"2\"}\n}\n";
    std::fs::write(&settings, theirs).unwrap();
    let out = repo.run(&home, &["hook", "claude", "install"]);
    assert_eq!(out.code(), 0, "{out}");
    let text = std::fs::read_to_string(&settings).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["model"], "opus");
    assert_eq!(v["hooks"]["PreToolUse"][0]["hooks"][0]["command"], "lint");
    assert_eq!(
        v["hooks"]["WorktreeRemove"][0]["hooks"][0]["command"],
        "binky hook claude worktree-remove"
    );
    assert!(text.find("\"model\"") < text.find("\"env\""), "{text}");
    assert!(text.find("\"Z\"") < text.find("\"A\""), "{text}");
    assert!(!out.stdout().contains('\u{1b}'), "NO_COLOR: {out}");
    // Again: nothing to do, nothing changed.
    let out = repo.run(&home, &["hook", "claude", "install"]);
    assert!(out.stdout().contains("nothing to do"), "{out}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), text);

    // A file it cannot read is named with its line, and left as it was.
    std::fs::write(&settings, "{\n  \"hooks\": {,\n}\n").unwrap();
    let out = repo.run(&home, &["hook", "claude", "install"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("line 2"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        "{\n  \"hooks\": {,\n}\n"
    );

    // A settings file that is a link is written where it points, the link
    // kept; a read-only one is refused and left as it was.
    let dotfiles = tempfile::tempdir().unwrap();
    let target = dotfiles.path().join("claude.json");
    std::fs::write(&target, "{}\n").unwrap();
    std::fs::remove_file(&settings).unwrap();
    std::os::unix::fs::symlink(&target, &settings).unwrap();
    let out = repo.run(&home, &["hook", "claude", "install"]);
    assert_eq!(out.code(), 0, "{out}");
    assert!(
        settings
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::read_to_string(&target)
            .unwrap()
            .contains("worktree-create")
    );
    std::fs::write(&target, "{}\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o444)).unwrap();
    let out = repo.run(&home, &["hook", "claude", "install"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("read-only"), "{out}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "{}\n");

    // --user writes ~/.claude/settings.json.
    let user_home = tempfile::tempdir().unwrap();
    let out = Out(repo
        .cmd(&home, &["hook", "claude", "install", "--user"])
        .env("HOME", user_home.path())
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
    assert!(user_home.path().join(".claude/settings.json").is_file());
}
