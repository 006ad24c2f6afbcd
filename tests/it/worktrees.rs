//! A world's worktree is what the user's own `git worktree add` makes.

use crate::harness::*;
use crate::project::*;

#[test]
fn a_world_gets_the_filtered_content_and_hooks_git_itself_gives() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\n",
        project_header("filters", 1)
    );
    let repo = Repo::with(
        "",
        &toml,
        &[
            (".gitattributes", "*.dat filter=upper\n"),
            (".gitignore", "hook-ran\n"),
            ("data.dat", "hello from the repository\n"),
        ],
    );
    // A smudge filter (as Git LFS is one) and a post-checkout hook, both
    // configured in the repository, as a user's would be.
    git(&repo.main, &["config", "filter.upper.smudge", "tr a-z A-Z"]);
    git(&repo.main, &["config", "filter.upper.clean", "tr A-Z a-z"]);
    let hook = repo.main.join(".git/hooks/post-checkout");
    std::fs::write(&hook, "#!/bin/sh\necho \"$3\" > hook-ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    // What git makes by hand...
    let by_hand = repo.main.parent().unwrap().join("by-hand");
    git(
        &repo.main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "hand",
            by_hand.to_str().unwrap(),
        ],
    );
    // ...and what binky makes.
    repo.ok(&home, &["up", "x"]);
    let wt = std::path::PathBuf::from(repo.worlds(&home)["x"]["path"].as_str().unwrap());
    for dir in [&by_hand, &wt] {
        assert_eq!(
            std::fs::read_to_string(dir.join("data.dat")).unwrap(),
            "HELLO FROM THE REPOSITORY\n",
            "{}",
            dir.display()
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("hook-ran"))
                .unwrap()
                .trim(),
            "1",
            "post-checkout did not run in {}",
            dir.display()
        );
    }
    // Clean through the filter: nothing to commit, so remove needs no force.
    repo.ok(&home, &["remove", "x"]);
    assert!(!wt.exists());
}

#[test]
fn without_git_on_path_up_fails_clearly_and_makes_nothing() {
    let home = Home::new();
    let toml = format!("{}{}", project_header("nogit", 2), http_service("web", ""));
    let repo = Repo::new(&toml);
    let bin = tempfile::tempdir().unwrap();
    let path = path_without("git", bin.path());
    let out = Out(repo
        .cmd(&home, &["up", "x"])
        .env("PATH", &path)
        .output()
        .unwrap());
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("git is not on PATH"), "{out}");
    assert!(out.stderr().contains("install git"), "{out}");
    assert!(repo.worlds(&home).is_empty());
    assert_eq!(home.ok(&["metrics"]).json()["port_reservations"], 0);
    assert!(!repo.worktree_root().exists());
}

#[test]
fn a_repository_owned_by_another_user_is_named_with_what_git_says() {
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !is_root {
        skip("needs root to give a repository to another user");
        return;
    }
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("notmine", 1)
    ));
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534:65534", repo.main.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(chown.success());
    let out = Out(repo
        .cmd(&home, &["up", "x"])
        // No safe.directory from the developer's own git config.
        .env("HOME", home.path())
        .output()
        .unwrap());
    let _ = std::process::Command::new("chown")
        .args(["-R", "0:0", repo.main.to_str().unwrap()])
        .status();
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("dubious ownership"), "{out}");
    assert!(out.stderr().contains("safe.directory"), "{out}");
}
