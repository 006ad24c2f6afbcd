//! Finding a project and a world: the project a request names, its main
//! checkout, a world's registry row; the names and paths a world may have.

use crate::config::Config;
use crate::daemon::{Daemon, admission};
use crate::protocol::{ApiError, ClientEnv, ErrorKind, WorldRef};
use crate::registry::WorldRow;
use crate::slug::WorldName;
use crate::{config, worktree};
use std::path::{Path, PathBuf};

/// A project found from a [`WorldRef`].
pub(in crate::daemon::world) struct Located {
    pub(in crate::daemon::world) name: String,
    pub(in crate::daemon::world) main: PathBuf,
    pub(in crate::daemon::world) subdir: PathBuf,
    /// The config as read from where the project was found (names, roots).
    pub(in crate::daemon::world) config: Config,
}

impl Located {
    /// The project folder in the main worktree: the base for `worktree_root`.
    pub(in crate::daemon::world) fn main_root(&self) -> PathBuf {
        join_subdir(&self.main, &self.subdir)
    }
}

/// `base/subdir`, without the trailing slash `join("")` would add.
pub(in crate::daemon::world) fn join_subdir(base: &Path, subdir: &Path) -> PathBuf {
    if subdir.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(subdir)
    }
}

pub(in crate::daemon::world) fn locate(d: &Daemon, w: &WorldRef) -> Result<Located, ApiError> {
    let dir = match (&w.project_dir, &w.project) {
        (_, Some(name)) => {
            let root = d.registry(|r| r.project_root(name))?.ok_or_else(|| {
                ApiError::new(format!("no project named `{name}` is known to this daemon"))
                    .hint("run the command inside the project, or pass --project PATH")
                    .with_kind(ErrorKind::NotFound)
            })?;
            PathBuf::from(root)
        }
        (Some(dir), None) => PathBuf::from(dir),
        (None, None) => return Err(ApiError::new("no project given")),
    };
    let file = config::find(&dir).map_err(|e| {
        ApiError::new(e.to_string())
            .hint("run binky inside a project (a folder with binky.toml), or pass --project")
    })?;
    let config = config::load(&file)?;
    let loc = worktree::locate(&config.root).map_err(|e| {
        let hint = match e {
            worktree::WorktreeError::DubiousOwnership(_) => {
                "git's check protects you from hooks in a repository someone else controls"
            }
            _ => "binky.toml must live inside a git repository",
        };
        ApiError::new(e.to_string()).hint(hint)
    })?;
    Ok(Located {
        name: config.project.name.clone(),
        main: loc.main_workdir,
        subdir: loc.subdir,
        config,
    })
}

/// Whether `path` lies inside `root`, compared as real paths (symlinks and
/// `..` resolved), so a path that merely starts like the root never counts.
pub(in crate::daemon::world) fn inside(path: &Path, root: &Path) -> bool {
    match (path.canonicalize(), root.canonicalize()) {
        (Ok(p), Ok(r)) => p.starts_with(&r) && p != r,
        _ => false,
    }
}

/// The caller's `git` (on its `PATH`, run with its environment): worktrees
/// are made and removed by the user's own git.
pub(in crate::daemon::world) fn user_git(
    client_env: &ClientEnv,
) -> Result<worktree::Git, ApiError> {
    worktree::Git::find(client_env.search_path().as_deref(), &client_env.0).map_err(|e| {
        ApiError::new(e.to_string())
            .hint("install git (Debian: apt-get install git) or put it on the PATH of the shell running binky")
    })
}

/// A world name that could change the shape of a command is refused before
/// anything is made (see [`crate::slug::check_world_name`]); the name that
/// passes, with its slug.
pub(in crate::daemon::world) fn check_name(name: &str) -> Result<WorldName, ApiError> {
    WorldName::parse(name).map_err(|e| {
        ApiError::new(e).hint("pick another branch name (`binky up feat-login`), or rename the branch with `git branch -m`").with_kind(ErrorKind::InvalidInput)
    })
}

/// An admission group that is empty, too long or holds a character a world
/// name may not is refused before anything is queued (see
/// [`crate::slug::check_group`]).
pub(in crate::daemon::world) fn check_group(group: Option<&str>) -> Result<(), ApiError> {
    match group {
        Some(g) => crate::slug::check_group(g).map_err(|e| {
            ApiError::new(e)
                .hint("name the group as a world is named, e.g. `--group agents-run-7`")
                .with_kind(ErrorKind::InvalidInput)
        }),
        None => Ok(()),
    }
}

/// Characters a path rendered into a command (`${worktree.path}`) must not
/// hold: each would let the path change the command's shape. Spaces are
/// allowed (quote `"${worktree.path}"` in commands).
pub(in crate::daemon::world) const SHELL_SPECIAL: &[char] = &[
    ';', '|', '&', '$', '`', '\'', '"', '(', ')', '<', '>', '\\', '\n', '\r',
];

