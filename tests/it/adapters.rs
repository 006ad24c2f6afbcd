//! Adapters against the real servers on this machine.

use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;

pub const PG_ADMIN: &str = "postgresql://postgres@127.0.0.1:5432/postgres";

pub fn pg_up() -> bool {
    std::net::TcpStream::connect(("127.0.0.1", 5432)).is_ok()
        && std::process::Command::new("psql")
            .args([PG_ADMIN, "-tAc", "select 1"])
            .output()
            .is_ok_and(|o| o.status.success())
}

pub fn psql(db_url: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([db_url, "-tAc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn databases() -> Vec<String> {
    psql(PG_ADMIN, "select datname from pg_database")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn postgres_slices_are_isolated_cloned_named_within_limits_and_dropped() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    // The project name and branches of case A1; admin_url comes from the
    // environment of the CLI that runs `up`, not the daemon's.
    let project = format!(
        "inventory-reconciliation-svc-{}",
        std::process::id() % 10000
    );
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let toml = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.TEST_PG_ADMIN}}\"\nmigrate = \"psql \\\"$DB_URL\\\" -qc 'create table items(n int)'\"\nseed = \"psql \\\"$DB_URL\\\" -qc 'insert into items select generate_series(1, 1000)'\"\nclone_from = \"golden\"\n",
        project_header(&project, 2)
    );
    let repo = Repo::new(&toml);
    let long = format!("feature/{}", "Very-Long-Branch-Name-".repeat(7));
    assert!(long.len() >= 150);
    let worlds = [
        "Feature-Login",
        "feature/quarterly-inventory-reconciliation-report-a",
        "feature/quarterly-inventory-reconciliation-report-b",
        long.as_str(),
    ];
    for w in worlds {
        let out = Out(repo
            .cmd(&home, &["up", w])
            .env("TEST_PG_ADMIN", PG_ADMIN)
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
    let dbs = databases();
    let mut names = Vec::new();
    for w in worlds {
        let env = Out(repo
            .cmd(&home, &["env", w])
            .env("TEST_PG_ADMIN", PG_ADMIN)
            .output()
            .unwrap())
        .json();
        let url = env["services"]["db"].as_str().unwrap().to_owned();
        let name = url.rsplit('/').next().unwrap().to_owned();
        assert!(name.len() <= 63, "{name}");
        assert!(
            dbs.contains(&name),
            "env names {name}, which pg_database does not list: {dbs:?}"
        );
        // Cloned from the golden template: the seeded rows are there.
        assert_eq!(psql(&url, "select count(*) from items"), "1000");
        names.push((name, url));
    }
    let distinct: std::collections::HashSet<_> = names.iter().map(|(n, _)| n).collect();
    assert_eq!(distinct.len(), 4, "{names:?}");
    let template = home.cloned_from("Feature-Login", "db");
    assert!(
        template.starts_with(&format!("{project}_golden_golden_")),
        "{template}"
    );
    assert!(dbs.contains(&template), "{template}: {dbs:?}");
    // One world's writes are invisible to another.
    psql(&names[0].1, "insert into items values (-1)");
    assert_eq!(
        psql(&names[1].1, "select count(*) from items where n = -1"),
        "0"
    );
    // remove drops exactly that database.
    for w in worlds {
        let out = Out(repo
            .cmd(&home, &["remove", w, "--force"])
            .env("TEST_PG_ADMIN", PG_ADMIN)
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
    let after = databases();
    for (n, _) in &names {
        assert!(!after.contains(n), "{n} left behind");
    }
}

#[test]
fn an_unreachable_server_is_named_by_host_port_and_user_never_the_password() {
    // Port 1 on loopback refuses: no server is needed for this.
    for (adapter, url) in [
        (
            "postgres",
            "postgresql://admin:Hunter2Secret@127.0.0.1:1/postgres",
        ),
        ("mysql", "mysql://admin:Hunter2Secret@127.0.0.1:1/"),
    ] {
        let home = Home::new();
        let toml = format!(
            "{}[services.db]\nadapter = \"{adapter}\"\nadmin_url = \"${{env.UNREACHABLE_URL}}\"\n",
            project_header("unreach", 2)
        );
        let repo = Repo::new(&toml);
        let out = Out(repo
            .cmd(&home, &["up", "a"])
            .env("UNREACHABLE_URL", url)
            .output()
            .unwrap());
        assert_eq!(out.code(), 1, "{adapter}: {out}");
        assert!(
            out.stderr()
                .contains("cannot connect to 127.0.0.1:1 as admin"),
            "{adapter}: {out}"
        );
        assert!(
            !out.to_string().contains("Hunter2Secret"),
            "{adapter}: {out}"
        );
    }
}

#[test]
fn an_unset_admin_url_variable_is_named_and_nothing_is_made() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.BINKY_TEST_SURELY_UNSET_VAR}}\"\n",
        project_header("unset", 2)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "a"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("${env.BINKY_TEST_SURELY_UNSET_VAR}"),
        "{out}"
    );
    assert!(out.stderr().contains("is not set"), "{out}");
    // Refused before a worktree or a record was made.
    assert!(!repo.worlds(&home).contains_key("a"));
    assert!(!repo.worktree_root().join("a").exists());
}

