//! A world's own login user (a PostgreSQL role, a MySQL user, a RabbitMQ
//! user) across crashes, against the real servers on this machine: a
//! daemon that dies between making a user and granting it, or in the
//! middle of a `remove`, never leaves a user on the server that nothing
//! drops, never makes Binky refuse its own user, and a dropped password is
//! recoverable from no file under `BINKY_HOME`. A dry run writes nothing.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use crate::rabbitmq::rabbit_up;
use crate::templates::{mysql, mysql_up};

const MYSQL_ADMIN: &str = "mysql://root@127.0.0.1:3306/";

/// How many MySQL accounts are named `user`.
fn mysql_users(user: &str) -> String {
    mysql(
        "",
        &format!("select count(*) from mysql.user where user = '{user}'"),
    )
}

/// How many PostgreSQL roles are named `role`.
fn pg_roles(role: &str) -> String {
    psql(
        PG_ADMIN,
        &format!("select count(*) from pg_roles where rolname = '{role}'"),
    )
}

/// World `w`'s address of service `service`, as `binky env --json` gives it.
fn address(repo: &Repo, home: &Home, w: &str, service: &str) -> String {
    repo.ok(home, &["env", w, "--json"]).json()["services"][service]
        .as_str()
        .unwrap_or_else(|| panic!("no address for {service}"))
        .to_owned()
}

/// The password in `scheme://user:password@host/…`.
fn password_of(url: &str) -> String {
    let creds = url.split_once("://").unwrap().1.split_once('@').unwrap().0;
    creds.split_once(':').unwrap().1.to_owned()
}

/// `(adapter, slice)` of every password the registry keeps, read with the
/// daemon stopped.
fn kept_passwords(home: &Home) -> Vec<(String, String)> {
    let out = python(
        "import sqlite3, sys\nfor a, s in sqlite3.connect(sys.argv[1]).execute('select adapter, slice from slice_secrets order by 1, 2'):\n    print(a, s)",
        &[home.file("registry.db").to_str().unwrap()],
    );
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, s)| (a.to_owned(), s.to_owned()))
        .collect()
}

/// Every file under `dir` (recursively) whose bytes hold `needle`.
fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(p);
            } else if kind.is_file()
                && let Ok(bytes) = std::fs::read(&p)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

/// A `remove` cut short after the slice was dropped (and its record and
/// password forgotten), then a daemon restart: the restart only resolves
/// the world's slices, and makes nothing. An old restart made the MySQL
/// user again, with a new password and its grant, that no record named:
/// `remove` and `gc` left it for good, and the next `up` was refused. `gc`
/// now also drops such a user an older Binky left.
#[test]
fn a_remove_cut_short_then_a_restart_leaves_no_mysql_user_behind() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("wurm{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    let repo = Repo::new(&format!(
        "{}[services.db]\nadapter = \"mysql\"\nadmin_url = \"{MYSQL_ADMIN}\"\n",
        project_header(&project, 2)
    ));
    let user = format!("{project}_w");
    repo.ok(&home, &["up", "w"]);
    assert_eq!(mysql_users(&user), "1");
    crash_at(
        &repo,
        &home,
        &["remove", "w", "--force"],
        "remove:torn_down",
        &[],
    );
    // The next command starts a daemon, which reconciles before it serves.
    repo.ok(&home, &["status"]);
    assert_eq!(
        mysql_users(&user),
        "0",
        "the restart made the user of a dropped slice again"
    );
    repo.ok(&home, &["remove", "w", "--force"]);
    repo.ok(&home, &["gc"]);
    assert_eq!(mysql_users(&user), "0");
    // The world's name is free for a new world, with a user of its own.
    repo.ok(&home, &["up", "w"]);
    let url = address(&repo, &home, "w", "db");
    assert!(url.starts_with(&format!("mysql://{user}:")), "{url}");
    repo.ok(&home, &["remove", "w", "--force"]);
    assert_eq!(mysql_users(&user), "0");
    home.ok(&["daemon", "stop"]);
    assert_eq!(kept_passwords(&home), Vec::new());

    // What an older Binky left that way: a user with Binky's grant on a
    // database that is gone, and no record. `gc` drops it; a user of the
    // same shape without the grant is someone else's, and stays.
    let (gone, theirs) = (format!("{project}_gone-1"), format!("{project}_mine-2"));
    mysql(
        "",
        &format!(
            "CREATE USER '{gone}'@'%' IDENTIFIED BY 'pw-{project}'; GRANT ALL PRIVILEGES ON `{}`.* TO '{gone}'@'%'; CREATE USER '{theirs}'@'%' IDENTIFIED BY 'pw-{project}'",
            gone.replace('_', "\\_")
        ),
    );
    let dry = repo.run(&home, &["gc", "--dry-run"]);
    assert!(dry.stdout().contains(&gone), "{dry}");
    assert!(!dry.stdout().contains(&theirs), "{dry}");
    let gc = repo.run(&home, &["gc"]);
    assert_eq!(gc.code(), 0, "{gc}");
    assert_eq!(mysql_users(&gone), "0", "{gc}");
    assert_eq!(mysql_users(&theirs), "1", "{gc}");
}

