//! Spare clones (issue 51): where a clone is a full copy, a world's data
//! costs the template's size in time at every `up`. So, per golden
//! template, `options.spares` clones (1 unless set) are made ahead of
//! time, in the background, only while admission has room; `up` takes one
//! by renaming it (metadata only, whatever the size), then the pool is
//! refilled.
//!
//! A spare is Binky's like a template: recorded (`spares`, state
//! `making`) before the server sees it, `ready` once made, `taking` while
//! an `up` renames it; never a world's. Whatever cuts a making or a taking
//! short leaves a row that `gc` sweeps ([`sweep`]). A spare is handed out
//! only for the template and key it was made from; spares of another key
//! of the same resource are dropped when its pool is refilled, and every
//! spare goes with its template.

use super::provision::Provisioning;
use super::reach::{TornDown, drop_template, reach, server_now};
use crate::adapters::{self, Adapter, Slice, golden};
use crate::daemon::Daemon;
use crate::daemon::events::{Event as LogEvent, EventKind};
use crate::daemon::world::{WorldCtx, world_event};
use crate::faults::point as fault_point;
use crate::protocol::ApiError;
use crate::registry::{SpareRow, SpareState};
use std::sync::Arc;

/// The lock that one making or taking of spare `name` holds, which `gc`
/// tries before it sweeps a `making` or `taking` row: held, the row is
/// work under way, not what a crash left.
fn in_flight(d: &Daemon, adapter: &str, name: &str) -> Arc<tokio::sync::Mutex<()>> {
    d.worlds.golden_lock(&format!("spare/{adapter}/{name}"))
}

/// The lock under which a spare is claimed and `gc` looks at a spare's
/// row (see [`take_spare`](Provisioning::take_spare)).
fn claims(d: &Daemon) -> Arc<tokio::sync::Mutex<()>> {
    d.worlds.golden_lock("spares")
}

/// A spare claimed for a world (its row `taking`), with the lock that
/// tells `gc` the taking is under way.
pub(in crate::daemon::world) struct Claimed {
    row: SpareRow,
    _flight: tokio::sync::OwnedMutexGuard<()>,
}

