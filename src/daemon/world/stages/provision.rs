//! Provisioning one slice for a world: kept live with its data, or
//! recorded as intent, made (cloned from its golden template, or
//! provisioned, migrated and seeded) and recorded live; a failure drops
//! what it made. Only a slice this project made is ever taken over.

use super::data::{provision_and_seed, run_data_commands, world_migrate_key};
use super::plan::{Plan, lookup_env};
use super::reach::{reach, server_now, tear_down};
use super::slices::{Resolved, SliceAt, adapter_error, adapter_for, no_adapter, slice_name};
use crate::adapters::Slice;
use crate::adapters::server::Server;
use crate::daemon::events::EventKind;
use crate::daemon::world::{SliceJob, WorldCtx, world_event};
use crate::daemon::{Daemon, ProgressTx};
use crate::faults::point as fault_point;
use crate::protocol::{ApiError, SliceState};
use crate::registry::SliceKey;
use crate::{adapters, config};

/// Makes (or keeps) service `service`'s slice for the world and returns its
/// address and fields: a live slice is kept with its data (its schema caught up with
/// the branch when the branch moved); otherwise the slice is recorded as
/// `provisioning` first (a crash leaves a row `gc` can sweep), then cloned
/// from the golden template where the adapter can, else provisioned,
/// migrated and seeded, and recorded `live` with the key it was migrated
/// at. A failure drops the slice and its record.
pub(in crate::daemon::world) async fn provision(
    cx: &WorldCtx<'_>,
    service: &str,
    r: &config::Resource,
    plan: &Plan,
    progress: &ProgressTx,
) -> Result<Resolved, ApiError> {
    let WorldCtx {
        d,
        cfg,
        project,
        world,
        world_id,
        client_env,
    } = *cx;
    let slug = world.slug();
    let adapter =
        adapter_for(d, &r.adapter, client_env).ok_or_else(|| no_adapter(service, &r.adapter))?;
    let env_fn = lookup_env(&plan.project_env, client_env);
    let slice_name = slice_name(adapter.as_ref(), project, cfg.slice_resource(service), slug)?;
    let slice = SliceAt {
        cfg,
        project,
        world,
        world_root: &plan.world_root,
        facts: &plan.facts,
        env: &env_fn,
        client_env,
    }
    .slice(d, service, adapter.as_ref(), slice_name.clone())?;
    let log = d
        .paths
        .world_logs(project, slug)
        .join(format!("{service}.log"));
    let p = Provisioning {
        cx,
        job: SliceJob {
            service,
            r,
            log: &log,
        },
        plan,
        progress,
        adapter: adapter.as_ref(),
        // Where the branch's migrations are: a slice migrated at another
        // key catches up.
        world_key: world_migrate_key(r, &plan.world_root),
        slice: &slice,
        claimed: std::sync::Mutex::new(None),
    };
    let (live, exists) = p.live_or_intent(world_id).await?;
    // A new slice claims its spare now, before its password is made: the
    // spare's user comes with one, which the world's then is (a slice with
    // a password already may have a user with it, so it keeps its own).
    if live.is_none()
        && !exists
        && let Some(from) = &r.clone_from
        && adapter.facts().capabilities.spares
        && d.registry(|reg| reg.slice_secret(adapter.name(), &slice_name))?
            .is_none()
    {
        let claimed = p.claim_spare(from, true).await?;
        *p.claimed.lock().unwrap_or_else(|e| e.into_inner()) = claimed;
    }
    // The password of the world's own user, kept before any server sees
    // it (only for a slice recorded now): a user made with it is Binky's
    // to take up again, or drop, however the rest is cut short.
    let with_secret = slice.clone().with_new_secret(d, adapter.as_ref())?;
    let p = Provisioning {
        slice: &with_secret,
        ..p
    };
    let address = match &live {
        Some(k) => p.keep_live(k).await?,
        None => p.make(exists).await?,
    };
    if let Some(from) = &r.clone_from
        && adapter.facts().capabilities.spares
    {
        // The pool this world may have taken from, topped up after it.
        let (tname, key) = p.template_id(from);
        super::spares::refill_later(super::spares::Pool {
            d: d.clone(),
            adapter: adapter.clone(),
            project: project.to_owned(),
            service: service.to_owned(),
            clone_from: from.clone(),
            template: p.template_slice(&tname)?,
            key,
        });
    }
    Ok(Resolved::new(address, adapter.as_ref(), &with_secret))
}

