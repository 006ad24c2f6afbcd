//! `binky mcp` bound to a world, driven by the official MCP Python SDK: a
//! server started in a world's worktree (or with `--world`) answers for that
//! world only and hands out its own credentials, never the admin's; one
//! started outside every world refuses every call; `--machine` reaches all.

use crate::harness::*;
use crate::project::*;

/// Runs `tests/fixtures/mcp_calls.py`: `binky mcp SERVER_ARGS` started in
/// `cwd`, the `calls` made in order; what it saw.
fn mcp_calls(
    home: &Home,
    cwd: &std::path::Path,
    server_args: &[&str],
    calls: &serde_json::Value,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp_calls.py");
    let mut py = home.program("python3", &[script]);
    py.arg(binky_exe())
        .arg(cwd)
        .arg(serde_json::to_string(server_args).unwrap())
        .arg(calls.to_string())
        .envs(env.iter().copied());
    let out = Out(py.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
    out.json()
}

fn refused(v: &serde_json::Value, label: &str, says: &str) {
    assert_eq!(v[label]["isError"], true, "{label} was not refused: {v}");
    let text = v[label]["text"].as_str().unwrap_or("");
    assert!(text.contains(says), "{label}: {text}");
}

const ADMIN_PW: &str = "BoundAdminPw-9";

#[test]
fn a_bound_server_reaches_its_own_world_only_and_never_hands_out_the_admins_password() {
    if !mcp_sdk() {
        return;
    }
    if !crate::adapters::pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let _cleanup = crate::cleanup::Cleanup {
        prefix: "bnd_".into(),
        mysql: false,
    };
    // `db` without a user of its own (`acl = false`): its address carries
    // the admin's password, which a bound server must never hand out.
    let toml = format!(
        "{}[services.app]\ncmd = \"exec sleep 600\"\n[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.BND_PG_ADMIN}}\"\noptions = {{ acl = false }}\n[env]\nDATABASE_URL = \"${{db.url}}\"\n[agents]\nverify = [\"true\"]\n",
        project_header("bnd", 2)
    );
    let repo = Repo::new(&toml);
    let admin = format!("postgresql://postgres:{ADMIN_PW}@127.0.0.1:5432/postgres");
    let env = [("BND_PG_ADMIN", admin.as_str())];
    for w in ["alpha", "beta"] {
        let out = repo.run_with(&home, &["up", w], &env);
        assert_eq!(out.code(), 0, "{out}");
    }
    let worlds = repo.worlds(&home);
    let alpha_dir = std::path::PathBuf::from(worlds["alpha"]["path"].as_str().unwrap());
    // Started in alpha's worktree (a folder inside it): bound to alpha.
    let inside = alpha_dir.join("sub");
    std::fs::create_dir_all(&inside).unwrap();
    let beta = serde_json::json!({"name": "beta"});
    let calls = serde_json::json!([
        ["own_env", "env", {}],
        ["own_env_named", "env", {"name": "alpha"}],
        ["own_project_by_name", "env", {"project": "bnd"}],
        ["status", "status", {}],
        ["own_verify", "verify", {}],
        ["beta_env", "env", beta],
        ["beta_down", "down", beta],
        ["beta_up", "up", beta],
        ["beta_verify", "verify", beta],
        ["beta_logs", "logs", beta],
        ["beta_reset", "reset", beta],
        ["beta_remove", "remove", beta],
        ["new_world_up", "up", {"name": "gamma"}],
        ["other_project", "env", {"project": "/tmp"}],
        ["other_project_status", "status", {"project": "elsewhere"}],
        // A misspelt key (`world` for `name`) is refused, never ignored so
        // that the call acts on the bound world instead.
        ["misspelt_down", "down", {"world": "beta"}],
        ["misspelt_reset", "reset", {"world": "beta"}],
        ["misspelt_up", "up", {"world": "beta"}],
        ["misspelt_env", "env", {"world": "beta"}],
        ["misspelt_verify", "verify", {"world": "beta"}],
        ["misspelt_logs", "logs", {"world": "beta"}],
        ["misspelt_status", "status", {"world": "beta"}],
        ["misspelt_remove", "remove", {"world": "beta"}],
    ]);
    let v = mcp_calls(&home, &inside, &[], &calls, &env);
    let says = "bound to world `alpha` of project `bnd`";
    for (tool, d) in v["descriptions"].as_object().unwrap() {
        assert!(
            d.as_str()
                .unwrap()
                .starts_with("This server is bound to world `alpha`"),
            "{tool}: {d}"
        );
    }
    assert!(
        v["instructions"]
            .as_str()
            .unwrap()
            .contains("bound to world `alpha`"),
        "{v}"
    );
    for label in ["own_env", "own_env_named", "own_project_by_name"] {
        assert_eq!(v[label]["isError"], false, "{label}: {v}");
        assert_eq!(v[label]["structured"]["world"], "alpha", "{v}");
    }
    assert_eq!(v["own_verify"]["structured"]["passed"], true, "{v}");
    // Its own world's coordinates, the admin's password masked wherever it
    // would appear.
    let env_text = v["own_env"].to_string();
    assert!(!env_text.contains(ADMIN_PW), "{env_text}");
    let db = v["own_env"]["structured"]["services"]["db"]
        .as_str()
        .unwrap();
    assert!(
        db.starts_with("postgresql://postgres:***@127.0.0.1:5432/bnd_alpha"),
        "{db}"
    );
    assert!(
        v["own_env"]["structured"]["env"]["DATABASE_URL"]
            .as_str()
            .unwrap()
            .contains(":***@"),
        "{v}"
    );
    // status: its own world only.
    let listed: Vec<&str> = v["status"]["structured"]["projects"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["worlds"].as_array().unwrap())
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["alpha"], "{v}");
    for label in [
        "beta_env",
        "beta_down",
        "beta_up",
        "beta_verify",
        "beta_logs",
        "beta_reset",
        "beta_remove",
    ] {
        refused(&v, label, says);
        refused(&v, label, "world `beta`");
    }
    refused(&v, "new_world_up", "world `gamma`");
    refused(&v, "other_project", "the `project` override is refused");
    refused(
        &v,
        "other_project_status",
        "the `project` override is refused",
    );
    for tool in [
        "down", "reset", "up", "env", "verify", "logs", "status", "remove",
    ] {
        let said = v[format!("misspelt_{tool}")].to_string();
        assert!(said.contains("unknown field `world`"), "{tool}: {said}");
    }
    assert!(!v.to_string().contains(ADMIN_PW));
    // beta was not touched, gamma never made, and alpha, the bound world a
    // misspelt call would have fallen back on, still runs.
    let worlds = repo.worlds(&home);
    assert_eq!(worlds["beta"]["state"], "running", "{worlds:?}");
    assert_eq!(worlds["alpha"]["state"], "running", "{worlds:?}");
    assert!(!worlds.contains_key("gamma"), "{worlds:?}");

    // `--world beta` from the project's folder: bound to beta.
    let calls = serde_json::json!([
        ["env", "env", {}],
        ["alpha_env", "env", {"name": "alpha"}],
    ]);
    let v = mcp_calls(
        &home,
        repo.project_dir(),
        &["--world", "beta"],
        &calls,
        &env,
    );
    assert_eq!(v["env"]["structured"]["world"], "beta", "{v}");
    refused(&v, "alpha_env", "bound to world `beta`");

    // Outside every world: bound to none, every call refused.
    let outside = tempfile::tempdir().unwrap();
    let calls = serde_json::json!([
        ["env", "env", {"name": "alpha", "project": "bnd"}],
        ["status", "status", {}],
        ["up", "up", {"name": "alpha", "project": "bnd"}],
    ]);
    let v = mcp_calls(&home, outside.path(), &[], &calls, &env);
    for label in ["env", "status", "up"] {
        refused(&v, label, "bound to no world");
    }
    for (tool, d) in v["descriptions"].as_object().unwrap() {
        assert!(
            d.as_str().unwrap().contains("bound to no world"),
            "{tool}: {d}"
        );
    }

    // `--machine`: every world, as the CLI (an orchestrator's choice).
    let calls = serde_json::json!([["beta_env", "env", {"name": "beta", "project": "bnd"}]]);
    let v = mcp_calls(&home, outside.path(), &["--machine"], &calls, &env);
    assert_eq!(v["beta_env"]["structured"]["world"], "beta", "{v}");
    for (tool, d) in v["descriptions"].as_object().unwrap() {
        assert!(
            d.as_str().unwrap().contains("reaches every world"),
            "{tool}: {d}"
        );
    }
    for w in ["alpha", "beta"] {
        let out = repo.run_with(&home, &["remove", w, "--force"], &env);
        assert_eq!(out.code(), 0, "{out}");
    }
}

#[test]
fn a_bad_world_for_binding_is_refused_as_the_server_starts() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.app]\ncmd = \"exec sleep 600\"\n",
        project_header("bndbad", 1)
    ));
    let long = "w".repeat(251);
    for (name, says) in [("a;b", "holds `;`"), (long.as_str(), "251 bytes long")] {
        let out = repo.run(&home, &["mcp", "--world", name]);
        assert_ne!(out.code(), 0, "{out}");
        assert!(out.stderr().contains(says), "{out}");
    }
    let out = repo.run(&home, &["mcp", "--world", "x", "--machine"]);
    assert_eq!(out.code(), 2, "{out}");
    assert!(out.stderr().contains("cannot be used with"), "{out}");
}