impl Provisioning<'_> {
    /// Claims a ready spare of the golden template `from` at the world's
    /// key, if there is one. With `secret`, the world's slice, which has no
    /// password yet, is given the one of the spare's user (made with the
    /// spare): taking it then sets nothing on the server but names.
    ///
    /// # Errors
    /// The registry cannot be read or written.
    pub(in crate::daemon::world) async fn claim_spare(
        &self,
        from: &str,
        secret: bool,
    ) -> Result<Option<Claimed>, ApiError> {
        let d = self.cx.d;
        let adapter = self.adapter.name();
        let (tname, key) = self.template_id(from);
        // The claim and its in-flight lock under one lock that `gc` takes
        // too: it never finds the row `taking` with nobody holding it.
        let claims = claims(d);
        let _claiming = claims.lock().await;
        let Some(row) = d.registry(|r| {
            let row = r.claim_spare(adapter, &tname, &key)?;
            if let Some(row) = row.as_ref().filter(|_| secret) {
                r.give_spare_secret(adapter, &row.name, &self.slice.name)?;
            }
            Ok::<_, crate::registry::RegistryError>(row)
        })?
        else {
            return Ok(None);
        };
        let flight = in_flight(d, adapter, &row.name).lock_owned().await;
        Ok(Some(Claimed {
            row,
            _flight: flight,
        }))
    }

    /// Takes a spare of the golden template `from` at the world's key as
    /// the world's slice — `claimed` early (see [`claim_spare`](Self::claim_spare)),
    /// or one claimed now — by renaming it (said in `up`'s progress, the
    /// world's log and a `spare_taken` event), and catches it up with the
    /// branch as a clone is: `Some(true)` when that is done; `Some(false)`
    /// when the catch-up failed on it (the copy dropped and said, as for a
    /// clone: the slice is to be built from scratch, not cloned to fail
    /// the same way). `None` when there is no spare, or it could not be
    /// taken (then dropped, and said): the world is cloned.
    ///
    /// # Errors
    /// The registry cannot be read or written.
    pub(in crate::daemon::world) async fn take_spare(
        &self,
        from: &str,
        claimed: Option<Claimed>,
    ) -> Result<Option<bool>, ApiError> {
        let WorldCtx {
            d, project, world, ..
        } = *self.cx;
        let (adapter, service) = (self.adapter, self.job.service);
        let (tname, key) = self.template_id(from);
        let claimed = match claimed {
            Some(c) => c,
            None => match self.claim_spare(from, false).await? {
                Some(c) => c,
                None => return Ok(None),
            },
        };
        let row = &claimed.row;
        let template = self.template_slice(&tname)?;
        // With its user's password, where it has one: the adapter sets the
        // world's only where the two differ.
        let spare = Slice {
            name: row.name.clone(),
            secret: d.registry(|r| r.slice_secret(adapter.name(), &row.name))?,
            ..template.clone()
        };
        // Made on another server than admin_url names now: dropped there,
        // never renamed into a world on this one.
        let here = server_now(d, adapter, self.slice)?;
        if row.server.as_ref().map(|s| &s.address) != here.as_ref().map(|s| &s.address) {
            drop_spare(d, adapter, row, vec![spare], "made on another server").await;
            return Ok(None);
        }
        let started = std::time::Instant::now();
        fault_point("spare:taking");
        if let Err(e) = adapter.take_spare(&template, &spare, self.slice).await {
            // The rename may have happened before the handover failed: the
            // world's slice is then the spare's data, dropped with it.
            let _ = adapter.teardown(self.slice).await;
            let why = e.redacted(self.slice).message;
            self.progress.say(
                crate::protocol::ProgressStep::Provision,
                Some(service),
                format!(
                    "{service}: the spare {} could not be taken ({why}); cloning instead",
                    row.name
                ),
            );
            drop_spare(d, adapter, row, vec![spare], &why).await;
            return Ok(None);
        }
        let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Renamed and handed over, the row still `taking`.
        fault_point("spare:taken");
        d.registry(|r| {
            r.delete_spare(adapter.name(), &row.name)?;
            r.set_slice_template(adapter.name(), &self.slice.name, Some((&tname, &key)))
        })?;
        let said = format!("took the spare {} of {tname} (rename, {took} ms)", row.name);
        self.progress.say(
            crate::protocol::ProgressStep::Provision,
            Some(service),
            format!("{service}: {said}"),
        );
        if let Ok(mut f) = crate::supervisor::logs::open_append(self.job.log) {
            use std::io::Write;
            let marker = d.paths.golden_dir(adapter.name()).join(&tname);
            let _ = writeln!(
                f,
                "binky: {said}; the template's migrate and seed output is in {}",
                golden::log_path(&marker).display()
            );
        }
        let mut ev = world_event(EventKind::SpareTaken, project, world).detail(said);
        ev.template = Some(tname.clone());
        ev.how = Some("rename".into());
        ev.ms = Some(took);
        ev.service = Some(service.to_owned());
        ev.adapter = Some(adapter.name().to_owned());
        d.event(ev);
        self.catch_up_clone(row.migrated.as_deref()).await.map(Some)
    }

    /// The name and key of the golden template `from` at the world's
    /// branch (see [`golden::key`]).
    pub(in crate::daemon::world) fn template_id(&self, from: &str) -> (String, String) {
        let r = self.job.r;
        let key = golden::key(
            self.cx.cfg.slice_resource(self.job.service),
            r.migrate.as_deref(),
            r.seed.as_deref(),
            &r.clone_inputs,
            &self.plan.world_root,
        );
        (golden::template_name(self.cx.project, from, &key), key)
    }

    /// The template `tname` as a slice on the world's server, with its
    /// role's password (kept until `gc` drops it).
    pub(in crate::daemon::world) fn template_slice(&self, tname: &str) -> Result<Slice, ApiError> {
        Slice {
            name: tname.to_owned(),
            ..self.slice.clone()
        }
        .with_new_secret(self.cx.d, self.adapter)
    }
}

