//! Copy-on-write clones on a filesystem that shares blocks (issue 51), for
//! real: PostgreSQL 18 with its data directory on XFS made with
//! `reflink=1`, and Binky's own files (sqlite slices, `[project] copy`) on
//! the same filesystem. `.ci/run` sets both up with `.ci/pg18-reflink`,
//! which exports `BINKY_TEST_PG18_URL` and `BINKY_TEST_XFS`.
//!
//! Disk is measured as the filesystem's free space, the one figure a
//! shared block does not inflate; bounds are fractions of the template's
//! own size, so they hold whatever the machine.

use crate::cleanup::drop_pg;
use crate::harness::*;
use crate::project::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// PostgreSQL 18's admin URL and the XFS folder, or a skip saying how to
/// get them.
fn pg18() -> Option<(String, PathBuf)> {
    let xfs = xfs()?;
    let Ok(admin) = std::env::var("BINKY_TEST_PG18_URL") else {
        skip("BINKY_TEST_PG18_URL is not set (run `eval \"$(.ci/pg18-reflink)\"` as root)");
        return None;
    };
    let version = std::process::Command::new("psql")
        .args([&admin, "-tAc", "show server_version_num"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match version.and_then(|v| v.parse::<u32>().ok()) {
        Some(v) if v >= 180_000 => Some((admin, xfs)),
        Some(v) => {
            skip(&format!("BINKY_TEST_PG18_URL is PostgreSQL {v}, not 18+"));
            None
        }
        None => {
            skip("BINKY_TEST_PG18_URL does not answer (start it with .ci/pg18-reflink)");
            None
        }
    }
}

/// The folder on a filesystem that shares blocks, or a skip.
fn xfs() -> Option<PathBuf> {
    let Ok(dir) = std::env::var("BINKY_TEST_XFS") else {
        skip("BINKY_TEST_XFS is not set (run `eval \"$(.ci/pg18-reflink)\"` as root)");
        return None;
    };
    let dir = PathBuf::from(dir);
    let magic = nix::sys::statfs::statfs(&dir).map(|s| s.filesystem_type());
    if magic != Ok(nix::sys::statfs::XFS_SUPER_MAGIC) {
        skip(&format!("BINKY_TEST_XFS={} is not on XFS", dir.display()));
        return None;
    }
    Some(dir)
}

/// Bytes free on the filesystem holding `dir`.
fn free(dir: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(dir).unwrap();
    s.blocks_available() as u64 * s.fragment_size() as u64
}

fn psql(url: &str, sql: &str) -> String {
    crate::adapters::psql(url, sql)
}

/// The `cloned` event of `world`'s `service`.
fn cloned(home: &Home, world: &str, service: &str) -> Value {
    home.events()
        .into_iter()
        .rev()
        .find(|e| e["event"] == "cloned" && e["worktree"] == world && e["service"] == service)
        .unwrap_or_else(|| panic!("no cloned event for {world}/{service}"))
}

/// `binky doctor --json`'s `clones` checks.
fn clone_checks(home: &Home) -> Vec<Value> {
    let out = home.cmd(&["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "clones")
        .cloned()
        .collect()
}

struct Pg18Cleanup {
    admin: String,
    prefix: String,
}

impl Drop for Pg18Cleanup {
    fn drop(&mut self) {
        drop_pg(&self.admin, &self.prefix);
    }
}

#[test]
fn a_postgres_18_world_on_reflink_is_a_clone_that_takes_no_disk_until_it_writes() {
    let Some((admin, xfs)) = pg18() else {
        return;
    };
    let env = [("TEST_PG18_ADMIN", admin.as_str())];
    let project = format!("cw{}", std::process::id() % 10000);
    let _cleanup = Pg18Cleanup {
        admin: admin.clone(),
        prefix: format!("{project}_"),
    };
    let psql_in = |db: &str| format!("psql \\\"$DB_URL\\\" -v ON_ERROR_STOP=1 -qc '{db}'");
    // `db`'s template is ~35 MB; `small`'s is an empty database, below the
    // 16 MB from which a plain copy takes FILE_COPY: it is cloned too. No
    // spares: every world is a clone.
    let toml = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.TEST_PG18_ADMIN}}\"\nmigrate = \"{}\"\nseed = \"{}\"\nclone_from = \"golden\"\noptions = {{ spares = 0 }}\n[services.small]\nadapter = \"postgres\"\nadmin_url = \"${{env.TEST_PG18_ADMIN}}\"\nmigrate = \"{}\"\nclone_from = \"golden\"\noptions = {{ spares = 0 }}\n",
        project_header(&project, 4),
        psql_in("create table if not exists big(n int, m text)"),
        psql_in("insert into big select g, md5(g::text) from generate_series(1, 400000) g"),
        psql_in("create table if not exists t(n int)"),
    );
    let repo = Repo::with("", &toml, &[]);
    let home = Home::new();
    let out = repo.run_with(&home, &["up", "a"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("cloned from"), "{out}");
    assert!(out.stderr().contains("(reflink, "), "{out}");

    let template = home.cloned_from("a", "db");
    let size: u64 = psql(&admin, &format!("select pg_database_size('{template}')"))
        .parse()
        .unwrap();
    assert!(size > 30_000_000, "the template is {size} bytes");

    // A second world: its clone takes under a tenth of the template's size
    // (what PostgreSQL's own checkpoint and WAL write), measured here and
    // by Binky.
    let before = free(&xfs);
    let out = repo.run_with(&home, &["up", "b"], &env);
    assert_eq!(out.code(), 0, "{out}");
    let took = before.saturating_sub(free(&xfs));
    assert!(took < size / 10, "a clone of {size} bytes took {took}");
    for service in ["db", "small"] {
        let ev = cloned(&home, "b", service);
        assert_eq!(ev["how"], "reflink", "{ev}");
        let bytes = ev["bytes"].as_u64().unwrap_or_else(|| panic!("{ev}"));
        assert!(bytes < size / 10, "{ev}");
    }
    // Binky set file_copy_method on its own session; the server's is not
    // changed.
    assert_eq!(psql(&admin, "show file_copy_method"), "copy");

    // Writes stay in their world.
    let url = |w: &str| {
        let env = repo.run_with(&home, &["env", w], &env).json();
        env["services"]["db"].as_str().unwrap().to_owned()
    };
    let (a, b) = (url("a"), url("b"));
    psql(&a, "insert into big values (-1, 'a only')");
    assert_eq!(psql(&b, "select count(*) from big where n = -1"), "0");
    let template_url = format!("{}/{template}", admin.rsplit_once('/').unwrap().0);
    assert_eq!(
        psql(&template_url, "select count(*) from big where n = -1"),
        "0"
    );
    assert_eq!(psql(&a, "select count(*) from big where n = -1"), "1");

    // Rewriting every row of a unshares its blocks; `remove` returns them.
    psql(&a, "update big set m = m || 'x'");
    psql(&admin, "checkpoint");
    let a_db = cloned(&home, "a", "db")["detail"].clone();
    let a_size: u64 = psql(&a, "select pg_database_size(current_database())")
        .parse()
        .unwrap();
    let written = free(&xfs);
    let out = repo.run_with(&home, &["remove", "a"], &env);
    assert_eq!(out.code(), 0, "{out}");
    // XFS may free an unlinked file's extents in the background.
    assert!(
        wait_until(Duration::from_secs(30), || free(&xfs)
            > written + a_size / 2),
        "remove of a ({a_db}, {a_size} bytes) returned {} bytes",
        free(&xfs).saturating_sub(written)
    );

    // `doctor` says the clones share blocks, with what they took.
    let checks = clone_checks(&home);
    assert_eq!(checks.len(), 2, "{checks:?}");
    for c in &checks {
        assert_eq!(c["status"], "ok", "{c}");
        assert!(c["detail"].as_str().unwrap().contains("sharing"), "{c}");
    }
}

#[test]
fn sqlite_slices_and_project_copies_on_reflink_share_blocks() {
    let Some(xfs) = xfs() else {
        return;
    };
    // The seed writes ~20 MB; each world's copy of it must share blocks.
    let seed = "import os, sqlite3\nc = sqlite3.connect(os.environ['DB_URL'].removeprefix('sqlite://'))\nc.execute('create table t(x)')\nc.executemany('insert into t values (?)', ((os.urandom(1000),) for _ in range(20000)))\nc.commit()\n";
    let toml = format!(
        "{}copy = [\"blob.bin\"]\n[services.db]\nadapter = \"sqlite\"\nseed = \"python3 seed.py\"\nclone_from = \"main\"\n",
        project_header("cwsq", 1)
    );
    let repo = Repo::with_in(
        &xfs,
        "",
        &toml,
        &[("seed.py", seed), (".gitignore", "blob.bin\n")],
    );
    // Untracked, so `[project] copy` brings it into each new worktree.
    let blob = vec![7u8; 20_000_000];
    std::fs::write(repo.main.join("blob.bin"), &blob).unwrap();
    let home = Home::new_in(&xfs);
    let out = repo.run(&home, &["up", "a"]);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stderr().contains("(reflink)"), "{out}");

    let before = free(&xfs);
    let out = repo.run(&home, &["up", "b"]);
    assert_eq!(out.code(), 0, "{out}");
    let took = before.saturating_sub(free(&xfs));
    // 40 MB of copies (the sqlite file and the blob) for a few hundred KB:
    // the worktree's own checkout and the registry.
    assert!(took < 4_000_000, "world b took {took} bytes");
    let ev = cloned(&home, "b", "db");
    assert_eq!(ev["how"], "reflink", "{ev}");
    assert!(ev["bytes"].as_u64().unwrap() < 2_000_000, "{ev}");
    let wt = repo.worlds(&home)["b"]["path"].as_str().unwrap().to_owned();
    assert_eq!(
        std::fs::read(Path::new(&wt).join("blob.bin")).unwrap(),
        blob
    );

    let checks = clone_checks(&home);
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0]["status"], "ok", "{checks:?}");
}
