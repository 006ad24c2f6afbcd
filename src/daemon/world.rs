//! World lifecycle: `up`, `down`, `reload`, `remove`, `env`.
//!
//! `up` runs the pipeline in order — worktree → config → ports → slices →
//! render → supervised start by dependency level — recording its intent in the
//! registry before it acts. One async lock per world serialises verbs on the
//! same world, so the same name upped twice at once yields one world.

use super::events::Event as LogEvent;
use super::{Daemon, ProgressTx};
use crate::adapters::{self, Slice, golden};
use crate::config::render::{Facts, ServiceFacts, render};
use crate::config::{self, Config, Probe, ServiceKind};
use crate::ports::{self, PortNote};
use crate::protocol::{
    ApiError, ClientEnv, UpRequest, WorldEnv, WorldOutcome, WorldRef, WorldStatus,
};
use crate::registry::WorldRow;
use crate::slug::world_slug;
use crate::supervisor::{self, Handle, ServiceSpec, State, health};
use crate::worktree;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Lines of a failing service's log quoted in the error.
const FAILURE_LOG_LINES: usize = 20;
/// First lines of a run quoted under a failure, before its tail.
const FAILURE_HEAD_LINES: usize = 8;

/// The daemon's live worlds.
#[derive(Default)]
pub(crate) struct Worlds {
    runtimes: Mutex<HashMap<i64, Arc<Runtime>>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    golden: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// libgit2 is not safe for concurrent changes to one repository (refs,
    /// `.git/worktrees`), so worktree changes are serialised per repository.
    repos: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// The environment each world's last `up` was given (daemon memory
    /// only: it may hold credentials), so every later verb renders with
    /// the same `${env.NAME}` values even from a shell that lacks them.
    last_env: Mutex<HashMap<i64, ClientEnv>>,
}

/// Supervised processes of one world.
pub(crate) struct Runtime {
    handles: IndexMap<String, Arc<Handle>>,
    /// Start order by dependency level.
    levels: Vec<Vec<String>>,
}

impl Worlds {
    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(key.to_owned()).or_default().clone()
    }
    fn golden_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.golden.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(key.to_owned()).or_default().clone()
    }
    fn repo_lock(&self, main: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.repos.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(main.to_path_buf()).or_default().clone()
    }
    fn remember_env(&self, id: i64, env: &ClientEnv) {
        self.last_env
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, env.clone());
    }
    /// The environment a verb on world `id` renders with: the caller's
    /// variables, then those the world's last `up` was given (the daemon's
    /// own come last, in [`lookup_env`]).
    fn env_for(&self, id: i64, caller: &ClientEnv) -> ClientEnv {
        let last = self.last_env.lock().unwrap_or_else(|p| p.into_inner());
        let mut merged = caller.clone();
        if let Some(up) = last.get(&id) {
            for (k, v) in &up.0 {
                if caller.get(k).is_none() {
                    merged.0.push((k.clone(), v.clone()));
                }
            }
        }
        merged
    }
    fn runtime(&self, id: i64) -> Option<Arc<Runtime>> {
        self.runtimes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }
    fn take_runtime(&self, id: i64) -> Option<Arc<Runtime>> {
        self.runtimes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
    }
    fn put_runtime(&self, id: i64, rt: Runtime) {
        self.runtimes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::new(rt));
    }
}

use crate::faults::point as fault_point;

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(e.to_string())
}

/// A project found from a [`WorldRef`].
struct Located {
    name: String,
    main: PathBuf,
    subdir: PathBuf,
    /// The config as read from where the project was found (names, roots).
    config: Config,
}

impl Located {
    /// The project folder in the main worktree: the base for `worktree_root`.
    fn main_root(&self) -> PathBuf {
        join_subdir(&self.main, &self.subdir)
    }
}

/// `base/subdir`, without the trailing slash `join("")` would add.
fn join_subdir(base: &Path, subdir: &Path) -> PathBuf {
    if subdir.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(subdir)
    }
}

fn invalid_config(e: config::LoadError) -> ApiError {
    match e {
        config::LoadError::Invalid { path, report } => {
            let shown = path.display().to_string();
            let lines: Vec<String> = report
                .diagnostics
                .iter()
                .filter(|d| d.severity == config::Severity::Error)
                .map(|d| d.render(&shown))
                .collect();
            ApiError::new(format!("{shown} is not valid:\n{}", lines.join("\n")))
                .hint(format!("run `binky check {shown}` and fix what it reports"))
        }
        other => ApiError::new(other.to_string()),
    }
}

fn locate(d: &Daemon, w: &WorldRef) -> Result<Located, ApiError> {
    let dir = match (&w.project_dir, &w.project) {
        (_, Some(name)) => {
            let root = d
                .registry()
                .project_root(name)
                .map_err(internal)?
                .ok_or_else(|| {
                    ApiError::new(format!("no project named `{name}` is known to this daemon"))
                        .hint("run the command inside the project, or pass --project PATH")
                })?;
            PathBuf::from(root)
        }
        (Some(dir), None) => PathBuf::from(dir),
        (None, None) => return Err(ApiError::new("no project given")),
    };
    let file = config::find(&dir).map_err(|e| {
        ApiError::new(e.to_string())
            .hint("run binky inside a project (a folder with binky.toml), or pass --project")
    })?;
    let config = config::load(&file).map_err(invalid_config)?;
    let loc = worktree::locate(&config.root).map_err(|e| {
        let hint = match e {
            worktree::WorktreeError::DubiousOwnership(_) => {
                "git's check protects you from hooks in a repository someone else controls"
            }
            _ => "binky.toml must live inside a git repository",
        };
        ApiError::new(e.to_string()).hint(hint)
    })?;
    Ok(Located {
        name: config.project.name.clone(),
        main: loc.main_workdir,
        subdir: loc.subdir,
        config,
    })
}

/// Start order: services grouped in levels; every service's dependencies sit
/// in earlier levels. (The config was validated, so there is no cycle.)
fn levels(cfg: &Config) -> Vec<Vec<String>> {
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

/// The URL Binky prints for a url service: https through Caddy when the
/// project asks for it and Caddy runs, else http through the proxy. It
/// carries the port whenever it is not the scheme's default, so a printed URL
/// always works.
fn proxy_url(d: &Daemon, label: &str, slug: &str, domain: &str, https: bool) -> String {
    let s = d.registry().settings().ok();
    url_of(s.as_ref(), d, &format!("{label}.{slug}.{domain}"), https)
}

fn url_of(s: Option<&crate::protocol::Settings>, d: &Daemon, host: &str, https: bool) -> String {
    let (scheme, port, default) =
        if https && d.https_live.load(std::sync::atomic::Ordering::Relaxed) {
            ("https", s.map(|s| s.https_port).unwrap_or(443), 443)
        } else {
            ("http", s.map(|s| s.proxy_port).unwrap_or(80), 80)
        };
    if port == default || port == 0 {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}:{port}")
    }
}

/// Fills in each url service's [`ServiceStatus::url`] (see [`proxy_url`]).
/// A project's config is read only when Caddy runs, to learn whether it
/// asks for HTTPS.
pub(crate) fn fill_urls(d: &Daemon, report: &mut crate::protocol::StatusReport) {
    let s = d.registry().settings().ok();
    let caddy = d.https_live.load(std::sync::atomic::Ordering::Relaxed);
    for p in &mut report.projects {
        if !p
            .worlds
            .iter()
            .any(|w| w.services.iter().any(|s| s.host.is_some()))
        {
            continue;
        }
        let https = caddy
            && config::load(&Path::new(&p.root).join(config::FILE_NAME))
                .is_ok_and(|c| c.project.https);
        for svc in p.worlds.iter_mut().flat_map(|w| w.services.iter_mut()) {
            if let Some(h) = &svc.host {
                svc.url = Some(url_of(s.as_ref(), d, h, https));
            }
        }
    }
}

/// Starts Caddy for a project with `https = true`; logs and degrades to
/// http when it cannot.
async fn ensure_https(d: &Daemon, project: &str, world: &str) -> Option<String> {
    let s = d.registry().settings().ok()?;
    // Caddy insists on an HTTP port too; give it a free one nobody uses.
    let http_port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0);
    match d
        .caddy
        .ensure(
            &d.paths.home().join("caddy"),
            s.https_port,
            http_port,
            s.proxy_port,
        )
        .await
    {
        Ok(()) => {
            d.https_live
                .store(true, std::sync::atomic::Ordering::Relaxed);
            None
        }
        Err(e) => {
            tracing::warn!("https unavailable: {e}");
            d.event(world_event("https_unavailable", project, world).detail(e.clone()));
            Some(format!("HTTPS is off: {e}; URLs stay http"))
        }
    }
}

fn slice_for(
    d: &Daemon,
    adapter: &dyn adapters::Adapter,
    name: String,
    project: &str,
    options: Option<&toml::Table>,
    admin_url: Option<String>,
    client_env: &ClientEnv,
) -> Slice {
    Slice {
        name,
        project: project.to_owned(),
        admin_url,
        options: options.cloned().unwrap_or_default(),
        data_dir: d.paths.home().join("slices").join(adapter.name()),
        search_path: search_path(client_env),
    }
}

/// The `PATH` adapters search for their client binaries and external
/// adapters: the calling CLI's (so what works in the user's shell works
/// here), else the daemon's.
fn search_path(client_env: &ClientEnv) -> Option<std::ffi::OsString> {
    client_env
        .0
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.into())
        .or_else(|| std::env::var_os("PATH"))
}

/// An adapter's error as the user sees it: naming the service, never the
/// slice's credentials.
fn adapter_error(service: &str, slice: &Slice, e: adapters::AdapterError) -> ApiError {
    ApiError::new(format!("services.{service}: {}", e.redacted(slice).message))
}

/// Whether `path` lies inside `root`, compared as real paths (symlinks and
/// `..` resolved), so a path that merely starts like the root never counts.
fn inside(path: &Path, root: &Path) -> bool {
    match (path.canonicalize(), root.canonicalize()) {
        (Ok(p), Ok(r)) => p.starts_with(&r) && p != r,
        _ => false,
    }
}

/// The caller's `git` (on its `PATH`, run with its environment): worktrees
/// are made and removed by the user's own git.
fn user_git(client_env: &ClientEnv) -> Result<worktree::Git, ApiError> {
    worktree::Git::find(search_path(client_env).as_deref(), &client_env.0).map_err(|e| {
        ApiError::new(e.to_string())
            .hint("install git (Debian: apt-get install git) or put it on the PATH of the shell running binky")
    })
}

/// The adapter named `name`, built in or external (`binky-adapter-<name>` on
/// the caller's `PATH`).
fn adapter_for(name: &str, client_env: &ClientEnv) -> Option<Arc<dyn adapters::Adapter>> {
    adapters::by_name(name, search_path(client_env).as_deref())
}

fn no_adapter(service: &str, name: &str) -> ApiError {
    ApiError::new(format!("services.{service}: no adapter named `{name}`")).hint(format!(
        "built-in adapters: {}; an external one is an executable {}{name} on PATH",
        adapters::BUILT_IN.join(", "),
        adapters::external::PREFIX
    ))
}

