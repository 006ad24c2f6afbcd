//! A real framework nobody here wrote, driven through Binky: Django on the
//! real PostgreSQL. Three worlds from one golden template; a migration on
//! one branch reaches that world's database (on `up` of a new world and on
//! `reload` of an existing one) and no other; `manage.py test` passes under
//! `binky verify` with `DATABASE_URL` from `[env]`; the proxy answers through
//! Django's autoreload.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// The Django project in tests/fixtures/django, file by file.
const DJANGO: &[(&str, &str)] = &[
    ("manage.py", include_str!("../fixtures/django/manage.py")),
    ("shop/__init__.py", ""),
    (
        "shop/settings.py",
        include_str!("../fixtures/django/shop/settings.py"),
    ),
    (
        "shop/urls.py",
        include_str!("../fixtures/django/shop/urls.py"),
    ),
    ("items/__init__.py", ""),
    ("items/migrations/__init__.py", ""),
    (
        "items/migrations/0001_initial.py",
        include_str!("../fixtures/django/items/migrations/0001_initial.py"),
    ),
    (
        "items/models.py",
        include_str!("../fixtures/django/items/models.py"),
    ),
    (
        "items/tests.py",
        include_str!("../fixtures/django/items/tests.py"),
    ),
];

const MIGRATION_0002: &str = include_str!("../fixtures/django/0002_item_color.py");
const MODELS_WITH_COLOR: &str = "from django.db import models\n\n\nclass Item(models.Model):\n    name = models.CharField(max_length=100)\n    color = models.CharField(max_length=20, default=\"red\")\n";

fn django_installed() -> bool {
    python_has("django, psycopg")
}

/// Adds migration 0002 (a `color` column) in the checkout at `dir` and
/// commits it there.
fn commit_color_migration(dir: &Path) {
    std::fs::write(
        dir.join("items/migrations/0002_item_color.py"),
        MIGRATION_0002,
    )
    .unwrap();
    std::fs::write(dir.join("items/models.py"), MODELS_WITH_COLOR).unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "items: color"]);
}

