//! Slices: what a world's slices are rendered from, each slice's name and
//! address, and the adapter that serves it. Making one is in
//! [`provision`](super::provision).

use super::plan::Renderer;
use super::routes::host_of;
use crate::adapters::{self, Slice};
use crate::config::Config;
use crate::config::render::ServiceFacts;
use crate::daemon::Daemon;
use crate::protocol::{ApiError, ClientEnv};
use indexmap::IndexMap;
use std::path::Path;
use std::sync::Arc;

/// What a world's slices are rendered from: the config (as on its branch)
/// whose `admin_url`s name the servers, and the facts and environment their
/// tokens resolve against. One place, so `up`, `env`, re-adoption, `remove`
/// and `gc` name a slice and reach its server the same way.
pub(in crate::daemon::world) struct SliceAt<'a> {
    pub(in crate::daemon::world) cfg: &'a Config,
    pub(in crate::daemon::world) project: &'a str,
    pub(in crate::daemon::world) world: &'a str,
    pub(in crate::daemon::world) world_root: &'a Path,
    /// Other services' facts (`${db.port}` in an `admin_url`); empty where
    /// no ports are known (teardown).
    pub(in crate::daemon::world) facts: &'a IndexMap<String, ServiceFacts>,
    pub(in crate::daemon::world) env: &'a (dyn Fn(&str) -> Option<String> + Sync),
    pub(in crate::daemon::world) client_env: &'a ClientEnv,
}

impl SliceAt<'_> {
    /// The address and fields of resource `service`'s slice as it was made
    /// (on the server its record names), touching nothing on the server.
    ///
    /// # Errors
    /// As [`slice`](Self::slice), [`pinned`](super::reach::pinned), or the
    /// adapter failing to resolve it.
    pub(in crate::daemon::world) async fn resolved(
        &self,
        d: &Daemon,
        service: &str,
        adapter: &dyn adapters::Adapter,
        slug: &str,
        world_id: i64,
    ) -> Result<Resolved, ApiError> {
        let slice = self.recorded(d, service, adapter, slug, world_id)?;
        let address = adapter
            .resolve(&slice)
            .await
            .map_err(|e| adapter_error(service, &slice, e))?;
        Ok(Resolved::new(address, adapter, &slice))
    }

    /// Resource `service`'s slice of world `world_id` (slug `slug`),
    /// rendered to reach the server its record names.
    ///
    /// # Errors
    /// As [`slice`](Self::slice) or [`pinned`](super::reach::pinned).
    fn recorded(
        &self,
        d: &Daemon,
        service: &str,
        adapter: &dyn adapters::Adapter,
        slug: &str,
        world_id: i64,
    ) -> Result<adapters::Slice, ApiError> {
        let slice = self.slice(
            d,
            service,
            adapter,
            slice_name(
                adapter,
                self.project,
                self.cfg.slice_resource(service),
                slug,
            )?,
        )?;
        super::reach::pinned(d, adapter, service, world_id, slice)
    }

    /// [`resolved`](Self::resolved) for a slice the registry records live,
    /// after bringing it up to what its config asks now
    /// ([`adapters::Adapter::complete`]: a user of its own, turned on since
    /// it was made), its data kept. What `reload` applies while the world
    /// still runs.
    ///
    /// # Errors
    /// As [`resolved`](Self::resolved), or the adapter cannot complete the
    /// slice (the admin may not create users, a user of that name is not
    /// Binky's).
    pub(in crate::daemon::world) async fn completed(
        &self,
        d: &Daemon,
        service: &str,
        adapter: &dyn adapters::Adapter,
        slug: &str,
        world_id: i64,
    ) -> Result<Resolved, ApiError> {
        let slice = self.recorded(d, service, adapter, slug, world_id)?;
        let slice = slice.with_new_secret(d, adapter)?;
        let named = |e| adapter_error(service, &slice, e);
        adapter.complete(&slice).await.map_err(named)?;
        let address = adapter.resolve(&slice).await.map_err(named)?;
        Ok(Resolved::new(address, adapter, &slice))
    }

    /// Slice `name` of resource `service` on `adapter`, with its rendered
    /// `admin_url` (registered as a secret) and rendered options; a service
    /// the config no longer has gets neither.
    ///
    /// # Errors
    /// The `admin_url` or an option uses a `${env.NAME}` that is not set, or
    /// an option's rendered value is not what the adapter takes.
    pub(in crate::daemon::world) fn slice(
        &self,
        d: &Daemon,
        service: &str,
        adapter: &dyn adapters::Adapter,
        name: String,
    ) -> Result<Slice, ApiError> {
        let r = self.cfg.services.get(service).and_then(|s| s.resource());
        let (admin_url, options) = match r {
            Some(r) => {
                let rx = Renderer {
                    cfg: self.cfg,
                    world: self.world,
                    world_root: self.world_root,
                    facts: self.facts,
                    env: self.env,
                };
                (rx.admin_url(service, r)?, rx.options(service, r)?)
            }
            None => (None, toml::Table::new()),
        };
        Ok(Slice {
            admin_url,
            options,
            ..slice_for(d, adapter, name, self.project, self.client_env)
        })
    }
}

