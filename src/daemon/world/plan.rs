//! What `up` computes before it starts anything: dependency levels, facts for
//! tokens, the environment every process and command gets, process specs.

use super::WorldCtx;
use super::locate::{Located, join_subdir};
use super::routes::proxy_url;
use crate::config::render::{Facts, ServiceFacts, render};
use crate::config::{Config, Probe};
use crate::daemon::Daemon;
use crate::daemon::errors::internal;
use crate::protocol::{ApiError, ClientEnv, ServiceState};
use crate::registry::WorldRow;
use crate::supervisor::{ServiceSpec, health};
use crate::{config, ports};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Start order: services grouped in levels; every service's dependencies sit
/// in earlier levels. (The config was validated, so there is no cycle.)
pub(super) fn levels(cfg: &Config) -> Vec<Vec<String>> {
    let mut placed: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<Vec<String>> = Vec::new();
    while placed.len() < cfg.services.len() {
        let before = placed.len();
        let mut this: Vec<String> = Vec::new();
        for (name, s) in &cfg.services {
            if placed.contains_key(name.as_str()) {
                continue;
            }
            if s.depends_on()
                .iter()
                .all(|dep| placed.contains_key(dep.as_str()))
            {
                this.push(name.clone());
            }
        }
        for n in &this {
            placed.insert(cfg.services.get_key_value(n).unwrap().0, out.len());
        }
        out.push(this);
        if placed.len() == before {
            break; // unreachable for a validated config
        }
    }
    out
}

/// Reads a dotenv file: the world's copy first, else the main checkout's
/// (a git-ignored `.env` exists only where the user made it).
pub(super) fn read_env_file(
    world_root: &Path,
    main_root: &Path,
    rel: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let candidates = [
        config::resolve_against(world_root, rel),
        config::resolve_against(main_root, rel),
    ];
    let path = candidates.iter().find(|p| p.is_file()).ok_or_else(|| {
        ApiError::new(format!(
            "env_file {rel} not found in the world's checkout or the main one"
        ))
        .hint(format!(
            "create {} or remove env_file",
            candidates[1].display()
        ))
    })?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| ApiError::new(format!("cannot read env_file {}: {e}", path.display())))?;
    // Values are taken literally (see config::dotenv); errors never quote one.
    let pairs = config::dotenv::parse(&text).map_err(|e| {
        ApiError::new(format!("env_file {}, {e}", path.display()))
            .hint("each line is KEY=value (quote a value with spaces); `#` starts a comment")
    })?;
    for (k, v) in &pairs {
        crate::secrets::register_var(k, v);
    }
    Ok(pairs)
}

/// The error for a `${env.NAME}` with no value, at `key` (`services.db.admin_url`).
pub(super) fn unset_env(key: &str, token: &str) -> ApiError {
    ApiError::new(format!("{key} uses {token}, which is not set"))
        .hint("export it in the shell you run binky from (or put it in env_file)")
}

/// Renders `template` at `key` (`services.web.env.DATABASE_URL`), failing
/// on a `${env.NAME}` that has no value: a process must never be handed, nor
/// a user shown, an unrendered `${env.NAME}`. Other unresolved tokens are
/// left as written (`binky check` warns about them).
pub(super) fn render_strict(
    template: &str,
    key: &str,
    service: Option<&str>,
    facts: &Facts<'_>,
) -> Result<String, ApiError> {
    let rendered = render(template, service, facts);
    if let Some(tok) = rendered.unresolved.iter().find(|t| t.starts_with("${env.")) {
        return Err(unset_env(key, tok));
    }
    // A service's fact with no value now (a slice whose address could not
    // be resolved): as bad as an unset variable.
    if let Some(tok) = rendered.unresolved.iter().find(|t| {
        t.strip_prefix("${")
            .and_then(|b| b.split('.').next())
            .is_some_and(|svc| {
                facts.services.contains_key(svc) || (svc == "self" && service.is_some())
            })
    }) {
        return Err(
            ApiError::new(format!("{key} uses {tok}, which has no value now"))
                .hint("run `binky up` for the world again from the shell it was built in"),
        );
    }
    Ok(rendered.text)
}

