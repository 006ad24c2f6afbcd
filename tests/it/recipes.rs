//! The book's recipes (docs/src/recipes), run as written: each page's
//! `binky.toml` is the one in examples/recipes/<name>, every one passes
//! `binky check`, every page's table of what a world reads is what `binky
//! env` renders for it, and the recipes whose toolchain this machine has are
//! brought up for real — Django + Celery on RabbitMQ with results in Redis
//! (two worlds, each with its own worker), and a Vite dev server in front of
//! an API (each world's front end reaching its own API).

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use crate::proxy::proxy_port;
use crate::rabbitmq::rabbit_up;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every recipe: its folder under examples/recipes, its page under
/// docs/src/recipes, and the project name its binky.toml carries.
const RECIPES: &[(&str, &str)] = &[
    ("django-celery", "shop"),
    ("nextjs-prisma-redis", "store"),
    ("rails-sidekiq", "depot"),
    ("vite-api", "front"),
];

const AMQP_ADMIN: &str = "amqp://guest:guest@127.0.0.1:5672/";
const REDIS_ADMIN: &str = "redis://127.0.0.1:6379/0";

/// What the recipes' `${env.…}` name, as the shell that runs binky sets them.
fn admin_env() -> [(&'static str, &'static str); 3] {
    [
        ("PG_ADMIN_URL", PG_ADMIN),
        ("AMQP_ADMIN_URL", AMQP_ADMIN),
        ("REDIS_ADMIN_URL", REDIS_ADMIN),
    ]
}

fn recipe_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/recipes")
        .join(name)
}

