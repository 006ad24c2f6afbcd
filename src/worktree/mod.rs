//! Git worktrees: made and removed by the user's own `git`, read through
//! libgit2 (git2).
//!
//! One world = one worktree with its branch checked out. [`ensure`] reuses a
//! worktree that already has the branch (even one made by hand with
//! `git worktree add`), recovers one whose folder was deleted, or adds a new
//! one for the local branch, for `origin/<branch>` (creating the tracking
//! branch), or for a new branch from the main worktree's HEAD.
//!
//! Every change to the repository runs the `git` found on the caller's
//! `PATH`, with the caller's environment, so a world's worktree is exactly
//! what `git worktree add` makes in the user's shell: clean/smudge filters
//! (Git LFS), the `post-checkout` hook, sparse-checkout and whatever else
//! git does. libgit2 does none of those; it is used only to read.

pub(crate) mod copy;
mod git;

pub(crate) use git::Git;

use git2::{BranchType, Repository};
use std::path::{Path, PathBuf};

/// Why a worktree operation failed. Messages name paths and what to do.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The folder is not inside a git repository.
    #[error("{0} is not inside a git repository")]
    NotARepo(PathBuf),
    /// Git refuses a repository another user owns (CVE-2022-24765).
    #[error(
        "git refuses the repository at {0}: it is owned by another user (\"dubious ownership\"); if you trust it, run `git config --global --add safe.directory {0}`"
    )]
    DubiousOwnership(PathBuf),
    /// The branch name is not a valid git ref name.
    #[error("`{name}` is not a valid git branch name: {rule}")]
    InvalidBranch {
        /// The name as given.
        name: String,
        /// The rule of `git check-ref-format` it breaks.
        rule: &'static str,
    },
    /// The branch is checked out somewhere Binky must not take it from.
    #[error("branch `{branch}` is checked out in {where_} at {path}")]
    CheckedOutElsewhere {
        /// The branch.
        branch: String,
        /// "the main worktree" or "a locked worktree".
        where_: &'static str,
        /// Where.
        path: PathBuf,
    },
    /// The target folder exists and is not a worktree of this repository.
    #[error("{0} already exists and is not a worktree of this repository")]
    PathTaken(PathBuf),
    /// Anything libgit2 reports.
    #[error("git: {}", git_message(.0))]
    Git(#[from] git2::Error),
    /// File system errors.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// No `git` on the caller's `PATH`.
    #[error("git is not on PATH; binky makes worktrees with your own git")]
    NoGit,
    /// A `git` command failed; its own words.
    #[error("`git {args}` failed: {stderr}")]
    Command {
        /// The arguments, as run.
        args: String,
        /// The end of what git printed on stderr.
        stderr: String,
    },
}

/// libgit2 sometimes reports an empty message; name the class and code then.
fn git_message(e: &git2::Error) -> String {
    let m = e.message().trim();
    if m.is_empty() || m == "no error" {
        format!("{:?} error ({:?})", e.class(), e.code())
    } else {
        m.to_owned()
    }
}

/// Where a project lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProjectLocation {
    /// The main worktree's folder.
    pub main_workdir: PathBuf,
    /// The project folder (holding binky.toml) relative to the repository
    /// root; empty when binky.toml is at the root.
    pub subdir: PathBuf,
}

/// Finds the repository holding `config_dir` and the project's place in it.
///
/// # Errors
/// Not a git repository, or a bare one.
pub(crate) fn locate(config_dir: &Path) -> Result<ProjectLocation, WorktreeError> {
    let dir = config_dir
        .canonicalize()
        .map_err(|_| WorktreeError::NotARepo(config_dir.to_path_buf()))?;
    let repo = discover(&dir)?;
    let workdir = repo
        .workdir()
        .ok_or_else(|| WorktreeError::NotARepo(dir.to_path_buf()))?
        .canonicalize()?;
    let subdir = dir
        .strip_prefix(&workdir)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let main_workdir = main_workdir_of(&repo)?;
    Ok(ProjectLocation {
        main_workdir,
        subdir,
    })
}

/// The repository holding `dir`.
///
/// # Errors
/// None holds it, or git refuses one another user owns.
fn discover(dir: &Path) -> Result<Repository, WorktreeError> {
    Repository::discover(dir).map_err(|e| {
        if e.code() == git2::ErrorCode::Owner {
            WorktreeError::DubiousOwnership(dir.to_path_buf())
        } else {
            WorktreeError::NotARepo(dir.to_path_buf())
        }
    })
}

fn main_workdir_of(repo: &Repository) -> Result<PathBuf, WorktreeError> {
    if repo.is_worktree() {
        // commondir is the main repository's `.git` folder.
        let common = repo.commondir().canonicalize()?;
        Ok(common.parent().map(Path::to_path_buf).unwrap_or(common))
    } else {
        Ok(repo
            .workdir()
            .ok_or_else(|| WorktreeError::NotARepo(repo.path().to_path_buf()))?
            .canonicalize()?)
    }
}

