//! Golden templates: a slice built once per project (migrated and seeded),
//! then cloned for each world where the adapter can clone.

use super::data::provision_and_seed;
use super::provision::Provisioning;
use super::reach::{TornDown, drop_template, reach, server_now};
use super::slices::adapter_error;
use crate::adapters::{Slice, golden};
use crate::daemon::errors::file_error;
use crate::daemon::events::EventKind;
use crate::daemon::world::{SliceJob, WorldCtx, world_event};
use crate::faults::point as fault_point;
use crate::protocol::ApiError;
use crate::supervisor;
use std::path::{Path, PathBuf};

/// A golden template ready to clone: its name and key, the log of its
/// build, the key its schema was migrated at, and the locks that keep it
/// from being rebuilt or dropped (by this daemon, or another on the same
/// server) until the clone is done.
pub(in crate::daemon::world) struct Template {
    pub(in crate::daemon::world) name: String,
    pub(in crate::daemon::world) key: String,
    pub(in crate::daemon::world) slice: Slice,
    pub(in crate::daemon::world) log: PathBuf,
    /// Where its last clone's cost is kept ([`golden::CloneReport`]).
    pub(in crate::daemon::world) report: PathBuf,
    pub(in crate::daemon::world) migrated: Option<String>,
    _held: (
        tokio::sync::OwnedMutexGuard<()>,
        Option<crate::adapters::TemplateLock>,
    ),
}