/// GET through the proxy with a fresh connection: (status, body).
fn get(port: u16, host: &str, path: &str) -> (u16, String) {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(c, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut raw = String::new();
    let _ = c.read_to_string(&mut raw);
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// The columns of `items_item` and the item names a world's page shows.
fn items_page(port: u16, host: &str) -> serde_json::Value {
    let (status, body) = get(port, host, "/items");
    assert_eq!(status, 200, "{host}/items: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn has_color(page: &serde_json::Value) -> bool {
    page["columns"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "color")
}

#[test]
fn django_migrations_reach_their_world_verify_runs_its_tests_and_autoreload_rides_through() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    if !django_installed() {
        skip("Django or psycopg is not installed (pip install django psycopg[binary])");
        return;
    }
    let home = Home::new();
    let project = format!("dj{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    // No clone_inputs, as the project this was found with had: the key is
    // the worktree's commit.
    let toml = format!(
        r#"{header}
[env]
DATABASE_URL = "${{db.url}}"

[services.db]
adapter = "postgres"
admin_url = "${{env.TEST_PG_ADMIN}}"
migrate = "python3 manage.py migrate --noinput"
# `manage.py test` makes its own test database as the world's role.
options = {{ createdb = true }}
seed = "python3 manage.py shell -c \"from items.models import Item; Item.objects.create(name='seeded')\""
clone_from = "golden"

[services.web]
cmd = "exec python3 manage.py runserver 127.0.0.1:${{self.port}}"
url = "web"
depends_on = ["db"]
health = {{ http = "/healthz", timeout = "60s", interval = "100ms" }}

[agents]
verify = ["python3 manage.py test items --noinput"]
"#,
        header = project_header(&project, 8)
    );
    let repo = Repo::with("", &toml, DJANGO);
    let binky = |args: &[&str]| {
        Out(repo
            .cmd(&home, args)
            .env("TEST_PG_ADMIN", PG_ADMIN)
            .output()
            .unwrap())
    };
    let ok = |args: &[&str]| {
        let out = binky(args);
        assert_eq!(out.code(), 0, "binky {args:?}:\n{out}");
        out
    };
    // Branch `colors` has a migration main has not.
    git(&repo.main, &["checkout", "-qb", "colors"]);
    commit_color_migration(&repo.main);
    git(&repo.main, &["checkout", "-q", "main"]);

    ok(&["up", "alpha"]);
    ok(&["up", "beta"]);
    let up = ok(&["up", "colors"]);
    assert!(
        up.stderr().contains("running migrate to catch up")
            || up.stdout().contains("running migrate to catch up"),
        "up says why migrate ran again:\n{up}"
    );
    let port = home.ok(&["config", "--json"]).json()["proxy_port"]
        .as_u64()
        .unwrap() as u16;
    let host = |w: &str| format!("web.{w}.{project}.localhost");
    // A new world of the branch has its migration; the others do not, and
    // every one has the golden template's seeded row.
    let colors = items_page(port, &host("colors"));
    assert!(has_color(&colors), "{colors}");
    for w in ["alpha", "beta"] {
        let page = items_page(port, &host(w));
        assert!(!has_color(&page), "{w}: {page}");
        assert_eq!(page["names"], serde_json::json!(["seeded"]), "{w}");
    }
    assert_eq!(colors["names"], serde_json::json!(["seeded"]));

    // A migration committed in an existing world's worktree reaches its own
    // database on reload; its data is kept and not seeded again.
    let env = ok(&["env", "alpha"]).json();
    let alpha_db = env["services"]["db"].as_str().unwrap().to_owned();
    assert_eq!(
        env["env"]["DATABASE_URL"], env["services"]["db"],
        "[env] printed: {env}"
    );
    psql(&alpha_db, "insert into items_item(name) values ('mine')");
    let alpha_tree = std::path::PathBuf::from(
        ok(&["env", "alpha", "--dotenv"])
            .stdout()
            .lines()
            .find_map(|l| l.strip_prefix("BINKY_WORKTREE="))
            .unwrap()
            .trim_matches('\'')
            .to_owned(),
    );
    commit_color_migration(&alpha_tree);
    // `up` of the running world changes nothing, and says what would.
    let up = ok(&["up", "alpha"]);
    assert!(
        format!("{}{}", up.stdout(), up.stderr()).contains("binky reload alpha"),
        "{up}"
    );
    assert!(!has_color(&items_page(port, &host("alpha"))));
    let reload = ok(&["reload", "alpha"]);
    let text = format!("{}{}", reload.stdout(), reload.stderr());
    assert!(text.contains("catch up"), "{reload}");
    let alpha = items_page(port, &host("alpha"));
    assert!(has_color(&alpha), "{alpha}");
    assert_eq!(alpha["names"], serde_json::json!(["seeded", "mine"]));
    assert!(!has_color(&items_page(port, &host("beta"))));
    // Nothing moved: a second reload migrates nothing.
    let again = ok(&["reload", "alpha"]);
    assert!(
        !format!("{}{}", again.stdout(), again.stderr()).contains("catch up"),
        "{again}"
    );

    // `manage.py test` needs DATABASE_URL, which only [env] gives it.
    let verify = ok(&["verify", "alpha"]);
    let text = format!("{}{}", verify.stdout(), verify.stderr());
    assert!(text.contains("OK"), "{verify}");

    // `--export` gives a child of the shell the same variable.
    let script = format!(
        "eval \"$('{}' env alpha --export)\" && python3 -c 'import os; print(os.environ[\"DATABASE_URL\"])'",
        binky_exe()
    );
    let child = Out(std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&repo.project)
        .env("BINKY_HOME", home.path())
        .env("TEST_PG_ADMIN", PG_ADMIN)
        .output()
        .unwrap());
    assert_eq!(child.stdout().trim(), alpha_db, "{child}");

    // Autoreload: Django's runner restarts its server when a file changes,
    // and the port refuses for a moment. Requests meanwhile wait for it.
    let beta_tree = alpha_tree.parent().unwrap().join("beta");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hammer = {
        let (stop, h, n) = (stop.clone(), host("beta"), answered.clone());
        std::thread::spawn(move || {
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                statuses.push(get(port, &h, "/healthz").0);
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
            statuses
        })
    };
    // Until `n` more requests have been answered (not a fixed time).
    let more = |n: usize| {
        let now = answered.load(std::sync::atomic::Ordering::Relaxed);
        assert!(wait_until(Duration::from_secs(30), || answered
            .load(std::sync::atomic::Ordering::Relaxed)
            >= now + n));
    };
    more(10);
    let urls = beta_tree.join("shop/urls.py");
    let mut text = std::fs::read_to_string(&urls).unwrap();
    text.push_str("\n# touched\n");
    std::fs::write(&urls, text).unwrap();
    let reloaded = wait_until(Duration::from_secs(20), || {
        let logs = ok(&["logs", "beta", "web"]);
        logs.stdout().contains("changed, reloading")
    });
    assert!(reloaded, "Django's autoreload never restarted the server");
    // Past the restart, until the new server answers.
    assert!(wait_until(Duration::from_secs(20), || get(
        port,
        &host("beta"),
        "/healthz"
    )
    .0 == 200));
    more(10);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // `more` waited for 10 answers before the touch and 10 after the
    // restart: every one of them must be a 200.
    let statuses = hammer.join().unwrap();
    let bad: Vec<_> = statuses.iter().filter(|s| **s != 200).collect();
    assert!(
        bad.is_empty(),
        "answers during the autoreload: {statuses:?}"
    );

    for w in ["alpha", "beta", "colors"] {
        ok(&["remove", w, "--force"]);
    }
}