/// A resource's rendered `admin_url` (registered as a secret), or `None`
/// when it has none.
///
/// # Errors
/// It uses a `${env.NAME}` that is not set.
pub(super) fn render_admin_url(
    cfg: &Config,
    world: &str,
    world_root: &Path,
    service: &str,
    r: &config::Resource,
    facts: &IndexMap<String, ServiceFacts>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Option<String>, ApiError> {
    let Some(t) = &r.admin_url else {
        return Ok(None);
    };
    let url = render_strict(
        t,
        &format!("services.{service}.admin_url"),
        Some(service),
        &facts_for(cfg, world, world_root, facts, env),
    )?;
    crate::secrets::register_url(&url);
    if let Some(e) = crate::adapters::catalog::find(&r.adapter) {
        e.check_admin_url(&url).map_err(|why| {
            ApiError::new(crate::secrets::redact_url(
                &format!("services.{service}: {}: {why}", e.name),
                Some(&url),
            ))
            .hint("fix admin_url, or the variables it is rendered from, and run this again")
        })?;
    }
    Ok(Some(url))
}

/// A resource's `options` with every string's tokens rendered (each
/// registered as a secret where its key or a URL in it says so), then
/// checked as `binky check` checks literal ones.
///
/// # Errors
/// An option uses a `${env.NAME}` that is not set, or its rendered value is
/// not what the adapter takes.
pub(super) fn render_options(
    cfg: &Config,
    world: &str,
    world_root: &Path,
    service: &str,
    r: &config::Resource,
    facts: &IndexMap<String, ServiceFacts>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<toml::Table, ApiError> {
    if !r
        .options
        .values()
        .any(crate::config::render::value_has_binky_token)
    {
        return Ok(r.options.clone());
    }
    let fx = facts_for(cfg, world, world_root, facts, env);
    fn walk(
        v: &toml::Value,
        key: &str,
        service: &str,
        fx: &Facts<'_>,
    ) -> Result<toml::Value, ApiError> {
        Ok(match v {
            toml::Value::String(t) => {
                let text = render_strict(t, key, Some(service), fx)?;
                let name = key.rsplit('.').next().unwrap_or(key);
                crate::secrets::register_var(name, &text);
                toml::Value::String(text)
            }
            toml::Value::Array(a) => toml::Value::Array(
                a.iter()
                    .enumerate()
                    .map(|(i, x)| walk(x, &format!("{key}[{i}]"), service, fx))
                    .collect::<Result<_, _>>()?,
            ),
            toml::Value::Table(t) => toml::Value::Table(
                t.iter()
                    .map(|(k, x)| Ok((k.clone(), walk(x, &format!("{key}.{k}"), service, fx)?)))
                    .collect::<Result<_, ApiError>>()?,
            ),
            other => other.clone(),
        })
    }
    let entry = crate::adapters::catalog::find(&r.adapter);
    let mut out = toml::Table::new();
    for (k, v) in &r.options {
        let mut rendered = walk(v, &format!("services.{service}.options.{k}"), service, &fx)?;
        if let Some(entry) = entry
            && crate::config::render::value_has_binky_token(v)
        {
            rendered = entry.typed(k, rendered);
        }
        out.insert(k.clone(), rendered);
    }
    if let Some(entry) = entry {
        entry.check_options(&out).map_err(|e| {
            ApiError::new(format!(
                "services.{service}.{e}, once its tokens are rendered"
            ))
            .hint("set the variables it is rendered from to a value of that kind")
        })?;
    }
    Ok(out)
}

/// The project's `env_file` pairs for a world (its checkout's copy, else the
/// main one's); none when it has no `env_file`.
pub(super) fn project_env(
    cfg: &Config,
    world_root: &Path,
    main_root: &Path,
) -> Result<Vec<(String, String)>, ApiError> {
    match &cfg.project.env_file {
        Some(f) => read_env_file(world_root, main_root, f),
        None => Ok(Vec::new()),
    }
}

/// Everything `up` computed about a world before starting it.
pub(super) struct Plan {
    pub(super) facts: IndexMap<String, ServiceFacts>,
    pub(super) world_root: PathBuf,
    pub(super) project_env: Vec<(String, String)>,
    /// The daemon's `BINKY_HOME`, handed to every process it starts: with
    /// the daemon's session id it is how a later daemon recognises them.
    pub(super) home: PathBuf,
    /// An unset `${env.NAME}` is an error (always, but when re-adopting a
    /// process that already runs: see [`adopt_world`]).
    pub(super) strict: bool,
    /// Every slice's address is in `facts` (false while they are made).
    pub(super) slices_ready: bool,
    /// Said under a failure when the world's `binky.toml` (its branch's) is
    /// not the main checkout's: a fix made on main has not reached it.
    pub(super) config_note: Option<String>,
    /// The world's token, set as `BINKY_WORLD_TOKEN` in every process it
    /// starts (see [`super::strays`]).
    pub(super) token: Option<String>,
}

/// The note for [`Plan::config_note`]: `None` when the world is the main
/// checkout or both files say the same.
pub(super) fn config_differs(world_root: &Path, main_root: &Path, world: &str) -> Option<String> {
    let (w, m) = (
        world_root.join(config::FILE_NAME),
        main_root.join(config::FILE_NAME),
    );
    if world_root == main_root {
        return None;
    }
    let (a, b) = (std::fs::read(&w).ok()?, std::fs::read(&m).ok()?);
    (a != b).then(|| {
        format!(
            "this world reads {} from its own branch, and it differs from the main checkout's {}: a fix made there reaches `{world}` once its branch has it (merge or rebase it), or fix the world's copy",
            w.display(),
            m.display()
        )
    })
}

/// `hint`, followed by the plan's [`Plan::config_note`] when there is one.
pub(super) fn with_config_note(hint: String, plan: &Plan) -> String {
    match &plan.config_note {
        Some(n) => format!("{hint}; {n}"),
        None => hint,
    }
}

pub(super) fn lookup_env<'a>(
    project_env: &'a [(String, String)],
    client: &'a ClientEnv,
) -> impl Fn(&str) -> Option<String> + Sync + 'a {
    move |name: &str| {
        let v = project_env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| client.get(name).map(str::to_owned))
            .or_else(|| std::env::var(name).ok());
        // What `${env.NAME}` hands a world may be a credential.
        if let Some(v) = &v {
            crate::secrets::register_var(name, v);
        }
        v
    }
}

