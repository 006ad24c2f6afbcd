//! Golden tests of `binky check`.
//!
//! Each `tests/check/NN-name.toml` is checked by the real binary (run in
//! `tests/check` with `NO_COLOR=1`); `NN-name.out` holds the expected result:
//!
//! ```text
//! exit: 1
//! <stdout, exactly>
//! --- stderr          (only when stderr is not empty)
//! <stderr, exactly>
//! ```
//!
//! A `NN-name.args` file instead gives the command-line arguments after
//! `check`, one a line (for `--json` and unreadable-file cases).
//!
//! `BINKY_BLESS=1 cargo test --test check_golden` rewrites the `.out` files;
//! read every one you bless.
//!
//! `tests/check/fuzz-regressions/` holds inputs the fuzzer once crashed on;
//! each must now pass through `check_str` and `render` without a panic.

use binky::config::render::{Facts, ServiceFacts, render};
use binky::config::{Probe, ServiceKind, check_str};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn case_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/check")
}

/// Every case: its name (file stem) and the arguments after `check`.
fn cases() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(case_dir()).expect("tests/check") {
        let path = entry.unwrap().path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        match ext {
            "toml" => out.push((stem, vec![file])),
            "args" => {
                let text = std::fs::read_to_string(&path).unwrap();
                let args = text.lines().map(str::to_owned).collect();
                out.push((stem, args));
            }
            _ => {}
        }
    }
    out.sort();
    out
}