/// What [`refill`] needs, owned, so it runs after the `up` that asked.
pub(in crate::daemon::world) struct Pool {
    pub(in crate::daemon::world) d: Arc<Daemon>,
    pub(in crate::daemon::world) adapter: Arc<dyn Adapter>,
    pub(in crate::daemon::world) project: String,
    pub(in crate::daemon::world) service: String,
    pub(in crate::daemon::world) clone_from: String,
    /// The template, rendered for its server with its role's password.
    pub(in crate::daemon::world) template: Slice,
    pub(in crate::daemon::world) key: String,
}

/// Brings the pool of template `p.template` up to `options.spares`, in the
/// background: first drops spares of the same resource made from another
/// key (never to be handed out again) and, with `spares = 0`, every spare
/// of it; then makes spares one at a time while admission has room
/// ([`crate::daemon::admission::room_for_spare`]) and the template is
/// built at its key. One refill per template at a time; a failure is
/// logged and ends the refill (the next `up` tries again).
pub(in crate::daemon::world) fn refill_later(p: Pool) {
    tokio::spawn(async move {
        let lock =
            p.d.worlds
                .golden_lock(&format!("spares/{}/{}", p.adapter.name(), p.template.name));
        let Ok(_one) = lock.try_lock_owned() else {
            return;
        };
        if let Err(why) = refill(&p).await {
            tracing::info!(
                project = p.project,
                service = p.service,
                template = p.template.name,
                why,
                "spares not refilled"
            );
        }
    });
}

async fn refill(p: &Pool) -> Result<(), String> {
    let (d, adapter) = (&p.d, p.adapter.as_ref());
    let wanted = golden::spares_wanted(&p.template.options) as usize;
    let mine = |s: &SpareRow| {
        s.adapter == adapter.name() && s.project == p.project && s.service == p.service
    };
    let rows = d.registry(|r| r.spares()).map_err(|e| e.to_string())?;
    for s in rows
        .iter()
        .filter(|s| mine(s) && s.state == SpareState::Ready)
    {
        let stale = s.template != p.template.name || s.template_key != p.key;
        if stale || wanted == 0 {
            let why = if stale {
                "its template's key is no longer the one worlds clone from"
            } else {
                "options.spares is 0"
            };
            let spare = Slice {
                name: s.name.clone(),
                ..p.template.clone()
            };
            drop_spare(d, adapter, s, vec![spare], why).await;
        }
    }
    let marker = d.paths.golden_dir(adapter.name()).join(&p.template.name);
    loop {
        let have = d
            .registry(|r| r.spares())
            .map_err(|e| e.to_string())?
            .iter()
            .filter(|s| {
                s.adapter == adapter.name()
                    && s.template == p.template.name
                    && s.template_key == p.key
                    && s.state != SpareState::Taking
            })
            .count();
        if have >= wanted {
            return Ok(());
        }
        // Made from the template as built at its key, never from one
        // being built or gone.
        let built = golden::Marker::parse(&std::fs::read_to_string(&marker).unwrap_or_default());
        if built.key != p.key {
            return Err("its template is not built at its key".into());
        }
        make_one(p, built.migrated).await?;
    }
}

