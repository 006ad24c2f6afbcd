//! `env` and what later verbs render with: a world's facts after `up`.

use crate::config;
use crate::config::Config;
use crate::config::render::ServiceFacts;
use crate::daemon::Daemon;
use crate::daemon::world::stages::locate::{Located, find_world, join_subdir, locate};
use crate::daemon::world::stages::plan::{
    facts_for, facts_of, lookup_env, project_env, project_vars,
};
use crate::daemon::world::stages::slices::{SliceAt, adapter_for};
use crate::daemon::world::world_ports;
use crate::protocol::{ApiError, ClientEnv, WorldEnv, WorldRef};
use crate::registry::WorldRow;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `binky env`: exposed services → addresses, and the project's `[env]`.
/// A `[env]` value templated from `${env.NAME}` is withheld (`None`) unless
/// `reveal`: it is usually a credential the caller's shell already has.
///
/// For an `agent` (a world-bound MCP server) every secret the daemon knows
/// that is not this world's own — an `admin_url`'s password (in a slice
/// address when the adapter gives the world no user of its own), a secret
/// from the user's environment — is masked wherever it appears.
pub(crate) async fn env(
    d: &Arc<Daemon>,
    wref: WorldRef,
    client_env: ClientEnv,
    reveal: bool,
    agent: bool,
) -> Result<WorldEnv, ApiError> {
    let loc = locate(d, &wref)?;
    let w = find_world(d, &loc, &wref.name)?;
    let wf = world_facts(d, &loc, &w, &client_env).await?;
    // A withheld value is not rendered either: one unset in this shell
    // does not fail the rest.
    let withheld = |k: &str| !reveal && wf.cfg.env.get(k).is_some_and(|t| t.contains("${env."));
    let mut shown: HashMap<String, String> = {
        let env_fn = lookup_env(&wf.project_env, &wf.env);
        let fx = facts_for(&wf.cfg, &w.name, &wf.world_root, &wf.facts, &env_fn);
        project_vars(&wf.cfg, &fx, true, true, &withheld)?
            .into_iter()
            .collect()
    };
    let vars = wf
        .cfg
        .env
        .keys()
        .map(|k| (k.clone(), shown.remove(k)))
        .collect();
    let services = exposed_of(&wf);
    let mut out = WorldEnv {
        project: loc.name.clone(),
        world: w.name.clone(),
        worktree: wf.world_root.display().to_string(),
        fields: fields_of(&wf, &services),
        services,
        vars,
        notes: super::sleep::sleeping_note(&w).into_iter().collect(),
    };
    if agent {
        let own = d.registry(|r| r.world_secrets(w.id))?;
        let mask = |v: &mut String| *v = crate::secrets::scrub_keeping(v, &own);
        out.services.values_mut().for_each(mask);
        out.fields
            .values_mut()
            .flat_map(|f| f.values_mut())
            .for_each(mask);
        out.vars.values_mut().flatten().for_each(mask);
    }
    Ok(out)
}

/// The project's `[env]` rendered for a world after `up` (every slice
/// made): what its processes, `migrate`, `seed` and `verify` get.
///
/// # Errors
/// A value uses an unset `${env.NAME}` or a token that cannot be rendered.
pub(in crate::daemon::world) fn world_vars(
    wf: &WorldFacts,
    world: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let env_fn = lookup_env(&wf.project_env, &wf.env);
    let fx = facts_for(&wf.cfg, world, &wf.world_root, &wf.facts, &env_fn);
    project_vars(&wf.cfg, &fx, true, true, &|_| false)
}

/// What `binky env` hands out: each exposed service's address.
pub(in crate::daemon::world) fn exposed_of(wf: &WorldFacts) -> IndexMap<String, String> {
    let exposed: Vec<String> = match &wf.cfg.agents.expose {
        Some(list) => list.clone(),
        None => wf
            .cfg
            .services
            .iter()
            .filter(|(_, s)| s.resource().is_some() || s.process().is_some_and(|p| p.url.is_some()))
            .map(|(n, _)| n.clone())
            .collect(),
    };
    let mut out = IndexMap::new();
    for n in exposed {
        // A url service's proxied URL, a resource's address, any other
        // service's loopback URL (`url` holds each); none without a port.
        if let Some(v) = wf.facts.get(&n).and_then(|f| f.url.clone()) {
            out.insert(n, v);
        }
    }
    out
}

/// Each exposed resource's adapter fields (`prefix`, `bucket`), for the
/// `exposed` names ([`exposed_of`]).
fn fields_of(
    wf: &WorldFacts,
    exposed: &IndexMap<String, String>,
) -> IndexMap<String, IndexMap<String, String>> {
    exposed
        .keys()
        .filter_map(|n| {
            let f = wf.facts.get(n)?;
            (!f.slice.is_empty()).then(|| (n.clone(), f.slice.clone()))
        })
        .collect()
}

/// What a verb after `up` needs to render a world's strings: its config (as
/// on its branch), its facts — ports, URLs, and the addresses of its slices —
/// and the environment it was built with.
pub(in crate::daemon::world) struct WorldFacts {
    pub(in crate::daemon::world) cfg: Config,
    pub(in crate::daemon::world) world_root: PathBuf,
    pub(in crate::daemon::world) facts: IndexMap<String, ServiceFacts>,
    pub(in crate::daemon::world) project_env: Vec<(String, String)>,
    pub(in crate::daemon::world) env: ClientEnv,
}