/// An `up` cut short between making the world's user and granting it
/// (fault point `user:made`): the user is Binky's — for MySQL, whose server
/// has no place for a mark, because its password is the one Binky kept
/// before it made it; for PostgreSQL and RabbitMQ, by the mark given in the
/// statement that made it — so the next `up` takes it up again (never "a
/// user … exists and Binky did not make it"), and `remove` and `gc` drop it.
#[test]
fn an_up_cut_short_between_making_a_user_and_granting_it_is_taken_up_again() {
    if !mysql_up() || !pg_up() || !rabbit_up() {
        skip(
            "needs MariaDB/MySQL on :3306, PostgreSQL on :5432 and RabbitMQ with its management API on :5672/:15672",
        );
        return;
    }
    // Each adapter, its admin URL, and how many users of a name its server has.
    type Counted = fn(&str) -> String;
    let cases: [(&str, &str, Counted); 3] = [
        ("mysql", MYSQL_ADMIN, mysql_users),
        ("postgres", PG_ADMIN, pg_roles),
        ("rabbitmq", "amqp://guest:guest@127.0.0.1:5672/", |u| {
            (crate::rabbitmq::users().iter().filter(|x| *x == u).count()).to_string()
        }),
    ];
    for (adapter, admin, users) in cases {
        let home = Home::new();
        let project = format!("wumk{}{}", &adapter[..2], std::process::id() % 100000);
        let _cleanup = Cleanup {
            prefix: format!("{project}_"),
            mysql: adapter == "mysql",
        };
        let _rabbit = crate::rabbitmq::Cleanup(project.clone());
        let repo = Repo::new(&format!(
            "{}[services.db]\nadapter = \"{adapter}\"\nadmin_url = \"{admin}\"\n",
            project_header(&project, 2)
        ));
        let user = format!("{project}_w");
        // Cut short, then `up` again: it goes on with its own user.
        crash_at(&repo, &home, &["up", "w"], "user:made", &[]);
        assert_eq!(
            users(&user),
            "1",
            "{adapter}: the fault point was not reached"
        );
        let up = repo.run(&home, &["up", "w"]);
        assert_eq!(up.code(), 0, "{adapter}: {up}");
        let url = address(&repo, &home, "w", "db");
        assert!(url.contains(&format!("://{user}:")), "{adapter}: {url}");
        if adapter == "mysql" {
            let (user_pw, host) = url["mysql://".len()..].split_once('@').unwrap();
            let (u, pw) = user_pw.split_once(':').unwrap();
            let db = host.rsplit('/').next().unwrap();
            let out = std::process::Command::new("mysql")
                .args(["-h127.0.0.1", "-P3306", "-N", "-B", &format!("-u{u}")])
                .env("MYSQL_PWD", pw)
                .args(["-e", "create table t(x int); select count(*) from t", db])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "the world's user cannot use its database: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        repo.ok(&home, &["remove", "w", "--force"]);
        assert_eq!(users(&user), "0", "{adapter}: remove left the user");

        if adapter == "mysql" {
            // What an `up` cut short before its GRANT leaves, whose slice
            // `gc` sweeps (a restarted daemon carries a cut `up` on, so
            // the grant is taken by hand here): the user is still known by
            // its password, and goes with the slice.
            repo.ok(&home, &["up", "w"]);
            mysql(
                "",
                &format!("REVOKE ALL PRIVILEGES ON `{project}\\_w`.* FROM '{user}'@'%'"),
            );
            crash_at(
                &repo,
                &home,
                &["remove", "w", "--force"],
                "remove:teardown",
                &[],
            );
            let gc = repo.run(&home, &["gc"]);
            assert_eq!(gc.code(), 0, "{gc}");
            assert_eq!(users(&user), "0", "gc left the user\n{gc}");
            repo.ok(&home, &["remove", "w", "--force"]);
        }
        home.ok(&["daemon", "stop"]);
        assert_eq!(kept_passwords(&home), Vec::new(), "{adapter}");
    }
}

/// `gc --dry-run` says what it would sweep and writes nothing: no
/// password is made for a slice named after the project alone (no slice
/// has an empty world name), nor for anything else.
#[test]
fn gc_dry_run_writes_no_password_and_names_no_slice_without_a_world() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("wudr{}", std::process::id() % 100000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let repo = Repo::new(&format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"{PG_ADMIN}\"\n",
        project_header(&project, 2)
    ));
    repo.ok(&home, &["up", "w"]);
    home.ok(&["daemon", "stop"]);
    let before = kept_passwords(&home);
    assert_eq!(
        before,
        vec![("postgres".to_owned(), format!("{project}_w"))]
    );
    repo.ok(&home, &["gc", "--dry-run"]);
    repo.ok(&home, &["env", "w", "--json"]);
    home.ok(&["daemon", "stop"]);
    assert_eq!(kept_passwords(&home), before);
    repo.ok(&home, &["remove", "w", "--force"]);
}