/// The result of [`ensure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ensured {
    /// The worktree's folder.
    pub path: PathBuf,
    /// A worktree was added now.
    pub created: bool,
    /// It was registered but its folder was gone; it was pruned and re-created.
    pub recreated: bool,
}

fn branch_of(repo: &Repository) -> Option<String> {
    let head = repo.head().ok()?;
    head.is_branch()
        .then(|| head.shorthand().map(str::to_owned))
        .flatten()
}

/// The branch a registered worktree's HEAD names, read from its admin folder
/// (works when the worktree's own folder is gone).
fn registered_branch(repo: &Repository, name: &str) -> Option<String> {
    let head =
        std::fs::read_to_string(repo.path().join("worktrees").join(name).join("HEAD")).ok()?;
    head.trim()
        .strip_prefix("ref: refs/heads/")
        .map(str::to_owned)
}

/// Reuses or creates the worktree for `branch` at `root/<slug>`, with
/// `git worktree add`.
///
/// # Errors
/// Invalid branch name; the branch is checked out in the main worktree (or a
/// locked worktree whose folder is missing); the target path is taken; git
/// failed (its message).
pub(crate) fn ensure(
    git: &Git,
    main_workdir: &Path,
    branch: &str,
    slug: &str,
    root: &Path,
) -> Result<Ensured, WorktreeError> {
    check_branch(branch)?;
    let repo = Repository::open(main_workdir)?;
    if branch_of(&repo).as_deref() == Some(branch) {
        return Err(WorktreeError::CheckedOutElsewhere {
            branch: branch.to_owned(),
            where_: "the main worktree",
            path: main_workdir.to_path_buf(),
        });
    }
    let recreate_at = match existing(git, &repo, main_workdir, branch)? {
        Existing::Live(path) => {
            return Ok(Ensured {
                path,
                created: false,
                recreated: false,
            });
        }
        Existing::Dropped(path) => Some(path),
        Existing::None => None,
    };
    let recreated = recreate_at.is_some();
    let path = recreate_at.unwrap_or_else(|| root.join(slug));
    if path.exists() {
        return Err(WorktreeError::PathTaken(path));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let remote = format!("origin/{branch}");
    let add = add_args(&repo, branch, &path, &remote);
    git.run(main_workdir, &add)?;
    Ok(Ensured {
        path,
        created: true,
        recreated,
    })
}

/// A branch name git takes and no option can be read from.
///
/// # Errors
/// [`WorktreeError::InvalidBranch`], naming the rule it breaks.
pub(crate) fn check_branch(branch: &str) -> Result<(), WorktreeError> {
    // A leading `-` would read as an option to git; git rejects such branch
    // names anyway.
    let rule = match branch_rule_broken(branch) {
        Some(r) => Some(r),
        None if !git2::Branch::name_is_valid(branch)? => Some("git refuses it as a branch name"),
        None => None,
    };
    if let Some(rule) = rule {
        return Err(WorktreeError::InvalidBranch {
            name: branch.to_owned(),
            rule,
        });
    }
    Ok(())
}

/// What the repository already has for a branch.
enum Existing {
    /// A worktree with its folder, on the branch: reused as it is.
    Live(PathBuf),
    /// A registration whose folder was deleted by hand, now dropped: the
    /// worktree is made again at the same path.
    Dropped(PathBuf),
    /// Nothing.
    None,
}

/// Finds the worktree of `branch` among the repository's registered ones.
fn existing(
    git: &Git,
    repo: &Repository,
    main_workdir: &Path,
    branch: &str,
) -> Result<Existing, WorktreeError> {
    for name in repo.worktrees()?.iter().flatten() {
        let wt = repo.find_worktree(name)?;
        let path = wt.path().to_path_buf();
        if path.exists() {
            if let Ok(r) = Repository::open(&path)
                && branch_of(&r).as_deref() == Some(branch)
            {
                return Ok(Existing::Live(path));
            }
        } else if registered_branch(repo, name).as_deref() == Some(branch) {
            if !matches!(wt.is_locked()?, git2::WorktreeLockStatus::Unlocked) {
                return Err(WorktreeError::CheckedOutElsewhere {
                    branch: branch.to_owned(),
                    where_: "a locked worktree whose folder is missing",
                    path,
                });
            }
            // Deleted by hand: drop that one stale registration (`git
            // worktree remove` of a missing folder), re-create it at the
            // same path.
            git.run(
                main_workdir,
                &["worktree".as_ref(), "remove".as_ref(), path.as_os_str()],
            )?;
            return Ok(Existing::Dropped(path));
        }
    }
    Ok(Existing::None)
}

/// `git worktree add` for `branch` at `path`: the local branch; else a new
/// one tracking `remote` (`origin/<branch>`); else a new one from HEAD.
fn add_args<'a>(
    repo: &Repository,
    branch: &'a str,
    path: &'a Path,
    remote: &'a str,
) -> Vec<&'a std::ffi::OsStr> {
    let local = repo.find_branch(branch, BranchType::Local).is_ok();
    let tracking = !local && repo.find_branch(remote, BranchType::Remote).is_ok();
    match (local, tracking) {
        (true, _) => vec![
            "worktree".as_ref(),
            "add".as_ref(),
            "--quiet".as_ref(),
            path.as_os_str(),
            branch.as_ref(),
        ],
        (false, true) => vec![
            "worktree".as_ref(),
            "add".as_ref(),
            "--quiet".as_ref(),
            "--track".as_ref(),
            "-b".as_ref(),
            branch.as_ref(),
            path.as_os_str(),
            remote.as_ref(),
        ],
        (false, false) => vec![
            "worktree".as_ref(),
            "add".as_ref(),
            "--quiet".as_ref(),
            "-b".as_ref(),
            branch.as_ref(),
            path.as_os_str(),
        ],
    }
}

