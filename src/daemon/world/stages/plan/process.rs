//! Every process's environment (shell, env files, Binky's variables, its
//! own table, in that order) and its supervisor spec.

use super::render::{read_env_file, render_strict, unset_env};
use super::{Plan, facts_for, lookup_env};
use crate::config;
use crate::config::render::{Facts, ServiceFacts, render};
use crate::config::{Config, Probe};
use crate::daemon::world::WorldCtx;
use crate::protocol::{ApiError, ClientEnv};
use crate::supervisor::{self, ServiceSpec, health};
use indexmap::IndexMap;
use std::path::Path;

/// What every command of a world starts from, services and `verify`
/// alike: the caller's shell (else the daemon's), then the project's
/// `env_file`, then Binky's own names (`BINKY_HOME`, `BINKY_PROJECT`,
/// `BINKY_WORLD`, `BINKY_WORKTREE`, and `BINKY_PORT_<SVC>[_<NAME>]` for every
/// reserved port), each later source winning.
pub(in crate::daemon::world) struct EnvBase<'a> {
    pub(in crate::daemon::world) shell: &'a ClientEnv,
    pub(in crate::daemon::world) project_env: &'a [(String, String)],
    pub(in crate::daemon::world) home: &'a Path,
    pub(in crate::daemon::world) project: &'a str,
    pub(in crate::daemon::world) world: &'a str,
    pub(in crate::daemon::world) world_root: &'a Path,
    /// Where the ports come from.
    pub(in crate::daemon::world) facts: &'a IndexMap<String, ServiceFacts>,
}

impl EnvBase<'_> {
    /// The variables, in the order they were set.
    pub(in crate::daemon::world) fn build(&self) -> IndexMap<String, String> {
        let mut env: IndexMap<String, String> = if self.shell.0.is_empty() {
            std::env::vars().collect()
        } else {
            self.shell.0.iter().cloned().collect()
        };
        for (k, v) in self.project_env {
            env.insert(k.clone(), v.clone());
        }
        // Only the daemon marks a process as a world's: a token in the
        // caller's shell or an env_file is never passed on.
        env.shift_remove(crate::daemon::world::strays::TOKEN_VAR);
        env.insert(
            crate::paths::HOME_ENV.into(),
            self.home.display().to_string(),
        );
        env.insert("BINKY_PROJECT".into(), self.project.to_owned());
        env.insert("BINKY_WORLD".into(), self.world.to_owned());
        env.insert(
            "BINKY_WORKTREE".into(),
            self.world_root.display().to_string(),
        );
        for (n, f) in self.facts {
            if let Some(p) = f.port {
                env.insert(crate::slug::port_var(n, ""), p.to_string());
            }
            for (pn, p) in &f.ports {
                env.insert(crate::slug::port_var(n, pn), p.to_string());
            }
        }
        env
    }
}

/// One service's environment before its own `env` table: the
/// [`EnvBase`] (with `env_files`, the project's and then the service's own
/// `env_file`, in place of the project's alone), `BINKY_SERVICE`, its
/// `PORT`, and the project's `[env]`. An env file therefore never overrides
/// a name Binky sets (`PORT`, `BINKY_*`, the world's token) or `[env]`.
pub(in crate::daemon::world) fn base_env(
    cx: &WorldCtx<'_>,
    service: &str,
    plan: &Plan,
    env_files: &[(String, String)],
    facts: &IndexMap<String, ServiceFacts>,
) -> Result<Vec<(String, String)>, ApiError> {
    let (cfg, world, client_env) = (cx.cfg, cx.world.as_str(), cx.client_env);
    let mut env = EnvBase {
        shell: client_env,
        project_env: env_files,
        home: &plan.home,
        project: &cfg.project.name,
        world,
        world_root: &plan.world_root,
        facts: &plan.facts,
    }
    .build();
    env.insert("BINKY_SERVICE".into(), service.to_owned());
    if let Some(t) = &plan.token {
        env.insert(crate::daemon::world::strays::TOKEN_VAR.into(), t.clone());
    }
    if let Some(p) = plan.facts.get(service).and_then(|f| f.port) {
        env.insert("PORT".into(), p.to_string());
    }
    // The project's [env], after Binky's own (a service's `env` wins).
    // While slices are still being made (a migrate), a value naming one not
    // made yet is left out rather than failing.
    let env_fn = lookup_env(&plan.project_env, client_env);
    let fx = facts_for(cfg, world, &plan.world_root, facts, &env_fn);
    for (k, v) in project_vars(cfg, &fx, plan.strict, plan.slices_ready, &|_| false)? {
        env.insert(k, v);
    }
    Ok(env.into_iter().collect())
}

