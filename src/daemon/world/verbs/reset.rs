//! `reset`: a world's slices rebuilt from their golden template (or by
//! provision + migrate + seed where there is none), its worktree and ports
//! kept — for an agent or a person whose data went wrong.

use super::reload::{SliceDrop, drop_slices, reload_with};
use super::up::{fully_running, plan_with, provision_slices, settle_up};
use crate::config;
use crate::daemon::world::stages::locate::{Located, find_world, join_subdir, locate};
use crate::daemon::world::stages::plan::facts_of;
use crate::daemon::world::stages::processes::stop_services;
use crate::daemon::world::stages::start::start_processes;
use crate::daemon::world::{WorldCtx, world_ports};
use crate::daemon::{Daemon, ProgressTx, WorldKey};
use crate::protocol::{ApiError, Intent, ResetRequest, UpRequest, WorldOutcome};
use std::path::Path;
use std::sync::Arc;

/// `binky reset`: checks which slices are meant (before anything stops),
/// then, in a running world, stops only the processes that use them
/// ([`config::users_of`]), drops the slices, makes them afresh — a clone
/// of the template of the branch's current key where the resource has
/// `clone_from` — and starts those processes again; the others run on. A
/// world not (fully) running is reloaded whole with the slices dropped
/// while it is stopped. Only slices the registry records for this world of
/// this project are touched.
///
/// # Errors
/// The world does not exist; a named service is not a resource of the
/// world; neither a service nor `all` was given and the world has several
/// resources; a teardown or the `up` that follows failed.
pub(crate) async fn reset(
    d: &Arc<Daemon>,
    req: ResetRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let loc = locate(d, &req.up.world)?;
    let name = &req.up.world.name;
    let w = find_world(d, &loc, name).map_err(|e| {
        e.hint("`binky up` creates a world; `reset` rebuilds the slices of one that exists")
    })?;
    let root = join_subdir(Path::new(&w.path), &loc.subdir);
    let cfg = config::load(&root.join(config::FILE_NAME)).unwrap_or_else(|_| loc.config.clone());
    let resources: Vec<String> = cfg
        .services
        .iter()
        .filter(|(_, s)| s.resource().is_some())
        .map(|(n, _)| n.clone())
        .collect();
    let chosen = choose(&resources, &req.services, req.all, name)?;
    let dropping = SliceDrop {
        services: &chosen,
        end_sessions: req.force,
    };
    if let Some(out) = reset_running(d, &loc, &req.up, &cfg, dropping, progress).await? {
        return Ok(out);
    }
    reload_with(d, req.up, progress, Some(dropping)).await
}

