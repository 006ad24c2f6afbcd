//! Every verb renders with the environment the world was built with, and
//! never hands out an unrendered `${env.NAME}`.

use crate::adapters::{PG_ADMIN, pg_up};
use crate::cleanup::Cleanup;
use crate::harness::*;
use crate::project::*;

#[test]
fn every_verb_renders_with_the_environment_the_world_was_built_with() {
    if !pg_up() {
        skip("no PostgreSQL on 127.0.0.1:5432 (or psql missing)");
        return;
    }
    let home = Home::new();
    let project = format!("envchain{}", std::process::id() % 10000);
    let _cleanup = Cleanup {
        prefix: format!("{project}_"),
        mysql: false,
    };
    let toml = format!(
        "{}[services.db]\nadapter = \"postgres\"\nadmin_url = \"${{env.CHAIN_PG_ADMIN}}\"\n[services.web]\ncmd = \"exec sleep 600\"\ndepends_on = [\"db\"]\n[agents]\nverify = [\"echo $DB_URL > verified-with.txt\"]\n",
        project_header(&project, 1)
    );
    let repo = Repo::new(&toml);
    let with_var = |args: &[&str]| {
        Out(repo
            .cmd(&home, args)
            .env("CHAIN_PG_ADMIN", PG_ADMIN)
            .output()
            .unwrap())
    };
    let out = with_var(&["up", "x"]);
    assert_eq!(out.code(), 0, "{out}");
    // From a shell without the variable: the values `up` was given (the
    // world's own role on the admin's server).
    let env = repo.ok(&home, &["env", "x", "--dotenv"]).stdout();
    let want = env
        .lines()
        .find_map(|l| l.strip_prefix("DB_URL='"))
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or_else(|| panic!("no DB_URL: {env}"))
        .to_owned();
    assert!(
        want.starts_with(&format!("postgresql://{project}_x:"))
            && want.ends_with(&format!("@127.0.0.1:5432/{project}_x")),
        "{env}"
    );
    repo.ok(&home, &["verify", "x"]);
    let wt = std::path::PathBuf::from(repo.worlds(&home)["x"]["path"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(wt.join("verified-with.txt"))
            .unwrap()
            .trim(),
        want
    );
    // A new daemon no longer has them: every verb that needs the variable
    // fails before doing anything, with `up`'s message.
    home.ok(&["daemon", "stop"]);
    let web = repo.worlds(&home)["x"]["services"][1]["pid"]
        .as_u64()
        .unwrap() as u32;
    for args in [
        &["env", "x", "--dotenv"][..],
        &["env", "x"][..],
        &["verify", "x"][..],
        &["remove", "x", "--force"][..],
    ] {
        let out = repo.run(&home, args);
        assert_eq!(out.code(), 1, "{args:?}: {out}");
        // On stderr, or (JSON output) in the error object on stdout.
        assert!(
            format!("{}{}", out.stdout(), out.stderr())
                .contains("services.db.admin_url uses ${env.CHAIN_PG_ADMIN}, which is not set"),
            "{args:?}: {out}"
        );
        // No value was printed: `--json` says only the error.
        let stdout = out.stdout();
        let is_error_json = serde_json::from_str::<serde_json::Value>(&stdout)
            .is_ok_and(|v| v.get("error").is_some() && v.as_object().unwrap().len() == 1);
        assert!(
            stdout.is_empty() || is_error_json,
            "{args:?} printed a value: {out}"
        );
    }
    // Nothing was done: the world is as it was.
    let w = &repo.worlds(&home)["x"];
    assert_eq!(w["state"], "running", "{w}");
    assert!(alive(web), "remove stopped the services before failing");
    let out = with_var(&["remove", "x", "--force"]);
    assert_eq!(out.code(), 0, "{out}");
}

#[test]
fn an_unset_variable_in_a_process_env_fails_up_naming_key_and_variable() {
    let home = Home::new();
    let toml = format!(
        "{}[services.web]\ncmd = \"exec sleep 600\"\nenv = {{ DATABASE_URL = \"${{env.NOPE_NOT_SET}}\" }}\n",
        project_header("unsetproc", 1)
    );
    let repo = Repo::new(&toml);
    let check = repo.ok(&home, &["check"]);
    assert!(check.stdout().contains("warning[unset-env]"), "{check}");
    let out = repo.run(&home, &["up", "x"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr()
            .contains("services.web.env.DATABASE_URL uses ${env.NOPE_NOT_SET}, which is not set"),
        "{out}"
    );
    assert!(pids_with("sleep 600").iter().all(|p| {
        std::fs::read_to_string(format!("/proc/{p}/environ"))
            .map(|e| !e.contains("NOPE_NOT_SET"))
            .unwrap_or(true)
    }));
    // Refused before anything was made: no world is recorded.
    assert!(!repo.worlds(&home).contains_key("x"));
}

#[test]
fn the_projects_env_reaches_every_process_and_command_and_binky_env_withholds_what_came_from_the_shell()
 {
    let home = Home::new();
    // `[env]` names a slice's address (made before any process), a port, and
    // a value from the shell: the service, migrate and verify all get them.
    let toml = format!(
        r#"{}[env]
DATABASE_URL = "${{db.url}}"
WEB_BASE = "${{web.url}}/api"
TOKEN = "${{env.SHELL_TOKEN}}"
[services.db]
adapter = "sqlite"
migrate = "env | grep -E '^(DATABASE_URL|TOKEN)=' | sort > migrated-with.txt"
[services.web]
cmd = "env | grep -E '^(DATABASE_URL|WEB_BASE|TOKEN)=' | sort > served-with.txt; exec python3 -m http.server ${{self.port}} --bind 127.0.0.1"
url = "web"
depends_on = ["db"]
health = {{ http = "/", timeout = "20s", interval = "50ms" }}
[agents]
verify = ["env | grep -E '^(DATABASE_URL|TOKEN)=' | sort > verified-with.txt"]
"#,
        project_header("penv", 2)
    );
    let repo = Repo::new(&toml);
    let binky = |args: &[&str]| {
        Out(repo
            .cmd(&home, args)
            .env("SHELL_TOKEN", "tok-from-shell")
            .output()
            .unwrap())
    };
    let up = binky(&["up", "x"]);
    assert_eq!(up.code(), 0, "{up}");
    let env = binky(&["env", "x"]);
    assert_eq!(env.code(), 0, "{env}");
    let env = env.json();
    let db = env["services"]["db"].as_str().unwrap().to_owned();
    assert!(db.starts_with("sqlite://"), "{env}");
    assert_eq!(env["env"]["DATABASE_URL"], db.as_str());
    assert_eq!(
        env["env"]["WEB_BASE"],
        format!("{}/api", env["services"]["web"].as_str().unwrap()).as_str()
    );
    // From the shell: withheld unless asked for.
    assert!(env["env"]["TOKEN"].is_null(), "{env}");
    let revealed = binky(&["env", "x", "--reveal"]).json();
    assert_eq!(revealed["env"]["TOKEN"], "tok-from-shell");
    let dotenv = binky(&["env", "x", "--dotenv"]).stdout();
    assert!(dotenv.contains(&format!("DATABASE_URL='{db}'")), "{dotenv}");
    assert!(!dotenv.contains("tok-from-shell"), "{dotenv}");
    assert!(
        dotenv
            .lines()
            .any(|l| l.starts_with("# TOKEN is withheld") && l.contains("--reveal")),
        "{dotenv}"
    );
    assert!(!dotenv.contains("export "), "{dotenv}");
    let export = binky(&["env", "x", "--export"]).stdout();
    assert!(
        export.contains(&format!("export DATABASE_URL='{db}'")),
        "{export}"
    );
    assert!(export.contains("export BINKY_WORLD='x'"), "{export}");
    assert!(
        binky(&["env", "x", "--export", "--reveal"])
            .stdout()
            .contains("export TOKEN='tok-from-shell'")
    );
    // Every process and command got the same values.
    let v = binky(&["verify", "x"]);
    assert_eq!(v.code(), 0, "{v}");
    let tree = repo.worktree_root().join("x");
    let want = format!("DATABASE_URL={db}\nTOKEN=tok-from-shell\n");
    let read = |f: &str| std::fs::read_to_string(tree.join(f)).unwrap_or_default();
    assert_eq!(read("migrated-with.txt"), want);
    assert_eq!(read("verified-with.txt"), want);
    let served = read("served-with.txt");
    assert!(served.contains(&format!("DATABASE_URL={db}\n")), "{served}");
    assert!(served.contains("TOKEN=tok-from-shell\n"), "{served}");
    assert!(
        served.contains("WEB_BASE=http://web.x.penv.localhost"),
        "{served}"
    );
}

#[test]
fn an_unset_variable_fails_up_before_a_branch_worktree_or_record_is_made() {
    let home = Home::new();
    let toml = format!(
        "{}[services.web]\ncmd = \"exec sleep 600\"\nenv = {{ TOKEN = \"${{env.PREFLIGHT_UNSET_TOKEN}}\" }}\n",
        project_header("preflight", 1)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "e2"]);
    assert_ne!(out.code(), 0, "{out}");
    let err = out.stderr();
    assert!(
        err.contains("services.web.env.TOKEN uses ${env.PREFLIGHT_UNSET_TOKEN}, which is not set"),
        "{err}"
    );
    assert!(err.contains("nothing was made"), "{err}");
    assert!(
        !repo.worktree_root().join("e2").exists(),
        "a worktree was made"
    );
    assert!(
        !git(&repo.main, &["branch", "--list", "e2"]).contains("e2"),
        "a branch was made"
    );
    assert!(
        !repo.worlds(&home).contains_key("e2"),
        "a world was recorded"
    );
    // With it set, the same up works.
    let ok = Out(repo
        .cmd(&home, &["up", "e2"])
        .env("PREFLIGHT_UNSET_TOKEN", "t")
        .output()
        .unwrap());
    assert_eq!(ok.code(), 0, "{ok}");
}