/// Refuses a worktree path that could change the shape of a command.
pub(in crate::daemon::world) fn check_path(path: &Path) -> Result<(), ApiError> {
    let text = path.display().to_string();
    match text.chars().find(|c| SHELL_SPECIAL.contains(c) || c.is_control()) {
        None => Ok(()),
        Some(c) => Err(ApiError::new(format!(
            "the worktree path {text:?} holds {c:?}, which a shell would read when `${{worktree.path}}` is rendered into a command"
        ))
        .hint("set [project] worktree_root to a folder whose path has none of ; | & $ ` ' \" ( ) < > \\")),
    }
}

/// World `name` of `project` by names alone, for what the daemon does on
/// its own (suspend, sleep, wake): no binky.toml is read.
///
/// # Errors
/// The project or the world is gone.
pub(in crate::daemon::world) fn world_row(
    d: &Daemon,
    project: &str,
    name: &str,
) -> Result<WorldRow, ApiError> {
    d.registry(|reg| {
        let pid = reg
            .project_id(project)?
            .ok_or_else(|| ApiError::new(format!("project {project} is gone")))?;
        reg.find_world(pid, name)?
            .ok_or_else(|| ApiError::new(format!("world {name} is gone")))
    })
}

pub(in crate::daemon::world) fn find_world(
    d: &Daemon,
    loc: &Located,
    name: &str,
) -> Result<WorldRow, ApiError> {
    let found = d.registry(|reg| {
        let pid = reg.project_id(&loc.name)?;
        pid.and_then(|pid| reg.find_world(pid, name).transpose())
            .transpose()
    })?;
    found.ok_or_else(|| match queued_unmade(d, &loc.name, name) {
        Some(place) => ApiError::new(format!(
            "`{name}` is queued and not made yet ({place}): it has no worktree, services or addresses"
        ))
        .hint(format!(
            "`binky up {name}` waits for its turn and shows it; `binky down {name}` takes it out of the queue"
        )),
        None => ApiError::new(format!("no world `{name}` in project {}", loc.name))
            .hint("`binky status` lists the worlds")
            .with_kind(ErrorKind::NotFound),
    })
}

/// Where world `name` of `project` stands in the queue (`2nd of 3 now:
/// max_parallel 2 reached`), when it is queued.
fn queued_unmade(d: &Daemon, project: &str, name: &str) -> Option<String> {
    let mut report = crate::protocol::StatusReport::default();
    admission::fill_queue(d, &mut report, Some(project), usize::MAX);
    let q = report
        .projects
        .iter()
        .flat_map(|p| &p.worlds)
        .find(|w| w.name == name)?
        .queue
        .clone()?;
    Some(format!(
        "{} of {} in admission order now: {}",
        q.position, q.of, q.reason
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_compares_real_paths() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("wt/a")).unwrap();
        std::fs::create_dir_all(r.join("wt-evil")).unwrap();
        let wt = r.join("wt");
        assert!(inside(&wt.join("a"), &wt));
        // The root itself, a sibling that merely starts like it, and a
        // `..` escape are not inside.
        assert!(!inside(&wt, &wt));
        assert!(!inside(&r.join("wt-evil"), &wt));
        assert!(!inside(&wt.join("a/../../wt-evil"), &wt));
        // A symlink inside the root that points out of it is outside.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(r.join("wt-evil"), wt.join("link")).unwrap();
            assert!(!inside(&wt.join("link"), &wt));
        }
        // A path that does not exist cannot be shown to be inside.
        assert!(!inside(&wt.join("missing"), &wt));
    }

    #[test]
    fn paths_a_shell_would_read_are_refused() {
        assert!(check_path(Path::new("/home/u/my repo.worktrees/feat")).is_ok());
        for bad in [
            "/tmp/a;rm",
            "/tmp/$(x)",
            "/tmp/a`b`",
            "/tmp/a\nb",
            "/tmp/a'b",
        ] {
            let e = check_path(Path::new(bad)).unwrap_err();
            assert!(e.message.contains("worktree path"), "{bad}: {}", e.message);
            assert!(e.hint.is_some());
        }
    }

    #[test]
    fn join_subdir_keeps_the_project_folder_inside_the_worktree() {
        assert_eq!(
            join_subdir(Path::new("/wt/feat"), Path::new("apps/web")),
            PathBuf::from("/wt/feat/apps/web")
        );
        assert_eq!(
            join_subdir(Path::new("/wt/feat"), Path::new("")),
            PathBuf::from("/wt/feat")
        );
    }
}
