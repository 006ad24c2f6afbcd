//! Several resources on one adapter: two PostgreSQL databases and two
//! Redis key prefixes per world, against the real servers on this machine.
//! Before slices carried their resource's name, `binky check` refused such
//! a project, since every world would have handed both one slice.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use crate::redis::{get, keys, redis_up};

/// `binky env <w> --json`'s `services` map: resource → its URL.
fn urls(repo: &Repo, home: &Home, w: &str) -> serde_json::Value {
    repo.ok(home, &["env", w, "--json"]).json()["services"].clone()
}

fn database_of(url: &str) -> String {
    url.rsplit('/').next().unwrap().to_owned()
}

#[test]
fn two_databases_of_one_adapter_are_two_slices_each_torn_down_where_it_was_made() {
    if !pg_up() || !redis_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing), or no Redis on 127.0.0.1:6379");
        return;
    }
    let home = Home::new();
    let p = format!("two-{}", std::process::id() % 100000);
    let _pg = Cleanup {
        prefix: format!("{p}_"),
        mysql: false,
    };
    let _redis = crate::redis::Cleanup(p.clone());
    let db = |name: &str, table: &str| {
        format!(
            "[services.{name}]\nadapter = \"postgres\"\nadmin_url = \"{PG_ADMIN}\"\nmigrate = \"psql \\\"${{self.url}}\\\" -qc 'create table if not exists {table}(n int)'\"\nseed = \"psql \\\"${{self.url}}\\\" -qc 'insert into {table} values (1)'\"\nclone_from = \"golden\"\n"
        )
    };
    let cache = |name: &str| {
        format!(
            "[services.{name}]\nadapter = \"redis\"\nseed = \"redis-cli -n 0 set ${{self.prefix}}seeded {name}\"\n"
        )
    };
    let toml = format!(
        "{}{}{}{}{}",
        project_header(&p, 2),
        db("db", "items"),
        cache("cache"),
        db("analytics_db", "events"),
        cache("sessions"),
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["check"]);
    for w in ["a", "b"] {
        repo.ok(&home, &["up", w]);
    }

    // Two databases per world: the first keeps the plain name, the second
    // carries its resource's.
    let a = urls(&repo, &home, "a");
    let (a_db, a_an) = (
        a["db"].as_str().unwrap().to_owned(),
        a["analytics_db"].as_str().unwrap().to_owned(),
    );
    assert_eq!(database_of(&a_db), format!("{p}_a"), "{a}");
    assert_eq!(database_of(&a_an), format!("{p}__analytics-db_a"), "{a}");
    // Each was migrated and seeded by its own commands, from a template of
    // its own, and reaches only itself.
    assert_eq!(psql(&a_db, "select count(*) from items"), "1");
    assert_eq!(psql(&a_an, "select count(*) from events"), "1");
    assert_eq!(
        psql(
            &a_db,
            "select count(*) from pg_tables where tablename = 'events'"
        ),
        "0"
    );
    assert_ne!(
        home.cloned_from("a", "db"),
        home.cloned_from("a", "analytics_db")
    );
    psql(&a_an, "insert into events values (2)");
    assert_eq!(psql(&a_db, "select count(*) from items"), "1");
    let b = urls(&repo, &home, "b");
    assert_eq!(
        psql(
            b["analytics_db"].as_str().unwrap(),
            "select count(*) from events"
        ),
        "1"
    );
    // Two key prefixes, neither covering the other's keys.
    assert_eq!(get(&format!("{p}:a:seeded")).as_deref(), Some("cache"));
    assert_eq!(
        get(&format!("{p}::sessions:a:seeded")).as_deref(),
        Some("sessions")
    );
    assert_eq!(keys(&format!("{p}:a:*")), [format!("{p}:a:seeded")]);

    // Moving the second database first would hand it the first's data:
    // up refuses and names both, before anything is made or dropped.
    let world_path = repo.worlds(&home)["a"]["path"].as_str().unwrap().to_owned();
    repo.ok(&home, &["down", "a"]);
    // Every such conflict is named at once (both adapters here).
    let head = toml.split("[services.").next().unwrap();
    let reordered = format!(
        "{head}{}{}{}{}",
        db("analytics_db", "events"),
        db("db", "items"),
        cache("sessions"),
        cache("cache"),
    );
    let file = std::path::Path::new(&world_path).join("binky.toml");
    let kept = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, &reordered).unwrap();
    let out = repo.run(&home, &["up", "a"]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr()
            .contains(&format!("slice {p}_a was made for `db`"))
            && out
                .stderr()
                .contains(&format!("slice {p}:a: was made for `cache`"))
            && out.stderr().contains("analytics_db"),
        "{out}"
    );
    // A renamed first resource would take up the slice under a name its
    // record does not have (it was re-made empty): refused, the cause named.
    let renamed = format!(
        "{head}{}{}{}{}",
        db("main", "items"),
        cache("cache"),
        db("analytics_db", "events"),
        cache("sessions"),
    );
    std::fs::write(&file, &renamed).unwrap();
    let out = repo.run(&home, &["up", "a"]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr()
            .contains("`db`, which is no longer in binky.toml"),
        "{out}"
    );
    assert_eq!(psql(&a_db, "select count(*) from items"), "1");
    assert_eq!(psql(&a_an, "select count(*) from events"), "2");
    std::fs::write(&file, kept).unwrap();

    // remove names each slice with the server it was deleted on, and
    // leaves none of the world's behind.
    let out = repo.ok(&home, &["remove", "a", "--force", "--json"]).json();
    let torn = out["torn_down_on"].as_array().unwrap();
    let mut seen: Vec<(String, String, String)> = torn
        .iter()
        .map(|t| {
            (
                t["service"].as_str().unwrap().to_owned(),
                t["slice"].as_str().unwrap().to_owned(),
                t["server"].as_str().unwrap_or("<none>").to_owned(),
            )
        })
        .collect();
    seen.sort();
    let pg = "postgresql://127.0.0.1:5432".to_owned();
    let rd = "redis://127.0.0.1:6379/0".to_owned();
    assert_eq!(
        seen,
        [
            (
                "analytics_db".into(),
                format!("{p}__analytics-db_a"),
                pg.clone()
            ),
            ("cache".into(), format!("{p}:a:"), rd.clone()),
            ("db".into(), format!("{p}_a"), pg.clone()),
            ("sessions".into(), format!("{p}::sessions:a:"), rd.clone()),
        ],
        "{out}"
    );
    let human = repo.ok(&home, &["remove", "b", "--force"]).stdout();
    assert!(
        human.contains(&format!("{p}__analytics-db_b (postgres on {pg})"))
            && human.contains(&format!("{p}_b (postgres on {pg})")),
        "{human}"
    );
    assert_eq!(
        psql(
            PG_ADMIN,
            &format!(
                "select count(*) from pg_database where datname in ('{p}_a', '{p}__analytics-db_a', '{p}_b', '{p}__analytics-db_b')"
            )
        ),
        "0"
    );
    assert_eq!(keys(&format!("{p}:*")), Vec::<String>::new());
}