/// Makes one spare of `p`'s template, recorded first; `migrated` is the key
/// the template's schema was migrated at.
async fn make_one(p: &Pool, migrated: Option<String>) -> Result<(), String> {
    let (d, adapter) = (&p.d, p.adapter.as_ref());
    let folder = adapter.data_path(&p.template).await;
    // A spare costs what the template's last clone took (a full copy's
    // size, or next to nothing where clones share blocks).
    let marker = d.paths.golden_dir(adapter.name()).join(&p.template.name);
    let report: Option<golden::CloneReport> = std::fs::read(golden::report_path(&marker))
        .ok()
        .and_then(|t| serde_json::from_slice(&t).ok());
    let cost = report.and_then(|r| r.added.or(r.size)).unwrap_or(0);
    crate::daemon::admission::room_for_spare(d, folder.as_deref(), cost)?;
    let tag = fresh_tag();
    let name = golden::spare_name(&p.project, &p.clone_from, &p.key, &tag);
    let row = SpareRow {
        adapter: adapter.name().to_owned(),
        name: name.clone(),
        project: p.project.clone(),
        service: p.service.clone(),
        template: p.template.name.clone(),
        template_key: p.key.clone(),
        migrated,
        server: server_now(d, adapter, &p.template).map_err(|e| e.to_string())?,
        state: SpareState::Making,
        bytes: None,
    };
    let flight = in_flight(d, adapter.name(), &name);
    let _flight = flight.lock().await;
    d.registry(|r| r.record_spare(&row))
        .map_err(|e| e.to_string())?;
    // Its user's own password (where the adapter makes users), kept like
    // a world's before the server sees it, and given to the world that
    // takes it.
    let spare = Slice {
        name: name.clone(),
        ..p.template.clone()
    }
    .with_new_secret(d, adapter)
    .map_err(|e| e.message)?;
    // The template's own locks, as a clone holds them: no rebuild or drop
    // of it (here, or by another daemon on its server) meanwhile.
    let glock = d
        .worlds
        .golden_lock(&format!("{}/{}", adapter.name(), p.template.name));
    let _local = glock.lock().await;
    let _server = adapter
        .lock_template(&p.template, true)
        .await
        .map_err(|e| e.redacted(&p.template).message)?;
    fault_point("spare:making");
    let free = || {
        folder
            .as_deref()
            .and_then(crate::platform::disk_space)
            .map(|(f, _)| f)
    };
    let before = free();
    let started = std::time::Instant::now();
    match adapter.make_spare(&p.template, &spare).await {
        Ok(cloned) => {
            // Made on the server, its row still `making`.
            fault_point("spare:made");
            let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let added = before.zip(free()).map(|(b, a)| b.saturating_sub(a));
            d.registry(|r| r.spare_ready(adapter.name(), &name, added))
                .map_err(|e| e.to_string())?;
            say_made(p, &name, cloned.how, ms, added);
            Ok(())
        }
        Err(e) => {
            let why = e.redacted(&p.template).message;
            drop_spare(d, adapter, &row, vec![spare], &why).await;
            Err(why)
        }
    }
}

/// The `spare_made` event of spare `name` of `p`'s template, made `how`
/// in `ms`, taking `added` bytes of disk where that was measured.
fn say_made(p: &Pool, name: &str, how: String, ms: u64, added: Option<u64>) {
    let mut ev = LogEvent::named(EventKind::SpareMade).detail(format!(
        "{name} of {} ({how}, {ms} ms{})",
        p.template.name,
        added
            .map(|a| format!(", +{}", adapters::kit::cow::size(a)))
            .unwrap_or_default()
    ));
    ev.project = Some(p.project.clone());
    ev.service = Some(p.service.clone());
    ev.adapter = Some(p.adapter.name().to_owned());
    ev.template = Some(p.template.name.clone());
    ev.how = Some(how);
    ev.ms = Some(ms);
    ev.bytes = added;
    p.d.event(ev);
}

/// Drops every spare of golden template `template` (rendered for the
/// server it is on), before the template itself is dropped or rebuilt: a
/// spare's objects are the template role's, which cannot be dropped while
/// they are there, and a spare of a template rebuilt would hold its old
/// data. A spare an `up` is taking now is left to it.
///
/// # Errors
/// A spare cannot be reached or dropped (named); its row is kept.
pub(in crate::daemon::world) async fn drop_spares_of(
    d: &Daemon,
    adapter: &dyn Adapter,
    template: &Slice,
    why: &str,
) -> Result<(), String> {
    let rows = d.registry(|r| r.spares()).map_err(|e| e.to_string())?;
    for row in rows
        .iter()
        .filter(|r| r.adapter == adapter.name() && r.template == template.name)
    {
        let flight = in_flight(d, &row.adapter, &row.name);
        let Ok(_free) = flight.try_lock() else {
            continue;
        };
        let spare = Slice {
            name: row.name.clone(),
            ..template.clone()
        };
        if drop_spare(d, adapter, row, vec![spare], why)
            .await
            .is_none()
        {
            return Err(format!(
                "its spare {} could not be dropped first; run `binky gc` to try again",
                row.name
            ));
        }
    }
    Ok(())
}