/// Refuses to take over a slice that exists on the server but that this
/// project never recorded: another `BINKY_HOME` on the same server, or
/// another project whose names collide, made it, and tearing it down to
/// start afresh would destroy their data. A slice this project recorded
/// (half-made, or left for `gc`) is its own to replace.
fn check_ours(
    d: &Daemon,
    service: &str,
    project: &str,
    adapter: &dyn adapters::Adapter,
    slice: &str,
) -> Result<(), ApiError> {
    let owner = d.registry(|r| r.slice_owner(adapter.name(), slice))?;
    match owner {
        Some(p) if p == project => Ok(()),
        Some(other) => Err(ApiError::new(format!(
            "services.{service}: the {} slice `{slice}` already exists and belongs to project `{other}`",
            adapter.name()
        ))
        .hint("give one of the projects another [project] name")),
        None => Err(ApiError::new(format!(
            "services.{service}: the {} slice `{slice}` already exists on the server, and this Binky did not make it",
            adapter.name()
        ))
        .hint("another BINKY_HOME (or a Binky whose registry was lost) made it: remove it there, or drop it by hand if nothing uses it, then `binky up` again")),
    }
}

impl Provisioning<'_> {
    /// Runs only `migrate` against the slice at `address`, which has data
    /// (never `seed`), so its schema catches up with the world's branch;
    /// says so in `up`'s progress, the resource's log and the event log.
    /// `dropped`: the slice is dropped if this fails (a fresh clone), as
    /// the failure's hint says.
    pub(in crate::daemon::world) async fn catch_up(
        &self,
        address: String,
        why: &str,
        dropped: bool,
    ) -> Result<(), ApiError> {
        let (d, cfg, world) = (self.cx.d, self.cx.cfg, self.cx.world);
        let SliceJob { service, log, .. } = self.job;
        self.progress.say(
            crate::protocol::ProgressStep::Migrate,
            Some(service),
            format!("{service}: running migrate to catch up with the branch ({why})"),
        );
        if let Ok(mut f) = crate::supervisor::logs::open_append(log) {
            use std::io::Write;
            let _ = writeln!(
                f,
                "binky: running migrate to catch up with the branch ({why})"
            );
        }
        let mut ev =
            world_event(EventKind::Migrated, &cfg.project.name, world).detail(why.to_owned());
        ev.service = Some(service.to_owned());
        d.event(ev);
        let resolved = Resolved::new(address, self.adapter, self.slice);
        run_data_commands(self.cx, &self.job, self.plan, &resolved, false, dropped).await
    }
}

/// One [`provision`] under way: who it is for, the slice, and the key the
/// world's branch is at.
pub(in crate::daemon::world) struct Provisioning<'a> {
    pub(in crate::daemon::world) cx: &'a WorldCtx<'a>,
    pub(in crate::daemon::world) job: SliceJob<'a>,
    pub(in crate::daemon::world) plan: &'a Plan,
    pub(in crate::daemon::world) progress: &'a ProgressTx,
    pub(in crate::daemon::world) adapter: &'a dyn adapters::Adapter,
    pub(in crate::daemon::world) slice: &'a Slice,
    pub(in crate::daemon::world) world_key: Option<String>,
    /// A spare claimed for this slice before its password was made (see
    /// [`claim_spare`](Self::claim_spare)), taken by [`fill`](Self::fill).
    pub(in crate::daemon::world) claimed: std::sync::Mutex<Option<super::spares::Claimed>>,
}

