//! Isolation by permission: each world reaches its slice with credentials
//! of its own, which cannot reach another world's, and never holds the
//! admin's. Against the real servers on this machine.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use crate::templates::{mysql, mysql_up};

/// The admin URL with a password the server does not check (trust auth
/// here) but Binky must never hand a world.
const ADMIN_WITH_PASSWORD: &str = "postgresql://postgres:AdminPw-4f1c9e@127.0.0.1:5432/postgres";

/// `psql` that may fail: its exit status and stderr.
fn psql_try(url: &str, sql: &str) -> (bool, String) {
    let out = std::process::Command::new("psql")
        .args([url, "-tAc", sql])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// World `w`'s `${db.url}` as `binky env --json` gives it.
fn db_url(repo: &Repo, home: &Home, w: &str) -> (String, String) {
    let out = repo.run_with(
        home,
        &["env", w, "--json"],
        &[("TEST_PG_ADMIN", ADMIN_WITH_PASSWORD)],
    );
    assert_eq!(out.code(), 0, "{out}");
    let whole = out.stdout();
    let url = out.json()["services"]["db"].as_str().unwrap().to_owned();
    (url, whole)
}

#[test]
fn postgres_worlds_get_roles_of_their_own_that_reach_no_other_world() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("iso-pg-{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let toml = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.TEST_PG_ADMIN}}\"\nmigrate = \"psql \\\"$DB_URL\\\" -qc 'create table if not exists items(n int); create type mood as enum (); create collation coll from \\\"C\\\"; create text search configuration tsc (copy = simple)'\"\nseed = \"psql \\\"$DB_URL\\\" -qc 'insert into items values (1)'\"\nclone_from = \"golden\"\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&toml);
    let env = [("TEST_PG_ADMIN", ADMIN_WITH_PASSWORD)];
    for w in ["a", "b"] {
        let out = repo.run_with(&home, &["up", w], &env);
        assert_eq!(out.code(), 0, "{out}");
    }
    let (a, a_env) = db_url(&repo, &home, "a");
    let (b, _) = db_url(&repo, &home, "b");
    // The world's own role, never the admin's user or password.
    assert!(!a_env.contains("AdminPw-4f1c9e"), "{a_env}");
    assert!(!a_env.contains("postgres:"), "{a_env}");
    let a_db = a.rsplit('/').next().unwrap().to_owned();
    let b_db = b.rsplit('/').next().unwrap().to_owned();
    assert_eq!(psql(&a, "select current_user"), a_db);
    // Cloned from the template, the copy is owned by the world's role:
    // table, type and database.
    assert_eq!(
        psql(
            &a,
            "select tableowner from pg_tables where tablename = 'items'"
        ),
        a_db
    );
    assert_eq!(
        psql(
            &a,
            "select pg_get_userbyid(typowner) from pg_type where typname = 'mood'"
        ),
        a_db
    );
    assert_eq!(
        psql(
            PG_ADMIN,
            &format!("select pg_get_userbyid(datdba) from pg_database where datname = '{a_db}'")
        ),
        a_db
    );
    // Every kind, not only tables: a later migrate may alter them.
    for (catalog, owner) in [("pg_collation", "collowner"), ("pg_ts_config", "cfgowner")] {
        let name = if catalog == "pg_collation" {
            "collname = 'coll'"
        } else {
            "cfgname = 'tsc'"
        };
        assert_eq!(
            psql(
                &a,
                &format!("select pg_get_userbyid({owner}) from {catalog} where {name}")
            ),
            a_db,
            "{catalog}"
        );
    }
    // A's role writes its own database …
    psql(&a, "insert into items values (2); create table mine(x int)");
    // … but cannot connect to B's, let alone drop it.
    let a_at_b = format!("{}/{b_db}", a.rsplit_once('/').unwrap().0);
    let (ok, err) = psql_try(&a_at_b, "select 1");
    assert!(!ok, "A's role connected to B's database");
    assert!(err.contains("permission denied"), "{err}");
    let (ok, err) = psql_try(&a, &format!("drop database \"{b_db}\""));
    assert!(!ok && err.contains("must be owner"), "{err}");
    let (ok, _) = psql_try(&a, "create role intruder");
    assert!(!ok, "a world's role may create roles");
    assert_eq!(psql(&b, "select count(*) from items"), "1");

    // gc: a role Binky made whose database is gone is swept; a role of the
    // same shape that Binky did not make is left.
    let orphan = format!("{project}_orphan-1");
    let foreign = format!("{project}_mine-2");
    psql(
        PG_ADMIN,
        &format!(
            "create role \"{orphan}\" login; comment on role \"{orphan}\" is 'binky: the login role of a world''s database {orphan}'; create role \"{foreign}\" login"
        ),
    );
    let dry = repo.run_with(&home, &["gc", "--dry-run", "--json"], &env);
    assert_eq!(dry.code(), 0, "{dry}");
    assert!(dry.stdout().contains(&orphan), "{dry}");
    assert!(!dry.stdout().contains(&foreign), "{dry}");
    let gc = repo.run_with(&home, &["gc"], &env);
    assert_eq!(gc.code(), 0, "{gc}");
    let roles = |name: &str| {
        psql(
            PG_ADMIN,
            &format!("select count(*) from pg_roles where rolname = '{name}'"),
        )
    };
    assert_eq!(roles(&orphan), "0", "{gc}");
    assert_eq!(roles(&foreign), "1", "{gc}");
    assert_eq!(roles(&a_db), "1", "gc dropped a live world's role");

    // remove drops the world's role with its database; B stays whole.
    let out = repo.run_with(&home, &["remove", "a", "--force"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(roles(&a_db), "0");
    assert_eq!(psql(&b, "select count(*) from items"), "1");
}

#[test]
fn a_postgres_world_made_without_a_role_gets_one_on_reload_with_its_data() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("iso-up-{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let base = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"{PG_ADMIN}\"\nmigrate = \"psql \\\"$DB_URL\\\" -qc 'create table if not exists items(n serial primary key, v text)'\"\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&format!("{base}options = {{ acl = false }}\n"));
    repo.ok(&home, &["up", "a"]);
    let (before, _) = db_url(&repo, &home, "a");
    assert!(before.starts_with("postgresql://postgres@"), "{before}");
    psql(&before, "insert into items(v) values ('kept')");
    let db = before.rsplit('/').next().unwrap().to_owned();

    // The world reads its own worktree's binky.toml.
    let tree = std::path::PathBuf::from(repo.worlds(&home)["a"]["path"].as_str().unwrap());
    for dir in [repo.project_dir(), tree.as_path()] {
        std::fs::write(dir.join("binky.toml"), &base).unwrap();
    }
    repo.ok(&home, &["reload", "a"]);
    let (after, _) = db_url(&repo, &home, "a");
    assert!(after.starts_with(&format!("postgresql://{db}:")), "{after}");
    assert_eq!(psql(&after, "select v from items"), "kept");
    assert_eq!(psql(&after, "select current_user"), db);
    // Its objects are the role's now: it can change its own schema.
    psql(
        &after,
        "alter table items add column w int; insert into items(v) values ('new')",
    );
    assert_eq!(psql(&after, "select count(*) from items"), "2");

    // Off, the admin makes a table, on again: that table is the world's too.
    let write = |toml: &str| {
        for dir in [repo.project_dir(), tree.as_path()] {
            std::fs::write(dir.join("binky.toml"), toml).unwrap();
        }
    };
    write(&format!("{base}options = {{ acl = false }}\n"));
    repo.ok(&home, &["reload", "a"]);
    let (admin_url, _) = db_url(&repo, &home, "a");
    psql(&admin_url, "create table later(x int)");
    write(&base);
    repo.ok(&home, &["reload", "a"]);
    let (again, _) = db_url(&repo, &home, "a");
    psql(&again, "alter table later add column y int");
}

#[test]
fn databases_a_worlds_role_made_go_with_the_world() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("iso-cd-{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let repo = Repo::new(&format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"{PG_ADMIN}\"\noptions = {{ createdb = true }}\n",
        project_header(&project, 2)
    ));
    repo.ok(&home, &["up", "a"]);
    let (url, _) = db_url(&repo, &home, "a");
    let db = url.rsplit('/').next().unwrap().to_owned();
    // A test runner's own database, made as the world's role.
    psql(&url, &format!("create database \"{db}_test\""));
    repo.ok(&home, &["remove", "a", "--force"]);
    let count = |sql: String| psql(PG_ADMIN, &sql);
    assert_eq!(
        count(format!(
            "select count(*) from pg_database where datname like '{db}%'"
        )),
        "0"
    );
    assert_eq!(
        count(format!(
            "select count(*) from pg_roles where rolname = '{db}'"
        )),
        "0"
    );
}

/// `mysql` as the user, password and database of a world's URL
/// (`mysql://user:pw@host:port/db`), in database `db` ("" for the URL's).
fn mysql_as(url: &str, db: &str, sql: &str) -> (bool, String) {
    let rest = url.strip_prefix("mysql://").unwrap();
    let (creds, place) = rest.split_once('@').unwrap();
    let (user, pw) = creds.split_once(':').unwrap();
    let own = place.rsplit('/').next().unwrap();
    let out = std::process::Command::new("mysql")
        .args(["-h127.0.0.1", "-P3306", "-N", "-B"])
        .arg(format!("-u{user}"))
        .env("MYSQL_PWD", pw)
        .args(["-e", sql])
        .arg(if db.is_empty() { own } else { db })
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(if out.status.success() {
        &out.stdout
    } else {
        &out.stderr
    })
    .trim()
    .to_owned();
    (out.status.success(), text)
}

#[test]
fn mysql_worlds_get_users_of_their_own_that_reach_no_other_world() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    // Long enough that a long branch's database name is cut to 64.
    let project = format!("isomy{}-customer-portal", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    let toml = format!(
        "{}[services.db]\nadapter = \"mariadb\"\nadmin_url = \"mysql://root@127.0.0.1:3306/\"\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&toml);
    let mut urls = Vec::new();
    for w in ["a", "b"] {
        repo.ok(&home, &["up", w]);
        let env = repo.ok(&home, &["env", w]).json();
        let url = env["services"]["db"].as_str().unwrap().to_owned();
        assert!(url.starts_with(&format!("mysql://{project}_{w}:")), "{url}");
        urls.push(url);
    }
    let (a, b) = (&urls[0], &urls[1]);
    let (a_db, b_db) = (format!("{project}_a"), format!("{project}_b"));
    let (ok, out) = mysql_as(
        a,
        "",
        "create table t(x int); insert into t values (1); select count(*) from t",
    );
    assert!(ok && out == "1", "{out}");
    // Not B's database, not a database whose name A's grant would match
    // were `_` a wildcard there, and no other database listed.
    let (ok, out) = mysql_as(a, &b_db, "select 1");
    assert!(!ok && out.contains("Access denied"), "{out}");
    let lookalike = a_db.replace('_', "X");
    let (ok, out) = mysql_as(a, "", &format!("create database `{lookalike}`"));
    assert!(!ok && out.contains("Access denied"), "{out}");
    let (_, listed) = mysql_as(a, "", "show databases");
    assert!(!listed.contains(&b_db), "{listed}");
    let (ok, out) = mysql_as(
        b,
        "",
        "select count(*) from information_schema.tables where table_name = 't'",
    );
    assert!(ok && out == "0", "{out}");
    // A name cut to MySQL's 64 characters still gets its user: the grant's
    // escapes count against the same limit.
    let long = "feature/JIRA-1234-add-payment-provider-webhooks-and-retries";
    repo.ok(&home, &["up", long]);
    let url = repo.ok(&home, &["env", long]).json()["services"]["db"]
        .as_str()
        .unwrap()
        .to_owned();
    let long_db = url.rsplit('/').next().unwrap().to_owned();
    // Too long to escape every `_` within 64: the case this covers.
    assert!(long_db.len() + long_db.matches('_').count() > 64, "{url}");
    let (ok, out) = mysql_as(&url, "", "create table t(x int); select database()");
    assert!(ok && out == long_db, "{out}");
    let (ok, _) = mysql_as(&url, &b_db, "select 1");
    assert!(!ok, "the long world's user reached B's database");
    repo.ok(&home, &["remove", long, "--force"]);
    // remove drops the user with the database; B stays whole.
    repo.ok(&home, &["remove", "a", "--force"]);
    let users = |u: &str| {
        mysql(
            "",
            &format!("select count(*) from mysql.user where user = '{u}'"),
        )
    };
    assert_eq!(users(&a_db), "0");
    assert_eq!(users(&b_db), "1");
    assert!(mysql_as(b, "", "select 1").0);
    // A user of a new world's name that Binky did not make is refused,
    // never taken over: its password still works, and it is still there
    // after the failed `up`.
    let theirs = format!("{project}_c");
    mysql(
        "",
        &format!("create user '{theirs}'@'%' identified by 'their-pw-1'"),
    );
    let out = repo.run(&home, &["up", "c"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("Binky did not make it"), "{out}");
    assert_eq!(users(&theirs), "1");
    let own = format!("mysql://{theirs}:their-pw-1@127.0.0.1:3306/information_schema");
    assert!(mysql_as(&own, "", "select 1").0, "its password was changed");
}

#[test]
fn a_reload_that_cannot_give_a_world_its_role_stops_nothing() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("iso-rf-{}", std::process::id() % 100000);
    // An admin that may create databases but not roles, dropped last.
    let admin_role = format!("{project}_admin");
    let _role = crate::recipes::Role::create(&admin_role, "login createdb");
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let admin = format!("postgresql://{admin_role}@127.0.0.1:5432/postgres");
    let base = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"{admin}\"\n[services.web]\ncmd = \"exec sleep 600\"\ndepends_on = [\"db\"]\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&base.replace(
        "adapter = \"postgres\"\n",
        "adapter = \"postgres\"\noptions = { acl = false }\n",
    ));
    repo.ok(&home, &["up", "a"]);
    let pid = |repo: &Repo| repo.worlds(&home)["a"]["services"][1]["pid"].as_u64();
    let before = pid(&repo);
    assert!(before.is_some());
    let tree = std::path::PathBuf::from(repo.worlds(&home)["a"]["path"].as_str().unwrap());
    for dir in [repo.project_dir(), tree.as_path()] {
        std::fs::write(dir.join("binky.toml"), &base).unwrap();
    }
    let out = repo.run(&home, &["reload", "a"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("CREATEROLE"), "{out}");
    // Refused before anything was stopped: the same process runs on.
    let w = &repo.worlds(&home)["a"];
    assert_eq!(w["state"], "running", "{w}");
    assert_eq!(pid(&repo), before, "{w}");
}

#[test]
fn an_extension_only_a_superuser_may_create_goes_in_options_extensions() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("iso-ext-{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    // postgres_fdw is not a trusted extension: a database's owner may not
    // create it.
    let base = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"{PG_ADMIN}\"\nmigrate = \"psql \\\"$DB_URL\\\" -v ON_ERROR_STOP=1 -qc 'create extension if not exists postgres_fdw; create table if not exists t(x int)'\"\nclone_from = \"golden\"\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&base);
    let out = repo.run(&home, &["up", "a"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("options.extensions"),
        "the hint names the way out: {out}"
    );
    let with = format!("{base}options = {{ extensions = [\"postgres_fdw\"] }}\n");
    std::fs::write(repo.project_dir().join("binky.toml"), &with).unwrap();
    crate::project::git(repo.project_dir(), &["commit", "-qam", "extensions"]);
    for w in ["b", "c"] {
        let out = repo.run(&home, &["up", w]);
        assert_eq!(out.code(), 0, "{out}");
    }
    // Cloned: the extension is there, the admin's; the table the world's.
    let (url, _) = db_url(&repo, &home, "c");
    let db = url.rsplit('/').next().unwrap().to_owned();
    assert_eq!(
        psql(
            &url,
            "select count(*) from pg_extension where extname = 'postgres_fdw'"
        ),
        "1"
    );
    assert_eq!(
        psql(
            &url,
            "select tableowner from pg_tables where tablename = 't'"
        ),
        db
    );
}

#[test]
fn a_mysql_world_made_without_a_user_gets_one_on_reload_with_its_data() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("isomu{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    let base = format!(
        "{}[services.db]\nadapter = \"mysql\"\nadmin_url = \"mysql://root@127.0.0.1:3306/\"\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&format!("{base}options = {{ acl = false }}\n"));
    repo.ok(&home, &["up", "a"]);
    let db = format!("{project}_a");
    let url = |repo: &Repo| {
        repo.ok(&home, &["env", "a"]).json()["services"]["db"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(url(&repo).starts_with("mysql://root@"), "{}", url(&repo));
    mysql(&db, "create table t(x int); insert into t values (7)");
    let tree = std::path::PathBuf::from(repo.worlds(&home)["a"]["path"].as_str().unwrap());
    for dir in [repo.project_dir(), tree.as_path()] {
        std::fs::write(dir.join("binky.toml"), &base).unwrap();
    }
    repo.ok(&home, &["reload", "a"]);
    let after = url(&repo);
    assert!(after.starts_with(&format!("mysql://{db}:")), "{after}");
    let (ok, out) = mysql_as(&after, "", "select x from t");
    assert!(ok && out == "7", "{out}");
}

/// `node_modules` holding BullMQ: `BINKY_TEST_BULLMQ` (.ci/run installs
/// it), else the local install's.
fn bullmq_modules() -> Option<std::path::PathBuf> {
    let package = cached_tool(
        "BINKY_TEST_BULLMQ",
        "binky-npm/node_modules/bullmq/package.json",
        "",
    )?;
    // `…/node_modules/bullmq/package.json` → `…/node_modules`.
    Some(package.parent()?.parent()?.to_owned())
}

#[test]
fn a_bullmq_worker_given_another_worlds_prefix_takes_none_of_its_jobs() {
    let modules = bullmq_modules();
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !crate::redis::redis_up() || modules.is_none() || !node {
        skip("no Redis on 127.0.0.1:6379, node or BullMQ (BINKY_TEST_BULLMQ; .ci/run installs it)");
        return;
    }
    let p = crate::redis::project("bull");
    let _cleanup = crate::redis::Cleanup(p.clone());
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.cache]\nadapter = \"redis\"\nadmin_url = \"{}\"\noptions = {{ acl = true }}\n",
        project_header(&p, 2),
        crate::redis::SERVER
    ));
    let mut worlds = Vec::new();
    for w in ["a", "b"] {
        repo.ok(&home, &["up", w]);
        let env = repo.ok(&home, &["env", w]).json();
        worlds.push((
            env["services"]["cache"].as_str().unwrap().to_owned(),
            env["fields"]["cache"]["prefix"]
                .as_str()
                .unwrap()
                .to_owned(),
        ));
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bullmq_thief.js"
    );
    let out = Out(std::process::Command::new("node")
        .arg(script)
        .args([&worlds[0].0, &worlds[0].1, &worlds[1].0])
        .env("NODE_PATH", modules.unwrap())
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let v = out.json();
    assert_eq!(v["stolen"], 0, "{v}");
    assert!(v["refused"].as_str().unwrap().contains("NOPERM"), "{v}");
    assert_eq!(v["mine"], 50, "{v}");
    for w in ["a", "b"] {
        repo.ok(&home, &["remove", w, "--force"]);
    }
}

#[test]
fn a_mysql_user_whose_grant_is_refused_is_not_left_behind() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("isomg{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    // An admin that may make the project's databases and users, but may not
    // grant (no GRANT OPTION): the world's user is made, then its grant is
    // refused.
    let admin = format!("{project}adm");
    mysql(
        "",
        &format!(
            "CREATE USER '{admin}'@'127.0.0.1'; GRANT CREATE USER ON *.* TO '{admin}'@'127.0.0.1'; GRANT ALL ON `{project}\\_%`.* TO '{admin}'@'127.0.0.1'"
        ),
    );
    struct DropAdmin(String);
    impl Drop for DropAdmin {
        fn drop(&mut self) {
            let _ = std::process::Command::new("mysql")
                .args(["-h127.0.0.1", "-uroot", "-e"])
                .arg(format!("DROP USER IF EXISTS '{}'@'127.0.0.1'", self.0))
                .output();
        }
    }
    let _admin = DropAdmin(admin.clone());
    let repo = Repo::new(&format!(
        "{}[services.db]\nadapter = \"mysql\"\nadmin_url = \"mysql://{admin}@127.0.0.1:3306/\"\n",
        project_header(&project, 2)
    ));
    let out = repo.run(&home, &["up", "a"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("GRANT OPTION"), "{out}");
    assert_eq!(
        mysql(
            "",
            &format!("select count(*) from mysql.user where user = '{project}_a'")
        ),
        "0",
        "the world's user was left behind"
    );
}
