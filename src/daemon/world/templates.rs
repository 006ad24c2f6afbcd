//! Golden templates: a slice built once per project (migrated and seeded),
//! then cloned for each world where the adapter can clone.

use super::data::{catch_up, provision_and_seed};
use super::reach::{TornDown, reach, server_now, tear_down};
use super::slices::{Provisioning, Resolved, adapter_error};
use super::{SliceJob, WorldCtx, world_event};
use crate::adapters::{Slice, golden};
use crate::daemon::errors::file_error;
use crate::daemon::events::EventKind;
use crate::faults::point as fault_point;
use crate::protocol::ApiError;
use crate::supervisor;
use std::path::{Path, PathBuf};

/// A golden template ready to clone: its name, the log of its build, and
/// the key its schema was migrated at.
pub(super) struct Template {
    pub(super) name: String,
    pub(super) slice: Slice,
    pub(super) log: PathBuf,
    pub(super) migrated: Option<String>,
}

impl Provisioning<'_> {
    /// The golden template `from`, built first when its key changed or it
    /// is gone — once, under a lock in this daemon and one on the server
    /// (other daemons sharing it). The marker holds the template's key,
    /// then the key its schema was migrated at (the building world's).
    pub(super) async fn golden(&self, from: &str) -> Result<Template, ApiError> {
        let WorldCtx { d, project, .. } = *self.cx;
        let (adapter, r) = (self.adapter, self.job.r);
        let tname = golden::template_name(project, from);
        // The world's slice on the same server, by the template's name.
        let template = Slice {
            name: tname.clone(),
            ..self.slice.clone()
        };
        let key = golden::key(
            r.migrate.as_deref(),
            r.seed.as_deref(),
            &r.clone_inputs,
            &self.plan.world_root,
        );
        let marker = d.paths.golden_dir(adapter.name()).join(&tname);
        let glock = d.worlds.golden_lock(&format!("{}/{tname}", adapter.name()));
        let _g = glock.lock().await;
        let _server_lock = adapter
            .lock_template(&template)
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
            self.drop_old_template(&template, &recorded, &marker)
                .await?;
        }
        let fresh =
            !moved && recorded.key == key && adapter.exists(&template).await.unwrap_or(false);
        // The template's migrate/seed output lives with the template, not
        // in the log of the world that happened to build it (gone with that
        // world); every clone's log points at it.
        let template_log = PathBuf::from(format!("{}.log", marker.display()));
        let mut t = Template {
            name: tname,
            slice: template,
            log: template_log,
            migrated: recorded.migrated.clone(),
        };
        if !fresh {
            t.migrated = self.build_template(&t, &key, &marker, server).await?;
        }
        Ok(t)
    }

    /// Builds template `t` afresh (dropping what is there): provisioned,
    /// migrated and seeded with its output in `t.log`, then its marker
    /// written with `key`, the key it was migrated at (returned) and the
    /// server it is on. A failed build is dropped.
    async fn build_template(
        &self,
        t: &Template,
        key: &str,
        marker: &Path,
        server: Option<crate::adapters::server::Server>,
    ) -> Result<Option<String>, ApiError> {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let adapter = self.adapter;
        let (tname, template, template_log) = (&t.name, &t.slice, &t.log);
        let _ = std::fs::remove_file(marker);
        adapter
            .teardown(template)
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
            // seed is dropped, so the next `up` builds it afresh.
            let _ = adapter.teardown(template).await;
            return Err(e);
        }
        fault_point("golden:built");
        if let Some(dir) = marker.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let migrated = self.world_key.clone();
        let m = golden::Marker {
            key: key.to_owned(),
            migrated: migrated.clone(),
            server,
        };
        std::fs::write(marker, m.render()).map_err(|e| file_error("write", marker, e))?;
        d.event(world_event(EventKind::GoldenBuilt, project, world).detail(tname.clone()));
        Ok(migrated)
    }

    /// Drops the golden template `template` on the server its marker says
    /// it was built on (another than `admin_url` names now), then its
    /// marker.
    ///
    /// # Errors
    /// That server cannot be reached with the credentials at hand, or
    /// refuses; the marker is kept, so a later run (or `gc`) finds it.
    async fn drop_old_template(
        &self,
        template: &Slice,
        recorded: &golden::Marker,
        marker: &Path,
    ) -> Result<(), ApiError> {
        let (d, service) = (self.cx.d, self.job.service);
        let old = reach(
            d,
            self.adapter,
            service,
            vec![template.clone()],
            recorded.server.as_ref(),
        )?;
        let found = tear_down(self.adapter, &old.slice)
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
        let _ = std::fs::remove_file(marker);
        Ok(())
    }

    /// Copies `template` into the slice; `false` (after `clone_fallback` is
    /// logged, with the reason) when the copy failed and the slice is to be
    /// built by provision + migrate + seed instead. A template migrated at
    /// another commit than the world's branch is caught up on the clone.
    pub(super) async fn clone_from(&self, template: &Template) -> Result<bool, ApiError> {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let (adapter, service, log) = (self.adapter, self.job.service, self.job.log);
        match adapter.clone_slice(&template.slice, self.slice).await {
            Ok(()) => {
                if let Ok(mut f) = supervisor::logs::open_append(log) {
                    use std::io::Write;
                    let _ = writeln!(
                        f,
                        "binky: cloned from template {}; its migrate and seed output is in {}",
                        template.name,
                        template.log.display()
                    );
                }
                if let Some(key) = &self.world_key
                    && template.migrated.as_deref() != Some(key.as_str())
                {
                    let address = adapter
                        .resolve(self.slice)
                        .await
                        .map_err(|e| self.named(e))?;
                    catch_up(
                        self.cx,
                        &self.job,
                        self.plan,
                        &Resolved::new(address, adapter, self.slice),
                        self.progress,
                        "its golden template was migrated at another commit",
                        true,
                    )
                    .await?;
                }
                Ok(true)
            }
            Err(e) => {
                let e = e.redacted(self.slice);
                tracing::warn!(project, world, service, reason = %e.message, "clone_fallback");
                if let Ok(mut f) = supervisor::logs::open_append(log) {
                    use std::io::Write;
                    let _ = writeln!(
                        f,
                        "binky: clone_fallback: {}; building this world by provision + migrate + seed",
                        e.message
                    );
                }
                let mut ev =
                    world_event(EventKind::CloneFallback, project, world).detail(e.message.clone());
                ev.service = Some(service.to_owned());
                ev.adapter = Some(adapter.name().to_owned());
                d.event(ev);
                let _ = adapter.teardown(self.slice).await;
                Ok(false)
            }
        }
    }
}
