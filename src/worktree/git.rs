//! The user's own `git`, run as they would run it: their executable and
//! environment, minus what would point it at another repository, and
//! never waiting on a prompt.

use super::WorktreeError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The user's `git`: the executable and the environment to run it in.
#[derive(Clone)]
pub(crate) struct Git {
    exe: PathBuf,
    env: Vec<(OsString, OsString)>,
}

// Hand-written: the environment may hold credentials.
impl std::fmt::Debug for Git {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Git")
            .field("exe", &self.exe)
            .finish_non_exhaustive()
    }
}

/// Variables that point git at another repository or index; a caller
/// running `binky` from inside a git hook has them set, and they must not
/// redirect the world's worktree commands.
const REPO_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_OBJECT_DIRECTORY",
    "GIT_NAMESPACE",
];

impl Git {
    /// The `git` on `search_path` (the daemon's `PATH` when `None`), run with
    /// `env` (the caller's; the daemon's when empty).
    ///
    /// # Errors
    /// [`WorktreeError::NoGit`] when there is none.
    pub(crate) fn find(
        search_path: Option<&std::ffi::OsStr>,
        env: &[(String, String)],
    ) -> Result<Git, WorktreeError> {
        let exe =
            crate::platform::find_executable(&["git"], search_path).ok_or(WorktreeError::NoGit)?;
        let env: Vec<(OsString, OsString)> = if env.is_empty() {
            std::env::vars_os().collect()
        } else {
            env.iter().map(|(k, v)| (k.into(), v.into())).collect()
        };
        let env = env
            .into_iter()
            .filter(|(k, _)| !REPO_VARS.iter().any(|v| k == v))
            .collect();
        Ok(Git { exe, env })
    }

    /// Runs `git -C dir args…`, failing with git's own stderr.
    pub(super) fn run(&self, dir: &Path, args: &[&std::ffi::OsStr]) -> Result<(), WorktreeError> {
        self.output(dir, args).map(drop)
    }

    /// Runs `git -C dir args…` and returns its stdout, failing with git's
    /// own stderr.
    pub(super) fn output(
        &self,
        dir: &Path,
        args: &[&std::ffi::OsStr],
    ) -> Result<String, WorktreeError> {
        let out = crate::platform::std_command(&self.exe)
            .arg("-C")
            .arg(dir)
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // Never ask for credentials or an editor: there is no one there.
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(std::process::Stdio::null())
            .output()?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let text = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        Err(WorktreeError::Command {
            args: args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            stderr: lines[lines.len().saturating_sub(6)..].join("\n"),
        })
    }
}