/// Ports, URLs and hosts of every service (resources' addresses are filled
/// in later), registering each url service's route with the proxy.
pub(super) fn build_facts(
    d: &Daemon,
    cfg: &Config,
    project: &str,
    name: &str,
    slug: &str,
    world_id: i64,
    allocated: &IndexMap<ports::PortKey, u16>,
) -> Result<IndexMap<String, ServiceFacts>, ApiError> {
    let facts = facts_of(d, cfg, slug, allocated);
    for (n, f) in &facts {
        let is_url = cfg.services[n].process().is_some_and(|p| p.url.is_some());
        if let (true, Some(port), Some(host)) = (is_url, f.port, &f.host) {
            d.routes.set(
                host,
                crate::proxy::Route {
                    project: project.to_owned(),
                    world: name.to_owned(),
                    service: n.clone(),
                    port,
                    state: ServiceState::Starting,
                    https: cfg.project.https,
                },
            );
            d.registry()
                .set_service_host(world_id, n, host)
                .map_err(internal)?;
        }
    }
    Ok(facts)
}

/// Ports, URLs and hosts of every service of a world (resources' addresses
/// are not in it), with no side effect.
pub(super) fn facts_of(
    d: &Daemon,
    cfg: &Config,
    slug: &str,
    allocated: &IndexMap<ports::PortKey, u16>,
) -> IndexMap<String, ServiceFacts> {
    let mut facts: IndexMap<String, ServiceFacts> = IndexMap::new();
    for (n, s) in &cfg.services {
        let mut f = ServiceFacts::default();
        if let Some(p) = allocated.get(&(n.clone(), String::new())) {
            f.port = Some(*p);
            f.local_url = Some(format!("http://localhost:{p}"));
            f.url = f.local_url.clone();
            f.host = Some("localhost".into());
        }
        for pn in s.port_names() {
            if let Some(p) = allocated.get(&(n.clone(), pn.clone())) {
                f.ports.insert(pn.clone(), *p);
            }
        }
        if let Some(label) = s.process().and_then(|p| p.url.as_deref()) {
            f.url = Some(proxy_url(
                d,
                label,
                slug,
                &cfg.project.domain,
                cfg.project.https,
            ));
            f.host = Some(format!("{label}.{slug}.{}", cfg.project.domain));
        }
        facts.insert(n.clone(), f);
    }
    facts
}

