//! What an `up` settles before its world is recorded: the project
//! registered, the worktree made or reused with the user's own `git`, and
//! the world's own `binky.toml` read from it. Shared by `up` and the
//! detached `up` of an agent host's hook.

use crate::config::Config;
use crate::daemon::world::stages::locate::{Located, check_path, user_git};
use crate::daemon::{Daemon, ProgressTx};
use crate::protocol::{ApiError, ClientEnv};
use crate::slug::WorldName;
use crate::{config, worktree};
use std::path::Path;

/// Registers the project by name and main checkout, returning its id.
///
/// # Errors
/// Another checkout with a `binky.toml` already claims the name: two would
/// share worlds, hostnames and slices.
pub(super) fn register_project(d: &Daemon, loc: &Located) -> Result<i64, ApiError> {
    let project = loc.name.as_str();
    let root = loc.main_root().display().to_string();
    if let Some(known) = d.registry(|r| r.project_root(project))?
        && known != root
        && Path::new(&known).join(config::FILE_NAME).is_file()
    {
        return Err(ApiError::new(format!(
            "project `{project}` is already registered at {known}, and {root} uses the same name"
        ))
        .hint(
            "give this project its own [project] name, or remove the other project's worlds first",
        ));
    }
    d.registry(|r| r.upsert_project(project, &root))
        .map_err(ApiError::from)
}

/// Creates or reuses the world's git worktree with the user's own `git`,
/// under the repository's lock (git's index and refs are not safe against
/// concurrent `worktree add`).
pub(super) async fn make_worktree(
    d: &Daemon,
    loc: &Located,
    project_id: i64,
    name: &WorldName,
    client_env: &ClientEnv,
    progress: &ProgressTx,
) -> Result<worktree::Ensured, ApiError> {
    progress.say(
        crate::protocol::ProgressStep::Worktree,
        None,
        format!("worktree for {name}"),
    );
    let root = match &loc.config.project.worktree_root {
        Some(r) => config::resolve_against(&loc.main_root(), r),
        None => worktree::default_root(&loc.main),
    };
    let git = user_git(client_env)?;
    check_path(&root.join(&loc.subdir))?;
    let (main, branch, slug) = (loc.main.clone(), name.to_string(), name.slug().to_owned());
    let repo_lock = d.worlds.repo_lock(&loc.main);
    let _repo_guard = repo_lock.lock().await;
    tokio::task::spawn_blocking(move || worktree::ensure(&git, &main, &branch, &slug, &root))
        .await?
        .map_err(|e| worktree_error(d, project_id, name, e))
}

/// A worktree failure as the user should read it, naming the world whose
/// folder it is when that is the cause (two names can share a slug-shaped
/// folder name).
fn worktree_error(d: &Daemon, project_id: i64, name: &str, e: worktree::WorktreeError) -> ApiError {
    if let worktree::WorktreeError::PathTaken(p) = &e
        && let Some(other) = d
            .registry(|r| r.world_with_path(project_id, &p.display().to_string()))
            .ok()
            .flatten()
    {
        return ApiError::new(format!(
            "{} is the worktree of world `{other}`, whose folder name `{name}` would take",
            p.display()
        ))
        .hint(format!(
            "pick another name; `binky status .` lists this project's worlds (`{other}` is one)"
        ));
    }
    e.into()
}

/// The world's own `binky.toml` (its branch's), noting edits the user has
/// not committed in the checkout they ran `up` from: the world does not
/// see them.
///
/// One line on what world `name`'s own `binky.toml` (at `cfg_path`, its
/// branch's) changes against the one committed on the main checkout's
/// branch ([`crate::daemon::world::stages::trusted`]): what the branch will run that main would
/// not, for a person to see before trusting it. `None` when they agree or
/// there is nothing committed to compare with.
fn branch_changes(loc: &Located, cfg_path: &Path, name: &str) -> Option<String> {
    let main = crate::daemon::world::stages::trusted::committed(loc).ok()?;
    let (main_text, own) = (main.text?, std::fs::read_to_string(cfg_path).ok()?);
    let changed = crate::daemon::world::stages::trusted::changes(&main_text, &own);
    (!changed.is_empty()).then(|| {
        format!(
            "branch `{name}`'s {} differs from {}'s: {}",
            config::FILE_NAME,
            main.branch,
            changed.join("; ")
        )
    })
}

/// # Errors
/// The file is invalid, or names another project.
pub(super) fn world_config(
    loc: &Located,
    world_root: &Path,
    name: &str,
    notes: &mut Vec<String>,
) -> Result<Config, ApiError> {
    let project = loc.name.as_str();
    let cfg_path = world_root.join(config::FILE_NAME);
    let cfg = config::load(&cfg_path)?;
    let here = loc.config.root.join(config::FILE_NAME);
    if here != cfg_path
        && std::fs::read(&here).ok() != std::fs::read(&cfg_path).ok()
        && worktree::has_uncommitted_changes(&here)
    {
        notes.push(format!(
            "{} has uncommitted changes this world does not see: it runs {} as on branch `{name}`; commit them there (or edit the world's copy), then `binky reload {name}`",
            here.display(),
            cfg_path.display()
        ));
    }
    if here != cfg_path
        && let Some(note) = branch_changes(loc, &cfg_path, name)
    {
        notes.push(note);
    }
    if cfg.project.name != project {
        return Err(ApiError::new(format!(
            "{} names project `{}`, but this project is `{project}`",
            cfg_path.display(),
            cfg.project.name
        ))
        .hint("a branch must keep the project's name"));
    }
    Ok(cfg)
}