/// A dropped password is recoverable from no file under `BINKY_HOME`: not
/// from the registry's pages, freed or not, nor from its WAL, nor a log —
/// whichever verb dropped it: `reset` (the slice made again with a new
/// one), `gc` (sweeping the slices of a `remove` cut short), `remove`.
#[test]
fn a_dropped_password_is_in_no_file_under_binky_home() {
    if !mysql_up() || !pg_up() || !rabbit_up() {
        skip(
            "needs MariaDB/MySQL on :3306, PostgreSQL on :5432 and RabbitMQ with its management API on :5672/:15672",
        );
        return;
    }
    let home = Home::new();
    let project = format!("wupw{}", std::process::id() % 100000);
    let _pg = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let _my = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    let _rabbit = crate::rabbitmq::Cleanup(project.clone());
    let repo = Repo::new(&format!(
        "{}[services.pg]\nadapter = \"postgres\"\nadmin_url = \"{PG_ADMIN}\"\n[services.my]\nadapter = \"mysql\"\nadmin_url = \"{MYSQL_ADMIN}\"\n[services.mq]\nadapter = \"rabbitmq\"\n",
        project_header(&project, 2)
    ));
    let nowhere = |what: &str, password: &str| {
        assert!(password.len() >= 32, "{password}");
        let found = files_holding(home.path(), password);
        assert!(
            found.is_empty(),
            "{what}: a dropped password is still in {found:?}"
        );
    };
    // Another world's passwords stay kept all along.
    repo.ok(&home, &["up", "keep"]);
    let kept = password_of(&address(&repo, &home, "keep", "my"));
    repo.ok(&home, &["up", "w"]);
    let before = password_of(&address(&repo, &home, "w", "my"));
    repo.ok(&home, &["reset", "w", "my"]);
    let passwords: Vec<(&str, String)> = [("postgres", "pg"), ("mysql", "my"), ("rabbitmq", "mq")]
        .into_iter()
        .map(|(a, s)| (a, password_of(&address(&repo, &home, "w", s))))
        .collect();
    assert_ne!(passwords[1].1, before);
    nowhere("reset", &before);

    // A remove cut short, whose slices `gc` sweeps.
    crash_at(
        &repo,
        &home,
        &["remove", "w", "--force"],
        "remove:teardown",
        &[],
    );
    let gc = repo.run(&home, &["gc"]);
    assert_eq!(gc.code(), 0, "{gc}");
    let swept: Vec<&(&str, String)> = passwords
        .iter()
        .filter(|(a, _)| gc.stdout().contains(&format!("{a} {project}_w")))
        .collect();
    assert!(!swept.is_empty(), "gc swept nothing:\n{gc}");
    for (a, p) in swept {
        nowhere(&format!("gc of the {a} slice"), p);
    }
    repo.ok(&home, &["remove", "w", "--force"]);
    for (a, p) in &passwords {
        nowhere(&format!("remove of the {a} slice"), p);
    }
    assert!(
        !files_holding(home.path(), &kept).is_empty(),
        "the registry should still keep another world's password"
    );
    repo.ok(&home, &["remove", "keep", "--force"]);
    nowhere("remove", &kept);
}
