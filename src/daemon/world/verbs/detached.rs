//! `up` for an agent host's worktree hook ([`UpRequest::detach`]): the
//! worktree at once, the world in the background.

use super::prepare::{make_worktree, register_project, world_config};
use super::up::admit_and_up;
use crate::daemon::admission;
use crate::daemon::world::stages::locate::{Located, check_path, join_subdir};
use crate::daemon::world::stages::plan::preflight;
use crate::daemon::{Daemon, ProgressTx};
use crate::protocol::{ApiError, UpRequest, WorldOutcome, WorldState};
use crate::slug::WorldName;
use std::sync::Arc;

/// An `up` that answers once its worktree exists ([`UpRequest::detach`]):
/// the worktree is made now, ahead of admission (files only, nothing runs:
/// the one thing an agent host waits for), and the rest — admission, which
/// may queue, then the world — goes on in the background with nobody
/// waiting, as a queued `up` does. Its outcome is recorded (`status`,
/// events, the world's `error`), not returned; the caller cannot cancel it
/// (`down` or `remove` can).
///
/// # Errors
/// The worktree cannot be made (the world is not started then).
pub(super) async fn up_detached(
    d: &Arc<Daemon>,
    loc: Located,
    name: WorldName,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let project_id = register_project(d, &loc)?;
    let existing = d.registry(|r| r.find_world(project_id, &name))?;
    preflight(d, &loc, existing.as_ref(), &req.env)?;
    let ensured = make_worktree(d, &loc, project_id, &name, &req.env, progress).await?;
    // What the branch's own binky.toml says is read now, as `up` reads it:
    // one that cannot be read fails the caller, not only the background.
    let world_root = join_subdir(&ensured.path, &loc.subdir);
    check_path(&world_root)?;
    let mut notes = Vec::new();
    world_config(&loc, &world_root, &name, &mut notes)?;
    let mut world = admission::unmade(&req.world.name, req.group.clone());
    world.state = WorldState::Starting;
    world.path = ensured.path.display().to_string();
    let project = loc.name.clone();
    let d = Arc::clone(d);
    let req = UpRequest {
        detach: false,
        idle_after: None,
        wait: true,
        ..req
    };
    tokio::spawn(async move {
        let (progress, _never) = admission::unwatched();
        let world = req.world.name.clone();
        if let Err(e) = admit_and_up(&d, &loc, &name, req, &progress).await {
            tracing::info!(world = %world, "detached up failed: {}", e.message);
        }
    });
    Ok(WorldOutcome {
        notes,
        ..WorldOutcome::of(project, world)
    })
}
