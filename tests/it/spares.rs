//! Spare clones (issue 51 §2), against the real PostgreSQL on this
//! machine: a world takes a spare by renaming it, the pool refills in the
//! background, a key change discards a spare, a spare never holds another
//! world's writes, and a daemon killed while a spare is made or taken
//! leaves nothing that `gc` does not sweep.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use serde_json::Value;
use std::time::Duration;

const ENV: [(&str, &str); 1] = [("TEST_PG_ADMIN", PG_ADMIN)];

/// A project whose `db` is a PostgreSQL slice seeded with three rows,
/// cloned from a golden template, with `migrate` as given.
fn toml(project: &str, migrate: &str) -> String {
    format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.TEST_PG_ADMIN}}\"\nmigrate = \"psql \\\"$DB_URL\\\" -v ON_ERROR_STOP=1 -qc '{migrate}'\"\nseed = \"psql \\\"$DB_URL\\\" -qc 'insert into items(n) values (1), (2), (3)'\"\nclone_from = \"golden\"\n",
        project_header(project, 2)
    )
}

fn events(home: &Home, name: &str) -> Vec<Value> {
    home.events()
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

/// The names `sql` lists that start with `prefix`.
fn named(sql: &str, prefix: &str) -> Vec<String> {
    psql(PG_ADMIN, sql)
        .lines()
        .filter(|d| d.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

fn databases(prefix: &str) -> Vec<String> {
    named("select datname from pg_database order by 1", prefix)
}

fn roles(prefix: &str) -> Vec<String> {
    named("select rolname from pg_roles order by 1", prefix)
}

fn spares_on_server(project: &str) -> Vec<String> {
    databases(&format!("{project}_spare_"))
}

/// `status --json`'s count of ready spares of `project`.
fn ready(repo: &Repo, home: &Home, project: &str) -> u64 {
    let status = repo.run_with(home, &["status", "--json"], &ENV).json();
    status["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == project)
        .and_then(|p| p["spares"]["ready"].as_u64())
        .unwrap_or(0)
}

fn db_url(repo: &Repo, home: &Home, world: &str) -> String {
    let env = repo.run_with(home, &["env", world], &ENV).json();
    env["services"]["db"].as_str().unwrap().to_owned()
}

/// Removes `worlds`, then runs `gc`: nothing of `project` is left on the
/// server (worlds, templates, spares).
fn remove_all_then_gc(repo: &Repo, home: &Home, project: &str, worlds: &[&str]) {
    for w in worlds {
        let out = repo.run_with(home, &["remove", w], &ENV);
        assert_eq!(out.code(), 0, "{out}");
    }
    gc_until_clean(repo, home, &ENV);
    assert_eq!(databases(&format!("{project}_")), Vec::<String>::new());
}

/// `gc` until it sweeps everything: a template whose spare a refill is
/// still making is "in use now; run gc again later", rightly.
fn gc_until_clean(repo: &Repo, home: &Home, env: &[(&str, &str)]) {
    let mut last = None;
    let clean = wait_until(Duration::from_secs(60), || {
        let gc = repo.run_with(home, &["gc"], env);
        let ok = gc.code() == 0;
        last = Some(gc);
        ok
    });
    assert!(clean, "{}", last.unwrap());
}

/// A fresh home and a PostgreSQL project named `<tag><pid>` (its databases
/// dropped when the returned guard goes), or `None` after a skip when no
/// PostgreSQL answers here.
fn pg_project(tag: &str) -> Option<(Home, Repo, String, Cleanup)> {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return None;
    }
    let project = format!("{tag}{}", std::process::id() % 10000);
    let cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let repo = Repo::with(
        "",
        &toml(&project, "create table if not exists items(n int)"),
        &[],
    );
    Some((Home::new(), repo, project, cleanup))
}

#[test]
fn up_takes_a_spare_the_pool_refills_and_a_key_change_discards_it() {
    let Some((home, repo, project, _cleanup)) = pg_project("sp") else {
        return;
    };
    let out = repo.run_with(&home, &["up", "a"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("cloned from"), "{out}");
    // The pool fills behind the `up`.
    assert!(
        wait_until(Duration::from_secs(30), || ready(&repo, &home, &project)
            == 1),
        "{:?}",
        home.events()
    );
    let first = spares_on_server(&project);
    assert_eq!(first.len(), 1, "{first:?}");
    // Its role is made with it, owns it, and may not log in until taken.
    assert_eq!(
        psql(
            PG_ADMIN,
            &format!(
                "select r.rolcanlogin, d.datdba = r.oid from pg_roles r, pg_database d where r.rolname = '{0}' and d.datname = '{0}'",
                first[0]
            )
        ),
        "f|t"
    );
    // a's writes are a's: made after the spare, and never in it.
    psql(
        &db_url(&repo, &home, "a"),
        "insert into items(n) values (99)",
    );

    // b takes the spare by renaming it: the three seeded rows, none of a's.
    let out = repo.run_with(&home, &["up", "b"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("took the spare"), "{out}");
    let taken = events(&home, "spare_taken");
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0]["worktree"], "b");
    let b = db_url(&repo, &home, "b");
    assert_eq!(
        psql(&b, "select string_agg(n::text, ',' order by n) from items"),
        "1,2,3"
    );
    // It is b's: its own role owns what it holds, and may write.
    assert_eq!(
        psql(
            &b,
            "select tableowner = current_user from pg_tables where tablename = 'items'"
        ),
        "t"
    );
    psql(&b, "insert into items(n) values (77)");
    assert!(
        !databases(&project).contains(&first[0]),
        "the spare was renamed"
    );
    assert_eq!(roles(&first[0]), Vec::<String>::new(), "its role too");

    // The pool refills with a fresh spare, holding neither a's write nor b's.
    assert!(wait_until(Duration::from_secs(30), || {
        spares_on_server(&project).len() == 1 && ready(&repo, &home, &project) == 1
    }));
    let second = spares_on_server(&project);
    assert_ne!(second, first);
    let spare_url = format!("{}/{}", PG_ADMIN.rsplit_once('/').unwrap().0, second[0]);
    assert_eq!(
        psql(
            &spare_url,
            "select string_agg(n::text, ',' order by n) from items"
        ),
        "1,2,3"
    );
    // `reset` takes a spare too: b's data is the template's again.
    let out = repo.run_with(&home, &["reset", "b", "--force"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("took the spare"), "{out}");
    assert_eq!(
        psql(
            &db_url(&repo, &home, "b"),
            "select string_agg(n::text, ',' order by n) from items"
        ),
        "1,2,3"
    );
    assert!(wait_until(Duration::from_secs(30), || {
        let now = spares_on_server(&project);
        now.len() == 1 && now != second && ready(&repo, &home, &project) == 1
    }));
    let second = spares_on_server(&project);

    // The migrations change on main: c clones the new template, and the
    // spare of the old key is dropped, never handed out.
    std::fs::write(
        repo.main.join("binky.toml"),
        toml(
            &project,
            "create table if not exists items(n int, tag text)",
        ),
    )
    .unwrap();
    git(&repo.main, &["commit", "-qam", "tag column"]);
    let out = repo.run_with(&home, &["up", "c"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("cloned from"), "{out}");
    assert!(!out.stderr().contains("took the spare"), "{out}");
    assert!(wait_until(Duration::from_secs(30), || {
        !events(&home, "spare_dropped").is_empty()
            && spares_on_server(&project).len() == 1
            && !spares_on_server(&project).contains(&second[0])
    }));
    let dropped = events(&home, "spare_dropped");
    assert!(
        dropped[0]["detail"].as_str().unwrap().contains(&second[0]),
        "{dropped:?}"
    );

    // The uninstall path: every world removed, then gc drops the templates
    // and their spares with them.
    remove_all_then_gc(&repo, &home, &project, &["a", "b", "c"]);
    assert_eq!(ready(&repo, &home, &project), 0);
    assert_eq!(roles(&format!("{project}_")), Vec::<String>::new());
}

#[test]
fn a_daemon_killed_while_a_spare_is_made_or_taken_leaves_nothing_after_gc() {
    let Some((home, repo, project, _cleanup)) = pg_project("sk") else {
        return;
    };
    // Killed with a spare made on the server, its row still `making`: the
    // `up` that asked for it may finish first.
    let _ = home.run(&["daemon", "stop"]);
    let started = Out(home
        .cmd(&["daemon", "start"])
        .env("BINKY_TEST_FAULT", "spare:made")
        .output()
        .unwrap());
    assert_eq!(started.code(), 0, "{started}");
    let crashed = home.daemon_pid().unwrap();
    let _ = repo.run_with(&home, &["up", "a"], &ENV);
    assert!(wait_until(Duration::from_secs(30), || !alive(crashed)));
    assert_eq!(spares_on_server(&project).len(), 1, "the spare was made");
    let gc = repo.run_with(&home, &["gc", "--json"], &ENV);
    assert_eq!(gc.code(), 0, "{gc}");
    let items = gc.json();
    assert!(
        items
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["kind"] == "spare"
                && i["result"] == "swept"
                && i["why"].as_str().unwrap().contains("making was cut short")),
        "{items}"
    );
    assert_eq!(spares_on_server(&project), Vec::<String>::new());

    // A ready spare (refilled after a new world's `up`), then a daemon
    // killed with it renamed into b's slice and handed over, its row still
    // `taking`.
    let out = repo.run_with(&home, &["up", "a2"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert!(wait_until(Duration::from_secs(30), || ready(
        &repo, &home, &project
    ) == 1));
    crash_at(&repo, &home, &["up", "b"], "spare:taken", &ENV);
    assert_eq!(spares_on_server(&project), Vec::<String>::new(), "renamed");
    let b_slice = format!("{project}_b");
    assert!(databases(&project).contains(&b_slice));
    let gc = repo.run_with(&home, &["gc", "--json"], &ENV);
    assert_eq!(gc.code(), 0, "{gc}");
    // The spare's row is forgotten: nothing of it is left on the server
    // under its name. b's half-made slice is b's, recorded `provisioning`:
    // its next `up` makes it afresh (or `remove` drops it).
    assert!(
        gc.json()
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["kind"] == "spare"
                && i["result"] == "forgotten"
                && i["why"]
                    .as_str()
                    .unwrap()
                    .contains("taking by an up was cut short")),
        "{gc}"
    );
    // b comes up whole afterwards, and everything goes with the worlds.
    let out = repo.run_with(&home, &["up", "b"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(
        psql(&db_url(&repo, &home, "b"), "select count(*) from items"),
        "3"
    );
    remove_all_then_gc(&repo, &home, &project, &["a", "a2", "b"]);
}

#[test]
fn a_mysql_spare_is_moved_table_by_table_and_gets_the_templates_views_triggers_and_routines() {
    use crate::cleanup::mysql_databases;
    use crate::templates::{
        MYSQL_ADMIN, MYSQL_SCHEMA, MYSQL_SEED, assert_a_whole_copy_of_the_schema, mysql_toml,
        mysql_up,
    };
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("spm{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    let repo = Repo::with(
        "",
        &mysql_toml(&project, "mariadb", ""),
        &[("schema.sql", MYSQL_SCHEMA), ("seed.sql", MYSQL_SEED)],
    );
    let env = [("TEST_MYSQL_ADMIN", MYSQL_ADMIN)];
    let spares = || mysql_databases(&format!("{project}_spare_"));
    let out = repo.run_with(&home, &["up", "a"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert!(wait_until(Duration::from_secs(60), || {
        let status = repo.run_with(&home, &["status", "--json"], &env).json();
        status["projects"][0]["spares"]["ready"] == 1
    }));
    let spare = spares();
    assert_eq!(spare.len(), 1, "{spare:?}");
    let out = repo.run_with(&home, &["up", "b"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("took the spare"), "{out}");
    assert!(
        !spares().contains(&spare[0]),
        "the spare is gone, its tables moved"
    );
    let url = repo.run_with(&home, &["env", "b"], &env).json()["services"]["db"]
        .as_str()
        .unwrap()
        .to_owned();
    let db = url.rsplit('/').next().unwrap().to_owned();
    // Rows, the view on b's own table, the trigger, the routines and the
    // foreign key, as a clone has them.
    assert_a_whole_copy_of_the_schema(&db);
    // The pool refills; removing the worlds and gc leaves nothing.
    assert!(wait_until(Duration::from_secs(60), || spares().len() == 1));
    for w in ["a", "b"] {
        let out = repo.run_with(&home, &["remove", w], &env);
        assert_eq!(out.code(), 0, "{out}");
    }
    gc_until_clean(&repo, &home, &env);
    assert_eq!(
        mysql_databases(&format!("{project}_")),
        Vec::<String>::new()
    );
}