/// What tokens read of a made slice: its address (`${SVC.url}`, and its
/// host) and the adapter's own fields (`${SVC.prefix}`).
#[derive(Clone)]
pub(in crate::daemon::world) struct Resolved {
    pub(in crate::daemon::world) address: String,
    pub(in crate::daemon::world) fields: Vec<(&'static str, String)>,
}

impl Resolved {
    /// `slice`'s address as `adapter` resolved it, with its fields.
    pub(in crate::daemon::world) fn new(
        address: String,
        adapter: &dyn adapters::Adapter,
        slice: &Slice,
    ) -> Self {
        Resolved {
            address,
            fields: adapter.fields(slice),
        }
    }

    /// Writes it into the service's facts.
    pub(in crate::daemon::world) fn apply(self, f: &mut ServiceFacts) {
        f.host = host_of(&self.address);
        f.url = Some(self.address);
        for (k, v) in self.fields {
            f.slice.insert(k.to_owned(), v);
        }
    }
}

/// Slice `name` of `project` with no `admin_url` and no options, its
/// folder and login password (where `adapter` makes users) filled in: the
/// base [`SliceAt::slice`] renders the rest onto, and what `gc` reaches a
/// server with once its config is gone.
pub(in crate::daemon::world) fn slice_for(
    d: &Daemon,
    adapter: &dyn adapters::Adapter,
    name: String,
    project: &str,
    client_env: &ClientEnv,
) -> Slice {
    Slice {
        name,
        project: project.to_owned(),
        admin_url: None,
        options: toml::Table::new(),
        data_dir: d.paths.home().join("slices").join(adapter.name()),
        search_path: client_env.search_path(),
        secret: None,
    }
    .with_secret(d, adapter)
}

impl Slice {
    /// The slice with its login user's password from the registry
    /// (registered as a secret), where `adapter` makes users and one was
    /// made ([`with_new_secret`](Self::with_new_secret)). Only reads: a
    /// verb that names a slice without making its user (`env`, `gc`, a
    /// restart's re-adoption, `remove`) writes nothing. None when none is
    /// kept or the registry cannot be read; the adapter then says so where
    /// it needs one.
    pub(in crate::daemon::world) fn with_secret(
        mut self,
        d: &Daemon,
        adapter: &dyn adapters::Adapter,
    ) -> Slice {
        self.secret = adapter
            .facts()
            .world_users
            .then(|| {
                d.registry(|r| r.slice_secret(adapter.name(), &self.name))
                    .ok()
            })
            .flatten()
            .flatten();
        if let Some(s) = &self.secret {
            crate::secrets::register(s);
        }
        self
    }

    /// The slice with its login user's password, made now when none is
    /// kept (registered as a secret), where `adapter` makes users. For
    /// what is about to make or complete the user on the server: the
    /// password is in the registry first, so a user made with it is known
    /// as Binky's whatever interrupts what follows.
    ///
    /// # Errors
    /// The registry cannot be written.
    pub(in crate::daemon::world) fn with_new_secret(
        mut self,
        d: &Daemon,
        adapter: &dyn adapters::Adapter,
    ) -> Result<Slice, ApiError> {
        if adapter.facts().world_users {
            let s = d.registry(|r| r.make_slice_secret(adapter.name(), &self.name))?;
            crate::secrets::register(&s);
            self.secret = Some(s);
        }
        Ok(self)
    }
}

/// The name of world `slug`'s slice of `project` on `adapter` (for
/// `resource` where the slice carries it:
/// [`Config::slice_resource`]): the one place the daemon names a world's
/// slice.
///
/// # Errors
/// `project` or `slug` is empty. A slice is one world's: a name made from
/// an empty slug (`<project>_`) is no world's, and would be the start of
/// every world's of the project.
pub(in crate::daemon::world) fn slice_name(
    adapter: &dyn adapters::Adapter,
    project: &str,
    resource: Option<&str>,
    slug: &str,
) -> Result<String, ApiError> {
    if project.is_empty() || slug.is_empty() {
        return Err(ApiError::new(format!(
            "internal error: a {} slice was to be named for project `{project}` and world slug `{slug}`; no slice has an empty name",
            adapter.name()
        ))
        .hint("report this as a bug in binky"));
    }
    let name = adapter.slice_name(project, resource, slug);
    if name.is_empty() {
        return Err(ApiError::new(format!(
            "the {} adapter named no slice for world slug `{slug}` of project `{project}`",
            adapter.name()
        )));
    }
    Ok(name)
}

/// An adapter's error as the user sees it: naming the service, never the
/// slice's credentials.
pub(in crate::daemon::world) fn adapter_error(
    service: &str,
    slice: &Slice,
    e: adapters::AdapterError,
) -> ApiError {
    ApiError::new(format!("services.{service}: {}", e.redacted(slice).message))
}

/// The adapter named `name`, built in or external (`binky-adapter-<name>` on
/// the caller's `PATH`).
pub(in crate::daemon::world) fn adapter_for(
    d: &Daemon,
    name: &str,
    client_env: &ClientEnv,
) -> Option<Arc<dyn adapters::Adapter>> {
    d.adapters.find(name, client_env.search_path().as_deref())
}

pub(in crate::daemon::world) fn no_adapter(service: &str, name: &str) -> ApiError {
    ApiError::new(format!("services.{service}: no adapter named `{name}`")).hint(format!(
        "built-in adapters: {}; an external one is an executable {}{name} on PATH",
        adapters::catalog::names().join(", "),
        adapters::external::PREFIX
    ))
}
