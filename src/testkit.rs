//! What unit tests across modules share (built for tests only).

use std::path::Path;
use std::process::Command;

/// Runs the real `git` in `dir` with a throwaway identity and `main` as the
/// default branch, asserting success (git's output in the failure).
pub(crate) fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}
