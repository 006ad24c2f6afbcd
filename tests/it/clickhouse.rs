//! The `clickhouse` adapter against the ClickHouse server on
//! 127.0.0.1:8123 (Debian's `clickhouse-server`, which `.ci/run` installs
//! and starts), spoken to over its HTTP interface, as apps do.

use crate::harness::*;
use crate::project::*;
use std::time::Duration;

const SERVER: &str = "http://127.0.0.1:8123";

fn clickhouse_up() -> bool {
    std::net::TcpStream::connect(("127.0.0.1", 8123)).is_ok()
}

/// Runs `sql` at `url` (a world's address, or the server) over HTTP, as an
/// app would; `(status, body)`.
fn sql(url: &str, sql: &str) -> (u16, String) {
    let script = r#"
import sys, urllib.request, urllib.parse, base64
url, sql = sys.argv[1], sys.argv[2]
u = urllib.parse.urlsplit(url)
plain = urllib.parse.urlunsplit((u.scheme, u.hostname + (":%d" % u.port if u.port else ""), u.path or "/", u.query, ""))
req = urllib.request.Request(plain, data=sql.encode(), method="POST")
if u.username is not None:
    cred = "%s:%s" % (urllib.parse.unquote(u.username), urllib.parse.unquote(u.password or ""))
    req.add_header("Authorization", "Basic " + base64.b64encode(cred.encode()).decode())
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status); print(r.read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode(), end="")
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, url, sql])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, body) = text.split_once('\n').unwrap_or((&text, ""));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn databases() -> Vec<String> {
    let (code, body) = sql(SERVER, "SELECT name FROM system.databases");
    assert_eq!(code, 200, "{body}");
    body.lines().map(str::to_owned).collect()
}

/// Drops this test's databases however it ends.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !clickhouse_up() {
            return;
        }
        for db in databases() {
            if db.starts_with(&format!("{}_", self.0)) {
                sql(SERVER, &format!("DROP DATABASE IF EXISTS `{db}`"));
            }
        }
    }
}

fn need_server() -> bool {
    if clickhouse_up() {
        return true;
    }
    skip("no ClickHouse HTTP interface on 127.0.0.1:8123");
    false
}

