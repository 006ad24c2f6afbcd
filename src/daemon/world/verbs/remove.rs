//! `remove`: stop, drop the slices, delete the worktree and logs — only what
//! Binky made.

use crate::daemon::events::EventKind;
use crate::daemon::world::stages::locate::{
    Located, find_world, inside, join_subdir, locate, user_git,
};
use crate::daemon::world::stages::plan::{lookup_env, project_env};
use crate::daemon::world::stages::processes::stop_processes;
use crate::daemon::world::stages::reach::{
    Reached, TornDown, not_found_note, reach, tear_down_with,
};
use crate::daemon::world::stages::slices::{SliceAt, adapter_for};
use crate::daemon::world::{first_line, withdrawn, world_event, world_exists, world_status};
use crate::daemon::{Daemon, WorldKey, admission};
use crate::faults::point as fault_point;
use crate::protocol::{
    ApiError, ClientEnv, ErrorKind, Intent, ServiceState, SliceState, TornDownSlice, WorldOutcome,
    WorldRef, WorldState,
};
use crate::registry::{SliceKey, WorldRow};
use crate::{adapters, config, worktree};
use indexmap::IndexMap;
use std::path::PathBuf;
use std::sync::Arc;

/// `binky remove`.
pub(crate) async fn remove(
    d: &Arc<Daemon>,
    wref: WorldRef,
    force: bool,
    client_env: ClientEnv,
) -> Result<WorldOutcome, ApiError> {
    let loc = locate(d, &wref)?;
    let was_queued = admission::withdraw(d, &loc.name, &wref.name)?.was_queued();
    let lock = d.worlds.lock_for(&WorldKey::new(&loc.name, &wref.name));
    // After the lock: a verb admitted a moment ago holds it while it
    // makes the world, and everything it made is removed here.
    let _guard = lock.lock().await;
    if was_queued && !world_exists(d, &loc, &wref.name)? {
        return Ok(withdrawn(&loc, &wref.name, WorldState::Removed));
    }
    let w = find_world(d, &loc, &wref.name)?;
    let rm = Removal::new(d, &loc, &w, force);
    let (ours, left_in_place) = rm.check(&client_env).await?;
    // Everything the teardown needs is rendered before anything is done,
    // with the environment the world was built with: a missing variable
    // fails here, leaving the world as it was.
    let client_env = d.worlds.env_for(w.id, &client_env);
    let teardowns = rm.teardowns(&client_env, None)?;
    let git = user_git(&client_env)?;
    let before = world_status(d, &loc.name, w.id)?;
    d.registry(|r| r.set_world_state(w.id, w.state, Some(Intent::Remove), None))?;
    let mut notes = stop_processes(d, &w).await;
    // The sampler looks again: with this world gone it may have nothing
    // left to watch, and stops.
    d.admission.resample();
    notes.extend(left_in_place);
    fault_point("remove:stopped");
    let (torn_down_on, left_for_gc) = rm.tear_down(teardowns, &mut notes).await?;
    rm.delete_files(git, ours).await?;
    d.registry(|reg| {
        let _ = reg.release_ports(w.id);
        reg.delete_world(w.id)
    })?;
    d.routes.remove_world(&loc.name, &w.name);
    d.event(world_event(EventKind::Removed, &loc.name, &w.name));
    let mut world = before;
    world.state = WorldState::Removed;
    // As the world is now: nothing runs and no slice is its (one left for
    // gc is listed in `left_for_gc`), though the status read before the
    // stop said otherwise.
    for s in &mut world.services {
        s.state = ServiceState::Stopped;
        s.pid = None;
    }
    Ok(WorldOutcome {
        project: loc.name.clone(),
        world,
        noop: false,
        notes,
        torn_down: torn_down_on.iter().map(|t| t.slice.clone()).collect(),
        torn_down_on,
        left_for_gc,
        left_queue: was_queued,
    })
}

/// One `remove` under way (or the teardown half of a `reset`): the world,
/// its worktree and the root Binky makes worktrees in.
pub(in crate::daemon::world) struct Removal<'a> {
    d: &'a Daemon,
    loc: &'a Located,
    w: &'a WorldRow,
    path: PathBuf,
    root: PathBuf,
    force: bool,
    /// What its teardowns do about sessions Binky did not open.
    others: adapters::OtherSessions,
}

