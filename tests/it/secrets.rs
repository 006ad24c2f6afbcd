//! Credentials Binky renders never reach what it stores or prints: the
//! terminal, `--json`, status, events.log, daemon.log, registry.db.

use crate::adapters::pg_up;
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;

/// Every place a secret must not be, with what each holds now.
fn everywhere(home: &Home, outputs: &[&Out]) -> Vec<(String, String)> {
    let mut places: Vec<(String, String)> = outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            (
                format!("output {i}"),
                format!("{}{}", o.stdout(), o.stderr()),
            )
        })
        .collect();
    places.push((
        "status --json".into(),
        home.ok(&["status", "--json"]).stdout(),
    ));
    for file in ["events.log", "daemon.log", "registry.db", "registry.db-wal"] {
        let bytes = std::fs::read(home.file(file)).unwrap_or_default();
        places.push((file.into(), String::from_utf8_lossy(&bytes).into_owned()));
    }
    places
}

fn assert_nowhere(secret: &str, places: &[(String, String)]) {
    for (what, text) in places {
        assert!(
            !text.contains(secret),
            "{what} holds the secret {secret:?}:\n{}",
            text.chars().take(3000).collect::<String>()
        );
    }
}

#[test]
fn a_migrate_that_prints_its_database_url_leaks_the_password_nowhere() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("leak{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    // Trust auth ignores the password, so it can be any string here.
    let secret = "Sup3rSecretPw";
    let admin = format!("postgresql://postgres:{secret}@127.0.0.1:5432/postgres");
    let toml = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.LEAK_PG}}\"\nmigrate = \"echo connecting to $DB_URL; echo as $BINKY_SLICE_URL >&2; exit 3\"\n",
        project_header(&project, 1)
    );
    let repo = Repo::new(&toml);
    let up = |args: &[&str]| {
        Out(repo
            .cmd(&home, args)
            .env("LEAK_PG", &admin)
            .output()
            .unwrap())
    };
    let text = up(&["up", "x"]);
    assert_eq!(text.code(), 1, "{text}");
    // The migrate's words are quoted, with the password masked: the
    // world's own role's (the admin's is not in the world's URL at all).
    assert!(
        text.stderr()
            .contains(&format!("connecting to postgresql://{project}_x:***@")),
        "{text}"
    );
    let json = up(&["up", "x", "--json"]);
    assert_eq!(json.code(), 1, "{json}");
    let mut places = everywhere(&home, &[&text, &json]);
    assert_nowhere(secret, &places);
    // Removed: nothing left in the files either, freed pages included.
    let removed = up(&["remove", "x", "--force"]);
    assert_eq!(removed.code(), 0, "{removed}");
    places = everywhere(&home, &[&removed]);
    assert_nowhere(secret, &places);
}

/// An external adapter that fails a verb on demand (a file `fail-<verb>` in
/// its `ctl` folder), quoting its `admin_url` in the error as a careless
/// adapter would.
const ECHOING_ADAPTER: &str = r#"#!/usr/bin/env python3
import json, os, shutil, sys
verb = sys.argv[1]
req = json.load(sys.stdin)
ctl = req["config"]["ctl"]
path = os.path.join(req["data_dir"], req["slice"])
if os.path.exists(os.path.join(ctl, "fail-" + verb)):
    print(json.dumps({"ok": False, "error": "cannot use " + req["config"].get("admin_url", "")}))
    sys.exit(0)
r = {"ok": True}
if verb == "provision":
    os.makedirs(path)
elif verb == "exists":
    r["exists"] = os.path.isdir(path)
elif verb == "resolve":
    r["address"] = "file://" + path
elif verb == "capabilities":
    r["capabilities"] = []
elif verb == "teardown":
    shutil.rmtree(path, ignore_errors=True)
print(json.dumps(r))
"#;