#[test]
fn clickhouse_databases_isolate_worlds_and_teardown_drops_only_theirs() {
    if !need_server() {
        return;
    }
    let p = format!("ch{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.olap]\nadapter = \"clickhouse\"\nadmin_url = \"http://default@127.0.0.1:8123\"\n[services.app]\ncmd = \"echo DB=$DB > app.txt; exec sleep 600\"\nenv = {{ DB = \"${{olap.database}}\" }}\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    // A database whose name merely starts like a world's is not that world's.
    let sibling = format!("{p}_feat-a-2");
    assert_eq!(sql(SERVER, &format!("CREATE DATABASE `{sibling}`")).0, 200);
    let long = format!("feature/{}", "Very-Long-Branch-Name-".repeat(7));
    let worlds = ["feat-a", "Feature/UPPER_case", long.as_str()];
    let mut urls = Vec::new();
    for w in worlds {
        repo.ok(&home, &["up", w]);
        let url = repo.ok(&home, &["env", w]).json()["services"]["olap"]
            .as_str()
            .unwrap()
            .to_owned();
        let db = url.split("database=").nth(1).unwrap().to_owned();
        assert!(db.len() <= 63, "{db}");
        assert!(databases().contains(&db), "{db} not listed");
        urls.push(url);
    }
    // `${olap.database}` is the name alone.
    let app = repo.worktree_root().join("feat-a/app.txt");
    assert!(wait_until(Duration::from_secs(10), || app.exists()));
    assert_eq!(
        std::fs::read_to_string(&app).unwrap().trim(),
        format!("DB={p}_feat-a")
    );
    // The world's URL runs statements in the world's database: a table made
    // in one is not in another.
    let (code, body) = sql(&urls[0], "CREATE TABLE events (n UInt32) ENGINE = Memory");
    assert_eq!(code, 200, "{body}");
    assert_eq!(sql(&urls[0], "INSERT INTO events VALUES (1), (2)").0, 200);
    assert_eq!(sql(&urls[0], "SELECT count() FROM events").1.trim(), "2");
    let (code, body) = sql(&urls[1], "SELECT count() FROM events");
    assert_ne!(code, 200, "{body}");
    assert!(body.contains("doesn't exist"), "{body}");
    // down keeps the database; up finds it again.
    repo.ok(&home, &["down", "feat-a"]);
    repo.ok(&home, &["up", "feat-a"]);
    assert_eq!(sql(&urls[0], "SELECT count() FROM events").1.trim(), "2");
    for w in worlds {
        repo.ok(&home, &["remove", w, "--force"]);
    }
    let left = databases();
    assert!(left.contains(&sibling), "{left:?}");
    assert!(left.contains(&"default".to_owned()), "{left:?}");
    for u in &urls {
        let db = u.split("database=").nth(1).unwrap();
        assert!(!left.contains(&db.to_owned()), "{db} left behind");
    }
}

#[test]
fn clickhouse_errors_name_the_server_and_what_to_do_never_the_password() {
    if !need_server() {
        return;
    }
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let cases = [
        (
            "http://default:Hunter2Secret@127.0.0.1:8123".to_owned(),
            String::new(),
            "the credentials in admin_url are not ones the server accepts",
        ),
        (
            "http://default:Hunter2Secret@127.0.0.1:1".to_owned(),
            String::new(),
            "clickhouse at 127.0.0.1:1: POST /: cannot connect",
        ),
        (
            format!("http://default:Hunter2Secret@127.0.0.1:{silent_port}"),
            "options = { timeout = \"1s\" }\n".to_owned(),
            "no answer within 1s",
        ),
    ];
    for (url, options, says) in cases {
        let home = Home::new();
        let toml = format!(
            "{}[services.olap]\nadapter = \"clickhouse\"\nadmin_url = \"${{env.CH_URL}}\"\n{options}",
            project_header("chbad", 2)
        );
        let repo = Repo::new(&toml);
        let out = repo.run_with(&home, &["up", "a"], &[("CH_URL", &url)]);
        assert_eq!(out.code(), 1, "{out}");
        assert!(out.stderr().contains(says), "wanted {says:?}:\n{out}");
        assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
    }
    assert!(!databases().contains(&"chbad_a".to_owned()));
    drop(silent);
}

/// Issue #28: `clone_from` copies by `CREATE TABLE … CLONE AS` only where the
/// server has it (24.10+); on an older server the world is built by
/// migrate + seed and `clone_fallback` says which path ran and why.
#[test]
fn clickhouse_clone_from_says_which_path_ran_and_the_world_has_the_seed_either_way() {
    if !need_server() {
        return;
    }
    let p = format!("chg{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let post = "python3 -c \\\"import sys,urllib.request as u; u.urlopen(u.Request(sys.argv[1], data=sys.argv[2].encode()))\\\"";
    let toml = format!(
        "{}[services.olap]\nadapter = \"clickhouse\"\nmigrate = \"{post} \\\"$OLAP_URL\\\" 'CREATE TABLE hits (n UInt64) ENGINE = MergeTree ORDER BY n'\"\nseed = \"{post} \\\"$OLAP_URL\\\" 'INSERT INTO hits SELECT number FROM system.numbers LIMIT 1000'\"\nclone_from = \"golden\"\n",
        project_header(&p, 2)
    );
    let repo = Repo::new(&toml);
    let up = repo.ok(&home, &["up", "a"]);
    let url = repo.ok(&home, &["env", "a"]).json()["services"]["olap"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        sql(&url, "SELECT count() FROM hits").1.trim(),
        "1000",
        "{up}"
    );
    let version = sql(SERVER, "SELECT version()").1;
    let events = home.events();
    let fallback = events
        .iter()
        .find(|e| e["event"] == "clone_fallback")
        .map(|e| e["detail"].as_str().unwrap_or("").to_owned());
    let (major, minor) = {
        let mut v = version.trim().split('.').map(|p| p.parse::<u32>().unwrap());
        (v.next().unwrap(), v.next().unwrap())
    };
    if (major, minor) < (24, 10) {
        let why = fallback.expect("an old server falls back, and says so");
        assert!(
            why.contains(&format!("is {}", version.trim())) && why.contains("CLONE AS"),
            "{why}"
        );
    } else {
        assert!(fallback.is_none(), "{fallback:?}");
    }
    repo.ok(&home, &["remove", "a", "--force"]);
}

#[test]
fn clickhouse_gc_sweeps_a_half_made_database_and_concurrent_ups_get_one_each() {
    if !need_server() {
        return;
    }
    let p = format!("chc{}", std::process::id() % 100000);
    let _cleanup = Cleanup(p.clone());
    let home = Home::new();
    let toml = format!(
        "{}[services.olap]\nadapter = \"clickhouse\"\n",
        project_header(&p, 4)
    );
    let repo = Repo::new(&toml);
    home.ok(&["daemon", "start"]);
    up_at_once(&repo, &home, &["one", "two"], &[]);
    up_then_crash_removing(&repo, &home, "ghost", &[]);
    let ghost = format!("{p}_ghost");
    assert!(databases().contains(&ghost));
    let out = repo.ok(&home, &["gc"]);
    assert!(out.stdout().contains("swept"), "{out}");
    let left = databases();
    assert!(!left.contains(&ghost), "{left:?}");
    for w in ["one", "two"] {
        assert!(left.contains(&format!("{p}_{w}")), "{w}: {left:?}");
        repo.ok(&home, &["remove", w, "--force"]);
    }
}