/// A slice to tear down: its row, its adapter and the slice as rendered to
/// reach the server it was made on (or why it cannot be).
pub(in crate::daemon::world) type Teardown = (
    crate::registry::SliceRow,
    Arc<dyn adapters::Adapter>,
    Result<Reached, ApiError>,
);

impl<'a> Removal<'a> {
    /// The removal of world `w`; `force` goes past uncommitted changes and
    /// failed teardowns (left for `gc`).
    pub(in crate::daemon::world) fn new(
        d: &'a Daemon,
        loc: &'a Located,
        w: &'a WorldRow,
        force: bool,
    ) -> Self {
        Removal {
            d,
            path: PathBuf::from(&w.path),
            root: match &loc.config.project.worktree_root {
                Some(r) => config::resolve_against(&loc.main_root(), r),
                None => worktree::default_root(&loc.main),
            },
            loc,
            w,
            force,
            // `--force` ends them knowingly; else they are waited for.
            others: if force {
                adapters::OtherSessions::End
            } else {
                adapters::OtherSessions::Wait(adapters::OTHER_SESSIONS_WAIT)
            },
        }
    }

    /// The same removal, its teardowns ending sessions Binky did not open
    /// on the slices when `end` (`reset --force`).
    pub(in crate::daemon::world) fn ending_sessions(mut self, end: bool) -> Self {
        if end {
            self.others = adapters::OtherSessions::End;
        }
        self
    }

    /// Whether the worktree is Binky's to delete, and the note to give when
    /// `--force` removes the world but leaves a folder that is not.
    ///
    /// Binky deletes only a registered git worktree inside the project's
    /// worktree root (git itself refuses anything else), and only log
    /// folders whose names are its own: a tampered or odd registry row never
    /// makes it delete elsewhere. `--force` overrides uncommitted changes,
    /// nothing else.
    ///
    /// # Errors
    /// Without `--force`: the folder is not Binky's, or it holds uncommitted
    /// or untracked changes (listed, 20 at most).
    async fn check(&self, client_env: &ClientEnv) -> Result<(bool, Option<String>), ApiError> {
        let (path, root, w) = (&self.path, &self.root, self.w);
        let ours =
            path.exists() && inside(path, root) && worktree::is_registered(&self.loc.main, path);
        let mut left_in_place = None;
        if path.exists() && !ours {
            let why = format!(
                "the worktree {} is not one binky made (outside {}, or not a registered git worktree of the project)",
                path.display(),
                root.display()
            );
            if !self.force {
                return Err(ApiError::new(format!("{why}; binky will not delete it"))
                    .hint(format!(
                        "remove it with `git worktree remove`, or run `binky remove {} --force` to remove the world and leave the folder",
                        w.name
                    ))
                    .with_kind(ErrorKind::NeedsForce));
            }
            left_in_place = Some(format!("{why}: left in place"));
        }
        if self.force || !ours {
            return Ok((ours, left_in_place));
        }
        let p2 = path.clone();
        let git = user_git(client_env)?;
        let changes = tokio::task::spawn_blocking(move || worktree::changes(&git, &p2)).await??;
        if changes.is_empty() {
            return Ok((ours, left_in_place));
        }
        let shown: Vec<String> = changes.iter().take(20).map(|c| format!("  {c}")).collect();
        let more = if changes.len() > 20 {
            format!("\n  … and {} more", changes.len() - 20)
        } else {
            String::new()
        };
        Err(ApiError::new(format!(
            "the worktree {} has uncommitted or untracked changes:\n{}{more}",
            path.display(),
            shown.join("\n")
        ))
        .hint(format!(
            "commit or stash them, or run `binky remove {} --force` to discard them",
            w.name
        ))
        .with_kind(ErrorKind::NeedsForce))
    }