/// Runs `binky check ARGS` in the case folder and formats the result.
fn run_check(args: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_binky"))
        .arg("check")
        .args(args)
        .current_dir(case_dir())
        // The same environment everywhere (`check` warns about an unset
        // `${env.NAME}`): the variables the cases use are set, except
        // `UNSET_IN_GOLDEN`, which one case is about.
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .envs(["APP_API_TOKEN", "SESSION_TOKEN"].map(|v| (v, "set-for-the-golden-tests")))
        // Server URLs as a user would export them: `check` reads an
        // admin_url through its variables. `BAD_REDIS_URL` has no scheme.
        .envs([
            ("CLICKHOUSE_URL", "http://127.0.0.1:8123"),
            ("MYSQL_ADMIN_URL", "mysql://root@127.0.0.1:3306/"),
            ("PG_ADMIN_URL", "postgresql://root@127.0.0.1:5432/postgres"),
            ("PG_URL", "postgresql://root@127.0.0.1:5432/postgres"),
            ("REDIS_URL", "redis://127.0.0.1:6379/0"),
            ("BAD_REDIS_URL", "127.0.0.1:6379"),
            (
                "BAD_AMQP_URL",
                "amqp://guest:Hunter2Secret@127.0.0.1:99999/",
            ),
        ])
        .output()
        .expect("run binky");
    let code = out
        .status
        .code()
        .map_or_else(|| "signal".to_owned(), |c| c.to_string());
    let mut s = format!("exit: {code}\n{}", String::from_utf8_lossy(&out.stdout));
    if !out.stderr.is_empty() {
        s.push_str("--- stderr\n");
        s.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    s
}

#[test]
fn golden() {
    let bless = std::env::var_os("BINKY_BLESS").is_some_and(|v| v == "1");
    let cases = cases();
    assert!(cases.len() >= 30, "expected at least 30 cases");
    let mut failures = Vec::new();
    for (name, args) in &cases {
        let actual = run_check(args);
        let out_path = case_dir().join(format!("{name}.out"));
        if bless {
            std::fs::write(&out_path, &actual).unwrap();
            continue;
        }
        match std::fs::read_to_string(&out_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "── {name}: output differs\n── expected:\n{expected}── actual:\n{actual}"
            )),
            Err(_) => failures.push(format!(
                "── {name}: no {name}.out (run with BINKY_BLESS=1)\n── actual:\n{actual}"
            )),
        }
    }
    // A `.out` with no case left behind is a test that silently stopped running.
    for entry in std::fs::read_dir(case_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "out") {
            let stem = path.file_stem().unwrap().to_str().unwrap();
            if !cases.iter().any(|(n, _)| n == stem) {
                failures.push(format!("── {stem}.out has no {stem}.toml or {stem}.args"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden cases failed (BINKY_BLESS=1 rewrites them):\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Credential values in the fixtures: no output may ever quote them.
const SECRETS: &[&str] = &[
    "hunter2",
    "correct-horse",
    "sk_live",
    "ghp_0123",
    "key-9f8e",
    "pa55w0rd",
    "s3cr3t",
];

#[test]
fn credentials_are_never_printed() {
    let mut checked = 0;
    for (name, args) in cases() {
        for json in [false, true] {
            let mut a = args.clone();
            if json && !a.iter().any(|x| x == "--json") {
                a.insert(0, "--json".to_owned());
            }
            let out = run_check(&a);
            for s in SECRETS {
                assert!(
                    !out.contains(s),
                    "{name} (json: {json}) printed `{s}`:\n{out}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
    // The fixtures must really contain the secrets, or this test proves nothing.
    let all: String = [
        "62-credential-admin-url.toml",
        "63-credential-env.toml",
        "50-wrong-type-env-string.toml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(case_dir().join(f)).unwrap())
    .collect();
    for s in SECRETS {
        assert!(all.contains(s), "no fixture contains `{s}`");
    }
}

/// `check_str`, then `render` over every string field of every service with
/// made-up facts: what the fuzz target does, for one input.
fn check_and_render(text: &str) {
    let report = check_str(text, Path::new("binky.toml"));
    for d in &report.diagnostics {
        let _ = d.render("binky.toml");
    }
    assert_eq!(report.config.is_some(), report.errors() == 0);
    let Some(config) = report.config else {
        return;
    };
    let mut services = IndexMap::new();
    for (i, (name, svc)) in config.services.iter().enumerate() {
        let port = 20000 + 10 * (i as u16 % 100);
        let mut f = ServiceFacts::default();
        if svc.has_port() {
            f.port = Some(port);
            for (j, p) in svc.port_names().iter().enumerate() {
                f.ports.insert(p.clone(), port + 1 + j as u16 % 9);
            }
            f.url = Some(format!("http://{name}.w.{}", config.project.domain));
            f.local_url = Some(format!("http://localhost:{port}"));
            f.host = Some(format!("{name}.w.{}", config.project.domain));
        } else if svc.resource().is_some() {
            f.url = Some(format!("sqlite:///tmp/{name}.db"));
        }
        services.insert(name.clone(), f);
    }
    let env = |n: &str| n.len().is_multiple_of(2).then(|| format!("<{n}>"));
    let facts = Facts {
        project: &config.project.name,
        worktree_name: "w",
        worktree_path: "/tmp/w",
        services: &services,
        env: &env,
    };
    let mut strings: Vec<(Option<&str>, &str)> = Vec::new();
    for (name, svc) in &config.services {
        let me = Some(name.as_str());
        match &svc.kind {
            ServiceKind::Process(p) => {
                strings.push((me, &p.cmd));
                strings.extend(p.cwd.as_deref().map(|s| (me, s)));
                strings.extend(p.env.values().map(|v| (me, v.as_str())));
                if let Some(h) = &p.health {
                    let (Probe::Http(v) | Probe::Tcp(v) | Probe::Cmd(v)) = &h.probe;
                    strings.push((me, v));
                }
            }
            ServiceKind::Resource(r) => {
                for s in [&r.admin_url, &r.migrate, &r.seed].into_iter().flatten() {
                    strings.push((me, s));
                }
            }
        }
    }
    strings.extend(config.agents.verify.iter().map(|v| (None, v.as_str())));
    for (me, s) in strings {
        let r = render(s, me, &facts);
        if !s.contains("${") {
            assert_eq!(r.text, s);
        }
    }
}

#[test]
fn fuzz_regressions_do_not_panic() {
    let dir = case_dir().join("fuzz-regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/check/fuzz-regressions") {
        let path = entry.unwrap().path();
        if !path.is_file() || path.file_name().is_some_and(|f| f == "README.md") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        // The fuzz target skips input that is not UTF-8; so does this.
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let r = std::panic::catch_unwind(|| check_and_render(text));
            assert!(r.is_ok(), "{} panics", path.display());
            n += 1;
        }
    }
    eprintln!("{n} fuzz regression inputs pass");
}

#[test]
fn golden_configs_render_without_panic() {
    for entry in std::fs::read_dir(case_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let r = std::panic::catch_unwind(|| check_and_render(&text));
            assert!(r.is_ok(), "{} panics", path.display());
        }
    }
}