impl Provisioning<'_> {
    /// The golden template `from` at the key of the world's branch, built
    /// first when it is not there — once, under a lock in this daemon and
    /// one on the server (other daemons sharing it), both held by the
    /// returned [`Template`]. Each key has its own template, so branches
    /// whose migrations differ never rebuild each other's. The marker holds
    /// the template's key, then the key its schema was migrated at (the
    /// building world's).
    pub(in crate::daemon::world) async fn golden(&self, from: &str) -> Result<Template, ApiError> {
        let WorldCtx { d, .. } = *self.cx;
        let adapter = self.adapter;
        let (tname, key) = self.template_id(from);
        // The world's slice on the same server, by the template's name,
        // with its own role's password (kept until `gc` drops it).
        let template = self.template_slice(&tname)?;
        let marker = d.paths.golden_dir(adapter.name()).join(&tname);
        let glock = d.worlds.golden_lock(&format!("{}/{tname}", adapter.name()));
        let local = glock.lock_owned().await;
        let server_lock = adapter
            .lock_template(&template, true)
            .await
            .map_err(|e| self.named(e))?;
        let recorded = golden::Marker::parse(&std::fs::read_to_string(&marker).unwrap_or_default());
        let server = server_now(d, adapter, &template)?;
        let moved = recorded
            .server
            .as_ref()
            .is_some_and(|r| server.as_ref().is_none_or(|s| s.address != r.address));
        if moved {
            // Built on the server `admin_url` named before: dropped there
            // first, or this build would orphan it.
            self.drop_old_template(&template, &recorded).await?;
        }
        let fresh =
            !moved && recorded.key == key && adapter.exists(&template).await.unwrap_or(false);
        // The template's migrate/seed output lives with the template, not
        // in the log of the world that happened to build it (gone with that
        // world); every clone's log points at it.
        let template_log = golden::log_path(&marker);
        let mut t = Template {
            name: tname,
            key,
            slice: template,
            log: template_log,
            report: golden::report_path(&marker),
            migrated: recorded.migrated.clone(),
            _held: (local, server_lock),
        };
        if !fresh {
            t.migrated = self.build_template(&t, &marker, server).await?;
        }
        Ok(t)
    }

    /// Builds template `t` afresh (dropping what is there): provisioned,
    /// migrated and seeded with its output in `t.log`, then its marker
    /// written with its key, the key it was migrated at (returned), the
    /// server it is on and whose it is. A failed build is dropped.
    async fn build_template(
        &self,
        t: &Template,
        marker: &Path,
        server: Option<crate::adapters::server::Server>,
    ) -> Result<Option<String>, ApiError> {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let adapter = self.adapter;
        let (tname, key, template, template_log) = (&t.name, &t.key, &t.slice, &t.log);
        // The marker goes first, with no key (never fresh): whatever ends
        // the build — a failure, a cancel, the daemon killed — leaves a
        // marker naming the server, and `gc` drops what is there and the
        // build log once no world's branch needs the template.
        let building = golden::Marker {
            key: String::new(),
            migrated: None,
            server: server.clone(),
            project: Some(project.to_owned()),
            service: Some(self.job.service.to_owned()),
        };
        write_marker(marker, &building)?;
        super::spares::drop_spares_of(d, adapter, template, "its template is rebuilt")
            .await
            .map_err(|e| ApiError::new(format!("services.{}: {e}", self.job.service)))?;
        adapter
            .drop_template(template)
            .await
            .map_err(|e| self.named(e))?;
        let _ = std::fs::remove_file(template_log);
        if let Ok(mut f) = supervisor::logs::open_append(template_log) {
            use std::io::Write;
            let _ = writeln!(
                f,
                "binky: building template {tname} (key {key}) for world {world}"
            );
        }
        let job = SliceJob {
            log: template_log,
            ..self.job
        };
        let built = provision_and_seed(adapter, template, self.cx, &job, self.plan, "golden").await;
        if let Err(e) = built {
            // Nothing half-made: a template that failed its migrate or
            // seed is dropped, so the next `up` builds it afresh; its
            // keyless marker and log stay for the user to read until `gc`.
            let _ = adapter.drop_template(template).await;
            return Err(e);
        }
        fault_point("golden:built");
        let migrated = self.world_key.clone();
        let m = golden::Marker {
            key: key.to_owned(),
            migrated: migrated.clone(),
            ..building
        };
        write_marker(marker, &m)?;
        d.event(world_event(EventKind::GoldenBuilt, project, world).detail(tname.clone()));
        Ok(migrated)
    }

    /// Drops the golden template `template` on the server its marker says
    /// it was built on (another than `admin_url` names now). The marker is
    /// left for the build that follows to replace: were it removed here, a
    /// crash before that build would leave a log no marker names.
    ///
    /// # Errors
    /// That server cannot be reached with the credentials at hand, or
    /// refuses; the marker is kept, so a later run (or `gc`) finds it.
    async fn drop_old_template(
        &self,
        template: &Slice,
        recorded: &golden::Marker,
    ) -> Result<(), ApiError> {
        let (d, service) = (self.cx.d, self.job.service);
        let old = reach(
            d,
            self.adapter,
            service,
            vec![template.clone()],
            recorded.server.as_ref(),
        )?;
        super::spares::drop_spares_of(d, self.adapter, &old.slice, "its template moved server")
            .await
            .map_err(|e| ApiError::new(format!("services.{service}: {e}")))?;
        let found = drop_template(self.adapter, &old.slice)
            .await
            .map_err(|e| adapter_error(service, &old.slice, e))?;
        let how = match found {
            TornDown::Deleted => "dropped it there",
            TornDown::NotFound => "it was no longer there",
        };
        let mut ev = world_event(EventKind::GoldenMoved, self.cx.project, self.cx.world).detail(
            format!("{}: {how}; building it anew", old.note.unwrap_or_default()),
        );
        ev.service = Some(service.to_owned());
        d.event(ev);
        Ok(())
    }

    /// Copies `template` into the slice (a `cloned` event says from which,
    /// how and how long it took) and returns `true`; a template migrated at
    /// another commit than the world's branch is caught up on the clone.
    /// `false` when the slice is to be built by provision + migrate + seed
    /// instead (the slice dropped, and why said in `up`'s progress, the
    /// log and an event): the copy failed for an environmental reason
    /// (`clone_fallback`), or the catch-up `migrate` failed on this fresh
    /// copy, which holds no data of the world's own yet (`clone_rebuilt`).
    ///
    /// # Errors
    /// The copy failed for any other reason (the slice is dropped).
    pub(in crate::daemon::world) async fn clone_from(
        &self,
        template: &Template,
    ) -> Result<bool, ApiError> {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let (adapter, service) = (self.adapter, self.job.service);
        // The disk a clone takes is the fall in free space of the folder
        // its data is kept in, across the copy: its logical size would
        // count shared blocks as copied.
        let folder = adapter.data_path(&template.slice).await;
        let free = || {
            folder
                .as_deref()
                .and_then(crate::platform::disk_space)
                .map(|(free, _)| free)
        };
        let before = free();
        let started = std::time::Instant::now();
        let cloned = match adapter.clone_slice(&template.slice, self.slice).await {
            Ok(c) => c,
            Err(e) if e.is_environmental() => {
                let e = e.redacted(self.slice);
                tracing::warn!(project, world = world.as_str(), service, reason = %e.message, "clone_fallback");
                self.rebuilding(
                    EventKind::CloneFallback,
                    &format!(
                        "clone_fallback: {}; building this world by provision + migrate + seed",
                        e.message
                    ),
                    e.message.clone(),
                )
                .await;
                return Ok(false);
            }
            Err(e) => {
                let _ = adapter.teardown(self.slice).await;
                return Err(self.named(e).hint(format!(
                    "the copy of the golden template {} failed; `binky up {world}` tries again, and `binky gc` drops a template no world uses",
                    template.name
                )));
            }
        };
        let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let added = before.zip(free()).map(|(b, a)| b.saturating_sub(a));
        d.registry(|r| {
            r.set_slice_template(
                adapter.name(),
                &self.slice.name,
                Some((&template.name, &template.key)),
            )
        })?;
        self.tell_clone(template, cloned, took, added);
        self.catch_up_clone(template.migrated.as_deref()).await
    }

    /// Runs `migrate` on a fresh copy of a template whose schema was
    /// `migrated` at another key than the world's branch; `false` (the copy
    /// dropped, `clone_rebuilt` said) when that fails.
    ///
    /// # Errors
    /// The copy's address cannot be resolved.
    pub(in crate::daemon::world) async fn catch_up_clone(
        &self,
        migrated: Option<&str>,
    ) -> Result<bool, ApiError> {
        let Some(key) = &self.world_key else {
            return Ok(true);
        };
        if migrated == Some(key.as_str()) {
            return Ok(true);
        }
        let address = self
            .adapter
            .resolve(self.slice)
            .await
            .map_err(|e| self.named(e))?;
        let caught_up = self
            .catch_up(
                address,
                "its golden template was migrated at another commit",
                true,
            )
            .await;
        let Err(e) = caught_up else {
            return Ok(true);
        };
        // A fresh copy holds nothing of the world's own: a `migrate` that
        // cannot run twice (`CREATE TABLE` without `IF NOT EXISTS`) must
        // not fail a brand-new world.
        let first = e.message.lines().next().unwrap_or_default().to_owned();
        self.rebuilding(
            EventKind::CloneRebuilt,
            &format!(
                "{first}; the clone holds no data of its own yet, so it is built from scratch (provision + migrate + seed)"
            ),
            first.clone(),
        )
        .await;
        Ok(false)
    }

    /// Says how `cloned` was made and what it took (`took` ms, `added`
    /// bytes of disk) in `up`'s progress, the world's log, the clone
    /// report `binky doctor` reads and a `cloned` event.
    fn tell_clone(
        &self,
        template: &Template,
        mut cloned: crate::adapters::Cloned,
        took: u64,
        added: Option<u64>,
    ) {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let (adapter, service, log) = (self.adapter, self.job.service, self.job.log);
        let shares = golden::shares_blocks(cloned.shares_blocks, added, cloned.size);
        if cloned.shares_blocks == Some(true) && shares == Some(false) {
            // Said to share blocks, but the disk it took says otherwise
            // (an XFS made without reflink, say): the measure is told.
            cloned.how = format!("{}, yet a full copy by the disk it took", cloned.how);
        }
        cloned.shares_blocks = shares;
        let how = &cloned.how;
        let cost = match added {
            Some(a) => format!("{how}, {took} ms, +{}", crate::adapters::kit::cow::size(a)),
            None => format!("{how}, {took} ms"),
        };
        if let Ok(mut f) = supervisor::logs::open_append(log) {
            use std::io::Write;
            let _ = writeln!(
                f,
                "binky: cloned from template {} ({cost}); its migrate and seed output is in {}",
                template.name,
                template.log.display()
            );
        }
        self.progress.say(
            crate::protocol::ProgressStep::Provision,
            Some(service),
            format!("{service}: cloned from {} ({cost})", template.name),
        );
        self.report_clone(template, &cloned, took, added);
        let mut ev = world_event(EventKind::Cloned, project, world)
            .detail(format!("from {} ({cost})", template.name));
        ev.template = Some(template.name.clone());
        ev.how = Some(how.clone());
        ev.ms = Some(took);
        ev.bytes = added;
        ev.service = Some(service.to_owned());
        ev.adapter = Some(adapter.name().to_owned());
        d.event(ev);
    }

    /// Keeps what this clone of `template` cost beside its marker
    /// ([`golden::CloneReport`]), for `binky doctor`. Best effort: a report
    /// that cannot be written costs the world nothing.
    fn report_clone(
        &self,
        template: &Template,
        cloned: &crate::adapters::Cloned,
        ms: u64,
        added: Option<u64>,
    ) {
        let report = golden::CloneReport {
            project: self.cx.project.to_owned(),
            service: self.job.service.to_owned(),
            template: template.name.clone(),
            how: cloned.how.clone(),
            ms,
            added,
            size: cloned.size,
            shares_blocks: cloned.shares_blocks,
            advice: cloned.advice.clone(),
        };
        if let Ok(text) = serde_json::to_vec_pretty(&report) {
            let _ = crate::platform::write_replacing(&template.report, &text);
        }
    }

    /// Says (in `up`'s progress, the resource's log and an event of `kind`
    /// with `detail`) that the slice is built from scratch after all, and
    /// drops the copy.
    async fn rebuilding(&self, kind: EventKind, why: &str, detail: String) {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let service = self.job.service;
        self.progress.say(
            crate::protocol::ProgressStep::Migrate,
            Some(service),
            format!("{service}: {why}"),
        );
        if let Ok(mut f) = supervisor::logs::open_append(self.job.log) {
            use std::io::Write;
            let _ = writeln!(f, "binky: {why}");
        }
        let mut ev = world_event(kind, project, world).detail(detail);
        ev.service = Some(service.to_owned());
        ev.adapter = Some(self.adapter.name().to_owned());
        d.event(ev);
        let _ = self.adapter.teardown(self.slice).await;
        let _ = d.registry(|r| r.set_slice_template(self.adapter.name(), &self.slice.name, None));
    }
}

/// Writes golden marker `m` at `marker`, its folder made first.
///
/// # Errors
/// The file cannot be written (named, with the OS's reason).
fn write_marker(marker: &Path, m: &golden::Marker) -> Result<(), ApiError> {
    if let Some(dir) = marker.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // By rename: a link planted at the name is replaced, not written through.
    crate::platform::write_replacing(marker, m.render().as_bytes())
        .map_err(|e| file_error("write", marker, e))
}
