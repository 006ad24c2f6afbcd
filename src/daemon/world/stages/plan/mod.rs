//! What `up` computes before it starts anything: dependency levels, facts for
//! tokens, the environment every process and command gets, process specs.
//! Rendering a value strictly is `render`; a process's environment and spec
//! are `process`.

use super::locate::{Located, join_subdir};
use super::routes::proxy_url;
use crate::config::Config;
use crate::config::render::{Facts, ServiceFacts};
use crate::daemon::Daemon;
use crate::protocol::{ApiError, ClientEnv, ServiceState};
use crate::registry::WorldRow;
use crate::{config, ports};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod process;
mod render;
pub(in crate::daemon::world) use process::{EnvBase, base_env, process_spec, project_vars};
pub(in crate::daemon::world) use render::{Renderer, read_env_file, render_strict, unset_env};

/// Start order: services grouped in levels; every service's dependencies sit
/// in earlier levels. (The config was validated, so there is no cycle.)
pub(in crate::daemon::world) fn levels(cfg: &Config) -> Vec<Vec<String>> {
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

/// The project's `env_file` pairs for a world (its checkout's copy, else the
/// main one's); none when it has no `env_file`.
pub(in crate::daemon::world) fn project_env(
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
pub(in crate::daemon::world) struct Plan {
    pub(in crate::daemon::world) facts: IndexMap<String, ServiceFacts>,
    pub(in crate::daemon::world) world_root: PathBuf,
    pub(in crate::daemon::world) project_env: Vec<(String, String)>,
    /// The daemon's `BINKY_HOME`, handed to every process it starts: with
    /// the daemon's session id it is how a later daemon recognises them.
    pub(in crate::daemon::world) home: PathBuf,
    /// An unset `${env.NAME}` is an error (always, but when re-adopting a
    /// process that already runs: see [`adopt_world`](crate::daemon::world::stages::reconcile::adopt_world)).
    pub(in crate::daemon::world) strict: bool,
    /// Every slice's address is in `facts` (false while they are made).
    pub(in crate::daemon::world) slices_ready: bool,
    /// Said under a failure when the world's `binky.toml` (its branch's) is
    /// not the main checkout's: a fix made on main has not reached it.
    pub(in crate::daemon::world) config_note: Option<String>,
    /// The world's token, set as `BINKY_WORLD_TOKEN` in every process it
    /// starts (see [`super::strays`]).
    pub(in crate::daemon::world) token: Option<String>,
}

/// The note for [`Plan::config_note`]: `None` when the world is the main
/// checkout or both files say the same.
pub(in crate::daemon::world) fn config_differs(
    world_root: &Path,
    main_root: &Path,
    world: &str,
) -> Option<String> {
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
pub(in crate::daemon::world) fn with_config_note(hint: String, plan: &Plan) -> String {
    match &plan.config_note {
        Some(n) => format!("{hint}; {n}"),
        None => hint,
    }
}

pub(in crate::daemon::world) fn lookup_env<'a>(
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
pub(in crate::daemon::world) fn build_facts(
    cx: &crate::daemon::world::WorldCtx<'_>,
    allocated: &IndexMap<ports::PortKey, u16>,
) -> Result<IndexMap<String, ServiceFacts>, ApiError> {
    let facts = facts_of(cx.d, cx.cfg, cx.world.slug(), allocated);
    for (n, f) in &facts {
        let is_url = cx.cfg.services[n]
            .process()
            .is_some_and(|p| p.url.is_some());
        if let (true, Some(port), Some(host)) = (is_url, f.port, &f.host) {
            cx.d.routes.set(
                host,
                crate::proxy::Route {
                    project: cx.project.to_owned(),
                    world: cx.world.to_string(),
                    service: n.clone(),
                    port,
                    state: ServiceState::Starting,
                    https: cx.cfg.project.https,
                    why: None,
                    seen: Default::default(),
                },
            );
            cx.d.registry(|r| r.set_service_host(cx.world_id, n, host))?;
        }
    }
    Ok(facts)
}

/// Ports, URLs and hosts of every service of a world (resources' addresses
/// are not in it), with no side effect.
pub(in crate::daemon::world) fn facts_of(
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

/// An unset `${env.NAME}` and an unknown adapter fail here, before a
/// worktree or a port is made.
///
/// # Errors
/// Names the variable or the service and its adapter.
pub(in crate::daemon::world) fn preflight(
    d: &Daemon,
    loc: &Located,
    existing: Option<&WorldRow>,
    client_env: &ClientEnv,
) -> Result<(), ApiError> {
    preflight_env(d, loc, existing, client_env)?;
    for (n, s) in &loc.config.services {
        if let Some(r) = s.resource()
            && super::slices::adapter_for(d, &r.adapter, client_env).is_none()
        {
            return Err(super::slices::no_adapter(n, &r.adapter));
        }
    }
    Ok(())
}

/// Refuses an `up` whose config uses a `${env.NAME}` that nothing sets —
/// not its `env_file`s, the caller's shell, what the world's last `up` was
/// given, nor the daemon — before a branch, worktree, port or record is
/// made. The config read is the world's own when its worktree exists, else
/// the one the caller's project was found by (a new world's branch starts
/// there); rendering checks again later either way.
fn preflight_env(
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
pub(in crate::daemon::world) fn facts_for<'a>(
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