impl Provisioning<'_> {
    /// Makes the slice afresh (dropping one of this project's that `exists`
    /// on its server) and returns its address: the intent is recorded
    /// before (`provisioning`, with the server), then the slice is filled
    /// (cloned, or provisioned, migrated and seeded), then recorded live
    /// with the key it was migrated at. A failure drops the slice and its
    /// record.
    async fn make(&self, exists: bool) -> Result<String, ApiError> {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let (adapter, slice, service) = (self.adapter, self.slice, self.job.service);
        let slice_name = &slice.name;
        if exists {
            adapter.teardown(slice).await.map_err(|e| self.named(e))?;
        }
        if let Err(e) = self.fill().await {
            // Leave nothing half-made: drop the slice, and its record once it
            // is really gone (else the record is what `gc` sweeps).
            // A teardown that refuses what it finds (another's topics a
            // refused provision left) made nothing either: no slice, no record.
            let gone = adapter.teardown(slice).await.is_ok()
                || adapter.exists(slice).await.is_ok_and(|there| !there);
            if gone {
                let _ = d.registry(|r| r.delete_slice(adapter.name(), slice_name));
            }
            return Err(e);
        }
        self.record(SliceState::Live, None)?;
        if let Some(key) = &self.world_key {
            d.registry(|r| r.set_slice_migrated(adapter.name(), slice_name, key))?;
        }
        let mut ev = world_event(EventKind::Provisioned, project, world);
        ev.service = Some(service.to_owned());
        ev.adapter = Some(adapter.name().to_owned());
        d.event(ev);
        adapter.resolve(slice).await.map_err(|e| self.named(e))
    }

    /// Records the world's slice in `state`, made on `server` (`None`
    /// keeps the server recorded).
    fn record(&self, state: SliceState, server: Option<&Server>) -> Result<(), ApiError> {
        let WorldCtx {
            d,
            project,
            world_id,
            ..
        } = *self.cx;
        let key = SliceKey {
            world_id: Some(world_id),
            project,
            service: self.job.service,
            adapter: self.adapter.name(),
            slice: &self.slice.name,
        };
        d.registry(|r| r.set_slice(&key, state, server))
            .map_err(ApiError::from)
    }

    /// When the slice's record names another server than `admin_url` does
    /// today: a live slice is an error (its data is there: the user moves
    /// it or removes the world); one an interrupted operation left there is
    /// torn down on that server first, so making it here orphans nothing.
    ///
    /// # Errors
    /// The slice is live on the other server, or that server cannot be
    /// reached or refuses the teardown; its record is kept.
    /// The slice's record if it is live and the slice is on the server,
    /// and whether it is there. Otherwise the intent is recorded first,
    /// with the server (a crash from here leaves a row `gc` can sweep
    /// where the slice is), after refusing a slice on the server that this
    /// project never recorded.
    ///
    /// # Errors
    /// The registry, the adapter's look, or a slice that is not Binky's.
    async fn live_or_intent(
        &self,
        world_id: i64,
    ) -> Result<(Option<crate::registry::SliceRow>, bool), ApiError> {
        let (d, project, service) = (self.cx.d, self.cx.project, self.job.service);
        let name = &self.slice.name;
        let known = d
            .registry(|r| r.slices_of(world_id))?
            .into_iter()
            .find(|s| s.service == service && &s.slice == name);
        let server = server_now(d, self.adapter, self.slice)?;
        if let Some(k) = &known {
            self.leave_old_server(k, server.as_ref()).await?;
        }
        let exists = self
            .adapter
            .exists(self.slice)
            .await
            .map_err(|e| self.named(e))?;
        let live = known.filter(|k| k.state == SliceState::Live && exists);
        if live.is_none() {
            if exists {
                check_ours(d, service, project, self.adapter, name)?;
            }
            self.record(SliceState::Provisioning, server.as_ref())?;
        }
        Ok((live, exists))
    }

    async fn leave_old_server(
        &self,
        known: &crate::registry::SliceRow,
        now: Option<&Server>,
    ) -> Result<(), ApiError> {
        let Some(recorded) = &known.server else {
            return Ok(());
        };
        if now.is_some_and(|n| n.address == recorded.address) {
            return Ok(());
        }
        let (d, service, world) = (self.cx.d, self.job.service, self.cx.world);
        let named = now.map_or("no server".to_owned(), |n| n.address.clone());
        if known.state == SliceState::Live {
            return Err(ApiError::new(format!(
                "services.{service}: the slice {} lives on {}, but admin_url now names {named}",
                self.slice.name, recorded.address
            ))
            .hint(format!(
                "set admin_url back so that it names {}, or run `binky remove {world}` (it tears the slice down there) and `binky up {world}` to make it on {named}",
                recorded.address
            )));
        }
        let old = reach(
            d,
            self.adapter,
            service,
            vec![self.slice.clone()],
            Some(recorded),
        )?;
        tear_down(self.adapter, &old.slice)
            .await
            .map_err(|e| adapter_error(service, &old.slice, e))?;
        d.registry(|r| r.delete_slice(self.adapter.name(), &self.slice.name))
            .map_err(ApiError::from)
    }

    /// An adapter error naming the service, never the credentials.
    pub(in crate::daemon::world) fn named(&self, e: adapters::AdapterError) -> ApiError {
        adapter_error(self.job.service, self.slice, e)
    }

    /// `up` after `down`, `reload`: the slice and its data are kept, nothing
    /// re-provisioned or re-seeded; its schema catches up with the branch
    /// when the branch moved.
    async fn keep_live(&self, known: &crate::registry::SliceRow) -> Result<String, ApiError> {
        // What the config asks of the slice now (a user of its own) is
        // made here, by `up`, never by `resolve`.
        self.adapter
            .complete(self.slice)
            .await
            .map_err(|e| self.named(e))?;
        let address = self
            .adapter
            .resolve(self.slice)
            .await
            .map_err(|e| self.named(e))?;
        if let Some(key) = &self.world_key
            && known.migrated_key.as_deref() != Some(key.as_str())
        {
            let why = if known.migrated_key.is_none() {
                "it was never migrated by this binky"
            } else {
                "its branch moved since it was last migrated"
            };
            self.catch_up(address.clone(), why, false).await?;
            self.cx
                .d
                .registry(|r| r.set_slice_migrated(self.adapter.name(), &self.slice.name, key))?;
        }
        Ok(address)
    }

    /// Fills the new slice: a clone of the golden template where the
    /// adapter can clone (falling back when the copy fails for an
    /// environmental reason), else provision + migrate + seed.
    async fn fill(&self) -> Result<(), ApiError> {
        let mut cloned = false;
        if let Some(from) = &self.job.r.clone_from
            && self.adapter.facts().capabilities.clone
        {
            let spare = if self.adapter.facts().capabilities.spares {
                let claimed = self
                    .claimed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                self.take_spare(from, claimed).await?
            } else {
                None
            };
            cloned = match spare {
                Some(caught_up) => caught_up,
                None => {
                    let template = self.golden(from).await?;
                    self.clone_from(&template).await?
                }
            };
        }
        if !cloned {
            provision_and_seed(
                self.adapter,
                self.slice,
                self.cx,
                &self.job,
                self.plan,
                "slice",
            )
            .await?;
            self.cx
                .d
                .registry(|r| r.set_slice_template(self.adapter.name(), &self.slice.name, None))?;
        }
        fault_point("slice:ready");
        Ok(())
    }
}

