//! Unit tests of `worktree`.

use super::*;
use crate::testkit::git;
use std::process::Command;

fn repo() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let main = t.path().join("app");
    std::fs::create_dir(&main).unwrap();
    git(&main, &["init", "-q"]);
    std::fs::write(main.join("README"), "hi").unwrap();
    git(&main, &["add", "."]);
    git(&main, &["commit", "-qm", "init"]);
    (t, main)
}

fn git_cli() -> Git {
    Git::find(None, &[]).unwrap()
}

#[test]
fn creates_reuses_and_recovers() {
    let (_t, main) = repo();
    let g = git_cli();
    let root = default_root(&main);
    let up = || {
        ensure(
            &g,
            &main,
            "feature/Login-Page",
            "feature-login-page-x",
            &root,
        )
    };
    let a = up().unwrap();
    assert!(a.created && a.path.join("README").exists());
    let again = up().unwrap();
    assert_eq!(again.path, a.path);
    assert!(!again.created);
    std::fs::remove_dir_all(&a.path).unwrap();
    let rec = up().unwrap();
    assert!(rec.created && rec.recreated);
    assert_eq!(rec.path, a.path);
    assert!(changes(&g, &rec.path).unwrap().is_empty());
    std::fs::write(rec.path.join("new.txt"), "x").unwrap();
    assert_eq!(changes(&g, &rec.path).unwrap(), vec!["?? new.txt"]);
    remove(&g, &main, &rec.path).unwrap();
    assert!(!rec.path.exists());
    assert_eq!(
        Repository::open(&main).unwrap().worktrees().unwrap().len(),
        0
    );
    // The branch survives removal.
    assert!(
        Repository::open(&main)
            .unwrap()
            .find_branch("feature/Login-Page", BranchType::Local)
            .is_ok()
    );
}

#[test]
fn reuses_a_hand_made_worktree_and_refuses_the_main_branch() {
    let (t, main) = repo();
    let by_hand = t.path().join("by-hand");
    git(
        &main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feat-x",
            by_hand.to_str().unwrap(),
        ],
    );
    let g = git_cli();
    let e = ensure(&g, &main, "feat-x", "feat-x", &default_root(&main)).unwrap();
    assert_eq!(
        e.path.canonicalize().unwrap(),
        by_hand.canonicalize().unwrap()
    );
    let err = ensure(&g, &main, "main", "main", &default_root(&main)).unwrap_err();
    assert!(
        err.to_string().contains("checked out in the main worktree"),
        "{err}"
    );
    for bad in ["bad..name", "-x", "--force"] {
        assert!(matches!(
            ensure(&g, &main, bad, "bad", &default_root(&main)),
            Err(WorktreeError::InvalidBranch { .. })
        ));
    }
}

/// The rules agree with the user's own git on every name, and a name
/// git refuses is refused naming the rule.
#[test]
fn branch_rules_agree_with_git_check_ref_format() {
    let names = [
        "feat",
        "feat/a",
        "a..b",
        "a@{b",
        "a@b",
        "@",
        "x.",
        "a/.b",
        ".a",
        "a.lock",
        "a.lock/b",
        "b/a.lockx",
        "a//b",
        "a/",
        "/a",
        "a b",
        "a:b",
        "a~1",
        "a^",
        "a?",
        "a*",
        "a[b",
        "a\\b",
        "ä/ö",
        "a\u{7f}",
        "a\tb",
        "-x",
        "a-",
        "a.b.c",
        "",
    ];
    for n in names {
        let git_ok = Command::new("git")
            .args(["check-ref-format", &format!("refs/heads/{n}")])
            .output()
            .expect("git")
            .status
            .success()
            && !n.starts_with('-')
            && !n.is_empty();
        assert_eq!(
            branch_rule_broken(n).is_none(),
            git_ok,
            "{n:?}: ours {:?}",
            branch_rule_broken(n)
        );
    }
    assert_eq!(
        branch_rule_broken("a..b"),
        Some("it holds `..` (git reads it as a range)")
    );
    assert_eq!(
        branch_rule_broken("feat/x.lock"),
        Some("a part of it (between `/`) ends with `.lock`")
    );
}
