//! Golden templates per key, against the real PostgreSQL on this machine:
//! branches whose migrations differ keep a template each and never rebuild
//! each other's; `status` says when a world's data predates its branch's
//! migrations; `reset` rebuilds one world's slice and leaves its sibling
//! alone; `gc` drops only templates no world's key uses; a fresh clone whose
//! catch-up `migrate` cannot run is built from scratch while a world with
//! data of its own keeps it; a copy that fails for a reason of its own fails
//! the world instead of hiding behind a rebuild.

use crate::adapters::{PG_ADMIN, pg_up, psql};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;
use serde_json::Value;

const ENV: [(&str, &str); 1] = [("TEST_PG_ADMIN", PG_ADMIN)];

/// A project whose `db` is a PostgreSQL slice seeded with three rows.
fn pg_toml(project: &str, migrate: &str, extra: &str) -> String {
    format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.TEST_PG_ADMIN}}\"\nmigrate = \"{migrate}\"\nseed = \"psql \\\"$DB_URL\\\" -qc 'insert into items(n) values (1), (2), (3)'\"\nclone_from = \"golden\"\n{extra}",
        project_header(project, 4)
    )
}

fn up(repo: &Repo, home: &Home, world: &str) -> Out {
    let out = repo.run_with(home, &["up", world], &ENV);
    assert_eq!(out.code(), 0, "up {world}: {out}");
    out
}

fn db_url(repo: &Repo, home: &Home, world: &str) -> String {
    let env = repo.run_with(home, &["env", world], &ENV).json();
    env["services"]["db"]
        .as_str()
        .unwrap_or_else(|| panic!("{env}"))
        .to_owned()
}

