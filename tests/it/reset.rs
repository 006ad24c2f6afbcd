//! `binky reset` of a running world restarts only what uses the slice it
//! remakes: SQLite slices, so it runs wherever Python does.

use crate::harness::*;
use crate::project::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// Migrate and seed for a SQLite slice: a table `t`, seeded with three rows.
const MIGRATE: &str = "import os, sqlite3\nc = sqlite3.connect(os.environ['DB_URL'].removeprefix('sqlite://'))\nc.execute('create table if not exists t(x)')\nc.commit()\n";
const SEED: &str = "import os, sqlite3\nc = sqlite3.connect(os.environ['DB_URL'].removeprefix('sqlite://'))\nc.executemany('insert into t values (?)', [(1,), (2,), (3,)])\nc.commit()\n";

/// Runs `sql` on the SQLite file behind `url`, returning the first column
/// of the first row (empty when the statement returns none).
fn sqlite(url: &str, sql: &str) -> String {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nr = c.execute(sys.argv[2]).fetchone()\nc.commit()\nprint('' if r is None else r[0])",
        ])
        .arg(url.strip_prefix("sqlite://").unwrap_or(url))
        .arg(sql)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Each service's (pid, port) as `status` shows them.
fn services(repo: &Repo, home: &Home, world: &str) -> BTreeMap<String, (Option<u64>, Value)> {
    repo.worlds(home)[world]["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                (s["pid"].as_u64(), s["port"].clone()),
            )
        })
        .collect()
}

#[test]
fn reset_restarts_only_the_services_that_use_the_slice() {
    let home = Home::new();
    let marker = format!("RESETUSE{}", std::process::id());
    let sleep =
        |tag: &str| format!("exec python3 -c 'import time; time.sleep(600)  # {marker} {tag}'");
    // api answers on its port: its health probe is what says it is up.
    // Python keeps an unknown -X option in its argv, so the marker shows in
    // /proc after `exec` (a shell comment would not).
    let api =
        format!("exec python3 -X {marker}=api -m http.server ${{self.port}} --bind 127.0.0.1");
    // api depends on db, web on api; report names db's URL without
    // depending on it; worker depends on docs, which uses no slice.
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nmigrate = \"python3 migrate.py\"\nseed = \"python3 seed.py\"\n\
[services.api]\ncmd = \"{}\"\nurl = \"api\"\ndepends_on = [\"db\"]\nhealth = {{ tcp = \"localhost:${{self.port}}\" }}\n\
[services.web]\ncmd = \"{}\"\ndepends_on = [\"api\"]\n\
[services.report]\ncmd = \"echo ${{db.url}} >/dev/null; {}\"\n\
[services.worker]\ncmd = \"{}\"\ndepends_on = [\"docs\"]\n\
[services.docs]\ncmd = \"{}\"\n",
        project_header("resetuse", 4),
        api,
        sleep("web"),
        sleep("report"),
        sleep("worker"),
        sleep("docs"),
    );
    let repo = Repo::with("", &toml, &[("migrate.py", MIGRATE), ("seed.py", SEED)]);
    repo.ok(&home, &["up", "w"]);
    let env = repo.ok(&home, &["env", "w"]).json();
    let db = env["services"]["db"].as_str().unwrap().to_owned();
    // The world's data goes wrong.
    sqlite(&db, "delete from t");
    let before = services(&repo, &home, "w");
    let out = repo.ok(&home, &["reset", "w", "db"]);
    assert!(
        out.stderr()
            .contains("stopping api, report, web (using db)")
            || out
                .stdout()
                .contains("stopping api, report, web (using db)"),
        "{out}"
    );
    let after = services(&repo, &home, "w");
    // The users of db restarted, on the same ports; the rest ran on.
    for s in ["api", "web", "report"] {
        let (b, a) = (&before[s], &after[s]);
        assert!(b.0.is_some() && a.0.is_some(), "{s}: {before:?} {after:?}");
        assert_ne!(b.0, a.0, "{s} should have restarted");
        assert_eq!(b.1, a.1, "{s} kept its port");
    }
    for s in ["worker", "docs"] {
        assert_eq!(before[s].0, after[s].0, "{s} should have run on");
        assert!(alive(before[s].0.unwrap() as u32), "{s}");
    }
    // db seeded afresh.
    assert_eq!(sqlite(&db, "select count(*) from t"), "3");
    assert_eq!(repo.worlds(&home)["w"]["state"], "running");
    // Nothing of the world runs twice.
    assert_eq!(pids_with(&marker).len(), 5, "{:?}", pids_with(&marker));
    // The world's events: one reset, the users of db started again, and
    // no `down` of the world.
    let started: Vec<String> = home
        .events()
        .into_iter()
        .filter(|e| e["event"] == "started")
        .map(|e| e["service"].as_str().unwrap_or("").to_owned())
        .collect();
    for s in ["api", "web", "report"] {
        assert_eq!(started.iter().filter(|n| *n == s).count(), 2, "{started:?}");
    }
    for s in ["worker", "docs"] {
        assert_eq!(started.iter().filter(|n| *n == s).count(), 1, "{started:?}");
    }

    // A stopped world is brought up whole, its slice made afresh.
    sqlite(&db, "delete from t");
    repo.ok(&home, &["down", "w"]);
    repo.ok(&home, &["reset", "w", "db"]);
    assert_eq!(repo.worlds(&home)["w"]["state"], "running");
    assert_eq!(sqlite(&db, "select count(*) from t"), "3");
    assert_eq!(pids_with(&marker).len(), 5, "{:?}", pids_with(&marker));
    repo.ok(&home, &["remove", "w"]);
    assert!(
        wait_until(std::time::Duration::from_secs(10), || pids_with(&marker)
            .is_empty()),
        "{:?}",
        pids_with(&marker)
    );
}