/// The reset of a running world, in place, under its lock: the users of
/// `chosen` stop (dependents first), the slices are dropped and made
/// afresh on the world's own ports and environment, and the users start
/// again level by level; every other process runs on, and the other
/// slices are not touched. `None` when the world is not fully running (the
/// caller reloads it whole).
///
/// # Errors
/// A teardown, the remaking of a slice, or a restarted process failed:
/// the world is then `failed`, as a failed `up` leaves it, with what it
/// did not reach stopped.
async fn reset_running(
    d: &Arc<Daemon>,
    loc: &Located,
    req: &UpRequest,
    cfg: &config::Config,
    dropping: SliceDrop<'_>,
    progress: &ProgressTx,
) -> Result<Option<WorldOutcome>, ApiError> {
    let chosen = dropping.services;
    let name = &req.world.name;
    let lock = d.worlds.lock_for(&WorldKey::new(&loc.name, name));
    let _guard = lock.lock().await;
    let w = find_world(d, loc, name)?;
    if !fully_running(d, &w, &loc.config) {
        return Ok(None);
    }
    let users = config::users_of(cfg, chosen);
    // Intent first, so a crash mid-reset is reported as such.
    d.registry(|r| r.set_world_state(w.id, w.state, Some(Intent::Reload), None))?;
    if !users.is_empty() {
        let listed: Vec<&str> = users.iter().map(String::as_str).collect();
        progress.say(
            crate::protocol::ProgressStep::Stop,
            None,
            format!(
                "stopping {} (using {})",
                listed.join(", "),
                chosen.join(", ")
            ),
        );
    }
    stop_services(d, &w, &users).await;
    let env = d.worlds.env_for(w.id, &req.env);
    let cx = WorldCtx {
        d,
        cfg,
        project: &loc.name,
        world: &w.world_name(),
        world_id: w.id,
        client_env: &env,
    };
    let mut notes = Vec::new();
    let result = async {
        notes = drop_slices(d, loc, &w, dropping, req, progress).await?;
        // The world's ports as reserved: the processes running on hold
        // theirs, and the restarted ones take theirs back.
        let ports = world_ports(d, w.id)?;
        let facts = facts_of(d, cfg, &w.slug, &ports);
        let root = join_subdir(Path::new(&w.path), &loc.subdir);
        let mut plan = plan_with(&cx, loc, root, facts)?;
        provision_slices(&cx, &mut plan, progress, Some(chosen)).await?;
        start_processes(&cx, &plan, progress, Some(&users)).await
    }
    .await;
    settle_up(&cx, w.project_id, result, progress, notes)
        .await
        .map(Some)
}

/// The services a reset rebuilds: those named (each a resource of the
/// world), every resource with `all`, or the only one.
fn choose(
    resources: &[String],
    named: &[String],
    all: bool,
    world: &str,
) -> Result<Vec<String>, ApiError> {
    let listed = || {
        if resources.is_empty() {
            "it has none".to_owned()
        } else {
            format!("its resources: {}", resources.join(", "))
        }
    };
    if all && !named.is_empty() {
        return Err(ApiError::new(format!(
            "reset of {world}: name services or ask for all of them, not both"
        ))
        .hint(format!(
            "binky reset {world} --all, or binky reset {world} {}",
            named.join(" ")
        )));
    }
    if all {
        return Ok(resources.to_vec());
    }
    if named.is_empty() {
        return match resources {
            [one] => Ok(vec![one.clone()]),
            [] => Err(ApiError::new(format!(
                "{world} has no resource (no service with an adapter): nothing to reset"
            ))),
            _ => Err(ApiError::new(format!(
                "{world} has several resources ({}): name one, or pass --all",
                resources.join(", ")
            ))
            .hint(format!("binky reset {world} {}", resources[0]))),
        };
    }
    for n in named {
        if !resources.contains(n) {
            return Err(ApiError::new(format!(
                "`{n}` is not a resource of {world}; {}",
                listed()
            ))
            .hint("reset rebuilds a slice (a service with an adapter); `binky reload` restarts processes"));
        }
    }
    let mut chosen = named.to_vec();
    chosen.sort();
    chosen.dedup();
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_names_a_resource_of_the_world_or_all() {
        let rs = vec!["db".to_owned(), "cache".to_owned()];
        assert_eq!(choose(&rs, &[], true, "w").unwrap(), rs);
        assert_eq!(choose(&rs, &["db".into()], false, "w").unwrap(), ["db"]);
        let several = choose(&rs, &[], false, "w").unwrap_err();
        assert!(several.message.contains("db, cache"), "{}", several.message);
        let not = choose(&rs, &["api".into()], false, "w").unwrap_err();
        assert!(
            not.message.contains("`api` is not a resource"),
            "{}",
            not.message
        );
        assert_eq!(choose(&["db".into()], &[], false, "w").unwrap(), ["db"]);
        assert!(choose(&rs, &["db".into()], true, "w").is_err());
        assert_eq!(
            choose(&rs, &["db".into(), "db".into()], false, "w").unwrap(),
            ["db"]
        );
        assert!(choose(&[], &[], false, "w").is_err());
    }
}
