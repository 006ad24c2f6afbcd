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
