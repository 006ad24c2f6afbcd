//! Git worktrees, through libgit2 (git2).
//!
//! One world = one worktree with its branch checked out. [`ensure`] reuses a
//! worktree that already has the branch (even one made by hand with
//! `git worktree add`), recovers one whose folder was deleted, or adds a new
//! one for the local branch, for `origin/<branch>` (creating the tracking
//! branch), or for a new branch from the main worktree's HEAD.

use git2::{BranchType, Repository, WorktreeAddOptions, WorktreePruneOptions};
use std::path::{Path, PathBuf};

/// Why a worktree operation failed. Messages name paths and what to do.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The folder is not inside a git repository.
    #[error("{0} is not inside a git repository")]
    NotARepo(PathBuf),
    /// The branch name is not a valid git ref name.
    #[error("`{0}` is not a valid git branch name")]
    InvalidBranch(String),
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
pub struct ProjectLocation {
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
pub fn locate(config_dir: &Path) -> Result<ProjectLocation, WorktreeError> {
    let dir = config_dir
        .canonicalize()
        .map_err(|_| WorktreeError::NotARepo(config_dir.to_path_buf()))?;
    let repo =
        Repository::discover(&dir).map_err(|_| WorktreeError::NotARepo(dir.to_path_buf()))?;
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
pub struct Ensured {
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

/// Reuses or creates the worktree for `branch` at `root/<slug>`.
///
/// # Errors
/// Invalid branch name; the branch is checked out in the main worktree (or a
/// locked worktree whose folder is missing); the target path is taken.
pub fn ensure(
    main_workdir: &Path,
    branch: &str,
    slug: &str,
    root: &Path,
) -> Result<Ensured, WorktreeError> {
    if !git2::Branch::name_is_valid(branch)? {
        return Err(WorktreeError::InvalidBranch(branch.to_owned()));
    }
    let repo = Repository::open(main_workdir)?;
    if branch_of(&repo).as_deref() == Some(branch) {
        return Err(WorktreeError::CheckedOutElsewhere {
            branch: branch.to_owned(),
            where_: "the main worktree",
            path: main_workdir.to_path_buf(),
        });
    }
    let mut recreate_at: Option<PathBuf> = None;
    for name in repo.worktrees()?.iter().flatten() {
        let wt = repo.find_worktree(name)?;
        let path = wt.path().to_path_buf();
        if path.exists() {
            if let Ok(r) = Repository::open(&path)
                && branch_of(&r).as_deref() == Some(branch)
            {
                return Ok(Ensured {
                    path,
                    created: false,
                    recreated: false,
                });
            }
        } else if registered_branch(&repo, name).as_deref() == Some(branch) {
            if !matches!(wt.is_locked()?, git2::WorktreeLockStatus::Unlocked) {
                return Err(WorktreeError::CheckedOutElsewhere {
                    branch: branch.to_owned(),
                    where_: "a locked worktree whose folder is missing",
                    path,
                });
            }
            // Deleted by hand: prune the stale registration, re-create it
            // at the same path.
            wt.prune(Some(WorktreePruneOptions::new().valid(true)))?;
            recreate_at = Some(path);
        }
    }
    let recreated = recreate_at.is_some();
    let path = recreate_at.unwrap_or_else(|| root.join(slug));
    if path.exists() {
        return Err(WorktreeError::PathTaken(path));
    }
    let reference = local_branch(&repo, branch)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let admin_name = unique_admin_name(&repo, slug);
    let mut opts = WorktreeAddOptions::new();
    opts.reference(Some(&reference));
    repo.worktree(&admin_name, &path, Some(&opts))?;
    Ok(Ensured {
        path,
        created: true,
        recreated,
    })
}

/// The local branch `name`: existing; else tracking `origin/<name>`; else new
/// from HEAD.
fn local_branch<'r>(
    repo: &'r Repository,
    name: &str,
) -> Result<git2::Reference<'r>, WorktreeError> {
    if let Ok(b) = repo.find_branch(name, BranchType::Local) {
        return Ok(b.into_reference());
    }
    if let Ok(remote) = repo.find_branch(&format!("origin/{name}"), BranchType::Remote) {
        let commit = remote.get().peel_to_commit()?;
        let mut b = repo.branch(name, &commit, false)?;
        b.set_upstream(Some(&format!("origin/{name}")))?;
        return Ok(b.into_reference());
    }
    let commit = repo.head()?.peel_to_commit()?;
    Ok(repo.branch(name, &commit, false)?.into_reference())
}

/// A free name under `.git/worktrees/`.
fn unique_admin_name(repo: &Repository, slug: &str) -> String {
    let taken = |n: &str| repo.path().join("worktrees").join(n).exists();
    if !taken(slug) {
        return slug.to_owned();
    }
    (2..)
        .map(|i| format!("{slug}-{i}"))
        .find(|n| !taken(n))
        .expect("an unused name exists")
}

/// Uncommitted and untracked changes in a worktree, as `git status --short`
/// would list them (ignored files excluded).
pub fn changes(path: &Path) -> Result<Vec<String>, WorktreeError> {
    let repo = Repository::open(path)?;
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(false);
    let statuses = repo.statuses(Some(&mut opts))?;
    let mut out = Vec::new();
    for s in statuses.iter() {
        let st = s.status();
        let tag = if st.is_wt_new() {
            "??"
        } else if st.is_index_new() {
            "A "
        } else if st.is_wt_deleted() || st.is_index_deleted() {
            " D"
        } else {
            " M"
        };
        out.push(format!("{tag} {}", s.path().unwrap_or("?")));
    }
    Ok(out)
}

/// Whether `file` has changes git has not committed (modified, staged or
/// untracked). False when it is not in a repository or git cannot tell.
pub fn has_uncommitted_changes(file: &Path) -> bool {
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

/// Deletes the worktree folder at `path` and its registration (not the
/// branch).
pub fn remove(main_workdir: &Path, path: &Path) -> Result<(), WorktreeError> {
    let repo = Repository::open(main_workdir)?;
    if path.exists() {
        std::fs::remove_dir_all(path)?;
    }
    for name in repo.worktrees()?.iter().flatten() {
        let wt = repo.find_worktree(name)?;
        if wt.path() == path || !wt.path().exists() && same_file_name(wt.path(), path) {
            wt.prune(Some(
                WorktreePruneOptions::new().valid(true).working_tree(true),
            ))?;
        }
    }
    Ok(())
}

fn same_file_name(a: &Path, b: &Path) -> bool {
    a.file_name() == b.file_name() && a.parent() == b.parent()
}

/// The commit HEAD points at in a worktree (for `verify` records).
pub fn head_commit(path: &Path) -> Option<String> {
    let repo = Repository::open(path).ok()?;
    let oid = repo.head().ok()?.target()?;
    Some(oid.to_string())
}

/// Default worktree root: `<parent of main worktree>/<main folder name>.worktrees`.
pub fn default_root(main_workdir: &Path) -> PathBuf {
    let name = main_workdir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".to_owned());
    main_workdir
        .parent()
        .unwrap_or(main_workdir)
        .join(format!("{name}.worktrees"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
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
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

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

    #[test]
    fn creates_reuses_and_recovers() {
        let (_t, main) = repo();
        let root = default_root(&main);
        let a = ensure(&main, "feature/Login-Page", "feature-login-page-x", &root).unwrap();
        assert!(a.created && a.path.join("README").exists());
        let again = ensure(&main, "feature/Login-Page", "feature-login-page-x", &root).unwrap();
        assert_eq!(again.path, a.path);
        assert!(!again.created);
        std::fs::remove_dir_all(&a.path).unwrap();
        let rec = ensure(&main, "feature/Login-Page", "feature-login-page-x", &root).unwrap();
        assert!(rec.created && rec.recreated);
        assert_eq!(rec.path, a.path);
        assert!(changes(&rec.path).unwrap().is_empty());
        std::fs::write(rec.path.join("new.txt"), "x").unwrap();
        assert_eq!(changes(&rec.path).unwrap(), vec!["?? new.txt"]);
        remove(&main, &rec.path).unwrap();
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
        let e = ensure(&main, "feat-x", "feat-x", &default_root(&main)).unwrap();
        assert_eq!(
            e.path.canonicalize().unwrap(),
            by_hand.canonicalize().unwrap()
        );
        let err = ensure(&main, "main", "main", &default_root(&main)).unwrap_err();
        assert!(
            err.to_string().contains("checked out in the main worktree"),
            "{err}"
        );
        assert!(matches!(
            ensure(&main, "bad..name", "bad", &default_root(&main)),
            Err(WorktreeError::InvalidBranch(_))
        ));
    }
}