/// Uncommitted and untracked changes in a worktree, as `git status --short`
/// lists them (ignored files excluded), from the user's git: libgit2 runs no
/// clean filter, so it would call every Git LFS file modified.
///
/// # Errors
/// git failed (not a worktree, a corrupt index).
pub(crate) fn changes(git: &Git, path: &Path) -> Result<Vec<String>, WorktreeError> {
    let out = git.output(
        path,
        &[
            "status".as_ref(),
            "--porcelain=v1".as_ref(),
            "--untracked-files=normal".as_ref(),
        ],
    )?;
    Ok(out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// Whether `file` has changes git has not committed (modified, staged or
/// untracked). False when it is not in a repository or git cannot tell.
pub(crate) fn has_uncommitted_changes(file: &Path) -> bool {
    let Some(dir) = file.parent() else {
        return false;
    };
    let Ok(repo) = Repository::discover(dir) else {
        return false;
    };
    let (Some(workdir), Ok(file)) = (repo.workdir(), file.canonicalize()) else {
        return false;
    };
    let Ok(workdir) = workdir.canonicalize() else {
        return false;
    };
    file.strip_prefix(&workdir)
        .ok()
        .and_then(|rel| repo.status_file(rel).ok())
        .is_some_and(|st| !st.is_empty() && !st.is_ignored())
}

/// Deletes the worktree at `path` and its registration (not the branch),
/// with `git worktree remove --force`: git deletes only a folder it has
/// registered as a worktree of this repository, so nothing else can go.
/// The caller has checked for changes the user must confirm losing.
///
/// # Errors
/// `path` is not a registered worktree of the repository; git failed.
pub(crate) fn remove(git: &Git, main_workdir: &Path, path: &Path) -> Result<(), WorktreeError> {
    git.run(
        main_workdir,
        &[
            "worktree".as_ref(),
            "remove".as_ref(),
            "--force".as_ref(),
            path.as_os_str(),
        ],
    )
}

/// Registered worktrees whose folder is gone, unlocked: `(admin name, path)`.
pub(crate) fn stale_registrations(main_workdir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(repo) = Repository::open(main_workdir) else {
        return Vec::new();
    };
    let Ok(names) = repo.worktrees() else {
        return Vec::new();
    };
    names
        .iter()
        .flatten()
        .filter_map(|n| {
            let wt = repo.find_worktree(n).ok()?;
            (!wt.path().exists()
                && matches!(wt.is_locked(), Ok(git2::WorktreeLockStatus::Unlocked)))
            .then(|| (n.to_owned(), wt.path().to_path_buf()))
        })
        .collect()
}

/// Drops the registration of a worktree whose folder is gone.
///
/// # Errors
/// git failed.
pub(crate) fn prune_registration(
    git: &Git,
    main_workdir: &Path,
    path: &Path,
) -> Result<(), WorktreeError> {
    git.run(
        main_workdir,
        &["worktree".as_ref(), "remove".as_ref(), path.as_os_str()],
    )
}

/// Whether `path` is a registered worktree of the repository at
/// `main_workdir` (by its folder, as git records it).
pub(crate) fn is_registered(main_workdir: &Path, path: &Path) -> bool {
    let Ok(repo) = Repository::open(main_workdir) else {
        return false;
    };
    let Ok(names) = repo.worktrees() else {
        return false;
    };
    let want = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    names.iter().flatten().any(|n| {
        repo.find_worktree(n).is_ok_and(|wt| {
            let p = wt.path();
            p.canonicalize().unwrap_or_else(|_| p.to_path_buf()) == want
        })
    })
}

/// The file at `rel` (relative to the repository's top) as committed on
/// the branch the checkout at `main_workdir` has, with that branch's name
/// (`HEAD` when detached): what the main checkout's owner committed, not
/// what a worktree or an unsaved edit holds. `None` for the text when the
/// file is not committed there. Read through libgit2: a committed blob is
/// what git stores, and `binky.toml` is text no filter changes.
///
/// # Errors
/// `main_workdir` is not in a repository, or its HEAD names no commit.
pub(crate) fn committed_file(
    main_workdir: &Path,
    rel: &Path,
) -> Result<(String, Option<String>), WorktreeError> {
    let repo = Repository::discover(main_workdir)?;
    let head = repo.head()?;
    let branch = head.shorthand().unwrap_or("HEAD").to_owned();
    let tree = head.peel_to_tree()?;
    let text = match tree.get_path(rel) {
        Ok(entry) => {
            let blob = entry.to_object(&repo)?.peel_to_blob()?;
            Some(String::from_utf8_lossy(blob.content()).into_owned())
        }
        Err(e) if e.code() == git2::ErrorCode::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    Ok((branch, text))
}

/// The commit HEAD points at in the worktree holding `path` (for `verify`
/// records and migrate keys).
pub(crate) fn head_commit(path: &Path) -> Option<String> {
    let repo = Repository::discover(path).ok()?;
    let oid = repo.head().ok()?.target()?;
    Some(oid.to_string())
}

/// What the git worktree holding `dir` is, for a verb given no world name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Here {
    /// A linked worktree (made by `git worktree add`, by Binky or anyone)
    /// with `branch` checked out: the world of that branch attaches to it.
    Linked {
        /// Its folder.
        path: PathBuf,
        /// The branch checked out there.
        branch: String,
    },
    /// The repository's main worktree, which is no world's.
    Main(PathBuf),
    /// A linked worktree with no branch checked out (a detached HEAD).
    Detached(PathBuf),
}

/// Reads the git worktree holding `dir` (libgit2, read only).
///
/// # Errors
/// `dir` is not inside a git repository (or one git refuses to read).
pub(crate) fn here(dir: &Path) -> Result<Here, WorktreeError> {
    let repo = discover(dir)?;
    let path = repo
        .workdir()
        .ok_or_else(|| WorktreeError::NotARepo(dir.to_path_buf()))?
        .to_path_buf();
    let path = path.canonicalize().unwrap_or(path);
    if !repo.is_worktree() {
        return Ok(Here::Main(path));
    }
    Ok(match branch_of(&repo) {
        Some(branch) => Here::Linked { path, branch },
        None => Here::Detached(path),
    })
}

/// Default worktree root: `<parent of main worktree>/<main folder name>.worktrees`.
pub(crate) fn default_root(main_workdir: &Path) -> PathBuf {
    let name = main_workdir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".to_owned());
    main_workdir
        .parent()
        .unwrap_or(main_workdir)
        .join(format!("{name}.worktrees"))
}

/// The rule of `git check-ref-format --branch` that `name` breaks, in the
/// words a person can act on; `None` when it breaks none of them. A
/// leading `-` is refused too: git would read it as an option.
pub(crate) fn branch_rule_broken(name: &str) -> Option<&'static str> {
    let components: Vec<&str> = name.split('/').collect();
    Some(if name.is_empty() {
        "it is empty"
    } else if name.starts_with('-') {
        "it starts with `-`, which git would read as an option"
    } else if name.contains("..") {
        "it holds `..` (git reads it as a range)"
    } else if name.contains("@{") {
        "it holds `@{` (git reads it as a reflog reference)"
    } else if name.bytes().any(|b| b < 0x20 || b == 0x7f) {
        "it holds a control character"
    } else if let Some(c) = name
        .chars()
        .find(|c| matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        match c {
            ' ' => "it holds a space",
            '~' => "it holds `~`",
            '^' => "it holds `^`",
            ':' => "it holds `:`",
            '?' => "it holds `?`",
            '*' => "it holds `*`",
            '[' => "it holds `[`",
            _ => "it holds `\\`",
        }
    } else if name.starts_with('/') || name.ends_with('/') {
        "it starts or ends with `/`"
    } else if components.iter().any(|c| c.is_empty()) {
        "it holds `//` (an empty component)"
    } else if name.ends_with('.') {
        "it ends with `.`"
    } else if components.iter().any(|c| c.starts_with('.')) {
        "a part of it (between `/`) starts with `.`"
    } else if components.iter().any(|c| c.ends_with(".lock")) {
        "a part of it (between `/`) ends with `.lock`"
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests;