/// Refuses an `up` whose config uses a `${env.NAME}` that nothing sets —
/// not its `env_file`s, the caller's shell, what the world's last `up` was
/// given, nor the daemon — before a branch, worktree, port or record is
/// made. The config read is the world's own when its worktree exists, else
/// the one the caller's project was found by (a new world's branch starts
/// there); rendering checks again later either way.
pub(super) fn preflight_env(
    d: &Daemon,
    loc: &Located,
    existing: Option<&WorldRow>,
    client_env: &ClientEnv,
) -> Result<(), ApiError> {
    let own = existing
        .map(|w| join_subdir(Path::new(&w.path), &loc.subdir).join(config::FILE_NAME))
        .filter(|p| p.is_file());
    let path = own.unwrap_or_else(|| loc.config.path.clone());
    let env = match existing {
        Some(w) => d.worlds.env_for(w.id, client_env),
        None => client_env.clone(),
    };
    let lookup = |name: &str| {
        env.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok())
    };
    let Ok(report) = config::check_file_in_env(&path, &lookup) else {
        return Ok(());
    };
    // An admin_url that reads as no URL once its variables are filled in
    // is refused here too, before anything is made.
    if let Some(diag) = report
        .diagnostics
        .iter()
        .find(|d| d.code == "invalid-admin-url")
    {
        return Err(
            ApiError::new(format!("{}: {}", diag.key, diag.message)).hint(format!(
                "fix the variable's value (or admin_url in {}); nothing was made",
                path.display()
            )),
        );
    }
    match report.diagnostics.iter().find(|d| d.code == "unset-env") {
        Some(diag) => {
            let token = diag
                .message
                .split('`')
                .nth(1)
                .unwrap_or("${env.…}")
                .to_owned();
            Err(unset_env(&diag.key, &token).hint(format!(
                "export it in the shell you run binky from (or put it in env_file); nothing was made ({})",
                path.display()
            )))
        }
        None => Ok(()),
    }
}

/// What rendering reads about a world: its project and names, its
/// worktree, every service's facts and the environment `${env.NAME}` reads.
pub(super) fn facts_for<'a>(
    cfg: &'a Config,
    world: &'a str,
    world_root: &'a Path,
    facts: &'a IndexMap<String, ServiceFacts>,
    env: &'a (dyn Fn(&str) -> Option<String> + Sync),
) -> Facts<'a> {
    Facts {
        project: &cfg.project.name,
        worktree_name: world,
        worktree_path: world_root.to_str().unwrap_or(""),
        services: facts,
        env,
    }
}

/// What every command of a world starts from, services and `verify`
/// alike: the caller's shell (else the daemon's), then the project's
/// `env_file`, then Binky's own names (`BINKY_HOME`, `BINKY_PROJECT`,
/// `BINKY_WORLD`, `BINKY_WORKTREE`, and `BINKY_PORT_<SVC>[_<NAME>]` for every
/// reserved port), each later source winning.
pub(super) struct EnvBase<'a> {
    pub(super) shell: &'a ClientEnv,
    pub(super) project_env: &'a [(String, String)],
    pub(super) home: &'a Path,
    pub(super) project: &'a str,
    pub(super) world: &'a str,
    pub(super) world_root: &'a Path,
    /// Where the ports come from.
    pub(super) facts: &'a IndexMap<String, ServiceFacts>,
}