fn events_named(home: &Home, name: &str) -> Vec<Value> {
    home.events()
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

fn databases(prefix: &str) -> Vec<String> {
    psql(PG_ADMIN, "select datname from pg_database")
        .lines()
        .filter(|d| d.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// `gc --json` (with `--dry-run` when `dry`): its items of kind `template`.
fn template_sweeps(repo: &Repo, home: &Home, dry: bool) -> Vec<Value> {
    let args: &[&str] = if dry {
        &["gc", "--dry-run", "--json"]
    } else {
        &["gc", "--json"]
    };
    let out = repo.run_with(home, args, &ENV);
    // 1: something was not swept (and said why).
    assert!(out.code() == 0 || out.code() == 1, "{out}");
    out.json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "template")
        .cloned()
        .collect()
}

#[test]
fn branches_keep_their_own_templates_reset_rebuilds_one_world_and_gc_drops_only_unused() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("gk{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let v1 = "create table if not exists items(n int);\n";
    let toml = pg_toml(
        &project,
        "psql \\\"$DB_URL\\\" -v ON_ERROR_STOP=1 -qf schema.sql",
        "clone_inputs = [\"schema.sql\"]\n",
    );
    let repo = Repo::with("", &toml, &[("schema.sql", v1)]);
    // Branch b carries a migration main does not have.
    git(&repo.main, &["checkout", "-qb", "b"]);
    let v2 = format!("{v1}alter table items add column if not exists tag text;\n");
    std::fs::write(repo.main.join("schema.sql"), &v2).unwrap();
    git(&repo.main, &["commit", "-qam", "tag column"]);
    git(&repo.main, &["checkout", "-q", "main"]);
    for w in ["a", "b", "a2"] {
        up(&repo, &home, w);
    }
    // One template per key: main's and b's, each built once.
    assert_eq!(events_named(&home, "golden_built").len(), 2);
    let (ta, tb) = (home.cloned_from("a", "db"), home.cloned_from("b", "db"));
    assert_ne!(ta, tb);
    assert_eq!(home.cloned_from("a2", "db"), ta);
    for t in [&ta, &tb] {
        assert!(t.starts_with(&format!("{project}_golden_golden_")), "{t}");
        assert!(t.len() <= 63, "{t}");
    }
    let has_tag = |w: &str| {
        psql(
            &db_url(&repo, &home, w),
            "select count(*) from information_schema.columns where table_name = 'items' and column_name = 'tag'",
        )
    };
    assert_eq!((has_tag("a"), has_tag("b")), ("0".into(), "1".into()));
    // Every clone is an event: from which template, how, how long.
    let cloned = events_named(&home, "cloned");
    assert_eq!(cloned.len(), 3, "{cloned:?}");
    for c in &cloned {
        assert!(c["template"].as_str().unwrap().contains("_golden_"), "{c}");
        assert!(c["how"].as_str().unwrap().starts_with("TEMPLATE"), "{c}");
        assert!(c["ms"].is_u64(), "{c}");
    }
    // `doctor` says what a clone costs on this server: a full copy before
    // PostgreSQL 18, and what would make it copy-on-write.
    let doctor: Value =
        serde_json::from_slice(&home.cmd(&["doctor", "--json"]).output().unwrap().stdout).unwrap();
    let clones: Vec<&Value> = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "clones")
        .collect();
    assert_eq!(clones.len(), 2, "one per template: {doctor}");
    let version: u32 = psql(PG_ADMIN, "show server_version_num").parse().unwrap();
    if version < 180_000 {
        for c in clones {
            assert_eq!(c["status"], "warn", "{c}");
            assert!(c["detail"].as_str().unwrap().contains("a full copy"), "{c}");
            let fix = c["fix"].as_str().unwrap();
            assert!(fix.contains("has no copy-on-write clone"), "{fix}");
            assert!(fix.contains("PostgreSQL 18"), "{fix}");
            // A local server: its data directory's filesystem is named.
            assert!(fix.contains(" is on "), "{fix}");
        }
    }
    // b reset: cloned again from its own template, nothing rebuilt.
    let out = repo.run_with(&home, &["reset", "b"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(events_named(&home, "golden_built").len(), 2);
    assert_eq!(home.cloned_from("b", "db"), tb);
    let notes = |w: &str| repo.worlds(&home)[w]["notes"].clone();
    assert!(notes("a").is_null(), "{}", notes("a"));

    // World a's migrations change in its worktree: status says its data
    // predates them, and how to get data that does not.
    let wt_a = repo.worlds(&home)["a"]["path"].as_str().unwrap().to_owned();
    std::fs::write(
        std::path::Path::new(&wt_a).join("schema.sql"),
        format!("{v1}create table if not exists extra(x int);\n"),
    )
    .unwrap();
    assert_eq!(
        notes("a"),
        serde_json::json!([
            "db cloned before migrations changed: `binky reset a db` (or `binky reload a` to migrate the data it has)"
        ])
    );
    let status = repo.run_with(&home, &["status"], &ENV).stdout();
    assert!(status.contains("`binky reset a db`"), "{status}");
    // A reload migrates the data a has: its schema is the branch's now,
    // and the note (whose reset would cost the data) goes.
    let out = repo.run_with(&home, &["reload", "a"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert!(notes("a").is_null(), "{}", notes("a"));
    assert_eq!(
        psql(&db_url(&repo, &home, "a"), "select count(*) from extra"),
        "0"
    );
    // a spoils its data; its sibling a2 has rows of its own.
    psql(&db_url(&repo, &home, "a"), "delete from items");
    psql(&db_url(&repo, &home, "a2"), "insert into items values (42)");
    let out = repo.run_with(&home, &["reset", "a", "db"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout().contains("✓ reset: a"), "{out}");
    // A template for a's new key, a's seeded rows back under its new
    // schema, a2 as it was, and the note gone.
    assert_eq!(events_named(&home, "golden_built").len(), 3);
    let a_url = db_url(&repo, &home, "a");
    assert_eq!(psql(&a_url, "select count(*) from items"), "3");
    assert_eq!(psql(&a_url, "select count(*) from extra"), "0");
    assert_eq!(
        psql(&db_url(&repo, &home, "a2"), "select count(*) from items"),
        "4"
    );
    assert!(notes("a").is_null(), "{}", notes("a"));
    let reset = events_named(&home, "reset");
    assert_eq!(reset.len(), 2, "{reset:?}");

    // gc: every template is some world's key, so none is swept…
    assert_eq!(template_sweeps(&repo, &home, true), Vec::<Value>::new());
    // …until the last world on main's key goes.
    let out = repo.run_with(&home, &["remove", "a2"], &ENV);
    assert_eq!(out.code(), 0, "{out}");
    let dry = template_sweeps(&repo, &home, true);
    assert_eq!(dry.len(), 1, "{dry:?}");
    assert!(dry[0]["what"].as_str().unwrap().ends_with(&ta), "{dry:?}");
    assert_eq!(dry[0]["result"], "would_sweep");
    assert!(databases(&project).contains(&ta), "a dry run dropped it");
    // Someone has the template open in psql: gc leaves it, and the session.
    let holder_url = format!("{}/{ta}", PG_ADMIN.rsplit_once('/').unwrap().0);
    let holder = Reaped(
        std::process::Command::new("psql")
            .arg(&holder_url)
            .env("PGAPPNAME", "someone-reading")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let open = || {
        psql(
            PG_ADMIN,
            &format!(
                "select count(*) from pg_stat_activity where datname = '{ta}' and application_name = 'someone-reading'"
            ),
        )
    };
    assert!(wait_until(std::time::Duration::from_secs(10), || open() == "1"));
    let held = template_sweeps(&repo, &home, false);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["result"], "not_swept", "{held:?}");
    assert!(
        held[0]["outcome"].as_str().unwrap().contains("in use"),
        "{held:?}"
    );
    assert_eq!(open(), "1", "gc ended a session it did not open");
    assert!(databases(&project).contains(&ta));
    drop(holder);
    assert!(wait_until(std::time::Duration::from_secs(10), || open() == "0"));
    let swept = template_sweeps(&repo, &home, false);
    assert_eq!(swept.len(), 1, "{swept:?}");
    assert_eq!(swept[0]["result"], "swept", "{swept:?}");
    let left = databases(&format!("{project}_golden_"));
    assert!(!left.contains(&ta), "{left:?}");
    assert!(left.contains(&tb), "{left:?}");
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!home.file(&format!("golden/postgres/{ta}")).exists());
    assert_eq!(events_named(&home, "template_dropped").len(), 1);
    for w in ["a", "b"] {
        let out = repo.run_with(&home, &["remove", w, "--force"], &ENV);
        assert_eq!(out.code(), 0, "{out}");
    }
}

#[test]
fn a_fresh_clone_whose_catch_up_cannot_run_is_built_from_scratch_but_data_is_kept() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("gc{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    // A migrate that cannot run twice, and no clone_inputs: every new
    // commit makes a clone catch up by running it again.
    let toml = pg_toml(
        &project,
        "psql \\\"$DB_URL\\\" -v ON_ERROR_STOP=1 -qc 'create table items(n int)'",
        "",
    );
    let repo = Repo::new(&toml);
    up(&repo, &home, "a");
    psql(&db_url(&repo, &home, "a"), "insert into items values (99)");
    std::fs::write(repo.main.join("notes.txt"), "a commit\n").unwrap();
    git(&repo.main, &["add", "notes.txt"]);
    git(&repo.main, &["commit", "-qm", "another commit"]);
    // b gets the spare a's `up` left ready (a copy of the template
    // migrated at the first commit): its catch-up fails, and b, holding
    // nothing of its own, is built afresh, once (never cloned again to
    // fail the same way).
    assert!(wait_until(std::time::Duration::from_secs(30), || {
        let status = repo.run_with(&home, &["status", "--json"], &ENV).json();
        status["projects"][0]["spares"]["ready"] == 1
    }));
    let out = up(&repo, &home, "b");
    assert!(out.stderr().contains("took the spare"), "{out}");
    assert!(out.stderr().contains("built from scratch"), "{out}");
    let rebuilt = events_named(&home, "clone_rebuilt");
    assert_eq!(rebuilt.len(), 1, "{rebuilt:?}");
    assert_eq!(rebuilt[0]["worktree"], "b");
    assert_eq!(
        psql(&db_url(&repo, &home, "b"), "select count(*) from items"),
        "3"
    );
    // a has rows of its own: when its branch moves and the catch-up
    // fails, it fails and keeps them.
    let wt_a = repo.worlds(&home)["a"]["path"].as_str().unwrap().to_owned();
    git(
        std::path::Path::new(&wt_a),
        &["commit", "--allow-empty", "-qm", "move"],
    );
    let out = repo.run_with(&home, &["reload", "a"], &ENV);
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("its data is kept"), "{out}");
    assert_eq!(
        psql(&db_url(&repo, &home, "a"), "select count(*) from items"),
        "4"
    );
    assert_eq!(events_named(&home, "clone_rebuilt").len(), 1);
    for w in ["a", "b"] {
        let out = repo.run_with(&home, &["remove", w, "--force"], &ENV);
        assert_eq!(out.code(), 0, "{out}");
    }
}

#[test]
fn a_copy_that_fails_for_its_own_reason_fails_up_and_leaves_no_slice() {
    let home = Home::new();
    let bin = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    link_example_adapter(bin.path(), "filestore");
    let path = path_with(bin.path());
    // The seed leaves a dangling symlink in the template, which the
    // adapter's copy refuses: not a missing tool or grant, so no rebuild.
    let toml = format!(
        "{}[services.files]\nadapter = \"filestore\"\nseed = \"ln -s /nonexistent-binky-target \\\"${{BINKY_SLICE_URL#file://}}/dangling\\\"\"\nclone_from = \"golden\"\noptions = {{ root = \"{}\" }}\n",
        project_header("badcopy", 2),
        store.path().display()
    );
    let repo = Repo::new(&toml);
    let out = repo.run_with(&home, &["up", "a"], &[("PATH", &path)]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("golden template"), "{out}");
    assert_eq!(events_named(&home, "golden_built").len(), 1);
    assert!(events_named(&home, "clone_fallback").is_empty());
    assert!(events_named(&home, "cloned").is_empty());
    // Only the template's folder: the half-made copy was dropped.
    let folders: Vec<String> = std::fs::read_dir(store.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    assert!(
        folders[0].starts_with("badcopy_golden_golden_"),
        "{folders:?}"
    );
}
