//! A new worktree made ready to work in: what the main checkout has and a
//! worktree lacks (`[project] copy`), then the project's install commands
//! (`[project] setup`), once — before its slices and services.
//!
//! "Once" is a marker in the world's log folder, written when both have
//! passed and removed whenever the worktree is made (or re-made): a copy
//! or a setup command that failed runs again on the next `up`.

use super::data::run_logged;
use super::locate::Located;
use super::plan::{EnvBase, Plan, facts_for, lookup_env, project_vars, render_strict};
use crate::daemon::events::EventKind;
use crate::daemon::world::{WorldCtx, world_event};
use crate::daemon::{Daemon, ProgressTx};
use crate::protocol::{ApiError, ProgressStep};
use std::path::PathBuf;

/// The marker of a world whose worktree was made ready.
fn marker(d: &Daemon, project: &str, slug: &str) -> PathBuf {
    d.paths.world_logs(project, slug).join(".bootstrapped")
}

/// Forgets that world `slug`'s worktree was made ready: it was made (or
/// re-made) now, with none of what `copy` and `setup` bring.
pub(in crate::daemon::world) fn forget(d: &Daemon, project: &str, slug: &str) {
    let _ = std::fs::remove_file(marker(d, project, slug));
}

/// Copies `[project] copy` into the world's worktree and runs `[project]
/// setup` there, unless the marker says it was done; says what it does in
/// `up`'s progress (how files were copied: `reflink` or `copy`).
///
/// # Errors
/// A copy entry leads out of the repository, would be made through a
/// symbolic link in the worktree, or cannot be copied (the others are
/// copied all the same, and the error says which were); a setup
/// command cannot be rendered or fails (its output's head and tail
/// quoted, the whole in the world's `setup` log). The marker is then not
/// written, so the next `up` tries again.
pub(in crate::daemon::world) async fn prepare(
    cx: &WorldCtx<'_>,
    loc: &Located,
    plan: &Plan,
    progress: &ProgressTx,
) -> Result<(), ApiError> {
    let project = &cx.cfg.project;
    let done = marker(cx.d, cx.project, cx.world.slug());
    if done.exists() || (project.copy.is_empty() && project.setup.is_empty()) {
        return Ok(());
    }
    if !project.copy.is_empty() {
        copy(cx, loc, plan, progress).await?;
    }
    if !project.setup.is_empty() {
        setup(cx, plan, progress).await?;
    }
    if let Some(dir) = done.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // By rename: a link planted at the name is replaced, not written through.
    crate::platform::write_replacing(&done, b"")
        .map_err(|e| crate::daemon::errors::file_error("write", &done, e))
}

async fn copy(
    cx: &WorldCtx<'_>,
    loc: &Located,
    plan: &Plan,
    progress: &ProgressTx,
) -> Result<(), ApiError> {
    let globs = cx.cfg.project.copy.clone();
    progress.say(
        ProgressStep::Setup,
        None,
        format!("copying {} from the main checkout", globs.join(", ")),
    );
    let (from, to, repo) = (loc.main_root(), plan.world_root.clone(), loc.main.clone());
    let hint = "fix [project] copy in binky.toml (paths inside the project), or the symbolic link in the worktree it names; `binky up` again copies what is still missing";
    let done = tokio::task::spawn_blocking(move || {
        crate::worktree::copy::copy_paths(&from, &to, &repo, &globs)
    })
    .await?
    .map_err(|e| ApiError::new(e.to_string()).hint(hint))?;
    for c in &done {
        progress.say(ProgressStep::Setup, None, format!("copy {}", c.describe()));
    }
    // Every entry was tried; one not copied fails the `up`, naming each
    // and what was copied all the same.
    match crate::worktree::copy::not_copied(&done) {
        Some(e) => Err(ApiError::new(e.to_string()).hint(hint)),
        None => Ok(()),
    }
}

async fn setup(cx: &WorldCtx<'_>, plan: &Plan, progress: &ProgressTx) -> Result<(), ApiError> {
    let WorldCtx {
        d,
        cfg,
        project,
        world,
        client_env,
        ..
    } = *cx;
    let slug = world.slug();
    let env_fn = lookup_env(&plan.project_env, client_env);
    let fx = facts_for(cfg, world, &plan.world_root, &plan.facts, &env_fn);
    let mut env = EnvBase {
        shell: client_env,
        project_env: &plan.project_env,
        home: &plan.home,
        project,
        world,
        world_root: &plan.world_root,
        facts: &plan.facts,
    }
    .build();
    // No slice is made yet: a value of [env] naming one is left out.
    for (k, v) in project_vars(cfg, &fx, plan.strict, false, &|_| false)? {
        env.insert(k, v);
    }
    let env: Vec<(String, String)> = env.into_iter().collect();
    let log = d.paths.world_logs(project, slug).join("setup.log");
    for (i, cmd) in cfg.project.setup.iter().enumerate() {
        let label = format!("project.setup[{i}]");
        let rendered = render_strict(cmd, &label, None, &fx)?;
        progress.say(ProgressStep::Setup, None, format!("setup: {cmd}"));
        run_logged(
            &label,
            &rendered,
            &plan.world_root,
            &env,
            &log,
            Some((progress, world)),
        )
        .await
            .map_err(|e| {
                e.hint(format!(
                    "fix the command (or what it needs) and run `binky up {world}` again: setup runs until it passes; its whole output is in {}",
                    log.display()
                ))
            })?;
    }
    d.event(
        world_event(EventKind::SetupRan, project, world)
            .detail(format!("{} command(s)", cfg.project.setup.len())),
    );
    Ok(())
}