#[test]
fn an_adapter_error_is_masked_on_every_path_it_can_take() {
    let home = Home::new();
    let bin = tempfile::tempdir().unwrap();
    let ctl = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let p = bin.path().join("binky-adapter-echoing");
        std::fs::write(&p, ECHOING_ADAPTER).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap()
    );
    let secret = "EchoedPassw0rd";
    let toml = format!(
        "{}[services.db]\nadapter = \"echoing\"\nadmin_url = \"${{env.ECHO_URL}}\"\noptions = {{ ctl = \"{}\" }}\n",
        project_header("echoing", 1),
        ctl.path().display()
    );
    let repo = Repo::new(&toml);
    let run = |args: &[&str]| {
        Out(repo
            .cmd(&home, args)
            .env("PATH", &path)
            .env("ECHO_URL", format!("store://admin:{secret}@127.0.0.1:1/"))
            .output()
            .unwrap())
    };
    let fail = |verb: &str, on: bool| {
        let f = ctl.path().join(format!("fail-{verb}"));
        if on {
            std::fs::write(f, "").unwrap();
        } else {
            let _ = std::fs::remove_file(f);
        }
    };
    let first = run(&["up", "x"]);
    assert_eq!(first.code(), 0, "{first}");
    let mut outs = Vec::new();
    // `env` resolves the slice's address.
    fail("resolve", true);
    outs.push(run(&["env", "x"]));
    outs.push(run(&["env", "x", "--dotenv"]));
    // `up` after `down` resolves a kept slice.
    assert_eq!(run(&["down", "x"]).code(), 0);
    outs.push(run(&["up", "x"]));
    outs.push(run(&["up", "x", "--json"]));
    fail("resolve", false);
    // A failing teardown: plain remove refuses, --force leaves it to gc.
    fail("teardown", true);
    outs.push(run(&["remove", "x"]));
    outs.push(run(&["remove", "x", "--force"]));
    outs.push(run(&["gc"]));
    outs.push(run(&["gc", "--json"]));
    // All fail but `remove --force`, which removes the world and notes the
    // teardown left to gc.
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.code() == 0, i == 5, "{o}");
        assert!(
            format!("{}{}", o.stdout(), o.stderr()).contains("***"),
            "the error should say it masked something: {o}"
        );
    }
    let refs: Vec<&Out> = outs.iter().collect();
    assert_nowhere(secret, &everywhere(&home, &refs));
    fail("teardown", false);
    assert_eq!(run(&["gc"]).code(), 0);
}

#[test]
fn a_malformed_env_file_line_is_named_by_file_line_and_key_never_by_value() {
    let home = Home::new();
    let toml = format!(
        "{}env_file = \".env\"\n[services.web]\ncmd = \"exec sleep 600\"\n",
        project_header("envfile", 1)
    );
    let repo = Repo::new(&toml);
    std::fs::write(
        repo.project.join(".env"),
        "OK=1\n# the next line lost its `=`\nDB_PASSWORD S3cretP4ss\n",
    )
    .unwrap();
    let out = repo.run(&home, &["up", "x"]);
    assert_eq!(out.code(), 1, "{out}");
    let err = out.stderr();
    assert!(err.contains(".env, line 3"), "{out}");
    assert!(err.contains("DB_PASSWORD"), "{out}");
    assert_nowhere("S3cretP4ss", &everywhere(&home, &[&out]));
}

#[test]
fn env_file_values_reach_the_service_exactly_as_written() {
    let home = Home::new();
    let toml = format!(
        "{}env_file = \".env\"\n[services.web]\ncmd = \"env > seen.env; exec sleep 600\"\n",
        project_header("literal", 1)
    );
    let repo = Repo::new(&toml);
    std::fs::write(
        repo.project.join(".env"),
        "A=pa$$w\nB='$HOME'\nD=\"${HOME}\"\nE=$SOME_NAME\n",
    )
    .unwrap();
    let out = Out(repo
        .cmd(&home, &["up", "x"])
        .env("SOME_NAME", "expanded-from-the-shell")
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let wt = std::path::PathBuf::from(repo.worlds(&home)["x"]["path"].as_str().unwrap());
    let seen_file = wt.join("seen.env");
    assert!(wait_until(std::time::Duration::from_secs(5), || seen_file.exists()));
    let seen = std::fs::read_to_string(seen_file).unwrap();
    for want in ["A=pa$$w", "B=$HOME", "D=${HOME}", "E=$SOME_NAME"] {
        assert!(seen.lines().any(|l| l == want), "{want} not in:\n{seen}");
    }
    repo.ok(&home, &["remove", "x", "--force"]);
}
