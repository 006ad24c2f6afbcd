//! Golden templates and the MySQL-family adapter against the real servers on
//! this machine (PostgreSQL :5432, MariaDB :3306): 200,000-row clones, views,
//! triggers and routines surviving a clone, a key change rebuilding the
//! template, concurrent `up`s building it once, and the fallback path when the
//! dump client is missing.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::{Cleanup, mysql_databases};
use crate::harness::*;
use crate::project::*;
use std::process::Command;

pub const MYSQL_ADMIN: &str = "mysql://root@127.0.0.1:3306/";

pub fn mysql_up() -> bool {
    std::net::TcpStream::connect(("127.0.0.1", 3306)).is_ok()
        && Command::new("mysql")
            .args(["-h127.0.0.1", "-uroot", "-e", "select 1"])
            .output()
            .is_ok_and(|o| o.status.success())
}

/// Runs `sql` in database `db` ("" for none); returns the rows, tab-separated.
pub fn mysql(db: &str, sql: &str) -> String {
    let mut c = Command::new("mysql");
    c.args(["-h127.0.0.1", "-uroot", "-N", "-B", "-e", sql]);
    if !db.is_empty() {
        c.arg(db);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "mysql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A schema with everything a clone must carry: a foreign key, a generated
/// column, a trigger, a view over the world's own table, a procedure and a
/// function; seeded with 200,000 rows.
pub const MYSQL_SCHEMA: &str = r#"
CREATE TABLE digits (x INT PRIMARY KEY);
INSERT INTO digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9);
CREATE TABLE owners (id INT PRIMARY KEY, name VARCHAR(20));
INSERT INTO owners VALUES (1, 'ada');
CREATE TABLE items (
  id INT AUTO_INCREMENT PRIMARY KEY,
  n INT NOT NULL,
  owner INT NOT NULL DEFAULT 1,
  doubled INT AS (n * 2) VIRTUAL,
  FOREIGN KEY (owner) REFERENCES owners(id)
);
CREATE TABLE audit (item INT);
CREATE VIEW item_count AS SELECT COUNT(*) AS c FROM items;
CREATE TRIGGER items_audit AFTER INSERT ON items FOR EACH ROW INSERT INTO audit VALUES (NEW.id);
DELIMITER //
CREATE PROCEDURE add_item(IN v INT) BEGIN INSERT INTO items(n) VALUES (v); END//
CREATE FUNCTION twice(v INT) RETURNS INT DETERMINISTIC RETURN v * 2//
DELIMITER ;
"#;

/// 200,000 rows, inserted before the trigger exists would be ideal, but a
/// seed runs after migrate: empty the audit table afterwards instead.
pub const MYSQL_SEED: &str = r#"
INSERT INTO items(n) SELECT a.x + 10*b.x + 100*c.x + 1000*d.x + 10000*e.x + 100000*f.x
  FROM digits a, digits b, digits c, digits d, digits e, digits f
 WHERE a.x + 10*b.x + 100*c.x + 1000*d.x + 10000*e.x + 100000*f.x < 200000;
DELETE FROM audit;
"#;

/// A world database made from [`MYSQL_SCHEMA`] and [`MYSQL_SEED`] is
/// whole: its rows, the view on its own table, the trigger, the routines
/// and the foreign key.
pub fn assert_a_whole_copy_of_the_schema(db: &str) {
    assert_eq!(
        mysql(db, "select count(*), sum(doubled) = 2 * sum(n) from items"),
        "200000\t1"
    );
    // The view reads this world's table; the trigger fires here; the
    // routines exist here.
    assert_eq!(mysql(db, "select c from item_count"), "200000");
    assert_eq!(
        mysql(db, "call add_item(7); select count(*) from audit"),
        "1"
    );
    assert_eq!(mysql(db, "select c from item_count"), "200001");
    assert_eq!(mysql(db, "select twice(21)"), "42");
    // The foreign key came along.
    assert!(
        Command::new("mysql")
            .args([
                "-h127.0.0.1",
                "-uroot",
                db,
                "-e",
                "insert into items(n, owner) values (1, 99)"
            ])
            .output()
            .is_ok_and(|o| !o.status.success()),
        "the foreign key was not cloned"
    );
}

pub fn mysql_toml(project: &str, adapter: &str, extra: &str) -> String {
    format!(
        "{}[services.db]\nadapter = \"{adapter}\"\nadmin_url = \"${{env.TEST_MYSQL_ADMIN}}\"\nmigrate = \"mysql -h127.0.0.1 -uroot \\\"${{DB_URL##*/}}\\\" < schema.sql\"\nseed = \"mysql -h127.0.0.1 -uroot \\\"${{DB_URL##*/}}\\\" < seed.sql\"\nclone_from = \"golden\"\nclone_inputs = [\"*.sql\"]\n{extra}",
        project_header(project, 2)
    )
}

fn up_with(repo: &Repo, home: &Home, world: &str, env: &[(&str, &str)]) -> Out {
    let mut c = repo.cmd(home, &["up", world]);
    for (k, v) in env {
        c.env(k, v);
    }
    Out(c.output().unwrap())
}

fn env_url(repo: &Repo, home: &Home, world: &str, var: (&str, &str)) -> String {
    let out = Out(repo
        .cmd(home, &["env", world])
        .env(var.0, var.1)
        .output()
        .unwrap());
    out.json()["services"]["db"].as_str().unwrap().to_owned()
}

/// Events of one name from `$BINKY_HOME/events.log`.
fn events(home: &Home, name: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(home.file("events.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == name)
        .collect()
}

#[test]
fn mysql_clones_carry_rows_views_triggers_and_routines_and_stay_isolated() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("my-Shop{}", std::process::id() % 10000).to_lowercase();
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    // `mariadb` is the MySQL adapter under another name.
    let repo = Repo::with(
        "",
        &mysql_toml(&project, "mariadb", ""),
        &[("schema.sql", MYSQL_SCHEMA), ("seed.sql", MYSQL_SEED)],
    );
    let long = format!("feature/{}", "Long-Branch-".repeat(12));
    assert!(long.len() >= 150);
    let worlds = ["Feature-Login", long.as_str(), "fix-b"];
    let var = ("TEST_MYSQL_ADMIN", MYSQL_ADMIN);
    for w in worlds {
        let out = up_with(&repo, &home, w, &[var]);
        assert_eq!(out.code(), 0, "{out}");
    }
    assert_eq!(events(&home, "golden_built").len(), 1);
    assert!(events(&home, "clone_fallback").is_empty());
    let listed = mysql_databases(&format!("{project}_"));
    let mut names = Vec::new();
    for w in worlds {
        let url = env_url(&repo, &home, w, var);
        let db = url.rsplit('/').next().unwrap().to_owned();
        assert!(db.len() <= 64, "{db}");
        assert!(listed.contains(&db), "{db} not in {listed:?}");
        assert_a_whole_copy_of_the_schema(&db);
        names.push(db);
    }
    let distinct: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(distinct.len(), 3, "{names:?}");
    // One world's writes never reach another, nor the template.
    assert_eq!(mysql(&names[1], "select c from item_count"), "200001");
    mysql(&names[0], "delete from items where n < 1000");
    assert_eq!(mysql(&names[1], "select c from item_count"), "200001");
    let template = home.cloned_from(worlds[0], "db");
    assert_eq!(mysql(&template, "select c from item_count"), "200000");
    // remove drops exactly the world's database; the template stays.
    for w in worlds {
        let out = Out(repo
            .cmd(&home, &["remove", w, "--force"])
            .env(var.0, var.1)
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
    // (A spare of the template, kept ready for the next world, stays too.)
    let left: Vec<String> = mysql_databases(&format!("{project}_"))
        .into_iter()
        .filter(|d| !d.starts_with(&format!("{project}_spare_")))
        .collect();
    assert_eq!(left, vec![template]);
}

/// A view whose text holds the template's name as data (a string
/// literal), and a sequence the seed advanced.
const LITERAL_AND_SEQUENCE: &str = r#"db=${DB_URL##*/}
mysql -h127.0.0.1 -uroot "$db" <<SQL
CREATE TABLE t (x INT);
CREATE VIEW labels AS SELECT '\`$db\`.t' AS built_in, COUNT(*) AS n FROM \`$db\`.t;
CREATE SEQUENCE ids START WITH 1;
SQL
"#;

#[test]
fn mysql_copies_keep_string_literals_and_carry_sequences_on() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("myq{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    let toml = format!(
        "{}[services.db]\nadapter = \"mariadb\"\nadmin_url = \"${{env.TEST_MYSQL_ADMIN}}\"\nmigrate = \"sh migrate.sh\"\nseed = \"mysql -h127.0.0.1 -uroot \\\"${{DB_URL##*/}}\\\" -e 'INSERT INTO t VALUES (1); SELECT NEXTVAL(ids); SELECT NEXTVAL(ids)'\"\nclone_from = \"golden\"\n",
        project_header(&project, 2)
    );
    let repo = Repo::with("", &toml, &[("migrate.sh", LITERAL_AND_SEQUENCE)]);
    let var = ("TEST_MYSQL_ADMIN", MYSQL_ADMIN);
    let out = up_with(&repo, &home, "a", &[var]);
    assert_eq!(out.code(), 0, "{out}");
    let template = home.cloned_from("a", "db");
    let db = env_url(&repo, &home, "a", var)
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    // The literal is data: the clone's view still says where it was built;
    // its qualifier reads the clone's table.
    assert_eq!(
        mysql(&db, "select built_in from labels"),
        format!("`{template}`.t")
    );
    assert_eq!(
        mysql(&db, "insert into t values (2); select n from labels"),
        "2"
    );
    assert_eq!(mysql(&template, "select n from labels"), "1");
    // The sequence goes on from where the template's was, never handing
    // out an id the seed used.
    let next: i64 = mysql(&db, "select nextval(ids)").parse().unwrap();
    assert!(next > 2, "the clone's sequence restarted at {next}");
    let out = Out(repo
        .cmd(&home, &["remove", "a", "--force"])
        .env(var.0, var.1)
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
}

#[test]
fn mysql_dump_clone_falls_back_to_migrate_and_seed_without_the_dump_client() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("dump{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    let repo = Repo::with(
        "",
        &mysql_toml(
            &project,
            "mysql",
            "options = { clone_strategy = \"dump\" }\n",
        ),
        &[("schema.sql", MYSQL_SCHEMA), ("seed.sql", MYSQL_SEED)],
    );
    let var = ("TEST_MYSQL_ADMIN", MYSQL_ADMIN);
    // The dump route works where mysqldump is on PATH.
    let out = up_with(&repo, &home, "a", &[var]);
    assert_eq!(out.code(), 0, "{out}");
    assert!(events(&home, "clone_fallback").is_empty());
    // A PATH with the mysql client but no dump client (case A2).
    let bin = tempfile::tempdir().unwrap();
    let client = ["/usr/bin/mysql", "/usr/bin/mariadb"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap();
    std::os::unix::fs::symlink(client, bin.path().join("mysql")).unwrap();
    // git makes the worktree (the user's own, from their PATH).
    let git = ["/usr/local/bin/git", "/usr/bin/git"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap();
    std::os::unix::fs::symlink(git, bin.path().join("git")).unwrap();
    let path = bin.path().display().to_string();
    let out = up_with(&repo, &home, "b", &[var, ("PATH", &path)]);
    assert_eq!(out.code(), 0, "{out}");
    let fallback = events(&home, "clone_fallback");
    assert_eq!(fallback.len(), 1, "{fallback:?}");
    assert_eq!(fallback[0]["worktree"], "b");
    assert!(
        fallback[0]["detail"]
            .as_str()
            .unwrap()
            .contains("mysqldump"),
        "{fallback:?}"
    );
    // Built by migrate + seed instead: the same world.
    for w in ["a", "b"] {
        let db = env_url(&repo, &home, w, var)
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        assert_eq!(mysql(&db, "select c from item_count"), "200000", "{w}");
        assert_eq!(mysql(&db, "select twice(2)"), "4", "{w}");
        assert_eq!(
            mysql(
                &db,
                "insert into items(n) values (5); select count(*) from audit"
            ),
            "1",
            "{w}"
        );
    }
    let log =
        std::fs::read_to_string(home.file(&format!("logs/{project}/b/db.log"))).unwrap_or_default();
    assert!(log.contains("clone_fallback"), "{log}");
}

/// A backend for the template lifecycle test.
struct Backend {
    adapter: &'static str,
    var: (&'static str, &'static str),
    migrate: &'static str,
    seed: &'static str,
    count: fn(&str) -> String,
}

fn pg_count(url: &str) -> String {
    psql(
        url,
        "select count(*) || ' ' || coalesce(max(tag), '') from items",
    )
}

fn mysql_count(url: &str) -> String {
    let db = url.rsplit('/').next().unwrap();
    mysql(
        db,
        "select concat(count(*), ' ', coalesce(max(tag), '')) from items",
    )
}

/// Two concurrent `up`s build the template once; a changed key (a
/// `clone_inputs` file) rebuilds it, and later worlds get the new data while
/// earlier ones keep theirs.
fn template_lifecycle(b: &Backend, project: &str) {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"{}\"\nadmin_url = \"${{env.{}}}\"\nmigrate = \"{}\"\nseed = \"{}\"\nclone_from = \"golden\"\nclone_inputs = [\"tag.txt\"]\n",
        project_header(project, 2),
        b.adapter,
        b.var.0,
        b.migrate,
        b.seed
    );
    let repo = Repo::with("", &toml, &[("tag.txt", "v1\n")]);
    let spawn = |w: &str| {
        repo.cmd(&home, &["up", w])
            .env(b.var.0, b.var.1)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Start the daemon first so both ups race inside it, not for its start.
    home.ok(&["daemon", "start"]);
    let (x, y) = (spawn("a"), spawn("b"));
    for c in [x, y] {
        let out = Out(c.wait_with_output().unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
    assert_eq!(events(&home, "golden_built").len(), 1, "built twice");
    for w in ["a", "b"] {
        assert_eq!(
            (b.count)(&env_url(&repo, &home, w, b.var)),
            "200000 v1",
            "{w}"
        );
    }
    // Change a clone input on main; a world made from it rebuilds.
    std::fs::write(repo.main.join("tag.txt"), "v2\n").unwrap();
    git(&repo.main, &["commit", "-qam", "tag v2"]);
    let out = up_with(&repo, &home, "c", &[b.var]);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(
        events(&home, "golden_built").len(),
        2,
        "no rebuild on a changed key"
    );
    assert_eq!((b.count)(&env_url(&repo, &home, "c", b.var)), "200000 v2");
    assert_eq!((b.count)(&env_url(&repo, &home, "a", b.var)), "200000 v1");
    // An unchanged key reuses it.
    let out = up_with(&repo, &home, "d", &[b.var]);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(events(&home, "golden_built").len(), 2);
    for w in ["a", "b", "c", "d"] {
        let out = Out(repo
            .cmd(&home, &["remove", w, "--force"])
            .env(b.var.0, b.var.1)
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
}

#[test]
fn postgres_template_is_built_once_under_concurrency_and_rebuilt_on_a_key_change() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let project = format!("pgtpl{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    template_lifecycle(
        &Backend {
            adapter: "postgres",
            var: ("TEST_PG_ADMIN", PG_ADMIN),
            migrate: "psql \\\"$DB_URL\\\" -qc 'create table items(n int, tag text)'",
            seed: "psql \\\"$DB_URL\\\" -qc \\\"insert into items select g, '$(cat tag.txt)' from generate_series(1, 200000) g\\\"",
            count: pg_count,
        },
        &project,
    );
}

#[test]
fn mysql_template_is_built_once_under_concurrency_and_rebuilt_on_a_key_change() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let project = format!("mytpl{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    template_lifecycle(
        &Backend {
            adapter: "mysql",
            var: ("TEST_MYSQL_ADMIN", MYSQL_ADMIN),
            migrate: "mysql -h127.0.0.1 -uroot \\\"${DB_URL##*/}\\\" -e 'create table items(n int, tag text); create table d(x int); insert into d values (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)'",
            seed: "mysql -h127.0.0.1 -uroot \\\"${DB_URL##*/}\\\" -e \\\"insert into items select a.x+10*b.x+100*c.x+1000*e.x+10000*f.x+100000*g.x, '$(cat tag.txt)' from d a, d b, d c, d e, d f, d g where a.x+10*b.x+100*c.x+1000*e.x+10000*f.x+100000*g.x < 200000\\\"",
            count: mysql_count,
        },
        &project,
    );
}

/// `target/<profile>/examples/<name>`, next to this test binary's folder.
fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let p = profile_dir.join("examples").join(name);
    assert!(
        p.exists(),
        "{} is missing: `cargo test`/`cargo nextest run` build examples; run `cargo build --examples`",
        p.display()
    );
    p
}

/// `dir` in front of this process's PATH.
fn script(dir: &std::path::Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn external_adapters_in_python_and_rust_serve_up_clone_and_remove() {
    let home = Home::new();
    let bin = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    link_example_adapter(bin.path(), "filestore");
    std::os::unix::fs::symlink(
        example_binary("binky-adapter-dirstore"),
        bin.path().join("binky-adapter-dirstore"),
    )
    .unwrap();
    let path = path_with(bin.path());
    let seed = "echo seeded-$(cat tag.txt) > \\\"${BINKY_SLICE_URL#file://}/greeting\\\"";
    let toml = format!(
        "{}[services.files]\nadapter = \"filestore\"\nseed = \"{seed}\"\nclone_from = \"golden\"\nclone_inputs = [\"tag.txt\"]\n[services.blobs]\nadapter = \"dirstore\"\nseed = \"{seed}\"\nclone_from = \"golden\"\noptions = {{ root = \"{}\" }}\n",
        project_header("ext", 2),
        store.path().display()
    );
    let repo = Repo::with("", &toml, &[("tag.txt", "v1")]);
    let up = |w: &str| {
        Out(repo
            .cmd(&home, &["up", w])
            .env("PATH", &path)
            .output()
            .unwrap())
    };
    for w in ["a", "b"] {
        let out = up(w);
        assert_eq!(out.code(), 0, "{out}");
    }
    // Each adapter built its template once; both worlds are clones.
    let built = events(&home, "golden_built");
    assert_eq!(built.len(), 2, "{built:?}");
    assert!(events(&home, "clone_fallback").is_empty());
    let mut folders = Vec::new();
    for w in ["a", "b"] {
        let env = Out(repo
            .cmd(&home, &["env", w])
            .env("PATH", &path)
            .output()
            .unwrap())
        .json();
        for svc in ["files", "blobs"] {
            let url = env["services"][svc]
                .as_str()
                .unwrap_or_else(|| panic!("{env}"));
            let dir = std::path::PathBuf::from(url.strip_prefix("file://").unwrap());
            assert_eq!(
                std::fs::read_to_string(dir.join("greeting"))
                    .unwrap()
                    .trim(),
                "seeded-v1",
                "{w} {svc}"
            );
            folders.push(dir);
        }
    }
    assert!(folders[1].starts_with(store.path()), "{folders:?}");
    assert!(
        folders[0].starts_with(home.file("slices/filestore")),
        "{folders:?}"
    );
    // Isolated: a write in one world's slice is not in the other's.
    std::fs::write(folders[0].join("only-a"), "x").unwrap();
    assert!(!folders[2].join("only-a").exists());
    for w in ["a", "b"] {
        let out = Out(repo
            .cmd(&home, &["remove", w, "--force"])
            .env("PATH", &path)
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
    for f in &folders {
        assert!(!f.exists(), "{} left behind", f.display());
    }
}

#[test]
fn a_broken_external_adapter_is_a_clear_error_and_leaves_nothing() {
    let home = Home::new();
    let bin = tempfile::tempdir().unwrap();
    script(
        bin.path(),
        "binky-adapter-crashy",
        "#!/bin/sh\ncat >/dev/null\necho 'first line' >&2\necho 'cannot reach the store at /var/run/store.sock' >&2\nexit 3\n",
    );
    script(
        bin.path(),
        "binky-adapter-chatty",
        "#!/bin/sh\ncat >/dev/null\necho 'hello, I am not JSON'\n",
    );
    script(
        bin.path(),
        "binky-adapter-slow",
        "#!/bin/sh\ncat >/dev/null\nexec sleep 30\n",
    );
    script(
        bin.path(),
        "binky-adapter-refusing",
        "#!/bin/sh\ncat >/dev/null\necho '{\"ok\": false, \"error\": \"quota exceeded\"}'\n",
    );
    let path = path_with(bin.path());
    for (adapter, extra, expect) in [
        (
            "crashy",
            "",
            "cannot reach the store at /var/run/store.sock",
        ),
        ("chatty", "", "did not print one JSON object"),
        (
            "slow",
            "options = { timeout = \"1s\" }\n",
            "did not finish within 1s",
        ),
        ("refusing", "", "quota exceeded"),
        ("absent", "", "binky-adapter-absent on PATH"),
    ] {
        let toml = format!(
            "{}[services.db]\nadapter = \"{adapter}\"\n{extra}",
            project_header(adapter, 2)
        );
        let repo = Repo::new(&toml);
        let out = Out(repo
            .cmd(&home, &["up", "w"])
            .env("PATH", &path)
            .output()
            .unwrap());
        assert_eq!(out.code(), 1, "{adapter}: {out}");
        assert!(out.stderr().contains(expect), "{adapter}: {out}");
        if adapter == "crashy" {
            assert!(out.stderr().contains("exited with"), "{out}");
            // The stderr line that explains it is on the line status shows.
            let worlds = repo.worlds(&home);
            let first = worlds["w"]["error"]
                .as_str()
                .unwrap()
                .lines()
                .next()
                .unwrap();
            assert!(first.contains("/var/run/store.sock"), "{first}");
        }
        // Nothing half-made: no slice recorded, no port held.
        let st = home.ok(&["metrics"]).json();
        assert_eq!(st["port_reservations"], 0, "{adapter}: {st}");
    }
}

#[test]
fn an_adapter_that_quotes_its_admin_url_never_leaks_the_password() {
    let home = Home::new();
    let bin = tempfile::tempdir().unwrap();
    // Echoes its request (which holds admin_url) to stderr and in its
    // error, then fails — as a careless adapter would.
    script(
        bin.path(),
        "binky-adapter-leaky",
        "#!/bin/sh\nreq=$(cat)\necho \"request was: $req\" >&2\nprintf '{\"ok\": false, \"error\": \"cannot use %s\"}' \"$(echo \"$req\" | sed 's/.*admin_url\":\"\\([^\"]*\\)\".*/\\1/')\"\n",
    );
    let path = path_with(bin.path());
    let toml = format!(
        "{}[services.db]\nadapter = \"leaky\"\nadmin_url = \"${{env.LEAKY_URL}}\"\n",
        project_header("leaky", 2)
    );
    let repo = Repo::new(&toml);
    let secret = "Hunter2Secret";
    let out = Out(repo
        .cmd(&home, &["up", "w"])
        .env("PATH", &path)
        .env("LEAKY_URL", format!("db://admin:{secret}@127.0.0.1:1/"))
        .output()
        .unwrap());
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("services.db"), "{out}");
    assert!(out.stderr().contains("cannot use ***"), "{out}");
    let status = home.ok(&["status", "--json"]).stdout();
    for (what, text) in [
        ("up's output", format!("{}{}", out.stdout(), out.stderr())),
        ("status", status),
        (
            "events.log",
            std::fs::read_to_string(home.file("events.log")).unwrap_or_default(),
        ),
        (
            "daemon.log",
            std::fs::read_to_string(home.file("daemon.log")).unwrap_or_default(),
        ),
    ] {
        assert!(!text.contains(secret), "{what} leaks the password:\n{text}");
    }
}

#[test]
fn a_template_whose_seed_fails_is_dropped_not_left_half_made() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nclone_from = \"main\"\nseed = \"echo seeding; exit 7\"\n",
        project_header("halfmade", 2)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "w"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("services.db.seed failed"), "{out}");
    // No template and no world's slice on the "server"...
    assert_eq!(home.listed("slices/sqlite"), Vec::<String>::new());
    // ...and the build's marker, keyless (never taken for a finished
    // template), with the seed's output in the log beside it.
    let golden = home.listed("golden/sqlite");
    assert_eq!(golden.len(), 2, "{golden:?}");
    assert!(golden[0].starts_with("halfmade_golden_main_"), "{golden:?}");
    assert_eq!(golden[1], format!("{}.log", golden[0]));
    let marker =
        std::fs::read_to_string(home.file(&format!("golden/sqlite/{}", golden[0]))).unwrap();
    assert_eq!(marker.lines().next(), Some(""), "{marker}");
    let log = std::fs::read_to_string(home.file(&format!("golden/sqlite/{}", golden[1]))).unwrap();
    assert!(log.contains("seeding"), "{log}");
    // Once no world needs it, gc leaves nothing of it, log included.
    repo.ok(&home, &["remove", "w", "--force"]);
    let gc = repo.run(&home, &["gc"]);
    assert_eq!(gc.code(), 0, "{gc}");
    assert_eq!(home.listed("golden/sqlite"), Vec::<String>::new(), "{gc}");
}

#[test]
fn a_teardown_that_fails_keeps_the_world_unless_forced_and_gc_sweeps_it_later() {
    let home = Home::new();
    let bin = tempfile::tempdir().unwrap();
    let flag = bin.path().join("teardown-works");
    // A slice is a folder; teardown fails until the flag file exists.
    script(
        bin.path(),
        "binky-adapter-sticky",
        &format!(
            "#!/usr/bin/env python3\nimport json, os, shutil, sys\nverb = sys.argv[1]\nreq = json.load(sys.stdin)\npath = os.path.join(req['data_dir'], req['slice'])\nr = {{'ok': True}}\nif verb == 'provision': os.makedirs(path)\nelif verb == 'exists': r['exists'] = os.path.isdir(path)\nelif verb == 'resolve': r['address'] = 'file://' + path\nelif verb == 'capabilities': r['capabilities'] = []\nelif verb == 'teardown':\n    if os.path.exists({flag:?}): shutil.rmtree(path, ignore_errors=True)\n    else: r = {{'ok': False, 'error': 'the store is read-only today'}}\nprint(json.dumps(r))\n",
            flag = flag.display().to_string()
        ),
    );
    let path = path_with(bin.path());
    let toml = format!(
        "{}[services.st]\nadapter = \"sticky\"\n",
        project_header("sticky", 2)
    );
    let repo = Repo::new(&toml);
    let run = |args: &[&str]| Out(repo.cmd(&home, args).env("PATH", &path).output().unwrap());
    assert_eq!(run(&["up", "w"]).code(), 0);
    assert_eq!(run(&["up", "v"]).code(), 0);
    // World v's remove fails and v stays, its slice stuck in teardown.
    assert_eq!(run(&["remove", "v"]).code(), 1);
    let folder = home.file("slices/sticky/sticky_w");
    assert!(folder.is_dir());
    // Without --force: refused, and status says why instead of "running".
    let out = run(&["remove", "w"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("the store is read-only today"),
        "{out}"
    );
    let w = &repo.worlds(&home)["w"];
    assert_eq!(w["state"], "failed", "{w}");
    // With --force: the world goes, the slice waits for gc.
    let out = run(&["remove", "w", "--force"]);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("`binky gc` retries it"), "{out}");
    assert!(!repo.worlds(&home).contains_key("w"));
    assert!(folder.is_dir());
    let dry = run(&["gc", "--dry-run"]);
    assert!(dry.stdout().contains("sticky_w"), "{dry}");
    std::fs::write(&flag, "").unwrap();
    let out = run(&["gc"]);
    assert_eq!(out.code(), 0, "{out}");
    assert!(!folder.exists(), "gc did not sweep the slice");
    assert!(!run(&["gc", "--dry-run"]).stdout().contains("sticky_w"));
    // v's slice went too, and v no longer claims it.
    assert!(!home.file("slices/sticky/sticky_v").exists());
    let v = &repo.worlds(&home)["v"];
    assert_ne!(v["services"][0]["state"], "provisioned", "{v}");
    // `up` makes it again.
    assert_eq!(run(&["up", "v"]).code(), 0);
    assert!(home.file("slices/sticky/sticky_v").is_dir());
    assert_eq!(
        repo.worlds(&home)["v"]["services"][0]["state"],
        "provisioned"
    );
}

fn pg_toml(project: &str, admin_var: &str) -> String {
    format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.{admin_var}}}\"\nmigrate = \"psql \\\"$DB_URL\\\" -qc 'create table t(x int)' && echo migrated\"\nseed = \"psql \\\"$DB_URL\\\" -qc 'insert into t values (42)' && echo seeded\"\nclone_from = \"golden\"\n",
        project_header(project, 1)
    )
}

#[test]
fn a_session_on_the_golden_template_is_never_ended_and_the_world_is_built_anyway() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("holder{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    // No spares: each world is a clone, so the template's sessions matter
    // (a spare, made before the session opened, would spare b the wait).
    let toml = format!(
        "{}[services.db.options]\nspares = 0\n",
        pg_toml(&project, "TEST_PG_ADMIN")
    );
    let repo = Repo::new(&toml);
    let var = ("TEST_PG_ADMIN", PG_ADMIN);
    let out = up_with(&repo, &home, "a", &[var]);
    assert_eq!(out.code(), 0, "{out}");
    // Someone inspects the template in psql and leaves the session open.
    let template = home.cloned_from("a", "db");
    let holder_url = format!("{}/{template}", PG_ADMIN.rsplit_once('/').unwrap().0);
    let mut holder = std::process::Command::new("psql")
        .arg(&holder_url)
        .env("PGAPPNAME", "someone-inspecting")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sessions = || {
        psql(
            PG_ADMIN,
            &format!(
                "select count(*) from pg_stat_activity where datname = '{template}' and application_name = 'someone-inspecting'"
            ),
        )
    };
    assert!(wait_until(std::time::Duration::from_secs(10), || sessions() == "1"));
    let out = up_with(&repo, &home, "b", &[var]);
    assert_eq!(out.code(), 0, "{out}");
    // The session lives on, untouched...
    assert_eq!(sessions(), "1", "binky ended a session it did not open");
    assert!(
        holder.try_wait().unwrap().is_none(),
        "psql was disconnected"
    );
    // ...the world was built by migrate + seed instead, and the reason says
    // who holds the template and what to do.
    assert_eq!(
        psql(&env_url(&repo, &home, "b", var), "select x from t"),
        "42"
    );
    let fallback = events(&home, "clone_fallback");
    assert_eq!(fallback.len(), 1, "{fallback:?}");
    let detail = fallback[0]["detail"].as_str().unwrap();
    for want in ["someone-inspecting", "pid ", "user postgres", "close them"] {
        assert!(detail.contains(want), "{want} not in {detail}");
    }
    // Once the session is gone, worlds are clones again; a clone's log says
    // which template it came from and where that template's log is.
    drop(holder.stdin.take());
    let _ = holder.wait();
    let out = up_with(&repo, &home, "c", &[var]);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(events(&home, "clone_fallback").len(), 1);
    let log = repo.ok(&home, &["logs", "c", "db"]).stdout();
    assert!(
        log.contains(&format!("cloned from template {template}")),
        "{log}"
    );
    let template_log = log
        .split("output is in ")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim();
    let built = std::fs::read_to_string(template_log).unwrap();
    assert!(
        built.contains("migrated") && built.contains("seeded"),
        "{built}"
    );
    for w in ["a", "b", "c"] {
        let out = up_with(&repo, &home, w, &[var]);
        assert_eq!(out.code(), 0, "{out}");
        let out = Out(repo
            .cmd(&home, &["remove", w, "--force"])
            .env(var.0, var.1)
            .output()
            .unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }
}

#[test]
fn a_postgres_error_shows_the_servers_own_words() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("nocreate{}", std::process::id() % 10000);
    let role = format!("binky_nocreate_{}", std::process::id());
    psql(PG_ADMIN, &format!("create role {role} login"));
    struct DropRole(String);
    impl Drop for DropRole {
        fn drop(&mut self) {
            let _ = std::process::Command::new("psql")
                .args([PG_ADMIN, "-qc", &format!("drop role if exists {}", self.0)])
                .output();
        }
    }
    let _role = DropRole(role.clone());
    let admin = format!("postgresql://{role}@127.0.0.1:5432/postgres");
    let repo = Repo::new(&pg_toml(&project, "NOCREATE_ADMIN"));
    let out = up_with(&repo, &home, "a", &[("NOCREATE_ADMIN", &admin)]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("permission denied to create database"),
        "{out}"
    );
    assert!(!out.stderr().contains("db error"), "{out}");
}

#[test]
fn a_mysql_clone_fallback_names_the_object_it_could_not_create() {
    if !mysql_up() {
        skip("no MariaDB/MySQL on 127.0.0.1:3306 (or the mysql client is missing)");
        return;
    }
    let home = Home::new();
    let project = format!("definer{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: true,
    };
    // An admin account that may create the project's databases but not
    // views with another definer (no SUPER / SET USER), as on a shared server.
    let user = format!("binky_definer_{}", std::process::id());
    mysql(
        "",
        &format!(
            "CREATE USER '{user}'@'127.0.0.1'; GRANT ALL ON `{project}\\_%`.* TO '{user}'@'127.0.0.1'"
        ),
    );
    struct DropUser(String);
    impl Drop for DropUser {
        fn drop(&mut self) {
            let _ = Command::new("mysql")
                .args([
                    "-h127.0.0.1",
                    "-uroot",
                    "-e",
                    &format!("DROP USER IF EXISTS '{}'@'127.0.0.1'", self.0),
                ])
                .output();
        }
    }
    let _user = DropUser(user.clone());
    // The migrate runs as root, so the view's definer is root.
    let toml = format!(
        "{}[services.db]\nadapter = \"mysql\"\nadmin_url = \"${{env.DEFINER_ADMIN}}\"\nmigrate = \"mysql -h127.0.0.1 -uroot \\\"${{DB_URL##*/}}\\\" -e 'create table t(x int); create sql security definer view the_view as select x from t'\"\nclone_from = \"golden\"\n# The account may not create users: worlds get its credentials.\noptions = {{ acl = false }}\n",
        project_header(&project, 1)
    );
    let repo = Repo::new(&toml);
    let admin = format!("mysql://{user}@127.0.0.1:3306/");
    let out = up_with(&repo, &home, "a", &[("DEFINER_ADMIN", &admin)]);
    assert_eq!(out.code(), 0, "{out}");
    let fallback = events(&home, "clone_fallback");
    assert_eq!(fallback.len(), 1, "{fallback:?}");
    let detail = fallback[0]["detail"].as_str().unwrap();
    assert!(detail.contains("VIEW `the_view`"), "{detail}");
    let out = Out(repo
        .cmd(&home, &["remove", "a", "--force"])
        .env("DEFINER_ADMIN", &admin)
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
}

/// Issue: a golden template's marker named no server, so an `admin_url`
/// that moved rebuilt the template on the new server and orphaned the old
/// one. The marker records where it was built; a move drops it there first,
/// or stops naming both servers when the credentials are not at hand.
#[test]
fn a_golden_template_is_dropped_on_the_server_it_was_built_on_when_admin_url_moves() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("gmove{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let repo = Repo::new(&pg_toml(&project, "TEST_PG_ADMIN"));
    // Built through 127.0.0.1: the marker says so, with no credential.
    let out = up_with(&repo, &home, "a", &[("TEST_PG_ADMIN", PG_ADMIN)]);
    assert_eq!(out.code(), 0, "{out}");
    let marker = home.file(&format!("golden/postgres/{}", home.cloned_from("a", "db")));
    let text = std::fs::read_to_string(&marker).unwrap();
    assert!(text.contains("postgresql://127.0.0.1:5432\n"), "{text}");
    assert!(!text.contains("postgres@"), "{text}");
    home.ok(&["daemon", "stop"]);
    // The same server spelled `localhost` is, to Binky, another one: the
    // template is dropped where it was built (same credentials) and built
    // anew.
    let moved = PG_ADMIN.replace("127.0.0.1", "localhost");
    let out = up_with(&repo, &home, "b", &[("TEST_PG_ADMIN", &moved)]);
    assert_eq!(out.code(), 0, "{out}");
    let ev = events(&home, "golden_moved");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(
        ev[0]["detail"]
            .as_str()
            .unwrap()
            .contains("was made on postgresql://127.0.0.1:5432: reached it there"),
        "{ev:?}"
    );
    assert_eq!(events(&home, "golden_built").len(), 2);
    let text = std::fs::read_to_string(&marker).unwrap();
    assert!(text.contains("postgresql://localhost:5432\n"), "{text}");
    home.ok(&["daemon", "stop"]);
    // Other credentials, another server: the template cannot be reached,
    // so nothing is built and the marker stays.
    let other = "postgresql://root@127.0.0.1:5432/postgres";
    let out = up_with(&repo, &home, "c", &[("TEST_PG_ADMIN", other)]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("was made on postgresql://localhost:5432")
            && out
                .stderr()
                .contains("admin_url now names postgresql://127.0.0.1:5432"),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), text);
    assert_eq!(events(&home, "golden_built").len(), 2);
}

#[test]
fn gc_leaves_a_marker_being_written_and_sweeps_one_a_crash_cut_short() {
    let home = Home::new();
    let toml = format!(
        "{}[services.db]\nadapter = \"sqlite\"\nclone_from = \"main\"\nseed = \"exit 7\"\n",
        project_header("midwrite", 2)
    );
    let repo = Repo::new(&toml);
    assert_eq!(repo.run(&home, &["up", "w"]).code(), 1);
    let golden = home.listed("golden/sqlite");
    let marker = home.file(&format!("golden/sqlite/{}", golden[0]));
    let text = std::fs::read_to_string(&marker).unwrap();
    // A marker's temporary file while its writer lives (an `up` renaming
    // it in a moment), and one whose writer died before the rename.
    let mut writer = Command::new("sleep").arg("60").spawn().unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let tmp = |pid: u32| home.file(&format!("golden/sqlite/.{}.{pid}.tmp", golden[0]));
    let (live, dead) = (tmp(writer.id()), tmp(gone.id()));
    std::fs::write(&live, &text).unwrap();
    std::fs::write(&dead, &text).unwrap();
    repo.ok(&home, &["remove", "w", "--force"]);
    let gc = repo.run(&home, &["gc", "--json"]);
    assert_eq!(gc.code(), 0, "{gc}");
    assert!(live.exists(), "a write in flight was swept: {gc}");
    assert!(!dead.exists(), "{gc}");
    // The marker and the dead write are swept; the live write is not
    // reported, nor taken for a template of its own.
    let mut swept: Vec<String> = gc
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["what"].as_str().unwrap().to_owned())
        .collect();
    assert!(!marker.exists(), "{gc}");
    swept.sort();
    assert_eq!(
        swept,
        [dead.display().to_string(), marker.display().to_string()],
        "{gc}"
    );
    let _ = writer.kill();
    let _ = writer.wait();
}