/// Refuses, before any slice is made, to hand one resource a slice the
/// world recorded for another on the same adapter: the first resource in
/// binky.toml's order keeps the plain slice name, so moving another first
/// would give it the first's database, data and all. Every such conflict
/// is named at once.
///
/// A slice whose resource is no longer in binky.toml (renamed, or the
/// first deleted so the next would inherit its name) is refused too, with
/// that cause named: taking it up under another name re-made it empty.
///
/// # Errors
/// Names the services of each conflict and says how to go on; a registry
/// error.
pub(in crate::daemon::world) fn refuse_reordered_slices(cx: &WorldCtx<'_>) -> Result<(), ApiError> {
    let recorded = cx.d.registry(|r| r.slices_of(cx.world_id))?;
    if recorded.is_empty() {
        return Ok(());
    }
    let implementation = adapters::catalog::implementation;
    let mut conflicts = Vec::new();
    for (service, s) in &cx.cfg.services {
        let Some(r) = s.resource() else { continue };
        let Some(adapter) = adapter_for(cx.d, &r.adapter, cx.client_env) else {
            continue;
        };
        let name = slice_name(
            adapter.as_ref(),
            cx.project,
            cx.cfg.slice_resource(service),
            cx.world.slug(),
        )?;
        let mine = implementation(&r.adapter);
        let Some(other) = recorded.iter().find(|s| {
            s.slice == name && &s.service != service && implementation(&s.adapter) == mine
        }) else {
            continue;
        };
        let still_listed = cx.cfg.services.get(&other.service).is_some_and(|o| {
            o.resource()
                .is_some_and(|o| implementation(&o.adapter) == mine)
        });
        let own = recorded
            .iter()
            .find(|s| &s.service == service && implementation(&s.adapter) == mine);
        conflicts.push(match (still_listed, own) {
            (true, _) => format!(
                "services.{service}: the slice {name} was made for `{}`, which now comes after `{service}` among the {mine} resources: `{service}` would take its data",
                other.service
            ),
            (false, Some(own)) => format!(
                "services.{service}: the slice {name} was made for `{}`, which is no longer in binky.toml; `{service}` has its own slice {} and would take {name}'s data instead",
                other.service, own.slice
            ),
            // Renamed, most likely: taking the slice up under the new name
            // would re-make it (its record is the old name's), so refuse.
            (false, None) => format!(
                "services.{service}: the slice {name} was made for `{}`, which is no longer in binky.toml (renamed to `{service}`?); a world's slice is not handed to a resource of another name",
                other.service
            ),
        });
    }
    if conflicts.is_empty() {
        return Ok(());
    }
    let world = cx.world;
    Err(ApiError::new(format!(
        "{} (the first resource of an adapter in binky.toml keeps the plain slice name; every other carries its own)",
        conflicts.join("; ")
    ))
    .hint(format!(
        "put the resources back as they were when the world was made (names and order), or run `binky remove {world}` (it tears down every slice) and `binky up {world}` to make them afresh"
    )))
}