/// A daemon killed (or an `up` cancelled) mid-clone leaves its backend
/// copying; that `CREATE DATABASE` commits later. A teardown in between
/// must not find "nothing to drop" and let a database appear that no
/// record names (found by the chaos run: `up` then refused the world's own
/// slice as "not made by this Binky", and `gc` could drop neither it nor
/// the template's role). Each clone here waits on a lock another session
/// keeps on the template, and is cut short: once by a killed daemon (its
/// socket closed: the teardown ends the orphaned copy), once by a
/// cancelled `up` (its socket still open: the teardown waits for the copy
/// and drops what it made). Either way no database is left.
#[test]
fn a_teardown_after_a_cut_short_clone_leaves_no_database_behind() {
    use binky::adapters::{Adapter, Slice, postgres::Postgres};
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let project = format!("orphanclone{}", std::process::id() % 100_000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let slice = |name: &str| Slice {
        name: format!("{project}_{name}"),
        project: project.clone(),
        admin_url: Some(binky::address::AdminUrl::new(PG_ADMIN)),
        options: toml::toml! { acl = false },
        data_dir: std::env::temp_dir(),
        search_path: None,
        secret: None,
    };
    let template = slice("tpl");
    psql(PG_ADMIN, &format!("create database \"{}\"", template.name));
    let secs = std::time::Duration::from_secs;
    let count = |sql: &str| psql(PG_ADMIN, sql);
    for killed in [true, false] {
        let world = slice(if killed { "killed" } else { "cancelled" });
        let holder = TemplateHold::take(&template.name);
        let creating = format!(
            "select count(*) from pg_stat_activity where query like 'CREATE DATABASE \"{}\"%'",
            world.name
        );
        let rt = runtime();
        let clone = {
            let (t, w) = (template.clone(), world.clone());
            rt.spawn(async move { Postgres.clone_slice(&t, &w).await })
        };
        assert!(
            wait_until(secs(30), || count(&creating) == "1"),
            "the clone never reached the server"
        );
        let teardown = if killed {
            // Every task and socket of the "daemon" goes at once.
            rt.shutdown_background();
            let rt = runtime();
            let w = world.clone();
            let done =
                rt.block_on(async { tokio::time::timeout(secs(60), Postgres.teardown(&w)).await });
            holder.release();
            done.expect("the teardown ended the orphaned copy")
                .expect("torn down");
            None
        } else {
            clone.abort();
            let w = world.clone();
            let teardown = rt.spawn(async move { Postgres.teardown(&w).await });
            // It waits on the clone's lock: seen by its look at who holds it.
            assert!(
                wait_until(secs(30), || count(
                    "select count(*) from pg_stat_activity where query like '%FROM pg_locks l%' and pid <> pg_backend_pid()"
                ) != "0"),
                "the teardown never waited for the copy"
            );
            holder.release();
            Some((rt, teardown))
        };
        if let Some((rt, teardown)) = teardown {
            rt.block_on(async { tokio::time::timeout(secs(60), teardown).await })
                .expect("the teardown finished")
                .expect("joined")
                .expect("torn down");
        }
        assert!(
            wait_until(secs(30), || count(&creating) == "0"),
            "the cut-short clone's backend never finished"
        );
        assert_eq!(
            count(&format!(
                "select count(*) from pg_database where datname = '{}'",
                world.name
            )),
            "0",
            "killed: {killed}: a database appeared after its teardown"
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A session holding a lock on database `template` that `CREATE DATABASE
/// … TEMPLATE` waits on (COMMENT's SHARE UPDATE EXCLUSIVE against its
/// SHARE), until [`TemplateHold::release`] rolls it back.
struct TemplateHold {
    psql: std::process::Child,
}

impl TemplateHold {
    fn take(template: &str) -> TemplateHold {
        use std::io::Write;
        let mut psql = std::process::Command::new("psql")
            .args([PG_ADMIN, "-q", "-v", "ON_ERROR_STOP=1"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = psql.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "begin; comment on database \"{template}\" is 'held';"
        )
        .unwrap();
        stdin.flush().unwrap();
        let held = format!(
            "select count(*) from pg_stat_activity where state = 'idle in transaction' and query like 'comment on database \"{template}\"%'"
        );
        assert!(
            wait_until(std::time::Duration::from_secs(30), || psql_count(&held)),
            "the template's lock was never taken"
        );
        TemplateHold { psql }
    }

    fn release(mut self) {
        use std::io::Write;
        let mut stdin = self.psql.stdin.take().unwrap();
        writeln!(stdin, "rollback;").unwrap();
        drop(stdin);
        let _ = self.psql.wait();
    }
}

impl Drop for TemplateHold {
    /// A failed test's hold ends with it, so the cleanup can drop the
    /// template.
    fn drop(&mut self) {
        let _ = self.psql.kill();
        let _ = self.psql.wait();
    }
}

fn psql_count(sql: &str) -> bool {
    psql(PG_ADMIN, sql) == "1"
}