/// Gathers [`WorldFacts`] for world `w`, resolving every resource's address
/// with the environment the world was built with (see
/// [`Worlds::env_for`](crate::daemon::world::Worlds::env_for)).
///
/// # Errors
/// Its config is invalid, an `admin_url` uses an unset `${env.NAME}`, or an
/// adapter fails to resolve a slice.
pub(in crate::daemon::world) async fn world_facts(
    d: &Arc<Daemon>,
    loc: &Located,
    w: &WorldRow,
    caller: &ClientEnv,
) -> Result<WorldFacts, ApiError> {
    let env = d.worlds.env_for(w.id, caller);
    resolve_slices(d, loc, w, env, &|_| true, false).await
}

/// Before `reload` stops anything: each slice world `w` has (recorded
/// live), as its config names it now and rendered with `caller`'s
/// environment, is reached, completed ([`crate::adapters::Adapter::complete`])
/// and resolved, so an option that changes the slice (a user of its own,
/// turned on) is applied in place while the world still runs, and a change
/// that cannot be applied (the admin may not create users, the server
/// moved) fails with nothing stopped.
///
/// # Errors
/// As [`world_facts`], for the first slice that cannot be resolved.
pub(in crate::daemon::world) async fn preflight(
    d: &Arc<Daemon>,
    loc: &Located,
    w: &WorldRow,
    caller: &ClientEnv,
) -> Result<(), ApiError> {
    let live: Vec<String> = d
        .registry(|r| r.slices_of(w.id))?
        .into_iter()
        .filter(|s| s.state == crate::protocol::SliceState::Live)
        .map(|s| s.service)
        .collect();
    if live.is_empty() {
        return Ok(());
    }
    resolve_slices(
        d,
        loc,
        w,
        caller.clone(),
        &|n| live.iter().any(|l| l == n),
        true,
    )
    .await
    .map(|_| ())
}

/// [`WorldFacts`] of world `w` with `env`, the addresses resolved of the
/// resources `which` names; with `complete`, each slice first brought up
/// to what its config asks now (only for slices recorded live: it may
/// make a user on the server). Without, nothing is written anywhere.
async fn resolve_slices(
    d: &Arc<Daemon>,
    loc: &Located,
    w: &WorldRow,
    env: ClientEnv,
    which: &(dyn Fn(&str) -> bool + Sync),
    complete: bool,
) -> Result<WorldFacts, ApiError> {
    let world_root = join_subdir(Path::new(&w.path), &loc.subdir);
    let cfg = config::load(&world_root.join(config::FILE_NAME))?;
    let ports = world_ports(d, w.id)?;
    let project_env = project_env(&cfg, &world_root, &loc.main_root())?;
    let mut facts = facts_of(d, &cfg, &w.slug, &ports);
    {
        let env_fn = lookup_env(&project_env, &env);
        for (n, s) in &cfg.services {
            let Some(r) = s.resource().filter(|_| which(n)) else {
                continue;
            };
            let Some(a) = adapter_for(d, &r.adapter, &env) else {
                continue;
            };
            // Rendered per service: an earlier resource's address is a
            // fact the next one's admin_url may use.
            let at = SliceAt {
                cfg: &cfg,
                project: &loc.name,
                world: &w.name,
                world_root: &world_root,
                facts: &facts,
                env: &env_fn,
                client_env: &env,
            };
            let resolved = if complete {
                at.completed(d, n, a.as_ref(), &w.slug, w.id).await?
            } else {
                at.resolved(d, n, a.as_ref(), &w.slug, w.id).await?
            };
            resolved.apply(facts.get_mut(n).expect("fact per service"));
        }
    }
    Ok(WorldFacts {
        cfg,
        world_root,
        facts,
        project_env,
        env,
    })
}

/// Where `binky curl` should connect for one service: the proxy for a url
/// service, else the service's own port.
pub(crate) fn locate_service(
    d: &Arc<Daemon>,
    wref: WorldRef,
    service: &str,
) -> Result<crate::protocol::ServiceTarget, ApiError> {
    let loc = locate(d, &wref)?;
    let w = find_world(d, &loc, &wref.name)?;
    let world_root = join_subdir(Path::new(&w.path), &loc.subdir);
    let cfg = config::load(&world_root.join(config::FILE_NAME))?;
    let svc = cfg.services.get(service).ok_or_else(|| {
        ApiError::new(format!("world `{}` has no service `{service}`", w.name)).hint(format!(
            "services: {}",
            cfg.services.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })?;
    if let Some(label) = svc.process().and_then(|p| p.url.as_deref()) {
        let port = d.registry(|r| r.settings())?.proxy_port;
        return Ok(crate::protocol::ServiceTarget {
            port,
            host: format!("{label}.{}.{}", w.slug, cfg.project.domain),
            via_proxy: true,
        });
    }
    let port = d.registry(|r| r.service_port(w.id, service))?;
    match port {
        Some(port) => Ok(crate::protocol::ServiceTarget {
            port,
            host: format!("localhost:{port}"),
            via_proxy: false,
        }),
        None => Err(
            ApiError::new(format!("service `{service}` has no port to call"))
                .hint("declare `url` or `ports` for it in binky.toml"),
        ),
    }
}