/// Reads a dotenv file: the world's copy first, else the main checkout's
/// (a git-ignored `.env` exists only where the user made it).
fn read_env_file(
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

fn env_key(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The error for a `${env.NAME}` with no value, at `key` (`services.db.admin_url`).
fn unset_env(key: &str, token: &str) -> ApiError {
    ApiError::new(format!("{key} uses {token}, which is not set"))
        .hint("export it in the shell you run binky from (or put it in env_file)")
}

/// Renders `template` at `key` (`services.web.env.DATABASE_URL`), failing
/// on a `${env.NAME}` that has no value: a process must never be handed, nor
/// a user shown, an unrendered `${env.NAME}`. Other unresolved tokens are
/// left as written (`binky check` warns about them).
fn render_strict(
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
            .is_some_and(|svc| facts.services.contains_key(svc))
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
fn render_admin_url(
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
    Ok(Some(url))
}

/// The project's `env_file` pairs for a world (its checkout's copy, else the
/// main one's); none when it has no `env_file`.
fn project_env(
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
struct Plan {
    facts: IndexMap<String, ServiceFacts>,
    world_root: PathBuf,
    project_env: Vec<(String, String)>,
    /// The daemon's `BINKY_HOME`, handed to every process it starts: with
    /// the daemon's session id it is how a later daemon recognises them.
    home: PathBuf,
    /// An unset `${env.NAME}` is an error (always, but when re-adopting a
    /// process that already runs: see [`adopt_world`]).
    strict: bool,
    /// Every slice's address is in `facts` (false while they are made).
    slices_ready: bool,
    /// Said under a failure when the world's `binky.toml` (its branch's) is
    /// not the main checkout's: a fix made on main has not reached it.
    config_note: Option<String>,
}

/// The note for [`Plan::config_note`]: `None` when the world is the main
/// checkout or both files say the same.
fn config_differs(world_root: &Path, main_root: &Path, world: &str) -> Option<String> {
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
fn with_config_note(hint: String, plan: &Plan) -> String {
    match &plan.config_note {
        Some(n) => format!("{hint}; {n}"),
        None => hint,
    }
}

fn lookup_env<'a>(
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

/// `binky up`.
pub(crate) async fn up(
    d: &Arc<Daemon>,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    check_name(&req.world.name)?;
    let loc = locate(d, &req.world)?;
    let name = req.world.name.clone();
    let key = format!("{}/{}", loc.name, name);
    let lock = d.worlds.lock_for(&key);
    let _guard = lock.lock().await;
    up_locked(d, &loc, &name, req.group.as_deref(), &req.env, progress).await
}

/// A world name that could change the shape of a command is refused before
/// anything is made (see [`crate::slug::check_world_name`]).
fn check_name(name: &str) -> Result<(), ApiError> {
    crate::slug::check_world_name(name).map_err(|e| {
        ApiError::new(e).hint("pick another branch name (`binky up feat-login`), or rename the branch with `git branch -m`")
    })
}

/// Characters a path rendered into a command (`${worktree.path}`) must not
/// hold: each would let the path change the command's shape. Spaces are
/// allowed (quote `"${worktree.path}"` in commands).
const SHELL_SPECIAL: &[char] = &[
    ';', '|', '&', '$', '`', '\'', '"', '(', ')', '<', '>', '\\', '\n', '\r',
];

/// Refuses a worktree path that could change the shape of a command.
fn check_path(path: &Path) -> Result<(), ApiError> {
    let text = path.display().to_string();
    match text.chars().find(|c| SHELL_SPECIAL.contains(c) || c.is_control()) {
        None => Ok(()),
        Some(c) => Err(ApiError::new(format!(
            "the worktree path {text:?} holds {c:?}, which a shell would read when `${{worktree.path}}` is rendered into a command"
        ))
        .hint("set [project] worktree_root to a folder whose path has none of ; | & $ ` ' \" ( ) < > \\")),
    }
}

async fn up_locked(
    d: &Arc<Daemon>,
    loc: &Located,
    name: &str,
    group: Option<&str>,
    client_env: &ClientEnv,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let project = loc.name.as_str();
    let slug = world_slug(name);
    let root = loc.main_root().display().to_string();
    if let Some(known) = d.registry().project_root(project).map_err(internal)?
        && known != root
        && Path::new(&known).join(config::FILE_NAME).is_file()
    {
        // Two checkouts claiming one project name would share worlds,
        // hostnames and slices.
        return Err(ApiError::new(format!(
            "project `{project}` is already registered at {known}, and {root} uses the same name"
        ))
        .hint(
            "give this project its own [project] name, or remove the other project's worlds first",
        ));
    }
    let project_id = d
        .registry()
        .upsert_project(project, &root)
        .map_err(internal)?;
    let existing = d
        .registry()
        .find_world(project_id, name)
        .map_err(internal)?;
    if let Some(w) = &existing
        && w.state == "running"
        && let Some(rt) = d.worlds.runtime(w.id)
        && rt
            .handles
            .values()
            .all(|h| matches!(*h.state.borrow(), State::Running { .. }))
        && Path::new(&w.path).exists()
    {
        return outcome(d, project, w.id, true, moved_migrations(d, loc, w));
    }
    // An unset `${env.NAME}` fails here too, before anything is made.
    preflight_env(d, loc, existing.as_ref(), client_env)?;
    // Unknown adapters fail here, before a worktree or a port is made.
    for (n, s) in &loc.config.services {
        if let Some(r) = s.resource()
            && adapter_for(&r.adapter, client_env).is_none()
        {
            return Err(no_adapter(n, &r.adapter));
        }
    }
    let mut notes = Vec::new();
    if let Some(w) = &existing {
        // Not (fully) running: stop whatever is left of it first, so nothing
        // runs twice and its ports are free to keep.
        stop_processes(d, w).await;
    }

    check_cancelled(progress, name)?;
    progress.say("worktree", None, format!("worktree for {name}"));
    let root = match &loc.config.project.worktree_root {
        Some(r) => config::resolve_against(&loc.main_root(), r),
        None => worktree::default_root(&loc.main),
    };
    let git = user_git(client_env)?;
    check_path(&root.join(&loc.subdir))?;
    let (main, branch, slug2) = (loc.main.clone(), name.to_owned(), slug.clone());
    let repo_lock = d.worlds.repo_lock(&loc.main);
    let repo_guard = repo_lock.lock().await;
    let ensured = tokio::task::spawn_blocking(move || {
        worktree::ensure(&git, &main, &branch, &slug2, &root)
    })
    .await
    .map_err(internal)?
    .map_err(|e| {
        let hint = match &e {
            worktree::WorktreeError::CheckedOutElsewhere { .. } => {
                "switch that checkout to another branch, or run `binky up` with a different name"
            }
            worktree::WorktreeError::InvalidBranch(_) => "use a valid git branch name",
            _ => "check the repository with `git worktree list` and `git status`",
        };
        ApiError::new(e.to_string()).hint(hint)
    })?;
    drop(repo_guard);
    fault_point("up:worktree");
    // Cancelled now, the worktree stays (the next `up` reuses it), and no
    // world has been recorded yet.
    check_cancelled(progress, name)?;
    if ensured.recreated {
        let msg = format!(
            "the worktree folder {} was missing and has been re-created",
            ensured.path.display()
        );
        progress.say("worktree", None, msg.clone());
        notes.push(msg);
        d.event(world_event("worktree_recreated", project, name));
    }
    let world_root = join_subdir(&ensured.path, &loc.subdir);
    check_path(&world_root)?;
    let cfg_path = world_root.join(config::FILE_NAME);
    let cfg = config::load(&cfg_path).map_err(invalid_config)?;
    // The world runs its own branch's binky.toml; edits the user has not
    // committed in the checkout they ran `up` from are not in it.
    let here = loc.config.root.join(config::FILE_NAME);
    if here != cfg_path
        && std::fs::read(&here).ok() != std::fs::read(&cfg_path).ok()
        && worktree::has_uncommitted_changes(&here)
    {
        let msg = format!(
            "{} has uncommitted changes this world does not see: it runs {} as on branch `{name}`; commit them there (or edit the world's copy), then `binky reload {name}`",
            here.display(),
            cfg_path.display()
        );
        notes.push(msg);
    }
    if cfg.project.name != project {
        return Err(ApiError::new(format!(
            "{} names project `{}`, but this project is `{project}`",
            cfg_path.display(),
            cfg.project.name
        ))
        .hint("a branch must keep the project's name"));
    }

    // Record the intent before acting, so a crash can be reconciled.
    let world_id = {
        let mut reg = d.registry();
        let id = reg
            .upsert_world(
                project_id,
                name,
                &slug,
                &ensured.path.display().to_string(),
                "starting",
                Some("up"),
                group,
            )
            .map_err(internal)?;
        let services: Vec<(String, &str)> = cfg
            .services
            .iter()
            .map(|(n, s)| {
                (
                    n.clone(),
                    if s.process().is_some() {
                        "process"
                    } else {
                        "resource"
                    },
                )
            })
            .collect();
        reg.sync_services(id, &services).map_err(internal)?;
        reg.reset_restarts(id).map_err(internal)?;
        id
    };
    d.worlds.remember_env(world_id, client_env);
    d.event(world_event("up_started", project, name));

    let result = bring_up(
        d, &cfg, loc, project, name, &slug, world_id, world_root, client_env, progress, &mut notes,
    )
    .await;
    match result {
        Ok(()) => {
            d.registry()
                .set_world_state(world_id, "running", None, None)
                .map_err(internal)?;
            d.event(world_event("up", project, name));
            outcome(d, project, world_id, false, notes)
        }
        Err(_) if progress.cancelled() => {
            // Stop what it started; keep what it made (worktree, ports,
            // complete slices), as `down` would: nothing is left half-made.
            let row = d
                .registry()
                .find_world(project_id, name)
                .map_err(internal)?;
            if let Some(w) = row {
                stop_processes(d, &w).await;
            }
            let _ = d.registry().set_world_state(
                world_id,
                "stopped",
                None,
                Some("`up` was cancelled by its caller"),
            );
            d.event(world_event("up_cancelled", project, name));
            Err(cancelled_error(name))
        }
        Err(e) => {
            let _ = d
                .registry()
                .set_world_state(world_id, "failed", None, Some(&e.message));
            d.event(world_event("up_failed", project, name).detail(first_line(&e.message)));
            Err(e)
        }
    }
}

/// What a cancelled `up` answers.
fn cancelled_error(name: &str) -> ApiError {
    ApiError::new(format!(
        "`up` of {name} was cancelled: what it had started is stopped; its worktree, ports and finished slices are kept"
    ))
    .hint(format!(
        "`binky up {name}` brings it up, `binky remove {name}` removes it"
    ))
}

/// Fails with [`cancelled_error`] once the caller has cancelled: checked
/// between the stages of `up`, where stopping leaves nothing half-made.
fn check_cancelled(progress: &ProgressTx, name: &str) -> Result<(), ApiError> {
    if progress.cancelled() {
        return Err(cancelled_error(name));
    }
    Ok(())
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_owned()
}

fn world_event(ev: &str, project: &str, world: &str) -> LogEvent {
    let mut e = LogEvent::named(ev);
    e.project = Some(project.to_owned());
    e.worktree = Some(world.to_owned());
    e
}

#[allow(clippy::too_many_arguments)]
async fn bring_up(
    d: &Arc<Daemon>,
    cfg: &Config,
    loc: &Located,
    project: &str,
    name: &str,
    slug: &str,
    world_id: i64,
    world_root: PathBuf,
    client_env: &ClientEnv,
    progress: &ProgressTx,
    notes: &mut Vec<String>,
) -> Result<(), ApiError> {
    // Ports: the whole map, before anything starts.
    let mut needs: Vec<ports::PortKey> = Vec::new();
    for (n, s) in &cfg.services {
        if s.has_port() {
            needs.push((n.clone(), String::new()));
            for p in s.port_names() {
                needs.push((n.clone(), p.clone()));
            }
        }
    }
    let running_ports: Vec<u16> = Vec::new();
    let mut port_notes = Vec::new();
    let allocated = {
        let mut reg = d.registry();
        ports::allocate(
            reg.conn(),
            project,
            world_id,
            cfg.project.port_range,
            &needs,
            &|p| running_ports.contains(&p),
            &mut port_notes,
        )
        .map_err(|e| {
            ApiError::new(e.to_string())
                .hint("widen [project] port_range, or remove worlds you no longer need")
        })?
    };
    for n in port_notes {
        let mut ev = world_event("port_skipped", project, name);
        match n {
            PortNote::Skipped(p) => ev = ev.detail(format!("port {p} is held outside binky")),
            PortNote::Moved { service, from, to } => {
                ev = world_event("port_moved", project, name).detail(format!(
                    "port {from} was taken outside binky; moved to {to}"
                ));
                ev.service = Some(service.clone());
                notes.push(format!(
                    "{service}: port {from} was taken outside binky; now {to}"
                ));
            }
        }
        d.event(ev);
    }
    progress.say(
        "ports",
        None,
        format!("{} port(s) reserved", allocated.len()),
    );
    fault_point("up:ports");
    check_cancelled(progress, name)?;

    let main_root = loc.main_root();
    let mut project_env = Vec::new();
    if let Some(f) = &cfg.project.env_file {
        project_env = read_env_file(&world_root, &main_root, f)?;
    }

    if cfg.project.https
        && let Some(note) = ensure_https(d, project, name).await
    {
        notes.push(note);
    }
    // Facts every token may read.
    let facts = build_facts(d, cfg, project, name, slug, world_id, &allocated)?;
    let mut plan = Plan {
        facts,
        world_root: world_root.clone(),
        project_env,
        home: d.paths.home().to_path_buf(),
        strict: true,
        slices_ready: false,
        config_note: config_differs(&world_root, &main_root, name),
    };

    // Slices, before any process that may use them.
    for (n, s) in &cfg.services {
        if let ServiceKind::Resource(r) = &s.kind {
            check_cancelled(progress, name)?;
            progress.say("provision", Some(n), format!("{} slice for {n}", r.adapter));
            let address = provision(
                d, cfg, project, name, slug, world_id, n, r, &plan, client_env, progress,
            )
            .await?;
            let f = plan.facts.get_mut(n).expect("fact per service");
            f.host = host_of(&address);
            f.url = Some(address);
            d.registry()
                .service_state(world_id, n, "provisioned", None, false)
                .map_err(internal)?;
        }
    }

    plan.slices_ready = true;
    fault_point("up:provisioned");
    // Processes, level by level; independent ones start together.
    let lv = levels(cfg);
    let mut handles: IndexMap<String, Arc<Handle>> = IndexMap::new();
    let log_dir = d.paths.world_logs(project, slug);
    let mut failure: Option<ApiError> = None;
    'levels: for level in &lv {
        let mut started = Vec::new();
        for sname in level {
            let svc = &cfg.services[sname];
            let Some(p) = svc.process() else { continue };
            let spec = process_spec(cfg, project, name, sname, p, &plan, client_env, &log_dir)?;
            progress.say("start", Some(sname), format!("starting {sname}"));
            // Intent first: the row says `starting` before a process exists.
            d.registry()
                .service_state(world_id, sname, "starting", None, false)
                .map_err(internal)?;
            let recorder = recorder(
                d.clone(),
                world_id,
                project.to_owned(),
                name.to_owned(),
                sname.clone(),
            );
            let log = spec.log.clone();
            let h = Arc::new(supervisor::spawn(spec, recorder));
            handles.insert(sname.clone(), h.clone());
            started.push((sname.clone(), h, log));
        }
        fault_point("up:started");
        for (sname, h, log) in started {
            let mut watch = h.state.clone();
            let settle = async {
                loop {
                    let s = watch.borrow_and_update().clone();
                    if s.is_settled() {
                        break s;
                    }
                    if watch.changed().await.is_err() {
                        break watch.borrow().clone();
                    }
                }
            };
            // A cancel does not wait for a slow health probe.
            let settled = tokio::select! {
                s = settle => s,
                _ = progress.until_cancelled() => {
                    failure.get_or_insert(cancelled_error(name));
                    break 'levels;
                }
            };
            match settled {
                State::Running { pid } => {
                    let port = plan.facts[&sname]
                        .port
                        .map(|p| format!("  :{p}"))
                        .unwrap_or_default();
                    progress.say("ready", Some(&sname), format!("{sname}  pid {pid}{port}"));
                }
                // A probe-less one-shot that did its work inside the grace
                // period (see supervisor::NO_PROBE_GRACE).
                s if s.exited_cleanly() => {
                    progress.say("ready", Some(&sname), format!("{sname}  finished (exit 0)"));
                }
                other => {
                    let reason = match &other {
                        State::Unhealthy { reason, .. } => format!("not healthy: {reason}"),
                        State::Failed { reason } => reason.clone(),
                        State::Stopped { exit } => exit.clone().unwrap_or_else(|| "stopped".into()),
                        s => s.label().to_owned(),
                    };
                    // This run's output only: its first lines often say
                    // the cause, its last where it stopped.
                    let run = supervisor::logs::current_run(&log);
                    let mut msg = format!("service `{sname}` failed to start: {reason}");
                    if !run.is_empty() {
                        msg.push_str(&format!(
                            "\noutput of this run ({} line(s), in {}):\n{}",
                            run.len(),
                            log.display(),
                            supervisor::logs::quote_head_tail(
                                &run,
                                FAILURE_HEAD_LINES,
                                FAILURE_LOG_LINES
                            )
                        ));
                    }
                    failure.get_or_insert(
                        ApiError::new(msg.trim_end().to_owned())
                            .hint(with_config_note(format!("`binky logs {name} {sname}` shows its output; services already started stay up for inspection"), &plan)),
                    );
                }
            }
        }
        if failure.is_some() {
            break 'levels;
        }
    }
    if failure.is_some() {
        // Services a failure kept from starting are stopped, not starting:
        // their proxy page must not promise a retry that never comes.
        for (sname, svc) in &cfg.services {
            if svc.process().is_some() && !handles.contains_key(sname) {
                d.routes.set_state(project, name, sname, "stopped");
            }
        }
    }
    d.worlds.put_runtime(
        world_id,
        Runtime {
            handles,
            levels: lv,
        },
    );
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Ports, URLs and hosts of every service (resources' addresses are filled
/// in later), registering each url service's route with the proxy.
fn build_facts(
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
                    state: "starting".into(),
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
fn facts_of(
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

/// Start-up reconciliation: re-adopts the service processes of worlds that
/// were up when the previous daemon stopped or died.
///
/// A recorded process is ours only if its pid *and* start time match (a
/// recycled pid is never mistaken for it). Adopted processes are watched for
/// exit through a pidfd, not polled; ones that died meanwhile are started
/// again per their restart policy. An `up` the crash interrupted is marked
/// failed with the reason.
pub(crate) async fn reconcile(d: &Arc<Daemon>) {
    let worlds: Vec<(i64, String, String, String, Option<String>)> = {
        let reg = d.registry();
        let mut stmt = match reg.conn_ref().prepare(
            "SELECT w.id, p.name, w.name, w.state, w.intent FROM worlds w JOIN projects p ON p.id = w.project_id",
        ) {
            Ok(s) => s,
            Err(_) => return,
        };
        stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .and_then(|rows| rows.collect())
        .unwrap_or_default()
    };
    reap_interrupted_verifies(d).await;
    stop_unknown(d).await;
    for (id, project, name, state, intent) in worlds {
        if let Some(op) = &intent {
            let reason = format!(
                "`{op}` was interrupted by a daemon restart; run `binky {op} {name}` again"
            );
            let _ = d
                .registry()
                .set_world_state(id, "failed", None, Some(&reason));
            d.event(
                world_event("interrupted", &project, &name).detail(format!("{op} interrupted")),
            );
        }
        if !matches!(state.as_str(), "running" | "failed" | "starting") {
            continue;
        }
        if let Err(e) = adopt_world(
            d,
            id,
            &project,
            &name,
            intent.is_none() && state == "running",
        )
        .await
        {
            tracing::warn!(project, world = name, error = %e.message, "could not re-adopt world");
            d.event(world_event("adopt_failed", &project, &name).detail(first_line(&e.message)));
        }
    }
}

/// Stops every process an earlier daemon of this `BINKY_HOME` started that
/// the registry does not list — as when that daemon died between starting a
/// service and recording its pid. Such a process is found by what a crash
/// cannot lose: it runs in a recorded daemon session (every process a daemon
/// starts shares its session) and carries this `BINKY_HOME` with
/// `BINKY_WORLD` (or `BINKY_CADDY`) in its environment. Processes of
/// recorded groups are left to adoption; nothing else is ever signalled.
async fn stop_unknown(d: &Arc<Daemon>) {
    use crate::platform;
    let ours = platform::session_id();
    let sessions: Vec<u32> = d
        .registry()
        .sessions()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| *s != ours)
        .collect();
    if sessions.is_empty() {
        return;
    }
    let listed: std::collections::HashSet<u32> = d
        .registry()
        .recorded_processes()
        .unwrap_or_default()
        .into_iter()
        .filter(|(pid, start)| platform::process_start_time(*pid) == Some(*start))
        .map(|(pid, _)| pid)
        .collect();
    let home = d.paths.home().display().to_string();
    let procs = platform::all_processes();
    for sid in &sessions {
        if !procs.iter().any(|p| p.session == *sid && !p.is_zombie()) {
            let _ = d.registry().forget_session(*sid);
        }
    }
    let mut set = tokio::task::JoinSet::new();
    for p in procs
        .iter()
        .filter(|p| sessions.contains(&p.session) && !p.is_zombie() && !listed.contains(&p.pgrp))
    {
        let Some(env) = platform::process_env(p.pid) else {
            continue;
        };
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        if get(crate::paths::HOME_ENV).as_deref() != Some(home.as_str()) {
            continue;
        }
        let world = get("BINKY_WORLD");
        if world.is_none() && get("BINKY_CADDY").is_none() {
            continue;
        }
        let service = get("BINKY_SERVICE");
        let what = format!(
            "pid {} ({})",
            p.pid,
            match (&world, &service) {
                (Some(w), Some(s)) => format!("world {w}, service {s}"),
                (Some(w), None) => format!("world {w}"),
                _ => "caddy".into(),
            }
        );
        tracing::warn!("stopping {what}: an earlier daemon started it and did not record it");
        let mut ev = LogEvent::named("orphan_stopped").detail(what);
        ev.project = get("BINKY_PROJECT");
        ev.worktree = world;
        ev.service = service;
        d.event(ev);
        let pid = p.pid;
        if p.pid == p.pgrp {
            set.spawn(async move {
                supervisor::stop_pgid(
                    pid,
                    "SIGTERM",
                    crate::config::DEFAULT_STOP_TIMEOUT,
                    platform::wait_exit(pid),
                )
                .await;
            });
        } else {
            set.spawn(async move {
                let _ = platform::signal_process(pid, Some(nix::sys::signal::Signal::SIGTERM));
                let _ = tokio::time::timeout(
                    crate::config::DEFAULT_STOP_TIMEOUT,
                    platform::wait_exit(pid),
                )
                .await;
                let _ = platform::signal_process(pid, Some(nix::sys::signal::Signal::SIGKILL));
            });
        }
    }
    while set.join_next().await.is_some() {}
}

/// Stops the process groups of `verify` commands a dead daemon left running
/// (identified by pid and start time, so a recycled pid is left alone) and
/// records those runs as interrupted.
async fn reap_interrupted_verifies(d: &Arc<Daemon>) {
    let running = d.registry().verifies_running().unwrap_or_default();
    for (world_id, pid, start) in running {
        if crate::platform::process_start_time(pid) == Some(start) {
            supervisor::stop_pgid(
                pid,
                "SIGTERM",
                crate::config::DEFAULT_STOP_TIMEOUT,
                crate::platform::wait_exit(pid),
            )
            .await;
        }
        let reg = d.registry();
        let _ = reg.set_verify_running(world_id, None);
        let _ = reg.record_verify(
            world_id,
            false,
            0,
            None,
            "interrupted by a daemon restart; run `binky verify` again",
        );
        let names: Option<(String, String)> = reg
            .conn_ref()
            .query_row(
                "SELECT p.name, w.name FROM worlds w JOIN projects p ON p.id = w.project_id WHERE w.id = ?1",
                [world_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ok();
        drop(reg);
        if let Some((project, world)) = names {
            d.event(world_event("verify_interrupted", &project, &world));
        }
    }
}

async fn adopt_world(
    d: &Arc<Daemon>,
    world_id: i64,
    project: &str,
    name: &str,
    restart_dead: bool,
) -> Result<(), ApiError> {
    let loc = locate(
        d,
        &WorldRef {
            project_dir: None,
            project: Some(project.to_owned()),
            name: name.to_owned(),
        },
    )?;
    let w = find_world(d, &loc, name)?;
    let world_root = join_subdir(Path::new(&w.path), &loc.subdir);
    let cfg = config::load(&world_root.join(config::FILE_NAME)).map_err(invalid_config)?;
    let allocated = world_ports(d, world_id)?;
    if cfg.project.https {
        let _ = ensure_https(d, project, name).await;
    }
    let facts = build_facts(d, &cfg, project, name, &w.slug, world_id, &allocated)?;
    let main_root = loc.main_root();
    let project_env = match &cfg.project.env_file {
        Some(f) => read_env_file(&world_root, &main_root, f).unwrap_or_default(),
        None => Vec::new(),
    };
    let mut plan = Plan {
        facts,
        world_root: world_root.clone(),
        project_env,
        home: d.paths.home().to_path_buf(),
        strict: true,
        slices_ready: false,
        config_note: None,
    };
    let no_env = ClientEnv::default();
    for (n, s) in &cfg.services {
        if let ServiceKind::Resource(r) = &s.kind
            && let Some(adapter) = adapter_for(&r.adapter, &no_env)
        {
            // With the daemon's environment: the caller's is gone.
            let admin = {
                let env_fn = lookup_env(&plan.project_env, &no_env);
                render_admin_url(&cfg, name, &world_root, n, r, &plan.facts, &env_fn)
                    .ok()
                    .flatten()
            };
            let slice = slice_for(
                d,
                adapter.as_ref(),
                adapter.slice_name(project, &w.slug),
                project,
                Some(&r.options),
                admin,
                &no_env,
            );
            if let Ok(address) = adapter.resolve(&slice).await {
                let f = plan.facts.get_mut(n).expect("fact per service");
                f.host = host_of(&address);
                f.url = Some(address);
            }
        }
    }
    plan.slices_ready = true;
    let recorded: HashMap<String, (Option<u32>, Option<i64>)> = {
        let reg = d.registry();
        let mut stmt = reg
            .conn_ref()
            .prepare("SELECT name, pid, start_time FROM services WHERE world_id = ?1")
            .map_err(internal)?;
        stmt.query_map([world_id], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
            .and_then(|rows| rows.collect())
            .map_err(internal)?
    };
    let log_dir = d.paths.world_logs(project, &w.slug);
    let lv = levels(&cfg);
    let mut handles = IndexMap::new();
    for level in &lv {
        for sname in level {
            let Some(p) = cfg.services[sname].process() else {
                continue;
            };
            // The shell the world was built from is gone with the old
            // daemon: a `${env.NAME}` only it had cannot be rendered now. A
            // process that runs keeps running, but is not restarted with a
            // half-rendered command; one that died is reported.
            let (spec, unrenderable) =
                match process_spec(&cfg, project, name, sname, p, &plan, &no_env, &log_dir) {
                    Ok(spec) => (spec, None),
                    Err(e) => {
                        plan.strict = false;
                        let mut spec =
                            process_spec(&cfg, project, name, sname, p, &plan, &no_env, &log_dir)?;
                        plan.strict = true;
                        spec.restart.policy = config::RestartPolicy::No;
                        (spec, Some(e))
                    }
                };
            let rec = recorder(
                d.clone(),
                world_id,
                project.to_owned(),
                name.to_owned(),
                sname.clone(),
            );
            let alive = recorded
                .get(sname)
                .and_then(|(pid, start)| match (pid, start) {
                    (Some(pid), Some(start))
                        if *pid > 1
                            && crate::platform::process_start_time(*pid) == Some(*start as u64) =>
                    {
                        Some(*pid)
                    }
                    _ => None,
                });
            let handle = match alive {
                Some(pid) => {
                    d.event({
                        let mut e =
                            world_event("adopted", project, name).detail(format!("pid {pid}"));
                        e.service = Some(sname.clone());
                        e
                    });
                    supervisor::adopt(spec, pid, rec)
                }
                None if let Some(e) = &unrenderable => {
                    let reason = format!(
                        "died while the daemon was away, and cannot be restarted: {}; run `binky up {name}` from a shell that has it",
                        e.message
                    );
                    let _ =
                        d.registry()
                            .service_state(world_id, sname, "failed", Some(&reason), false);
                    d.routes.set_state(project, name, sname, "stopped");
                    continue;
                }
                None if restart_dead && p.restart.policy != config::RestartPolicy::No => {
                    d.event({
                        let mut e = world_event("restarting", project, name)
                            .detail("its process died while the daemon was away");
                        e.service = Some(sname.clone());
                        e
                    });
                    let _ = d.registry().service_restarted(world_id, sname);
                    supervisor::spawn(spec, rec)
                }
                None => {
                    let _ = d.registry().service_state(
                        world_id,
                        sname,
                        "stopped",
                        Some("died while the daemon was away"),
                        false,
                    );
                    d.routes.set_state(project, name, sname, "stopped");
                    continue;
                }
            };
            handles.insert(sname.clone(), Arc::new(handle));
        }
    }
    d.worlds.put_runtime(
        world_id,
        Runtime {
            handles,
            levels: lv,
        },
    );
    Ok(())
}

fn host_of(address: &str) -> Option<String> {
    let rest = address.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match hostport.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => hostport.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

#[allow(clippy::too_many_arguments)]
async fn provision(
    d: &Arc<Daemon>,
    cfg: &Config,
    project: &str,
    world: &str,
    slug: &str,
    world_id: i64,
    service: &str,
    r: &config::Resource,
    plan: &Plan,
    client_env: &ClientEnv,
    progress: &ProgressTx,
) -> Result<String, ApiError> {
    let adapter =
        adapter_for(&r.adapter, client_env).ok_or_else(|| no_adapter(service, &r.adapter))?;
    // Where the branch's migrations are: a slice migrated at another key
    // catches up (see golden::migrate_key).
    let world_key = r.migrate.as_deref().map(|m| {
        golden::migrate_key(
            m,
            &r.clone_inputs,
            &plan.world_root,
            worktree::head_commit(&plan.world_root).as_deref(),
        )
    });
    let env_fn = lookup_env(&plan.project_env, client_env);
    let admin_url = render_admin_url(
        cfg,
        world,
        &plan.world_root,
        service,
        r,
        &plan.facts,
        &env_fn,
    )?;
    let slice_name = adapter.slice_name(project, slug);
    let slice = slice_for(
        d,
        adapter.as_ref(),
        slice_name.clone(),
        project,
        Some(&r.options),
        admin_url.clone(),
        client_env,
    );
    let known = d
        .registry()
        .slices_of(world_id)
        .map_err(internal)?
        .into_iter()
        .find(|s| s.service == service && s.slice == slice_name);
    // Adapter errors name the service, never the credentials.
    let named = |e| adapter_error(service, &slice, e);
    let exists = adapter.exists(&slice).await.map_err(named)?;
    let log = d
        .paths
        .world_logs(project, slug)
        .join(format!("{service}.log"));
    if let Some(k) = known.as_ref().filter(|k| k.state == "live")
        && exists
    {
        // `up` after `down`, `reload`: the slice and its data are kept,
        // nothing re-provisioned or re-seeded; its schema catches up with
        // the branch when the branch moved.
        let address = adapter.resolve(&slice).await.map_err(named)?;
        if let Some(key) = &world_key
            && k.migrated_key.as_deref() != Some(key.as_str())
        {
            let why = if k.migrated_key.is_none() {
                "it was never migrated by this binky"
            } else {
                "its branch moved since it was last migrated"
            };
            catch_up(
                d, cfg, world, service, r, plan, client_env, &address, &log, progress, why, false,
            )
            .await?;
            d.registry()
                .set_slice_migrated(adapter.name(), &slice_name, key)
                .map_err(internal)?;
        }
        return Ok(address);
    }
    // Intent first: a crash from here leaves a row `gc` can sweep.
    d.registry()
        .set_slice(
            Some(world_id),
            project,
            service,
            adapter.name(),
            &slice_name,
            "provisioning",
        )
        .map_err(internal)?;
    if exists {
        adapter.teardown(&slice).await.map_err(named)?;
    }
    let result: Result<(), ApiError> = async {
        let mut cloned = false;
        if let Some(from) = &r.clone_from
            && adapter.capabilities().clone
        {
            let tname = golden::template_name(project, from);
            let template = slice_for(
                d,
                adapter.as_ref(),
                tname.clone(),
                project,
                Some(&r.options),
                admin_url.clone(),
                client_env,
            );
            let key = golden::key(
                r.migrate.as_deref(),
                r.seed.as_deref(),
                &r.clone_inputs,
                &plan.world_root,
            );
            let marker = d.paths.golden_dir(adapter.name()).join(&tname);
            let glock = d.worlds.golden_lock(&format!("{}/{tname}", adapter.name()));
            let _g = glock.lock().await;
            // And across daemons sharing the server (other BINKY_HOMEs).
            let _server_lock = adapter.lock_template(&template).await.map_err(named)?;
            // The marker: the template's key, then the key its schema was
            // migrated at (the building world's).
            let marker_text = std::fs::read_to_string(&marker).unwrap_or_default();
            let mut marker_lines = marker_text.lines();
            let fresh = marker_lines.next().map(str::trim) == Some(key.as_str())
                && adapter.exists(&template).await.unwrap_or(false);
            let mut template_migrated = marker_lines.next().map(|l| l.trim().to_owned());
            // The template's migrate/seed output lives with the template, not
            // in the log of the world that happened to build it (gone with
            // that world); every clone's log points at it.
            let template_log = PathBuf::from(format!("{}.log", marker.display()));
            if !fresh {
                let _ = std::fs::remove_file(&marker);
                adapter.teardown(&template).await.map_err(named)?;
                let _ = std::fs::remove_file(&template_log);
                if let Ok(mut f) = supervisor::logs::open_append(&template_log) {
                    use std::io::Write;
                    let _ = writeln!(
                        f,
                        "binky: building template {tname} (key {key}) for world {world}"
                    );
                }
                let built = provision_and_seed(
                    adapter.as_ref(),
                    &template,
                    cfg,
                    world,
                    service,
                    r,
                    plan,
                    client_env,
                    &template_log,
                    "golden",
                )
                .await;
                if let Err(e) = built {
                    // Nothing half-made: a template that failed its migrate
                    // or seed is dropped, so the next `up` builds it afresh.
                    let _ = adapter.teardown(&template).await;
                    return Err(e);
                }
                fault_point("golden:built");
                if let Some(dir) = marker.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                template_migrated = world_key.clone();
                std::fs::write(
                    &marker,
                    format!("{key}\n{}\n", template_migrated.as_deref().unwrap_or("")),
                )
                .map_err(internal)?;
                d.event(world_event("golden_built", project, world).detail(tname.clone()));
            }
            match adapter.clone_slice(&template, &slice).await {
                Ok(()) => {
                    cloned = true;
                    if let Ok(mut f) = supervisor::logs::open_append(&log) {
                        use std::io::Write;
                        let _ = writeln!(
                            f,
                            "binky: cloned from template {tname}; its migrate and seed output is in {}",
                            template_log.display()
                        );
                    }
                    // A template built from another commit may lack this
                    // branch's migrations: run them on the clone.
                    if let Some(key) = &world_key
                        && template_migrated.as_deref() != Some(key.as_str())
                    {
                        let address = adapter.resolve(&slice).await.map_err(named)?;
                        catch_up(
                            d,
                            cfg,
                            world,
                            service,
                            r,
                            plan,
                            client_env,
                            &address,
                            &log,
                            progress,
                            "its golden template was migrated at another commit",
                            true,
                        )
                        .await?;
                    }
                }
                Err(e) => {
                    let e = e.redacted(&slice);
                    tracing::warn!(project, world, service, reason = %e.message, "clone_fallback");
                    if let Ok(mut f) = supervisor::logs::open_append(&log) {
                        use std::io::Write;
                        let _ = writeln!(
                            f,
                            "binky: clone_fallback: {}; building this world by provision + migrate + seed",
                            e.message
                        );
                    }
                    let mut ev =
                        world_event("clone_fallback", project, world).detail(e.message.clone());
                    ev.service = Some(service.to_owned());
                    ev.adapter = Some(adapter.name().to_owned());
                    d.event(ev);
                    let _ = adapter.teardown(&slice).await;
                }
            }
        }
        if !cloned {
            provision_and_seed(
                adapter.as_ref(),
                &slice,
                cfg,
                world,
                service,
                r,
                plan,
                client_env,
                &log,
                "slice",
            )
            .await?;
        }
        fault_point("slice:ready");
        Ok(())
    }
    .await;
    if let Err(e) = result {
        // Leave nothing half-made: drop the slice and its record.
        let _ = adapter.teardown(&slice).await;
        let _ = d.registry().delete_slice(adapter.name(), &slice_name);
        return Err(e);
    }
    d.registry()
        .set_slice(
            Some(world_id),
            project,
            service,
            adapter.name(),
            &slice_name,
            "live",
        )
        .map_err(internal)?;
    if let Some(key) = &world_key {
        d.registry()
            .set_slice_migrated(adapter.name(), &slice_name, key)
            .map_err(internal)?;
    }
    let mut ev = world_event("provisioned", project, world);
    ev.service = Some(service.to_owned());
    ev.adapter = Some(adapter.name().to_owned());
    d.event(ev);
    adapter
        .resolve(&slice)
        .await
        .map_err(|e| adapter_error(service, &slice, e))
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
    let is_set =
        |name: &str| env.0.iter().any(|(k, _)| k == name) || std::env::var_os(name).is_some();
    let Ok(report) = config::check_file_in_env(&path, &is_set) else {
        return Ok(());
    };
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

/// For `up` of a world that is already running (which changes nothing): a
/// note per slice whose branch moved since its last `migrate`, saying that
/// `reload` runs it — a running app is not migrated under it unasked.
fn moved_migrations(d: &Daemon, loc: &Located, w: &WorldRow) -> Vec<String> {
    let root = join_subdir(Path::new(&w.path), &loc.subdir);
    let Ok(cfg) = config::load(&root.join(config::FILE_NAME)) else {
        return Vec::new();
    };
    let slices = d.registry().slices_of(w.id).unwrap_or_default();
    let commit = worktree::head_commit(&root);
    let mut notes = Vec::new();
    for (n, s) in &cfg.services {
        let Some(m) = s
            .resource()
            .and_then(|r| r.migrate.as_deref().map(|m| (r, m)))
        else {
            continue;
        };
        let key = golden::migrate_key(m.1, &m.0.clone_inputs, &root, commit.as_deref());
        if slices
            .iter()
            .any(|sl| &sl.service == n && sl.migrated_key.as_deref().is_some_and(|k| k != key))
        {
            notes.push(format!(
                "{n}: the branch moved since its last migrate; `binky reload {}` runs it",
                w.name
            ));
        }
    }
    notes
}

/// Runs only `migrate` against a slice that has data (never `seed`), so its
/// schema catches up with the world's branch; says so in `up`'s progress,
/// the resource's log and the event log. `dropped`: the slice is dropped if
/// this fails (a fresh clone), as the failure's hint says.
#[allow(clippy::too_many_arguments)]
async fn catch_up(
    d: &Daemon,
    cfg: &Config,
    world: &str,
    service: &str,
    r: &config::Resource,
    plan: &Plan,
    client_env: &ClientEnv,
    address: &str,
    log: &Path,
    progress: &ProgressTx,
    why: &str,
    dropped: bool,
) -> Result<(), ApiError> {
    progress.say(
        "migrate",
        Some(service),
        format!("{service}: running migrate to catch up with the branch ({why})"),
    );
    if let Ok(mut f) = supervisor::logs::open_append(log) {
        use std::io::Write;
        let _ = writeln!(
            f,
            "binky: running migrate to catch up with the branch ({why})"
        );
    }
    let mut ev = world_event("migrated", &cfg.project.name, world).detail(why.to_owned());
    ev.service = Some(service.to_owned());
    d.event(ev);
    run_data_commands(
        cfg, world, service, r, plan, client_env, address, log, false, dropped,
    )
    .await
}

/// Provisions `slice`, then runs `migrate` and `seed` against it.
#[allow(clippy::too_many_arguments)]
async fn provision_and_seed(
    adapter: &dyn adapters::Adapter,
    slice: &Slice,
    cfg: &Config,
    world: &str,
    service: &str,
    r: &config::Resource,
    plan: &Plan,
    client_env: &ClientEnv,
    log: &Path,
    stage: &str,
) -> Result<(), ApiError> {
    let named = |e| adapter_error(service, slice, e);
    adapter.provision(slice).await.map_err(named)?;
    fault_point(&format!("{stage}:provisioned"));
    let addr = adapter.resolve(slice).await.map_err(named)?;
    run_data_commands(
        cfg, world, service, r, plan, client_env, &addr, log, true, true,
    )
    .await
}

fn facts_for<'a>(
    cfg: &'a Config,
    world: &'a str,
    world_root: &'a Path,
    facts: &'a IndexMap<String, ServiceFacts>,
    env: &'a (dyn Fn(&str) -> Option<String> + Sync),
) -> Facts<'a> {
    let _ = world_root;
    Facts {
        project: &cfg.project.name,
        worktree_name: world,
        worktree_path: world_root.to_str().unwrap_or(""),
        services: facts,
        env,
    }
}

/// The environment every process of a world starts with: the caller's, the
/// env files, then Binky's own variables (the whole port map).
fn base_env(
    cfg: &Config,
    world: &str,
    service: &str,
    plan: &Plan,
    facts: &IndexMap<String, ServiceFacts>,
    client_env: &ClientEnv,
) -> Result<Vec<(String, String)>, ApiError> {
    let mut env: IndexMap<String, String> = if client_env.0.is_empty() {
        std::env::vars().collect()
    } else {
        client_env.0.iter().cloned().collect()
    };
    for (k, v) in &plan.project_env {
        env.insert(k.clone(), v.clone());
    }
    env.insert(
        crate::paths::HOME_ENV.into(),
        plan.home.display().to_string(),
    );
    env.insert("BINKY_PROJECT".into(), cfg.project.name.clone());
    env.insert("BINKY_WORLD".into(), world.to_owned());
    env.insert(
        "BINKY_WORKTREE".into(),
        plan.world_root.display().to_string(),
    );
    env.insert("BINKY_SERVICE".into(), service.to_owned());
    for (n, f) in &plan.facts {
        let key = env_key(n);
        if let Some(p) = f.port {
            env.insert(format!("BINKY_PORT_{key}"), p.to_string());
        }
        for (pn, p) in &f.ports {
            env.insert(format!("BINKY_PORT_{key}_{}", env_key(pn)), p.to_string());
        }
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
fn project_vars(
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

#[allow(clippy::too_many_arguments)]
async fn run_data_commands(
    cfg: &Config,
    world: &str,
    service: &str,
    r: &config::Resource,
    plan: &Plan,
    client_env: &ClientEnv,
    address: &str,
    log: &Path,
    with_seed: bool,
    dropped: bool,
) -> Result<(), ApiError> {
    let mut facts = plan.facts.clone();
    if let Some(f) = facts.get_mut(service) {
        f.url = Some(address.to_owned());
        f.host = host_of(address);
    }
    let env_fn = lookup_env(&plan.project_env, client_env);
    let fx = facts_for(cfg, world, &plan.world_root, &facts, &env_fn);
    let mut env = base_env(cfg, world, service, plan, &facts, client_env)?;
    env.push(("BINKY_SLICE_URL".into(), address.to_owned()));
    env.push((format!("{}_URL", env_key(service)), address.to_owned()));
    let seed = if with_seed { &r.seed } else { &None };
    for (step, cmd) in [("migrate", &r.migrate), ("seed", seed)] {
        let Some(cmd) = cmd else { continue };
        let rendered = render_strict(
            cmd,
            &format!("services.{service}.{step}"),
            Some(service),
            &fx,
        )?;
        supervisor::logs::mark_run(log, &format!("services.{service}.{step}"));
        let out = supervisor::logs::open_append(log).map_err(internal)?;
        let err = out.try_clone().map_err(internal)?;
        let status = crate::platform::command("/bin/sh")
            .arg("-c")
            .arg(&rendered)
            .current_dir(&plan.world_root)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .await
            .map_err(|e| ApiError::new(format!("services.{service}.{step}: cannot run: {e}")))?;
        if !status.success() {
            // The first line stands alone (status shows only it): the
            // step, how it ended and its first words, often the cause.
            let run = supervisor::logs::current_run(log);
            let first = run
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .map(|l| format!(": {}", l.chars().take(200).collect::<String>()))
                .unwrap_or_else(|| " with no output".to_owned());
            let mut msg = format!("services.{service}.{step} failed ({status}){first}");
            if !run.is_empty() {
                msg.push_str(&format!(
                    "\noutput ({} line(s), in {}):\n{}",
                    run.len(),
                    log.display(),
                    supervisor::logs::quote_head_tail(&run, FAILURE_HEAD_LINES, FAILURE_LOG_LINES)
                ));
            }
            let kept = if dropped {
                "the slice was dropped"
            } else {
                "its data is kept"
            };
            return Err(ApiError::new(msg).hint(with_config_note(
                format!("{kept}; fix the {step} command and run `binky up {world}` again"),
                plan,
            )));
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn process_spec(
    cfg: &Config,
    _project: &str,
    world: &str,
    service: &str,
    p: &config::Process,
    plan: &Plan,
    client_env: &ClientEnv,
    log_dir: &Path,
) -> Result<ServiceSpec, ApiError> {
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
        log_writer: std::env::current_exe().ok(),
    })
}

/// Records one service's supervisor events in the registry and event log.
fn recorder(
    d: Arc<Daemon>,
    world_id: i64,
    project: String,
    world: String,
    service: String,
) -> supervisor::Recorder {
    Arc::new(move |e: supervisor::Event| {
        let ev = |name: &str| {
            let mut e = world_event(name, &project, &world);
            e.service = Some(service.clone());
            e
        };
        match e {
            supervisor::Event::Started { pid, start_time } => {
                let _ = d
                    .registry()
                    .service_started(world_id, &service, pid, start_time);
            }
            supervisor::Event::State(s) => {
                d.routes.set_state(&project, &world, &service, s.label());
                let exit = match &s {
                    State::Stopped { exit } => exit.clone(),
                    State::Failed { reason } => Some(reason.clone()),
                    _ => None,
                };
                let _ = d.registry().service_state(
                    world_id,
                    &service,
                    s.label(),
                    exit.as_deref(),
                    s.pid().is_some(),
                );
                match &s {
                    State::Unhealthy { reason, .. } => {
                        d.event(ev("unhealthy").detail(reason.clone()))
                    }
                    State::Failed { reason } => d.event(ev("failed").detail(reason.clone())),
                    State::Stopped { exit: Some(x) } => d.event(ev("exited").detail(x.clone())),
                    _ => {}
                }
            }
            supervisor::Event::Restarting { exit, delay } => {
                let _ = d.registry().service_restarted(world_id, &service);
                d.event(ev("restarting").detail(format!("{exit}; restarting in {delay:?}")));
            }
            supervisor::Event::GaveUp { reason } => {
                let _ = d.registry().set_world_state(
                    world_id,
                    "failed",
                    None,
                    Some(&format!("{service}: {reason}")),
                );
                d.event(ev("gave_up").detail(reason));
            }
            supervisor::Event::WatchRestart => d.event(ev("watch_restart")),
        }
    })
}

fn outcome(
    d: &Daemon,
    project: &str,
    world_id: i64,
    noop: bool,
    notes: Vec<String>,
) -> Result<WorldOutcome, ApiError> {
    let world = world_status(d, project, world_id)?;
    Ok(WorldOutcome {
        project: project.to_owned(),
        world,
        noop,
        notes,
    })
}

fn world_status(d: &Daemon, project: &str, world_id: i64) -> Result<WorldStatus, ApiError> {
    let reg = d.registry();
    let row_name: String = reg
        .conn_ref()
        .query_row("SELECT name FROM worlds WHERE id = ?1", [world_id], |r| {
            r.get(0)
        })
        .map_err(internal)?;
    let mut report = reg.status(Some(project)).map_err(internal)?;
    drop(reg);
    fill_urls(d, &mut report);
    report
        .projects
        .into_iter()
        .flat_map(|p| p.worlds)
        .find(|w| w.name == row_name)
        .ok_or_else(|| ApiError::new("world vanished from the registry"))
}

fn find_world(d: &Daemon, loc: &Located, name: &str) -> Result<WorldRow, ApiError> {
    let reg = d.registry();
    let pid = reg.project_id(&loc.name).map_err(internal)?;
    pid.and_then(|pid| reg.find_world(pid, name).transpose())
        .transpose()
        .map_err(internal)?
        .ok_or_else(|| {
            ApiError::new(format!("no world `{name}` in project {}", loc.name))
                .hint("`binky status` lists the worlds")
        })
}

/// A world's reserved ports by `(service, name)`.
fn world_ports(d: &Daemon, world_id: i64) -> Result<IndexMap<ports::PortKey, u16>, ApiError> {
    let reg = d.registry();
    let mut stmt = reg
        .conn_ref()
        .prepare("SELECT service, name, port FROM port_reservations WHERE world_id = ?1")
        .map_err(internal)?;
    stmt.query_map([world_id], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(internal)
}

/// Stops a world's processes in reverse dependency order and returns once
/// every process of every group is gone (bounded per group by
/// [`supervisor::KILL_WAIT`] after SIGKILL); what outlived that is returned,
/// for the verb to report.
async fn stop_processes(d: &Daemon, w: &WorldRow) -> Vec<String> {
    let mut left = Vec::new();
    match d.worlds.take_runtime(w.id) {
        Some(rt) => {
            for level in rt.levels.iter().rev() {
                let mut set = tokio::task::JoinSet::new();
                for n in level {
                    if let Some(h) = rt.handles.get(n) {
                        let (h, n) = (h.clone(), n.clone());
                        set.spawn(async move { h.stop().await.map(|p| format!("{n}: {p}")) });
                    }
                }
                while let Some(r) = set.join_next().await {
                    left.extend(r.ok().flatten());
                }
            }
        }
        None => {
            // No live supervisor (the daemon restarted): stop what the
            // registry recorded, if it is still that very process.
            let rows: Vec<(String, Option<u32>, Option<i64>)> = {
                let reg = d.registry();
                let mut stmt = match reg
                    .conn_ref()
                    .prepare("SELECT name, pid, start_time FROM services WHERE world_id = ?1")
                {
                    Ok(s) => s,
                    Err(_) => return left,
                };
                stmt.query_map([w.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .and_then(|rows| rows.collect())
                    .unwrap_or_default()
            };
            // Not our children any more: stop each recorded group that is
            // still that very process, waiting on its exit through a pidfd.
            let mut set = tokio::task::JoinSet::new();
            for (n, pid, start) in rows {
                if let (Some(pid), Some(start)) = (pid, start)
                    && crate::platform::process_start_time(pid) == Some(start as u64)
                {
                    set.spawn(async move {
                        supervisor::stop_pgid(
                            pid,
                            "SIGTERM",
                            crate::config::DEFAULT_STOP_TIMEOUT,
                            crate::platform::wait_exit(pid),
                        )
                        .await
                        .map(|p| format!("{n}: {p}"))
                    });
                }
            }
            while let Some(r) = set.join_next().await {
                left.extend(r.ok().flatten());
            }
        }
    }
    let reg = d.registry();
    let _ = reg.conn_ref().execute(
        "UPDATE services SET state = 'stopped', pid = NULL, pgid = NULL, start_time = NULL WHERE world_id = ?1 AND kind = 'process'",
        [w.id],
    );
    if let Ok(project) = reg.conn_ref().query_row(
        "SELECT p.name FROM projects p JOIN worlds w ON w.project_id = p.id WHERE w.id = ?1",
        [w.id],
        |r| r.get::<_, String>(0),
    ) {
        d.routes.set_world_state(&project, &w.name, "stopped");
    }
    left
}

/// `binky down`.
pub(crate) async fn down(d: &Arc<Daemon>, wref: WorldRef) -> Result<WorldOutcome, ApiError> {
    let loc = locate(d, &wref)?;
    let lock = d.worlds.lock_for(&format!("{}/{}", loc.name, wref.name));
    let _guard = lock.lock().await;
    let w = find_world(d, &loc, &wref.name)?;
    let noop = w.state == "stopped";
    d.registry()
        .set_world_state(w.id, &w.state, Some("down"), None)
        .map_err(internal)?;
    fault_point("down:intent");
    let left = stop_processes(d, &w).await;
    d.registry()
        .set_world_state(w.id, "stopped", None, None)
        .map_err(internal)?;
    d.event(world_event("down", &loc.name, &w.name));
    outcome(d, &loc.name, w.id, noop, left)
}

/// `binky reload`: stop, then up on the same ports and data.
pub(crate) async fn reload(
    d: &Arc<Daemon>,
    req: UpRequest,
    progress: &ProgressTx,
) -> Result<WorldOutcome, ApiError> {
    let loc = locate(d, &req.world)?;
    let lock = d
        .worlds
        .lock_for(&format!("{}/{}", loc.name, req.world.name));
    let _guard = lock.lock().await;
    let w = find_world(d, &loc, &req.world.name)
        .map_err(|e| e.hint("`binky up` creates a world; `reload` restarts an existing one"))?;
    // Intent first, so a crash mid-reload is reported as such.
    d.registry()
        .set_world_state(w.id, &w.state, Some("reload"), None)
        .map_err(internal)?;
    progress.say("stop", None, format!("stopping {}", w.name));
    stop_processes(d, &w).await;
    fault_point("reload:stopped");
    d.registry()
        .set_world_state(w.id, "stopped", None, None)
        .map_err(internal)?;
    up_locked(
        d,
        &loc,
        &req.world.name,
        req.group.as_deref(),
        &req.env,
        progress,
    )
    .await
}

/// `binky remove`.
pub(crate) async fn remove(
    d: &Arc<Daemon>,
    wref: WorldRef,
    force: bool,
    client_env: ClientEnv,
) -> Result<WorldOutcome, ApiError> {
    let loc = locate(d, &wref)?;
    let lock = d.worlds.lock_for(&format!("{}/{}", loc.name, wref.name));
    let _guard = lock.lock().await;
    let w = find_world(d, &loc, &wref.name)?;
    let path = PathBuf::from(&w.path);
    let root = match &loc.config.project.worktree_root {
        Some(r) => config::resolve_against(&loc.main_root(), r),
        None => worktree::default_root(&loc.main),
    };
    // Binky deletes only a registered git worktree inside the project's
    // worktree root (git itself refuses anything else), and only log folders
    // whose names are its own: a tampered or odd registry row never makes it
    // delete elsewhere. `--force` overrides uncommitted changes, nothing else.
    let ours = path.exists() && inside(&path, &root) && worktree::is_registered(&loc.main, &path);
    let mut left_in_place = None;
    if path.exists() && !ours {
        let why = format!(
            "the worktree {} is not one binky made (outside {}, or not a registered git worktree of the project)",
            path.display(),
            root.display()
        );
        if !force {
            return Err(ApiError::new(format!("{why}; binky will not delete it")).hint(format!(
                "remove it with `git worktree remove`, or run `binky remove {} --force` to remove the world and leave the folder",
                w.name
            )));
        }
        left_in_place = Some(format!("{why}: left in place"));
    }
    if !force && ours {
        let p2 = path.clone();
        let git = user_git(&client_env)?;
        let changes = tokio::task::spawn_blocking(move || worktree::changes(&git, &p2))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        if !changes.is_empty() {
            let shown: Vec<String> = changes.iter().take(20).map(|c| format!("  {c}")).collect();
            let more = if changes.len() > 20 {
                format!("\n  … and {} more", changes.len() - 20)
            } else {
                String::new()
            };
            return Err(ApiError::new(format!(
                "the worktree {} has uncommitted or untracked changes:\n{}{more}",
                path.display(),
                shown.join("\n")
            ))
            .hint(format!(
                "commit or stash them, or run `binky remove {} --force` to discard them",
                w.name
            )));
        }
    }
    // Everything the teardown needs is rendered before anything is done,
    // with the environment the world was built with: a missing variable
    // fails here, leaving the world as it was.
    let client_env = d.worlds.env_for(w.id, &client_env);
    // The world's own config names the server (its admin_url); fall back to
    // the main checkout's when the worktree is gone.
    let world_root = join_subdir(&path, &loc.subdir);
    let cfg =
        config::load(&world_root.join(config::FILE_NAME)).unwrap_or_else(|_| loc.config.clone());
    let penv = project_env(&cfg, &world_root, &loc.main_root()).unwrap_or_default();
    let env_fn = lookup_env(&penv, &client_env);
    let mut teardowns = Vec::new();
    for s in d.registry().slices_of(w.id).map_err(internal)? {
        let Some(adapter) = adapter_for(&s.adapter, &client_env) else {
            continue;
        };
        let resource = cfg.services.get(&s.service).and_then(|x| x.resource());
        let admin_url = match resource {
            Some(r) => render_admin_url(
                &cfg,
                &w.name,
                &world_root,
                &s.service,
                r,
                &IndexMap::new(),
                &env_fn,
            )?,
            None => None,
        };
        let slice = slice_for(
            d,
            adapter.as_ref(),
            s.slice.clone(),
            &loc.name,
            resource.map(|r| &r.options),
            admin_url,
            &client_env,
        );
        teardowns.push((s, adapter, slice));
    }
    let git = user_git(&client_env)?;
    let before = world_status(d, &loc.name, w.id)?;
    d.registry()
        .set_world_state(w.id, &w.state, Some("remove"), None)
        .map_err(internal)?;
    let mut notes = stop_processes(d, &w).await;
    notes.extend(left_in_place);
    fault_point("remove:stopped");
    // Tear down slices.
    for (s, adapter, slice) in teardowns {
        {
            d.registry()
                .set_slice(
                    Some(w.id),
                    &loc.name,
                    &s.service,
                    &s.adapter,
                    &s.slice,
                    "teardown",
                )
                .map_err(internal)?;
            if let Err(e) = adapter.teardown(&slice).await {
                let message = format!(
                    "teardown of {} failed: {}",
                    s.slice,
                    e.redacted(&slice).message
                );
                if !force {
                    // Its processes are stopped: say so rather than "running".
                    let _ = d
                        .registry()
                        .set_world_state(w.id, "failed", None, Some(&message));
                    return Err(ApiError::new(message).hint(
                        "fix the cause and run `binky remove` again, or `binky remove --force` to remove the world and leave the slice to `binky gc`",
                    ));
                }
                // --force: the world goes; the slice stays recorded as
                // pending teardown, which `binky gc` sweeps.
                notes.push(format!("{message}; `binky gc` retries it"));
                let mut ev = world_event("teardown_deferred", &loc.name, &w.name)
                    .detail(first_line(&message));
                ev.service = Some(s.service.clone());
                ev.adapter = Some(s.adapter.clone());
                d.event(ev);
                continue;
            }
            d.registry()
                .delete_slice(&s.adapter, &s.slice)
                .map_err(internal)?;
        }
    }
    let main = loc.main.clone();
    let p2 = path.clone();
    let repo_lock = d.worlds.repo_lock(&loc.main);
    let _repo_guard = repo_lock.lock().await;
    fault_point("remove:torn_down");
    if ours || !path.exists() {
        // A missing folder: git drops the registration, if any.
        let removed = tokio::task::spawn_blocking(move || worktree::remove(&git, &main, &p2))
            .await
            .map_err(internal)?;
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
        let _ = std::fs::remove_dir(&root);
    }
    // The log folder is named by Binky's own slug of the world's name, never
    // by whatever the registry row holds.
    if w.slug == crate::slug::world_slug(&w.name) {
        let _ = std::fs::remove_dir_all(d.paths.world_logs(&loc.name, &w.slug));
    } else {
        tracing::warn!(
            world = w.name,
            "the registry's slug for this world is not its own; its logs are left"
        );
    }
    {
        let reg = d.registry();
        let _ = ports::release(reg.conn_ref(), w.id);
        reg.delete_world(w.id).map_err(internal)?;
    }
    d.routes.remove_world(&loc.name, &w.name);
    d.event(world_event("removed", &loc.name, &w.name));
    let mut world = before;
    world.state = "removed".into();
    Ok(WorldOutcome {
        project: loc.name.clone(),
        world,
        noop: false,
        notes,
    })
}

/// `binky env`: exposed services → addresses, and the project's `[env]`.
/// A `[env]` value templated from `${env.NAME}` is withheld (`None`) unless
/// `reveal`: it is usually a credential the caller's shell already has.
pub(crate) async fn env(
    d: &Arc<Daemon>,
    wref: WorldRef,
    client_env: ClientEnv,
    reveal: bool,
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
    Ok(WorldEnv {
        project: loc.name.clone(),
        world: w.name.clone(),
        worktree: wf.world_root.display().to_string(),
        services: exposed_of(&wf),
        vars,
    })
}

/// The project's `[env]` rendered for a world after `up` (every slice
/// made): what its processes, `migrate`, `seed` and `verify` get.
///
/// # Errors
/// A value uses an unset `${env.NAME}` or a token that cannot be rendered.
fn world_vars(wf: &WorldFacts, world: &str) -> Result<Vec<(String, String)>, ApiError> {
    let env_fn = lookup_env(&wf.project_env, &wf.env);
    let fx = facts_for(&wf.cfg, world, &wf.world_root, &wf.facts, &env_fn);
    project_vars(&wf.cfg, &fx, true, true, &|_| false)
}

/// What `binky env` hands out: each exposed service's address.
fn exposed_of(wf: &WorldFacts) -> IndexMap<String, String> {
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

/// What a verb after `up` needs to render a world's strings: its config (as
/// on its branch), its facts — ports, URLs, and the addresses of its slices —
/// and the environment it was built with.
struct WorldFacts {
    cfg: Config,
    world_root: PathBuf,
    facts: IndexMap<String, ServiceFacts>,
    project_env: Vec<(String, String)>,
    env: ClientEnv,
}

/// Gathers [`WorldFacts`] for world `w`, resolving every resource's address
/// with the environment the world was built with (see
/// [`Worlds::env_for`]).
///
/// # Errors
/// Its config is invalid, an `admin_url` uses an unset `${env.NAME}`, or an
/// adapter fails to resolve a slice.
async fn world_facts(
    d: &Arc<Daemon>,
    loc: &Located,
    w: &WorldRow,
    caller: &ClientEnv,
) -> Result<WorldFacts, ApiError> {
    let world_root = join_subdir(Path::new(&w.path), &loc.subdir);
    let cfg = config::load(&world_root.join(config::FILE_NAME)).map_err(invalid_config)?;
    let ports = world_ports(d, w.id)?;
    let env = d.worlds.env_for(w.id, caller);
    let project_env = project_env(&cfg, &world_root, &loc.main_root())?;
    let mut facts = facts_of(d, &cfg, &w.slug, &ports);
    {
        let env_fn = lookup_env(&project_env, &env);
        for (n, s) in &cfg.services {
            let Some(r) = s.resource() else { continue };
            let Some(a) = adapter_for(&r.adapter, &env) else {
                continue;
            };
            let admin = render_admin_url(&cfg, &w.name, &world_root, n, r, &facts, &env_fn)?;
            let slice = slice_for(
                d,
                a.as_ref(),
                a.slice_name(&loc.name, &w.slug),
                &loc.name,
                Some(&r.options),
                admin,
                &env,
            );
            let address = a
                .resolve(&slice)
                .await
                .map_err(|e| adapter_error(n, &slice, e))?;
            let f = facts.get_mut(n).expect("fact per service");
            f.host = host_of(&address);
            f.url = Some(address);
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
    let cfg = config::load(&world_root.join(config::FILE_NAME)).map_err(invalid_config)?;
    let svc = cfg.services.get(service).ok_or_else(|| {
        ApiError::new(format!("world `{}` has no service `{service}`", w.name)).hint(format!(
            "services: {}",
            cfg.services.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })?;
    if let Some(label) = svc.process().and_then(|p| p.url.as_deref()) {
        let port = d.registry().settings().map_err(internal)?.proxy_port;
        return Ok(crate::protocol::ServiceTarget {
            port,
            host: format!("{label}.{}.{}", w.slug, cfg.project.domain),
            via_proxy: true,
        });
    }
    let port: Option<u16> = d
        .registry()
        .conn_ref()
        .query_row(
            "SELECT port FROM port_reservations WHERE world_id = ?1 AND service = ?2 AND name = ''",
            rusqlite::params![w.id, service],
            |r| r.get(0),
        )
        .ok();
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

/// `binky verify`: runs `[agents] verify` in the world's checkout, in order,
/// through the shell, with the exposed coordinates in the environment
/// (`WEB_URL`…, as `binky env --dotenv` names them). Output streams to the
/// caller; the result is recorded against the world and its commit.
pub(crate) async fn verify(
    d: &Arc<Daemon>,
    wref: WorldRef,
    keep_going: bool,
    client_env: ClientEnv,
    progress: &ProgressTx,
) -> Result<crate::protocol::VerifyReport, ApiError> {
    use tokio::io::AsyncBufReadExt;
    let loc = locate(d, &wref)?;
    let w = find_world(d, &loc, &wref.name)?;
    let wf = world_facts(d, &loc, &w, &client_env).await?;
    let (cfg, world_root) = (&wf.cfg, &wf.world_root);
    if cfg.agents.verify.is_empty() {
        return Err(ApiError::new(format!(
            "{} has no [agents] verify commands",
            cfg.path.display()
        ))
        .hint("add e.g. verify = [\"make test\"] under [agents]"));
    }
    // Every command rendered (no `self` here) before the first runs: an
    // unset variable fails the verify, not one of its checks.
    let commands: Vec<(String, String)> = {
        let env_fn = lookup_env(&wf.project_env, &wf.env);
        let fx = facts_for(cfg, &w.name, world_root, &wf.facts, &env_fn);
        cfg.agents
            .verify
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Ok((
                    c.clone(),
                    render_strict(c, &format!("agents.verify[{i}]"), None, &fx)?,
                ))
            })
            .collect::<Result<_, ApiError>>()?
    };
    let client_env = wf.env.clone();
    let mut env: IndexMap<String, String> = if client_env.0.is_empty() {
        std::env::vars().collect()
    } else {
        client_env.0.iter().cloned().collect()
    };
    for (k, v) in &wf.project_env {
        env.insert(k.clone(), v.clone());
    }
    for (svc, value) in &exposed_of(&wf) {
        env.insert(format!("{}_URL", env_key(svc)), value.clone());
    }
    env.insert(
        crate::paths::HOME_ENV.into(),
        d.paths.home().display().to_string(),
    );
    env.insert("BINKY_PROJECT".into(), loc.name.clone());
    env.insert("BINKY_WORLD".into(), w.name.clone());
    env.insert("BINKY_WORKTREE".into(), world_root.display().to_string());
    let ports = world_ports(d, w.id)?;
    for ((svc, name), port) in ports {
        let key = if name.is_empty() {
            format!("BINKY_PORT_{}", env_key(&svc))
        } else {
            format!("BINKY_PORT_{}_{}", env_key(&svc), env_key(&name))
        };
        env.insert(key, port.to_string());
    }
    // The project's [env] last, as every process of the world gets it.
    for (k, v) in world_vars(&wf, &w.name)? {
        env.insert(k, v);
    }
    let commit = worktree::head_commit(Path::new(&w.path));
    // A result is for a commit only when nothing else was in the worktree.
    let uncommitted: Vec<String> = {
        let (git, p) = (user_git(&client_env)?, PathBuf::from(&w.path));
        tokio::task::spawn_blocking(move || worktree::changes(&git, &p))
            .await
            .map_err(internal)?
            .unwrap_or_default()
            .into_iter()
            .take(20)
            .collect()
    };
    let started = std::time::Instant::now();
    let mut checks = Vec::new();
    let mut all_ok = true;
    let mut cancelled = false;
    for (cmd, rendered) in &commands {
        if (!all_ok && !keep_going) || cancelled {
            break;
        }
        progress.say("verify", None, format!("$ {cmd}"));
        let t0 = std::time::Instant::now();
        let child = crate::platform::command("/bin/sh")
            .arg("-c")
            .arg(format!("exec 2>&1; {rendered}"))
            .current_dir(world_root)
            .env_clear()
            .envs(env.iter())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            // Its own group, recorded before it can outlive us: a daemon
            // that dies mid-verify stops the whole group on restart.
            .process_group(0)
            .kill_on_drop(true)
            .spawn();
        let (code, ok) = match child {
            Ok(mut child) => {
                if let Some(pid) = child.id() {
                    let start = crate::platform::process_start_time(pid).unwrap_or(0);
                    d.registry()
                        .set_verify_running(w.id, Some((pid, start)))
                        .map_err(internal)?;
                    fault_point("verify:running");
                }
                let run = async {
                    if let Some(out) = child.stdout.take() {
                        let mut lines = tokio::io::BufReader::new(out).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            progress.say("output", None, line);
                        }
                    }
                    child.wait().await
                };
                tokio::select! {
                    st = run => match st {
                        Ok(st) => (st.code(), st.success()),
                        Err(_) => (None, false),
                    },
                    // Cancelled by the caller: the command's whole group
                    // stops, and so does the run.
                    _ = progress.until_cancelled() => {
                        if let Some(pid) = child.id() {
                            supervisor::stop_pgid(
                                pid,
                                "SIGTERM",
                                std::time::Duration::from_secs(2),
                                crate::platform::wait_exit(pid),
                            )
                            .await;
                        }
                        let _ = child.wait().await;
                        progress.say("output", None, "cancelled".into());
                        cancelled = true;
                        (None, false)
                    }
                }
            }
            Err(e) => {
                progress.say("output", None, format!("cannot run: {e}"));
                (None, false)
            }
        };
        d.registry()
            .set_verify_running(w.id, None)
            .map_err(internal)?;
        all_ok &= ok;
        checks.push(crate::protocol::VerifyCheck {
            command: cmd.clone(),
            exit_code: code,
            passed: ok,
            duration_ms: t0.elapsed().as_millis() as u64,
        });
    }
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut detail = format!(
        "{}/{} passed",
        checks.iter().filter(|c| c.passed).count(),
        checks.len()
    );
    if !uncommitted.is_empty() {
        detail.push_str(", with uncommitted changes");
    }
    d.registry()
        .record_verify(w.id, all_ok, duration_ms, commit.as_deref(), &detail)
        .map_err(internal)?;
    d.event(
        world_event(
            if all_ok {
                "verify_passed"
            } else {
                "verify_failed"
            },
            &loc.name,
            &w.name,
        )
        .detail(detail),
    );
    Ok(crate::protocol::VerifyReport {
        passed: all_ok,
        checks,
        commit,
        uncommitted,
        duration_ms,
    })
}

/// `binky gc`: sweeps what a crash left half-made. Never touches a slice the
/// registry says is live, a world the registry knows, or a worktree with
/// changes.
pub(crate) async fn gc(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: ClientEnv,
) -> Vec<crate::protocol::SweepItem> {
    use crate::protocol::SweepItem;
    let mut out = Vec::new();
    let outcome = |r: Result<(), String>| match (dry_run, r) {
        (true, _) => "would sweep".to_owned(),
        (false, Ok(())) => "swept".to_owned(),
        (false, Err(e)) => format!("not swept: {e}"),
    };
    // 1. Slices stuck in provisioning/teardown whose world is gone.
    let orphans: Vec<(String, String, String, String, String)> = {
        let reg = d.registry();
        let Ok(mut stmt) = reg.conn_ref().prepare(
            "SELECT s.project, s.service, s.adapter, s.slice, s.state FROM slices s
             WHERE s.state <> 'live' AND (s.world_id IS NULL OR NOT EXISTS (SELECT 1 FROM worlds w WHERE w.id = s.world_id)
                   OR EXISTS (SELECT 1 FROM worlds w WHERE w.id = s.world_id AND w.intent IS NULL AND w.state <> 'starting'))",
        ) else {
            return out;
        };
        stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .and_then(|rows| rows.collect())
        .unwrap_or_default()
    };
    for (project, service, adapter_name, slice_name, state) in orphans {
        let mut r: Result<(), String> = Ok(());
        if !dry_run {
            r = match adapter_for(&adapter_name, &client_env) {
                None => Err(format!("no adapter named {adapter_name} in this build")),
                Some(adapter) => {
                    let root = d.registry().project_root(&project).ok().flatten();
                    let cfg = root
                        .and_then(|r| config::load(&Path::new(&r).join(config::FILE_NAME)).ok());
                    let resource = cfg
                        .as_ref()
                        .and_then(|c| c.services.get(&service))
                        .and_then(|s| s.resource());
                    let admin_url = match (resource, &cfg) {
                        (Some(r), Some(c)) => {
                            let penv = project_env(c, &c.root, &c.root).unwrap_or_default();
                            let env_fn = lookup_env(&penv, &client_env);
                            render_admin_url(c, "", &c.root, &service, r, &IndexMap::new(), &env_fn)
                        }
                        _ => Ok(None),
                    };
                    let admin_url = match admin_url {
                        Ok(u) => u,
                        Err(e) => {
                            out.push(SweepItem {
                                kind: "slice".into(),
                                what: format!("{adapter_name} {slice_name}"),
                                why: format!("left in state `{state}` by an interrupted operation"),
                                outcome: format!(
                                    "not swept: {}; {}",
                                    e.message,
                                    e.hint.unwrap_or_default()
                                ),
                            });
                            continue;
                        }
                    };
                    let slice = slice_for(
                        d,
                        adapter.as_ref(),
                        slice_name.clone(),
                        &project,
                        resource.map(|r| &r.options),
                        admin_url,
                        &client_env,
                    );
                    match adapter.teardown(&slice).await {
                        Ok(()) => d
                            .registry()
                            .delete_slice(&adapter_name, &slice_name)
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e.redacted(&slice).message),
                    }
                }
            };
        }
        out.push(SweepItem {
            kind: "slice".into(),
            what: format!("{adapter_name} {slice_name}"),
            why: format!("left in state `{state}` by an interrupted operation"),
            outcome: outcome(r),
        });
    }
    // 2. Worktree folders in a project's worktree root that no world owns,
    //    and git registrations whose folder is gone.
    let projects: Vec<(i64, String, String)> = {
        let reg = d.registry();
        let Ok(mut stmt) = reg
            .conn_ref()
            .prepare("SELECT id, name, root FROM projects")
        else {
            return out;
        };
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .unwrap_or_default()
    };
    for (pid, name, root) in projects {
        let Ok(cfg) = config::load(&Path::new(&root).join(config::FILE_NAME)) else {
            continue;
        };
        let Ok(loc) = worktree::locate(Path::new(&root)) else {
            continue;
        };
        let wt_root = match &cfg.project.worktree_root {
            Some(r) => config::resolve_against(Path::new(&root), r),
            None => worktree::default_root(&loc.main_workdir),
        };
        let owned: Vec<PathBuf> = {
            let reg = d.registry();
            let Ok(mut stmt) = reg
                .conn_ref()
                .prepare("SELECT path FROM worlds WHERE project_id = ?1")
            else {
                continue;
            };
            stmt.query_map([pid], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .unwrap_or_default()
                .into_iter()
                .map(PathBuf::from)
                .collect()
        };
        if let Ok(rd) = std::fs::read_dir(&wt_root) {
            for e in rd.flatten() {
                let p = e.path();
                if !p.is_dir() || owned.contains(&p) || !p.join(".git").is_file() {
                    continue;
                }
                let dirty = user_git(&client_env)
                    .ok()
                    .and_then(|g| worktree::changes(&g, &p).ok())
                    .is_none_or(|c| !c.is_empty());
                let r = if dirty {
                    Err("it has uncommitted or untracked changes; remove it by hand".to_owned())
                } else if dry_run {
                    Ok(())
                } else {
                    user_git(&client_env).map_err(|e| e.message).and_then(|g| {
                        worktree::remove(&g, &loc.main_workdir, &p).map_err(|e| e.to_string())
                    })
                };
                out.push(SweepItem {
                    kind: "worktree".into(),
                    what: p.display().to_string(),
                    why: format!("a worktree of project {name} that no world owns"),
                    outcome: if dirty {
                        format!("not swept: {}", r.err().unwrap_or_default())
                    } else {
                        outcome(r)
                    },
                });
            }
        }
        for (n, path) in worktree::stale_registrations(&loc.main_workdir) {
            let r = if dry_run {
                Ok(())
            } else {
                user_git(&client_env).map_err(|e| e.message).and_then(|g| {
                    worktree::prune_registration(&g, &loc.main_workdir, &path)
                        .map_err(|e| e.to_string())
                })
            };
            out.push(SweepItem {
                kind: "registration".into(),
                what: format!("{} ({})", n, path.display()),
                why: "a git worktree registration whose folder is gone".into(),
                outcome: outcome(r),
            });
        }
    }
    // 3. Golden markers of projects the registry does not know.
    let known: Vec<String> = d
        .registry()
        .conn_ref()
        .prepare("SELECT name FROM projects")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect())
        })
        .unwrap_or_default();
    if let Ok(adapters_dir) = std::fs::read_dir(d.paths.home().join("golden")) {
        for a in adapters_dir.flatten() {
            let Ok(markers) = std::fs::read_dir(a.path()) else {
                continue;
            };
            for m in markers.flatten() {
                let file = m.file_name().to_string_lossy().into_owned();
                let owner_known = known
                    .iter()
                    .any(|p| file.starts_with(&format!("{p}_golden_")));
                if !owner_known {
                    let r = if dry_run {
                        Ok(())
                    } else {
                        std::fs::remove_file(m.path()).map_err(|e| e.to_string())
                    };
                    out.push(SweepItem {
                        kind: "golden_marker".into(),
                        what: m.path().display().to_string(),
                        why: "a golden template marker of a project this daemon does not know"
                            .into(),
                        outcome: outcome(r),
                    });
                }
            }
        }
    }
    if !dry_run && !out.is_empty() {
        d.event(LogEvent::named("gc").detail(format!("{} item(s)", out.len())));
    }
    out
}
