//! `reset` and `remove` end only the sessions Binky opened: the world's
//! own services' sessions go when those services stop; a session someone
//! else holds on the world's database (a person's `psql` inside a
//! transaction) is waited for, then named and refused, and ended only
//! with `--force`, which says so. Against the machine's PostgreSQL.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use std::io::Write;
use std::time::Duration;

/// Sessions on database `db` whose application name is `app`.
fn sessions(db: &str, app: &str) -> String {
    psql(
        PG_ADMIN,
        &format!(
            "select count(*) from pg_stat_activity where datname = '{db}' and application_name = '{app}'"
        ),
    )
}

/// A person's `psql` on `url`, inside a transaction that inserted a row
/// and has not committed; its stdin stays open.
fn someone_in_a_transaction(url: &str, app: &str) -> Reaped {
    let mut p = std::process::Command::new("psql")
        .arg(url)
        .env("PGAPPNAME", app)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    p.stdin
        .as_mut()
        .unwrap()
        .write_all(b"BEGIN;\nINSERT INTO t VALUES (7);\n")
        .unwrap();
    Reaped(p)
}

#[test]
fn reset_and_remove_never_end_a_session_binky_did_not_open_unless_forced() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("sess{}", std::process::id() % 100_000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    // `app` holds a session of its own on the world's database, inside a
    // long query, as a busy service does: stopped, its backend runs on
    // until it next writes to the client, which is gone. Binky started it,
    // so its session goes with it and is never named as someone else's.
    let toml = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"{PG_ADMIN}\"\nmigrate = \"psql \\\"$DB_URL\\\" -qc 'create table t(x int)'\"\nseed = \"psql \\\"$DB_URL\\\" -qc 'insert into t values (42)'\"\n\
[services.app]\ncmd = \"exec psql '${{db.url}}' -c 'select pg_sleep(600)'\"\nenv = {{ PGAPPNAME = \"own-service\" }}\ndepends_on = [\"db\"]\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "w"]);
    let url = repo.ok(&home, &["env", "w"]).json()["services"]["db"]
        .as_str()
        .unwrap()
        .to_owned();
    let db = url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    assert!(
        wait_until(Duration::from_secs(20), || sessions(&db, "own-service")
            == "1"),
        "the service's own session never showed"
    );

    // Someone works in the world's database, mid-transaction.
    let mut person = someone_in_a_transaction(&url, "someone-else");
    assert!(wait_until(Duration::from_secs(10), || sessions(
        &db,
        "someone-else"
    ) == "1"));
    let out = repo.run(&home, &["reset", "w", "db"]);
    assert_ne!(
        out.code(),
        0,
        "reset ended a session it did not open: {out}"
    );
    let said = out.to_string();
    for want in ["someone-else", "pid ", "did not open", "--force"] {
        assert!(said.contains(want), "{want} not in {said}");
    }
    assert!(!said.contains("own-service"), "{said}");
    assert_eq!(sessions(&db, "own-service"), "0");
    // The session lives on, and its work commits.
    assert_eq!(sessions(&db, "someone-else"), "1");
    assert!(person.0.try_wait().unwrap().is_none(), "psql was ended");
    person
        .0
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"COMMIT;\n")
        .unwrap();
    drop(person.0.stdin.take());
    let _ = person.0.wait();
    assert_eq!(psql(&url, "select count(*) from t"), "2");

    // With --force it is ended knowingly, and the summary names it.
    let person = someone_in_a_transaction(&url, "someone-forced");
    assert!(wait_until(Duration::from_secs(10), || sessions(
        &db,
        "someone-forced"
    ) == "1"));
    let out = repo.run(&home, &["reset", "w", "db", "--force"]);
    assert_eq!(out.code(), 0, "{out}");
    let said = out.to_string();
    assert!(
        said.contains("ended 1 session(s)") && said.contains("someone-forced"),
        "{said}"
    );
    assert_eq!(sessions(&db, "someone-forced"), "0");
    // Made afresh: the seed's row alone; the world runs again, its
    // service's session back.
    assert_eq!(psql(&url, "select count(*) from t"), "1");
    assert!(wait_until(Duration::from_secs(20), || sessions(
        &db,
        "own-service"
    ) == "1"));
    drop(person);

    // `remove` likewise: refused while the session is open…
    let _person = someone_in_a_transaction(&url, "someone-removing");
    assert!(wait_until(Duration::from_secs(10), || sessions(
        &db,
        "someone-removing"
    ) == "1"));
    let out = repo.run(&home, &["remove", "w"]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.to_string().contains("someone-removing"), "{out}");
    assert_eq!(sessions(&db, "someone-removing"), "1");
    // …and with --force the session is ended, and named.
    let out = repo.run(&home, &["remove", "w", "--force"]);
    assert_eq!(out.code(), 0, "{out}");
    assert!(
        out.to_string().contains("someone-removing"),
        "the ended session is not named: {out}"
    );
    assert_eq!(
        psql(
            PG_ADMIN,
            &format!("select count(*) from pg_database where datname = '{db}'")
        ),
        "0"
    );
}