/// Eight hex digits that tell a new spare from every other of its
/// template: the clock and a counter, hashed (the registry's unique name
/// catches the impossible repeat).
fn fresh_tag() -> String {
    use sha2::Digest;
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let h = sha2::Sha256::digest(format!("{now} {n} {}", std::process::id()));
    h[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Drops spare `row` on the server it was made on (`candidates`: its
/// renderings, today's first) and forgets it once it is gone there; says
/// so in a `spare_dropped` event with `why`. A spare that cannot be
/// reached keeps its row, as `taking`'s or `making`'s, for `gc`.
async fn drop_spare(
    d: &Daemon,
    adapter: &dyn Adapter,
    row: &SpareRow,
    candidates: Vec<Slice>,
    why: &str,
) -> Option<TornDown> {
    let gone = sweep(d, adapter, row, candidates).await.ok()?;
    let mut ev = LogEvent::named(EventKind::SpareDropped).detail(format!("{}: {why}", row.name));
    ev.project = Some(row.project.clone());
    ev.service = Some(row.service.clone());
    ev.adapter = Some(row.adapter.clone());
    ev.template = Some(row.template.clone());
    d.event(ev);
    Some(gone)
}

/// What `gc` does with spare `row`: `None` when it is left (ready, of a
/// template that is still there at its key; or being made or taken now).
/// Otherwise why it goes, with the spare's in-flight lock, which the
/// caller holds while it sweeps: a `making` or `taking` row that no work
/// holds (a crash cut it short), or a ready spare whose template is gone
/// or rebuilt at another key.
pub(in crate::daemon::world) async fn to_sweep(
    d: &Daemon,
    row: &SpareRow,
) -> Option<(&'static str, tokio::sync::OwnedMutexGuard<()>)> {
    let claims = claims(d);
    let _claims = claims.lock().await;
    let flight = in_flight(d, &row.adapter, &row.name)
        .try_lock_owned()
        .ok()?;
    // As it is now, under the locks: taken or dropped since it was listed.
    let row = d
        .registry(|r| r.spares())
        .ok()?
        .into_iter()
        .find(|s| s.adapter == row.adapter && s.name == row.name)?;
    let why = match row.state {
        SpareState::Making => "a spare whose making was cut short",
        SpareState::Taking => "a spare whose taking by an up was cut short",
        SpareState::Ready => {
            let marker = d.paths.golden_dir(&row.adapter).join(&row.template);
            let built = std::fs::read_to_string(&marker)
                .ok()
                .map(|t| golden::Marker::parse(&t).key);
            if built.as_deref() == Some(row.template_key.as_str()) {
                return None;
            }
            "a spare of a golden template that is gone or was rebuilt"
        }
    };
    Some((why, flight))
}

/// Drops spare `row` for `gc`, on the server it was made on (`candidates`:
/// its renderings from its project's config): its row goes once it is
/// gone there.
///
/// # Errors
/// It cannot be reached or dropped; the row is kept.
pub(in crate::daemon::world) async fn sweep(
    d: &Daemon,
    adapter: &dyn Adapter,
    row: &SpareRow,
    candidates: Vec<Slice>,
) -> Result<TornDown, String> {
    let reached = reach(d, adapter, &row.service, candidates, row.server.as_ref())
        .map_err(|e| e.to_string())?;
    let gone = drop_template(adapter, &reached.slice)
        .await
        .map_err(|e| e.redacted(&reached.slice).message)?;
    d.registry(|r| r.delete_spare(adapter.name(), &row.name))
        .map_err(|e| e.to_string())?;
    Ok(gone)
}

/// Counts each project's spares into `report` (`status`), from the
/// registry's reading connection.
pub(crate) fn fill_spares(d: &Daemon, report: &mut crate::protocol::StatusReport) {
    let Ok(rows) = d.read_registry(|r| r.spares()) else {
        return;
    };
    for p in &mut report.projects {
        let mut s = crate::protocol::SparesStatus::default();
        for row in rows.iter().filter(|r| r.project == p.name) {
            match row.state {
                SpareState::Ready => {
                    s.ready += 1;
                    s.bytes += row.bytes.unwrap_or(0);
                }
                SpareState::Making => s.making += 1,
                SpareState::Taking => {}
            }
        }
        if s != crate::protocol::SparesStatus::default() {
            p.spares = Some(s);
        }
    }
}