    /// Every slice of the world (of the services in `only`, when given),
    /// rendered for teardown from the world's own config (it names the
    /// servers), else the main checkout's when the worktree is gone — with
    /// today's environment, and with the one the world was built with — and
    /// pinned to the server it was made on. Only slices the registry
    /// records for this world: never another world's.
    ///
    /// # Errors
    /// An `admin_url` cannot be rendered (an unset variable); without
    /// `--force`, a slice's server cannot be reached (see [`reach`]).
    pub(in crate::daemon::world) fn teardowns(
        &self,
        client_env: &ClientEnv,
        only: Option<&[String]>,
    ) -> Result<Vec<Teardown>, ApiError> {
        let (d, loc, w) = (self.d, self.loc, self.w);
        let world_root = join_subdir(&self.path, &loc.subdir);
        let cfg = config::load(&world_root.join(config::FILE_NAME))
            .unwrap_or_else(|_| loc.config.clone());
        let penv = project_env(&cfg, &world_root, &loc.main_root()).unwrap_or_default();
        let built = d.worlds.built_env(w.id);
        let envs: Vec<&ClientEnv> = std::iter::once(client_env).chain(built.as_ref()).collect();
        let mut teardowns = Vec::new();
        // Read first: the registry's lock must not be held across the loop.
        let rows = d.registry(|r| r.slices_of(w.id))?;
        for s in rows
            .into_iter()
            .filter(|s| only.is_none_or(|o| o.contains(&s.service)))
        {
            let Some(adapter) = adapter_for(d, &s.adapter, client_env) else {
                continue;
            };
            let mut candidates = Vec::new();
            for env in &envs {
                let env_fn = lookup_env(&penv, env);
                let at = SliceAt {
                    cfg: &cfg,
                    project: &loc.name,
                    world: &w.name,
                    world_root: &world_root,
                    facts: &IndexMap::new(),
                    env: &env_fn,
                    client_env: env,
                };
                match at.slice(d, &s.service, adapter.as_ref(), s.slice.clone()) {
                    Ok(slice) => candidates.push(slice),
                    Err(e) if candidates.is_empty() => return Err(e),
                    Err(_) => {}
                }
            }
            let reached = reach(
                d,
                adapter.as_ref(),
                &s.service,
                candidates,
                s.server.as_ref(),
            );
            if let Err(e) = &reached
                && !self.force
            {
                return Err(e
                    .clone()
                    .hint(format!(
                        "{}; or run `binky remove {} --force` to remove the world and leave the slice to `binky gc`",
                        e.hint.clone().unwrap_or_default(),
                        w.name
                    ))
                    .with_kind(ErrorKind::NeedsForce));
            }
            teardowns.push((s, adapter, reached));
        }
        Ok(teardowns)
    }