/// The project's `[env]` rendered (no `self`), each value registered as a
/// secret when its name says so. Strict: an unset `${env.NAME}` fails, and
/// so — once `complete` (every slice made) — does any value that cannot be
/// rendered; otherwise such a value is left out. Not strict (re-adopting
/// after a daemon restart): whatever cannot be rendered is left out.
pub(in crate::daemon::world) fn project_vars(
    cfg: &Config,
    fx: &Facts<'_>,
    strict: bool,
    complete: bool,
    skip: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, ApiError> {
    let mut out = Vec::new();
    for (k, t) in cfg.env.iter().filter(|(k, _)| !skip(k)) {
        let key = format!("env.{k}");
        let rendered = render(t, None, fx);
        let unset = rendered.unresolved.iter().find(|t| t.starts_with("${env."));
        match unset {
            Some(tok) if strict => return Err(unset_env(&key, tok)),
            // Not renderable yet (or ever, when re-adopting): left out.
            _ if !(rendered.unresolved.is_empty() || strict && complete) => continue,
            _ => {}
        }
        let value = render_strict(t, &key, None, fx)?;
        crate::secrets::register_var(k, &value);
        out.push((k.clone(), value));
    }
    Ok(out)
}

pub(in crate::daemon::world) fn process_spec(
    cx: &WorldCtx<'_>,
    service: &str,
    p: &config::Process,
    plan: &Plan,
    log_dir: &Path,
) -> Result<ServiceSpec, ApiError> {
    let WorldCtx {
        cfg,
        world,
        client_env,
        ..
    } = *cx;
    let mut service_env = plan.project_env.clone();
    if let Some(f) = &p.env_file {
        service_env.extend(read_env_file(&plan.world_root, &plan.world_root, f)?);
    }
    let env_fn = lookup_env(&service_env, client_env);
    let fx = facts_for(cfg, world, &plan.world_root, &plan.facts, &env_fn);
    // Every value names its key, so an unset `${env.NAME}` is reported where
    // it is written.
    let r = |t: &str, key: &str| {
        let key = format!("services.{service}.{key}");
        if plan.strict {
            render_strict(t, &key, Some(service), &fx)
        } else {
            Ok(render(t, Some(service), &fx).text)
        }
    };
    let mut env: IndexMap<String, String> = base_env(cx, service, plan, &service_env, &plan.facts)?
        .into_iter()
        .collect();
    for (k, v) in &p.env {
        let value = r(v, &format!("env.{k}"))?;
        crate::secrets::register_var(k, &value);
        env.insert(k.clone(), value);
    }
    let cwd = match &p.cwd {
        Some(c) => config::resolve_against(&plan.world_root, &r(c, "cwd")?),
        None => plan.world_root.clone(),
    };
    // As the process will have them (a service's `env` could override
    // one): what marks it, and whatever it starts, as this service's.
    let mark = mark_of(&env);
    let env: Vec<(String, String)> = env.into_iter().collect();
    let own_port = plan.facts[service].port;
    let health = match &p.health {
        None => None,
        Some(h) => Some(probe_of(service, h, &r, own_port, &cwd, &env)?),
    };
    Ok(ServiceSpec {
        name: service.to_owned(),
        cmd: r(&p.cmd, "cmd")?,
        cwd,
        env,
        log: log_dir.join(format!("{service}.log")),
        port: own_port,
        must_listen: p.url.is_some(),
        health,
        restart: p.restart.clone(),
        stop_signal: p.stop_signal.0.to_owned(),
        stop_timeout: p.stop_timeout,
        watch: p.watch.clone(),
        watch_root: plan.world_root.clone(),
        log_writer: crate::platform::self_exe().ok(),
        mark,
    })
}

/// Service `service`'s health probe, its tokens rendered by `r`, with its
/// timeout and interval. A `cmd` probe runs in the service's folder with its
/// environment.
///
/// # Errors
/// A token does not render, or the probe's address does not parse (named as
/// `services.<service>.health`).
fn probe_of(
    service: &str,
    h: &config::Health,
    r: &impl Fn(&str, &str) -> Result<String, ApiError>,
    own_port: Option<u16>,
    cwd: &Path,
    env: &[(String, String)],
) -> Result<(health::ProbeSpec, std::time::Duration, std::time::Duration), ApiError> {
    let probe = match &h.probe {
        Probe::Http(u) => health::parse_http(&r(u, "health")?, own_port),
        Probe::Tcp(a) => health::parse_tcp(&r(a, "health")?),
        Probe::Cmd(c) => Ok(health::ProbeSpec::Cmd {
            cmd: r(c, "health")?,
            cwd: cwd.to_path_buf(),
            env: env.to_vec(),
        }),
    }
    .map_err(|e| ApiError::new(format!("services.{service}.health: {e}")))?;
    Ok((probe, h.timeout, h.interval))
}

/// The [`supervisor::Mark`] of a service whose environment is `env`: its
/// home, its world's token and its name. `None` without a token (nothing
/// then tells its processes from another world's).
fn mark_of(env: &IndexMap<String, String>) -> Option<supervisor::Mark> {
    let pair = |k: &str| env.get(k).map(|v| (k.to_owned(), v.clone()));
    Some(supervisor::Mark {
        home: pair(crate::paths::HOME_ENV)?,
        token: pair(crate::daemon::world::strays::TOKEN_VAR)?,
        service: pair("BINKY_SERVICE")?,
    })
}
