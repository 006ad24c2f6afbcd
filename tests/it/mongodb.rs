//! The `mongodb` adapter against a server that speaks MongoDB's wire
//! protocol: NX-27017 (PyPI `nx-27017`, a MongoDB wire-protocol server on
//! SQLite), the one such server the machines Binky is tested on can install.
//! It is not MongoDB: it answers the commands Binky sends (`listDatabases`,
//! `dropDatabase`, `listCollections`, `create`, `listIndexes`,
//! `createIndexes`, `find`, `insert`) but has no `$merge` (so a clone
//! streams its documents) and keeps no validators. `.ci/run` installs it;
//! each test starts its own on a free port, and checks what it sees through
//! pymongo, a real MongoDB client.

use crate::harness::*;
use crate::project::*;
use std::path::PathBuf;
use std::time::Duration;

/// The `nx-27017` program: `BINKY_NX27017`, the one `.ci/run` installs, or
/// `PATH`'s.
fn nx_bin() -> Option<PathBuf> {
    cached_tool("BINKY_NX27017", "binky-nx/bin/nx-27017", "nx-27017")
}

const NO_NX: &str = "no nx-27017 (pip install nx-27017 into a venv, or set BINKY_NX27017)";

/// One NX-27017 server for one test, stopped when dropped.
struct Mongo {
    child: std::process::Child,
    port: u16,
    /// The venv's Python, which has pymongo (nx-27017 depends on it).
    python: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mongo {
    fn start() -> Option<Mongo> {
        let bin = nx_bin()?;
        let python = bin.with_file_name("python");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = std::process::Command::new(&bin)
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--host", "127.0.0.1", "-p", &port.to_string()])
            .arg("--log-file")
            .arg(dir.path().join("nx.log"))
            .arg("--pid-file")
            .arg(dir.path().join("nx.pid"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let m = Mongo {
            child,
            port,
            python,
            _dir: dir,
        };
        let up = wait_until(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "nx-27017 did not listen on {port}");
        Some(m)
    }

    fn url(&self) -> String {
        format!("mongodb://127.0.0.1:{}", self.port)
    }

    /// Runs a pymongo script with `c` (a client of `url`) and `args`; its
    /// stdout.
    fn py(&self, url: &str, script: &str, args: &[&str]) -> String {
        let full = format!(
            "import sys, json, pymongo\nc = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=10000)\nargs = sys.argv[2:]\n{script}"
        );
        let out = std::process::Command::new(&self.python)
            .args(["-c", &full, url])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pymongo: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn databases(&self) -> Vec<String> {
        let out = self.py(
            &self.url(),
            "print(json.dumps(c.list_database_names()))",
            &[],
        );
        serde_json::from_str(&out).unwrap()
    }
}

impl Drop for Mongo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn server() -> Option<Mongo> {
    let m = Mongo::start();
    if m.is_none() {
        skip(NO_NX);
    }
    m
}

#[test]
fn mongodb_databases_isolate_worlds_and_teardown_drops_only_theirs() {
    let Some(m) = server() else { return };
    let home = Home::new();
    let toml = format!(
        "{}[services.docs]\nadapter = \"mongodb\"\nadmin_url = \"${{env.MONGO_URL}}\"\n",
        project_header("mg", 2)
    );
    let repo = Repo::new(&toml);
    let url = m.url();
    let env = [("MONGO_URL", url.as_str())];
    // A database whose name merely starts like a world's is not that world's.
    m.py(&url, "c['mg_feat-a-2'].x.insert_one({'mine': 1})", &[]);
    let long = format!("feature/{}", "Very-Long-Branch-Name-".repeat(7));
    let worlds = ["feat-a", "Feature/UPPER_case", long.as_str()];
    let mut urls = Vec::new();
    for w in worlds {
        let up = repo.run_with(&home, &["up", w], &env);
        assert_eq!(up.code(), 0, "{up}");
        let got = repo.run_with(&home, &["env", w], &env).json()["services"]["docs"]
            .as_str()
            .unwrap()
            .to_owned();
        let db = got.rsplit('/').next().unwrap().to_owned();
        assert!(db.len() <= 63 && !db.contains(['.', '$', ' ']), "{db}");
        urls.push(got);
    }
    // The world's URL names its database: a client's default database.
    let write =
        "db = c.get_default_database(); db.items.insert_one({'w': args[0]}); print(db.name)";
    let db0 = m.py(&urls[0], write, &["a"]);
    let db1 = m.py(&urls[1], write, &["b"]);
    assert_eq!(db0, "mg_feat-a");
    let count = "print(c.get_default_database().items.count_documents({'w': args[0]}))";
    assert_eq!(m.py(&urls[0], count, &["a"]), "1");
    assert_eq!(m.py(&urls[1], count, &["a"]), "0");
    // down keeps the data; up finds it again.
    repo.run_with(&home, &["down", "feat-a"], &env);
    assert_eq!(repo.run_with(&home, &["up", "feat-a"], &env).code(), 0);
    assert_eq!(m.py(&urls[0], count, &["a"]), "1");
    for w in worlds {
        let out = repo.run_with(&home, &["remove", w, "--force"], &env);
        assert_eq!(out.code(), 0, "{out}");
    }
    let left = m.databases();
    assert!(left.contains(&"mg_feat-a-2".to_owned()), "{left:?}");
    assert!(!left.contains(&db0) && !left.contains(&db1), "{left:?}");
}

#[test]
fn mongodb_errors_name_the_server_and_never_the_password() {
    let home = Home::new();
    let toml = format!(
        "{}[services.docs]\nadapter = \"mongodb\"\nadmin_url = \"mongodb://root:Hunter2Secret@127.0.0.1:1/admin\"\noptions = {{ timeout = \"2s\" }}\n",
        project_header("mgbad", 2)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "a"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr().contains("mongodb at 127.0.0.1:1")
            && out
                .stderr()
                .contains("cannot reach the server (none answered within 2s)")
            && !out.stderr().contains("Topology"),
        "{out}"
    );
    assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
    // binky check refuses what up cannot speak, naming no secret.
    let toml = format!(
        "{}[services.docs]\nadapter = \"mongodb\"\nadmin_url = \"mongodb+srv://root:Hunter2Secret@cluster.example\"\n",
        project_header("mgbad", 2)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["check"]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.to_string().contains("DNS SRV"), "{out}");
    // A password the driver needs percent-encoded is refused by check,
    // before up makes anything.
    let toml = format!(
        "{}[services.docs]\nadapter = \"mongodb\"\nadmin_url = \"${{env.M}}\"\n",
        project_header("mgenc", 2)
    );
    let repo = Repo::new(&toml);
    let out = repo.run_with(
        &home,
        &["up", "b"],
        &[("M", "mongodb://u:p@Hunter2Secret@127.0.0.1:1/")],
    );
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("percent-encode"), "{out}");
    assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
    assert!(
        repo.worlds(&home).get("b").is_none(),
        "nothing is made: {out}"
    );
    assert!(!out.to_string().contains("Hunter2Secret"), "{out}");
}

/// Issue #28: a clone keeps the template's documents and indexes (and its
/// validators where the server keeps them) — here a 200,000-document
/// template.
#[test]
fn mongodb_clone_from_keeps_documents_and_indexes_of_a_large_template() {
    let Some(m) = server() else { return };
    let home = Home::new();
    let docs = 200_000;
    let seed = format!(
        "import os, pymongo\nc = pymongo.MongoClient(os.environ['DOCS_URL'])\ndb = c.get_default_database()\ndb.create_collection('users', validator={{'$jsonSchema': {{'required': ['email']}}}})\nfor s in range(0, {docs}, 20000):\n    db.users.insert_many([{{'email': 'u%d@x' % i, 'n': i}} for i in range(s, s + 20000)], ordered=False)\ndb.users.create_index('email', unique=True)\ndb.users.create_index([('n', -1)])\n"
    );
    let toml = format!(
        "{}[services.docs]\nadapter = \"mongodb\"\nadmin_url = \"${{env.MONGO_URL}}\"\nseed = \"{} seed.py\"\nclone_from = \"golden\"\n",
        project_header("mgc", 2),
        m.python.display()
    );
    let repo = Repo::with("", &toml, &[("seed.py", &seed)]);
    let url = m.url();
    let env = [("MONGO_URL", url.as_str())];
    let up = repo.run_with(&home, &["up", "a"], &env);
    assert_eq!(up.code(), 0, "{up}");
    assert!(
        !home.events().iter().any(|e| e["event"] == "clone_fallback"),
        "{:?}",
        home.events()
    );
    let world = repo.run_with(&home, &["env", "a"], &env).json()["services"]["docs"]
        .as_str()
        .unwrap()
        .to_owned();
    let template = world.replace("mgc_a", &home.cloned_from("a", "docs"));
    let shape = "db = c.get_default_database()\nidx = sorted((json.dumps(i['key'], sort_keys=True), bool(i.get('unique'))) for i in db.users.list_indexes())\nopts = db.command('listCollections', filter={'name': 'users'})['cursor']['firstBatch'][0].get('options', {})\nprint(json.dumps([db.users.count_documents({}), db.users.find_one({'n': 4242}, {'_id': 0}), idx, 'validator' in opts]))";
    let got: serde_json::Value = serde_json::from_str(&m.py(&world, shape, &[])).unwrap();
    let want: serde_json::Value = serde_json::from_str(&m.py(&template, shape, &[])).unwrap();
    assert_eq!(got[0], docs, "{got}");
    assert_eq!(got[1], serde_json::json!({"email": "u4242@x", "n": 4242}));
    // The same indexes (unique included), and a validator exactly where the
    // template has one.
    assert_eq!(got[2], want[2], "{got} vs {want}");
    assert_eq!(got[2].as_array().unwrap().len(), 3, "{got}");
    assert_eq!(got[3], want[3]);
    // A unique index that holds: a duplicate is refused in the world too.
    let dup = "db = c.get_default_database()\ntry:\n    db.users.insert_one({'email': 'u1@x'}); print('taken')\nexcept pymongo.errors.DuplicateKeyError:\n    print('refused')";
    assert_eq!(m.py(&world, dup, &[]), "refused");
    assert_eq!(
        repo.run_with(&home, &["remove", "a", "--force"], &env)
            .code(),
        0
    );
}

#[test]
fn mongodb_gc_sweeps_a_half_made_database_and_concurrent_ups_get_one_each() {
    let Some(m) = server() else { return };
    let home = Home::new();
    let toml = format!(
        "{}[services.docs]\nadapter = \"mongodb\"\nadmin_url = \"${{env.MONGO_URL}}\"\nseed = \"{} -c \\\"import os, pymongo; pymongo.MongoClient(os.environ['DOCS_URL']).get_default_database().s.insert_one({{}})\\\"\"\n",
        project_header("mgg", 4),
        m.python.display()
    );
    let repo = Repo::new(&toml);
    let url = m.url();
    let env = [("MONGO_URL", url.as_str())];
    home.start_daemon_with(&env);
    up_at_once(&repo, &home, &["one", "two"], &env);
    up_then_crash_removing(&repo, &home, "ghost", &env);
    assert!(m.databases().contains(&"mgg_ghost".to_owned()));
    let out = repo.run_with(&home, &["gc"], &env);
    assert!(out.stdout().contains("swept"), "{out}");
    let left = m.databases();
    assert!(!left.contains(&"mgg_ghost".to_owned()), "{left:?}");
    for w in ["one", "two"] {
        assert!(left.contains(&format!("mgg_{w}")), "{w}: {left:?}");
        repo.run_with(&home, &["remove", w, "--force"], &env);
    }
}