    /// Tears down each slice, recorded `teardown` first so a crash leaves
    /// what `gc` sweeps; returns the slices `--force` left for `gc`.
    ///
    /// # Errors
    /// A teardown failed, without `--force` (the world is then `failed`;
    /// its processes are already stopped). With `--force` the failure is a
    /// note and the slice stays recorded for `gc`.
    pub(in crate::daemon::world) async fn tear_down(
        &self,
        teardowns: Vec<Teardown>,
        notes: &mut Vec<String>,
    ) -> Result<(Vec<TornDownSlice>, Vec<String>), ApiError> {
        let (mut torn, mut left) = (Vec::new(), Vec::new());
        let (d, loc, w) = (self.d, self.loc, self.w);
        for (s, adapter, reached) in teardowns {
            let key = SliceKey {
                world_id: Some(w.id),
                project: &loc.name,
                service: &s.service,
                adapter: &s.adapter,
                slice: &s.slice,
            };
            d.registry(|r| r.set_slice(&key, SliceState::Teardown, None))?;
            fault_point("remove:teardown");
            let (result, shown) = match reached {
                Ok(r) => {
                    notes.extend(r.note);
                    let done = tear_down_with(adapter.as_ref(), &r.slice, self.others).await;
                    let done = done.map(|(found, ended)| {
                        if !ended.is_empty() {
                            notes.push(format!(
                                "ended {} session(s) on {} that binky did not open (--force): {}",
                                ended.len(),
                                s.slice,
                                ended.join("; ")
                            ));
                        }
                        found
                    });
                    (
                        done.map_err(|e| e.redacted(&r.slice).message),
                        Some(r.slice),
                    )
                }
                Err(e) => (Err(e.message), None),
            };
            if let Ok(found) = result {
                if found == TornDown::Deleted {
                    torn.push(torn_down(&s, adapter.as_ref(), shown.as_ref()));
                } else if let Some(slice) = &shown {
                    notes.push(not_found_note(d, adapter.as_ref(), slice));
                }
                d.registry(|reg| {
                    reg.delete_slice(&s.adapter, &s.slice)?;
                    // Gone: a later failure must not leave it shown as
                    // provisioned.
                    let _ = reg.service_state(w.id, &s.service, ServiceState::Stopped, None, false);
                    Ok::<_, crate::registry::RegistryError>(())
                })?;
                continue;
            }
            let message = format!(
                "teardown of {} failed: {}",
                s.slice,
                result.err().unwrap_or_default()
            );
            if !self.force {
                // Its processes are stopped: say so rather than "running".
                let _ = d.registry(|r| {
                    r.set_world_state(w.id, WorldState::Failed, None, Some(&message))
                });
                return Err(ApiError::new(message)
                    .hint(
                        "fix the cause and run `binky remove` again, or `binky remove --force` to remove the world and leave the slice to `binky gc`",
                    )
                    .with_kind(ErrorKind::NeedsForce));
            }
            notes.push(format!("{message}; `binky gc` retries it"));
            left.push(s.slice.clone());
            let mut ev = world_event(EventKind::TeardownDeferred, &loc.name, &w.name)
                .detail(first_line(&message));
            ev.service = Some(s.service.clone());
            ev.adapter = Some(s.adapter.clone());
            d.event(ev);
        }
        Ok((torn, left))
    }

    /// Deletes the worktree (when it is Binky's, or drops git's
    /// registration of a missing one), the emptied default root, and the
    /// world's log folder.
    async fn delete_files(&self, git: worktree::Git, ours: bool) -> Result<(), ApiError> {
        let (d, loc, w, path) = (self.d, self.loc, self.w, &self.path);
        let (main, p2) = (loc.main.clone(), path.clone());
        let repo_lock = d.worlds.repo_lock(&loc.main);
        let _repo_guard = repo_lock.lock().await;
        fault_point("remove:torn_down");
        if ours || !path.exists() {
            let removed =
                tokio::task::spawn_blocking(move || worktree::remove(&git, &main, &p2)).await?;
            match removed {
                Ok(()) => {}
                Err(_) if !path.exists() => {}
                Err(e) => {
                    return Err(ApiError::new(format!(
                        "cannot remove the worktree {}: {e}",
                        path.display()
                    )));
                }
            }
        }
        if loc.config.project.worktree_root.is_none() {
            // The last world gone leaves no empty `<repo>.worktrees/` behind
            // (remove_dir removes only an empty folder).
            let _ = std::fs::remove_dir(&self.root);
        }
        // The log folder is named by Binky's own slug of the world's name,
        // never by whatever the registry row holds.
        if w.slug == crate::slug::world_slug(&w.name) {
            let logs = d.paths.world_logs(&loc.name, &w.slug);
            let _ = crate::daemon::blocking(|| std::fs::remove_dir_all(logs));
        } else {
            tracing::warn!(
                world = w.name,
                "the registry's slug for this world is not its own; its logs are left"
            );
        }
        Ok(())
    }
}

/// What `remove` reports of slice `s`, deleted: where the teardown went is
/// the recorded server, or (a row from before servers were recorded) the
/// one `shown`'s admin_url or the adapter's default names.
fn torn_down(
    s: &crate::registry::SliceRow,
    adapter: &dyn adapters::Adapter,
    shown: Option<&adapters::Slice>,
) -> TornDownSlice {
    let server = s.server.as_ref().map(|v| v.address.clone()).or_else(|| {
        let url = adapters::server_url(adapter, shown?)?;
        Some(url.server(adapter.facts().path_names_server))
    });
    TornDownSlice {
        slice: s.slice.clone(),
        service: s.service.clone(),
        adapter: s.adapter.clone(),
        server,
    }
}