/// Every file of examples/recipes/<name> as (relative path, text), but
/// what a developer's checkout grows and git ignores (a virtualenv,
/// node_modules, bytecode).
fn recipe_files(name: &str) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            let file = e.file_name().to_string_lossy().into_owned();
            if [".venv", "node_modules", "__pycache__"].contains(&file.as_str()) {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let root = recipe_dir(name);
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// The recipe as a repository of its own, its binky.toml as written but
/// for the project's name (`project`: slices on the shared servers are
/// named after it) and a private port range.
fn recipe_repo(name: &str, project: &str, ports: u16) -> Repo {
    let files = recipe_files(name);
    let toml = &files.iter().find(|(n, _)| n == "binky.toml").unwrap().1;
    let original = RECIPES.iter().find(|(n, _)| *n == name).unwrap().1;
    let header = format!("[project]\nname = \"{original}\"\n");
    assert!(toml.contains(&header), "{name}/binky.toml: {toml}");
    let toml = toml.replace(&header, &project_header(project, ports));
    let rest: Vec<(&str, &str)> = files
        .iter()
        .filter(|(n, _)| n != "binky.toml")
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    Repo::with("", &toml, &rest)
}

/// One HTTP/1.0 request on a fresh connection: (status, body).
fn http(port: u16, method: &str, host: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: Basic {a}\r\n"));
    write!(
        c,
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\n{auth}Content-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw);
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `binky env <world> --dotenv` as a map (values unquoted).
fn dotenv(
    repo: &Repo,
    home: &Home,
    world: &str,
    env: &[(&str, &str)],
) -> std::collections::BTreeMap<String, String> {
    let out = repo.run_with(home, &["env", world, "--dotenv"], env);
    assert_eq!(out.code(), 0, "{out}");
    out.stdout()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect()
}

/// Redis keys matching a pattern (SCAN), one a line, sorted.
const REDIS_KEYS: &str = r#"
import sys, redis
r = redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_timeout=10)
print("\n".join(sorted(k.decode() for k in r.scan_iter(match=sys.argv[1], count=1000))))
"#;

fn redis_keys(pattern: &str) -> Vec<String> {
    python(REDIS_KEYS, &[pattern])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Deletes a test's Redis keys (its project's, and its slices' markers)
/// however the test ends.
struct RedisKeys(String);

impl Drop for RedisKeys {
    fn drop(&mut self) {
        let _ = std::process::Command::new("python3")
            .arg("-c")
            .arg(
                "import sys, redis\nr = redis.Redis.from_url('redis://127.0.0.1:6379/0', socket_timeout=10)\n\
                 for p in sys.argv[1:]:\n    for k in list(r.scan_iter(match=p, count=1000)):\n        r.delete(k)\n",
            )
            .arg(format!("{}:*", self.0))
            .arg(format!("_binky:slice:{}:*", self.0))
            .output();
    }
}

/// guest:guest, as the management API takes it.
const GUEST: &str = "Z3Vlc3Q6Z3Vlc3Q=";

/// The server's vhosts, or why the management API did not list them.
fn try_vhosts() -> Result<Vec<String>, String> {
    let (status, body) = http(15672, "GET", "127.0.0.1", "/api/vhosts", Some(GUEST));
    let list: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    match (status, list.as_array()) {
        (200, Some(hosts)) => Ok(hosts
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect()),
        _ => Err(format!("GET /api/vhosts: {status} {body}")),
    }
}

fn vhosts() -> Vec<String> {
    try_vhosts().unwrap_or_else(|e| panic!("{e}"))
}

/// Connects to the broker URL in argv[1] with kombu (Celery's transport):
/// prints `ok`, or `refused` when the broker will not let its user into
/// its vhost (`NOT_ALLOWED - access to vhost … refused for user …`).
const KOMBU_CONNECT: &str = r#"
import sys
from kombu import Connection
try:
    with Connection(sys.argv[1], connect_timeout=10) as c:
        c.connect()
    print("ok")
except Exception as e:
    print("refused" if "refused for user" in str(e) else f"other: {type(e).__name__}: {e}")
"#;

/// Deletes a test's vhosts, and their users (each world's, named as its
/// vhost), however it ends.
struct Vhosts(String);

impl Drop for Vhosts {
    fn drop(&mut self) {
        let Ok(hosts) = try_vhosts() else {
            return;
        };
        for v in hosts {
            if v.starts_with(&format!("{}_", self.0)) {
                let v = v.replace('/', "%2F");
                for what in ["vhosts", "users"] {
                    let path = format!("/api/{what}/{v}");
                    http(15672, "DELETE", "127.0.0.1", &path, Some(GUEST));
                }
            }
        }
    }
}

/// A PostgreSQL admin role made for a test with `attributes` (`login
/// createdb createrole`: databases and each world's own role, nothing
/// more); dropped when the guard is (declare it before the guard that drops
/// its databases, so it outlives them).
pub(crate) struct Role(String);

impl Role {
    pub(crate) fn create(name: &str, attributes: &str) -> Role {
        let _ = std::process::Command::new("psql")
            .args([PG_ADMIN, "-qc", &format!("drop role if exists \"{name}\"")])
            .output();
        psql(PG_ADMIN, &format!("create role \"{name}\" {attributes}"));
        Role(name.to_owned())
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = std::process::Command::new("psql")
            .args([
                PG_ADMIN,
                "-qc",
                &format!("drop role if exists \"{}\"", self.0),
            ])
            .output();
    }
}

fn databases(prefix: &str) -> Vec<String> {
    psql(PG_ADMIN, "select datname from pg_database")
        .lines()
        .filter(|d| d.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// Whether the servers the recipes use answer (PostgreSQL, RabbitMQ with
/// its management API, Redis); skips, naming the first that does not.
fn servers_up() -> bool {
    let missing = if !pg_up() {
        "no PostgreSQL on 127.0.0.1:5432 (or psql missing)"
    } else if !rabbit_up() {
        "no RabbitMQ with its management API on 127.0.0.1:5672/15672"
    } else if std::net::TcpStream::connect(("127.0.0.1", 6379)).is_err() {
        "no Redis on 127.0.0.1:6379"
    } else {
        return true;
    };
    skip(missing);
    false
}

/// Each recipe's page shows the example's binky.toml itself (mdBook
/// includes the file, so the page cannot drift from what is checked and
/// run), and every one of them passes `binky check` with no finding at all
/// (with the admin URLs the page says to export set).
#[test]
fn every_recipe_page_shows_its_binky_toml_and_the_file_passes_binky_check() {
    let home = Home::new();
    for (name, _) in RECIPES {
        let toml_path = recipe_dir(name).join("binky.toml");
        let page = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/src/recipes")
            .join(format!("{name}.md"));
        let page = std::fs::read_to_string(&page).unwrap();
        let include =
            format!("```toml\n{{{{#include ../../../examples/recipes/{name}/binky.toml}}}}\n```");
        assert!(
            page.contains(&include),
            "docs/src/recipes/{name}.md does not include examples/recipes/{name}/binky.toml"
        );
        let out = Out(home
            .cmd(&["check", "--json", &toml_path.display().to_string()])
            .envs(admin_env())
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{name}: {out}");
        let report = out.json();
        assert_eq!(report["valid"], true, "{name}: {report}");
        assert_eq!(
            report["diagnostics"],
            serde_json::json!([]),
            "{name}: binky check has findings: {report}"
        );
    }
}

/// Django + Celery (docs/src/recipes/django-celery.md): two worlds, each
/// with its own web server and Celery worker, vhost, database and Redis
/// prefix. A task sent in one world runs on that world's worker, writes to
/// that world's database, and its result is read in that world only;
/// `remove` of one world leaves the other whole and working.
#[test]
fn django_celery_tasks_stay_in_their_world_and_remove_leaves_the_other_whole() {
    if !servers_up() {
        return;
    }
    if !python_has("django, psycopg, celery, redis") {
        skip(
            "python3 lacks Django, psycopg, Celery or redis \
             (pip install -r examples/recipes/django-celery/requirements.txt)",
        );
        return;
    }
    let project = format!("rcd{}", std::process::id() % 100000);
    // What an earlier run of this pid left, so its role can be made again.
    drop(Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    });
    // The admin is what the page says it needs: a role that may log in and
    // create databases, no superuser. Dropped last, after its databases.
    let _role = Role::create(&project, "login createdb createrole");
    let pg_admin = format!("postgresql://{project}@127.0.0.1:5432/postgres");
    let _databases = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let _vhosts = Vhosts(project.clone());
    let _keys = RedisKeys(project.clone());
    let home = Home::new();
    let repo = recipe_repo("django-celery", &project, 8);
    // The developer's virtualenv in the main checkout, which `copy` gives
    // every new worktree: here one over the packages python3 already has.
    let venv = std::process::Command::new("python3")
        .args([
            "-m",
            "venv",
            "--system-site-packages",
            "--without-pip",
            ".venv",
        ])
        .current_dir(&repo.project)
        .output()
        .unwrap();
    assert!(venv.status.success(), "{venv:?}");
    let env = [
        ("PG_ADMIN_URL", pg_admin.as_str()),
        ("AMQP_ADMIN_URL", AMQP_ADMIN),
        ("REDIS_ADMIN_URL", REDIS_ADMIN),
    ];
    home.ok(&["daemon", "start"]);
    let started = std::time::Instant::now();
    up_at_once(&repo, &home, &["a", "b"], &env);
    eprintln!("up of two worlds took {:.1?}", started.elapsed());

    // Each world's coordinates: its own vhost, database and prefix.
    for w in ["a", "b"] {
        let vars = dotenv(&repo, &home, w, &env);
        assert!(
            vars["CELERY_BROKER_URL"].ends_with(&format!("/{project}_{w}")),
            "{vars:?}"
        );
        assert!(
            vars["DATABASE_URL"].ends_with(&format!("/{project}_{w}")),
            "{vars:?}"
        );
        assert_eq!(vars["REDIS_PREFIX"], format!("{project}:{w}:"), "{vars:?}");
        assert!(Path::new(&vars["BINKY_WORKTREE"]).join(".venv").is_dir());
    }
    // A worker wired by mistake to b's vhost with a's own credentials is
    // turned away by the broker (Celery's own transport, kombu), so it can
    // take none of b's tasks; with a's whole URL it connects.
    let a_url = dotenv(&repo, &home, "a", &env)["CELERY_BROKER_URL"].clone();
    let wrong = format!("{}/{project}_b", a_url.rsplit_once('/').unwrap().0);
    assert_eq!(python(KOMBU_CONNECT, &[&a_url]), "ok");
    assert_eq!(python(KOMBU_CONNECT, &[&wrong]), "refused");

    let port = proxy_port(&home);
    let host = |w: &str| format!("web.{w}.{project}.localhost");
    let send = |w: &str, text: &str| {
        let (status, body) = http(port, "POST", &host(w), &format!("/tasks?text={text}"), None);
        assert_eq!(status, 202, "{w}: {body}");
        json(&body)["task"].as_str().unwrap().to_owned()
    };
    let state = |w: &str, id: &str| {
        let (status, body) = http(port, "GET", &host(w), &format!("/tasks/{id}"), None);
        assert_eq!(status, 200, "{w}: {body}");
        json(&body)
    };
    let done = |w: &str, id: &str| {
        let mut last = serde_json::Value::Null;
        let ok = wait_until(Duration::from_secs(30), || {
            last = state(w, id);
            last["state"] == "SUCCESS"
        });
        assert!(ok, "task {id} in {w} never succeeded: {last}");
        last["result"].clone()
    };
    let notes = |w: &str| {
        let (status, body) = http(port, "GET", &host(w), "/notes", None);
        assert_eq!(status, 200, "{w}: {body}");
        json(&body)
    };
    let worker_log = |w: &str| {
        let out = repo.run_with(&home, &["logs", w, "worker", "-n", "1000"], &env);
        assert_eq!(out.code(), 0, "{out}");
        out.stdout()
    };

    // A task sent in a is run by a's worker, on a's database, and its
    // result is read in a.
    let a_task = send("a", "from-a");
    let result = done("a", &a_task);
    assert_eq!(
        result,
        serde_json::json!({"world": "a", "text": "from-a", "notes": 1})
    );
    assert_eq!(notes("a")["notes"], serde_json::json!(["from-a"]));
    // b sees none of it: no result, no row, nothing in its worker's log.
    assert_eq!(state("b", &a_task)["state"], "PENDING");
    assert_eq!(notes("b")["notes"], serde_json::json!([]));
    assert!(
        wait_until(Duration::from_secs(10), || worker_log("a")
            .contains(&a_task)),
        "a's worker never logged {a_task}"
    );
    assert!(!worker_log("b").contains(&a_task));
    // `[agents] verify` runs with the world's [env] (Django imports all of
    // its settings to run `check`).
    let verify = repo.run_with(&home, &["verify", "a"], &env);
    assert_eq!(verify.code(), 0, "{verify}");
    // The result lies under a's prefix, and nowhere else on the server.
    assert_eq!(
        redis_keys(&format!("*{a_task}*")),
        [format!("{project}:a:celery-task-meta-{a_task}")]
    );

    // And the other way round.
    let b_task = send("b", "from-b");
    assert_eq!(
        done("b", &b_task),
        serde_json::json!({"world": "b", "text": "from-b", "notes": 1})
    );
    assert_eq!(state("a", &b_task)["state"], "PENDING");
    assert_eq!(
        notes("a"),
        serde_json::json!({"notes": ["from-a"], "last_task": a_task})
    );
    assert_eq!(
        notes("b"),
        serde_json::json!({"notes": ["from-b"], "last_task": b_task})
    );
    // Django's cache (KEY_PREFIX) is under the world's prefix too.
    assert_eq!(
        redis_keys(&format!("{project}:a:*last-task")),
        [format!("{project}:a::1:last-task")]
    );

    // remove a: its vhost, database and keys go; b is whole and working.
    // (No --force: the recipe's .gitignore keeps the copied .venv and
    // bytecode from making the worktree dirty.)
    let rm = repo.run_with(&home, &["remove", "a"], &env);
    assert_eq!(rm.code(), 0, "{rm}");
    let hosts = vhosts();
    assert!(!hosts.contains(&format!("{project}_a")), "{hosts:?}");
    assert!(hosts.contains(&format!("{project}_b")), "{hosts:?}");
    let dbs = databases(&format!("{project}_"));
    assert!(!dbs.contains(&format!("{project}_a")), "{dbs:?}");
    assert!(dbs.contains(&format!("{project}_b")), "{dbs:?}");
    assert_eq!(redis_keys(&format!("{project}:a:*")), Vec::<String>::new());
    assert_eq!(done("b", &b_task)["world"], "b");
    let again = send("b", "again");
    assert_eq!(
        done("b", &again),
        serde_json::json!({"world": "b", "text": "again", "notes": 2})
    );
    assert_eq!(notes("b")["notes"], serde_json::json!(["from-b", "again"]));

    let rm = repo.run_with(&home, &["remove", "b"], &env);
    assert_eq!(rm.code(), 0, "{rm}");
    assert_eq!(redis_keys(&format!("{project}:*")), Vec::<String>::new());
}

/// Vite + API (docs/src/recipes/vite-api.md): in each of two worlds, the
/// Vite dev server's proxy reaches that world's API, through Binky's proxy
/// at the front end's own URL, and the page's module is given that world's
/// API URL.
#[test]
fn a_vite_front_end_reaches_the_api_of_its_own_world() {
    let Some(vite) = cached_tool(
        "BINKY_TEST_VITE",
        "binky-npm/node_modules/.bin/vite",
        "vite",
    ) else {
        skip("vite is not installed (.ci/run installs vite@7 from npm into ~/.cache/binky-npm)");
        return;
    };
    if !std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip("node is not installed");
        return;
    }
    let home = Home::new();
    let repo = recipe_repo("vite-api", "front", 8);
    // The main checkout's node_modules after `npm install`, which `copy`
    // gives every new worktree: here the vite package the test cache holds.
    let package = std::fs::canonicalize(&vite)
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    assert!(package.join("package.json").is_file(), "{package:?}");
    let modules = repo.project.join("node_modules");
    std::fs::create_dir_all(modules.join(".bin")).unwrap();
    std::os::unix::fs::symlink(&package, modules.join("vite")).unwrap();
    std::os::unix::fs::symlink("../vite/bin/vite.js", modules.join(".bin/vite")).unwrap();

    home.ok(&["daemon", "start"]);
    up_at_once(&repo, &home, &["a", "b"], &[]);
    let port = proxy_port(&home);
    for w in ["a", "b"] {
        let web = format!("web.{w}.front.localhost");
        // The page's call, through the dev server's proxy, answered by
        // this world's API.
        let (status, body) = http(port, "GET", &web, "/api/hello", None);
        assert_eq!(status, 200, "{w}: {body}");
        assert_eq!(json(&body), serde_json::json!({"from": "api", "world": w}));
        // Vite serves the page (its client injected) and gives the module
        // this world's API URL.
        let (status, page) = http(port, "GET", &web, "/", None);
        assert_eq!(status, 200, "{w}: {page}");
        assert!(
            page.contains("/@vite/client") && page.contains("/src/main.js"),
            "{page}"
        );
        let (status, module) = http(port, "GET", &web, "/src/main.js", None);
        assert_eq!(status, 200, "{w}: {module}");
        let api_url = format!("http://api.{w}.front.localhost:{port}");
        assert!(module.contains(&format!("\"{api_url}\"")), "{module}");
        // That URL answers too, for code that calls the API directly.
        let (status, body) = http(
            port,
            "GET",
            &format!("api.{w}.front.localhost"),
            "/api/hello",
            None,
        );
        assert_eq!(status, 200, "{w}: {body}");
        assert_eq!(json(&body)["world"], w);
    }
    for w in ["a", "b"] {
        repo.ok(&home, &["remove", w]);
    }
}

/// The rows of a recipe page's "value in world `feat-a`" table: (variable,
/// token, value), backticks stripped.
fn page_table(name: &str) -> Vec<(String, String, String)> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/src/recipes")
        .join(format!("{name}.md"));
    let page = std::fs::read_to_string(&page).unwrap();
    let cell = |c: &str| c.trim().trim_matches('`').to_owned();
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in page.lines() {
        if line.starts_with("| variable | token | value in world `feat-a` |") {
            in_table = true;
        } else if in_table && line.starts_with("| `") {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            rows.push((cell(cells[0]), cell(cells[1]), cell(cells[2])));
        } else if in_table && !line.starts_with("|---") {
            in_table = false;
        }
    }
    rows
}

/// The recipe's binky.toml as a project whose processes only hold their
/// ports (`python3 -m http.server`) or wait, and whose resources are made
/// without their app's migrate or seed: the names and addresses a world
/// gets depend on neither. Each table row's token joins `[env]` as
/// `PAGE_ROW_<n>`, so `binky env` renders it.
fn table_project(name: &str, project: &str, rows: &[(String, String, String)]) -> Repo {
    let original = RECIPES.iter().find(|(n, _)| *n == name).unwrap().1;
    let text = std::fs::read_to_string(recipe_dir(name).join("binky.toml")).unwrap();
    let mut doc: toml::Table = text.parse().unwrap();
    let header = project_header(project, 8);
    let header: toml::Table = header.parse().unwrap();
    assert_eq!(doc["project"]["name"].as_str(), Some(original));
    doc.insert("project".into(), header["project"].clone());
    doc.remove("agents");
    let services = doc["services"].as_table_mut().unwrap();
    for (_, svc) in services.iter_mut() {
        let svc = svc.as_table_mut().unwrap();
        for key in ["migrate", "seed", "clone_from", "clone_inputs", "health"] {
            svc.remove(key);
        }
        let Some(cmd) = svc.get("cmd").and_then(|c| c.as_str()) else {
            continue;
        };
        let stub = if cmd.contains("${self.port}") || svc.contains_key("url") {
            "exec python3 -m http.server ${self.port} --bind 127.0.0.1"
        } else {
            "exec sleep 600"
        };
        svc.insert("cmd".into(), stub.into());
    }
    let env = doc
        .entry("env")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .unwrap();
    for (n, (_, token, _)) in rows.iter().enumerate() {
        env.insert(format!("PAGE_ROW_{n}"), token.as_str().into());
    }
    Repo::new(&toml::to_string(&doc).unwrap())
}

/// A rendered value as the page writes it: the test's project name as the
/// recipe's, the world's password as `<password>`, a port of the test's
/// private range as the same place in the default one (20000 up), and no
/// proxy port (the page assumes port 80).
fn as_the_page_writes(
    value: &str,
    project: &str,
    original: &str,
    range: (u16, u16),
    proxy: u16,
) -> String {
    let mut v = value.replace(project, original);
    if let Some((scheme, rest)) = v.split_once("://")
        && let Some((userinfo, host)) = rest.split_once('@')
        && let Some((user, _)) = userinfo.split_once(':')
    {
        v = format!("{scheme}://{user}:<password>@{host}");
    }
    v = v.replace(&format!(".localhost:{proxy}"), ".localhost");
    for p in (range.0..=range.1).rev() {
        v = v.replace(&format!(":{p}"), &format!(":{}", 20000 + (p - range.0)));
    }
    v
}

/// Every recipe page's table of what a world `feat-a` reads is what
/// `binky env` renders for such a world (a page once showed the admin's
/// user in every URL, long after each world got its own).
#[test]
fn every_recipe_pages_table_is_what_binky_env_renders() {
    if !servers_up() {
        return;
    }
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    let proxy = proxy_port(&home);
    let mut wrong = Vec::new();
    for (i, (name, original)) in RECIPES.iter().enumerate() {
        let rows = page_table(name);
        assert!(!rows.is_empty(), "{name}: the page has no table of values");
        let project = format!("rt{}{i}", std::process::id() % 100000);
        let _databases = Cleanup {
            prefix: format!("{project}_"),
            mysql: false,
        };
        let _vhosts = Vhosts(project.clone());
        let _keys = RedisKeys(project.clone());
        let repo = table_project(name, &project, &rows);
        let toml = std::fs::read_to_string(repo.project.join("binky.toml")).unwrap();
        let range: toml::Table = toml.parse().unwrap();
        let range = range["project"]["port_range"].as_array().unwrap();
        let range = (
            range[0].as_integer().unwrap() as u16,
            range[1].as_integer().unwrap() as u16,
        );
        let up = repo.run_with(&home, &["up", "feat-a"], &admin_env());
        assert_eq!(up.code(), 0, "{name}: {up}");
        let out = repo.run_with(&home, &["env", "feat-a", "--json"], &admin_env());
        assert_eq!(out.code(), 0, "{name}: {out}");
        let env = out.json()["env"].clone();
        for (n, (var, token, value)) in rows.iter().enumerate() {
            let rendered = env[format!("PAGE_ROW_{n}")].as_str().unwrap_or_default();
            let shown = as_the_page_writes(rendered, &project, original, range, proxy);
            if &shown != value {
                wrong.push(format!(
                    "{name}.md: {var} = {token} is `{shown}` in world feat-a, the page says `{value}`"
                ));
            }
            // The variable itself, where the project's [env] sets it, is
            // the same value.
            if let Some(own) = env[var.as_str()].as_str() {
                assert_eq!(own, rendered, "{name}: {var}");
            }
        }
        let rm = repo.run_with(&home, &["remove", "feat-a", "--force"], &admin_env());
        assert_eq!(rm.code(), 0, "{name}: {rm}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