impl EnvBase<'_> {
    /// The variables, in the order they were set.
    pub(super) fn build(&self) -> IndexMap<String, String> {
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
        env.shift_remove(super::strays::TOKEN_VAR);
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

/// One service's environment before its own `env_file` and `env`: the
/// [`EnvBase`], `BINKY_SERVICE`, its `PORT`, and the project's `[env]`.
pub(super) fn base_env(
    cfg: &Config,
    world: &str,
    service: &str,
    plan: &Plan,
    facts: &IndexMap<String, ServiceFacts>,
    client_env: &ClientEnv,
) -> Result<Vec<(String, String)>, ApiError> {
    let mut env = EnvBase {
        shell: client_env,
        project_env: &plan.project_env,
        home: &plan.home,
        project: &cfg.project.name,
        world,
        world_root: &plan.world_root,
        facts: &plan.facts,
    }
    .build();
    env.insert("BINKY_SERVICE".into(), service.to_owned());
    if let Some(t) = &plan.token {
        env.insert(super::strays::TOKEN_VAR.into(), t.clone());
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
pub(super) fn project_vars(
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

pub(super) fn process_spec(
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
    let mut env: IndexMap<String, String> =
        base_env(cfg, world, service, plan, &plan.facts, client_env)?
            .into_iter()
            .collect();
    for (k, v) in &service_env {
        env.insert(k.clone(), v.clone());
    }
    for (k, v) in &p.env {
        let value = r(v, &format!("env.{k}"))?;
        crate::secrets::register_var(k, &value);
        env.insert(k.clone(), value);
    }
    let cwd = match &p.cwd {
        Some(c) => config::resolve_against(&plan.world_root, &r(c, "cwd")?),
        None => plan.world_root.clone(),
    };
    let env: Vec<(String, String)> = env.into_iter().collect();
    let own_port = plan.facts[service].port;
    let health = match &p.health {
        None => None,
        Some(h) => {
            let probe = match &h.probe {
                Probe::Http(u) => health::parse_http(&r(u, "health")?, own_port),
                Probe::Tcp(a) => health::parse_tcp(&r(a, "health")?),
                Probe::Cmd(c) => Ok(health::ProbeSpec::Cmd {
                    cmd: r(c, "health")?,
                    cwd: cwd.clone(),
                    env: env.clone(),
                }),
            }
            .map_err(|e| ApiError::new(format!("services.{service}.health: {e}")))?;
            Some((probe, h.timeout, h.interval))
        }
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(config::FILE_NAME);
        std::fs::write(&path, toml).unwrap();
        let cfg = config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        (dir, cfg)
    }

    #[test]
    fn levels_put_every_dependency_first_and_independent_services_together() {
        let (_d, cfg) = config(
            r#"
[project]
name = "shop"
[services.web]
cmd = "true"
depends_on = ["api", "cache"]
[services.worker]
cmd = "true"
depends_on = ["db"]
[services.api]
cmd = "true"
depends_on = ["db"]
[services.db]
adapter = "sqlite"
[services.cache]
cmd = "true"
"#,
        );
        let lv = levels(&cfg);
        assert_eq!(
            lv,
            vec![
                vec!["db".to_owned(), "cache".to_owned()],
                vec!["worker".to_owned(), "api".to_owned()],
                vec!["web".to_owned()],
            ]
        );
    }

    #[test]
    fn a_project_without_dependencies_is_one_level() {
        let (_d, cfg) = config(
            "[project]\nname = \"p\"\n[services.a]\ncmd = \"true\"\n[services.b]\ncmd = \"true\"\n",
        );
        assert_eq!(levels(&cfg), vec![vec!["a".to_owned(), "b".to_owned()]]);
    }

    #[test]
    fn lookup_env_prefers_the_env_file_then_the_callers_shell() {
        let project = vec![
            ("A".to_owned(), "first".to_owned()),
            ("A".to_owned(), "from-file".to_owned()),
        ];
        let client = ClientEnv(vec![
            ("A".to_owned(), "from-shell".to_owned()),
            ("B".to_owned(), "shell-only".to_owned()),
        ]);
        let get = lookup_env(&project, &client);
        // The file's last line wins, as a shell sourcing it would.
        assert_eq!(get("A").as_deref(), Some("from-file"));
        assert_eq!(get("B").as_deref(), Some("shell-only"));
        assert_eq!(get("BINKY_TEST_SURELY_UNSET_VARIABLE"), None);
    }

    #[test]
    fn env_base_layers_shell_then_env_file_then_binkys_names() {
        let shell = ClientEnv(vec![
            ("KEEP".to_owned(), "shell".to_owned()),
            ("OVER".to_owned(), "shell".to_owned()),
            ("BINKY_WORLD".to_owned(), "spoofed".to_owned()),
        ]);
        let project_env = vec![("OVER".to_owned(), "file".to_owned())];
        let mut facts = IndexMap::new();
        facts.insert(
            "api".to_owned(),
            ServiceFacts {
                port: Some(41000),
                ports: [("debug".to_owned(), 41001)].into_iter().collect(),
                ..Default::default()
            },
        );
        facts.insert("db".to_owned(), ServiceFacts::default());
        let env = EnvBase {
            shell: &shell,
            project_env: &project_env,
            home: Path::new("/h"),
            project: "shop",
            world: "feat/a",
            world_root: Path::new("/w"),
            facts: &facts,
        }
        .build();
        assert_eq!(env["KEEP"], "shell");
        assert_eq!(env["OVER"], "file");
        // Binky's own names are never the shell's.
        assert_eq!(env["BINKY_WORLD"], "feat/a");
        assert_eq!(env["BINKY_PROJECT"], "shop");
        assert_eq!(env["BINKY_WORKTREE"], "/w");
        assert_eq!(env[crate::paths::HOME_ENV], "/h");
        assert_eq!(env["BINKY_PORT_API"], "41000");
        assert_eq!(env["BINKY_PORT_API_DEBUG"], "41001");
        assert!(!env.keys().any(|k| k.starts_with("BINKY_PORT_DB")));
    }

    #[test]
    fn config_differs_only_between_two_checkouts_that_disagree() {
        let (main, world) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let write = |d: &tempfile::TempDir, s: &str| {
            std::fs::write(d.path().join(config::FILE_NAME), s).unwrap()
        };
        write(&main, "[project]\nname = \"p\"\n");
        write(&world, "[project]\nname = \"p\"\n");
        assert_eq!(config_differs(world.path(), main.path(), "feat"), None);
        assert_eq!(config_differs(main.path(), main.path(), "feat"), None);
        write(&world, "[project]\nname = \"p\"\n# changed\n");
        let note = config_differs(world.path(), main.path(), "feat").unwrap();
        assert!(note.contains("feat"), "{note}");
    }
}
