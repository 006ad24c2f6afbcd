//! Golden tests of `binky init`.
//!
//! Each folder `tests/init/NN-name/` holds compose files (and `.env`,
//! env files, an `extends` target) written for one feature. The real
//! binary runs there as `binky init --stdout` (or with the arguments of
//! an `args` file, one a line), with an empty environment but `PATH` and
//! `NO_COLOR`. `expected.toml` holds what it prints; `expected.err` the
//! exit code and stderr when either is not the plain success. Every
//! `expected.toml` must pass `binky check`, and no value of the folder's
//! `.env`, env files or `environment:` may be in it.
//!
//! `BINKY_BLESS=1 cargo test --test init_golden` rewrites the expected
//! files; read every one you bless.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/init");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/init")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

fn binky() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_binky"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1");
    c
}

/// Runs `binky init` in `case`: (exit code, stdout, stderr).
fn run_init(case: &Path) -> (i32, String, String) {
    let args: Vec<String> = match std::fs::read_to_string(case.join("args")) {
        Ok(t) => t.lines().map(str::to_owned).collect(),
        Err(_) => vec!["--stdout".to_owned()],
    };
    let out = binky()
        .arg("init")
        .args(&args)
        .current_dir(case)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Every value a case's `.env`, env files and compose `environment:` set
/// that is long enough to be recognisable (not `1` or `true`) and is no
/// service or key name.
fn secret_values(case: &Path) -> Vec<String> {
    let mut values = Vec::new();
    let mut stack = vec![case.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            if name.ends_with(".env") || name.starts_with(".env") {
                for line in text.lines() {
                    if let Some((_, v)) = line.split_once('=') {
                        values.push(v.trim().to_owned());
                    }
                }
            }
            if name.ends_with(".yml") || name.ends_with(".yaml") {
                // `KEY: value` and `- KEY=value` lines under an
                // `environment:`; a rough reading is enough to find values.
                let mut in_env = false;
                let mut indent = 0;
                for line in text.lines() {
                    let ind = line.len() - line.trim_start().len();
                    let t = line.trim();
                    if t.starts_with("environment:") {
                        in_env = true;
                        indent = ind;
                        continue;
                    }
                    if in_env && ind <= indent && !t.is_empty() {
                        in_env = false;
                    }
                    if in_env {
                        let t = t.trim_start_matches("- ");
                        if let Some((_, v)) = t.split_once(['=', ':']) {
                            values.push(v.trim().trim_matches('"').to_owned());
                        }
                    }
                }
            }
        }
    }
    values.retain(|v| v.len() >= 6 && !v.starts_with("${") && !v.starts_with("<<"));
    values
}

#[test]
fn every_case_matches_its_expected_output_passes_check_and_copies_no_value() {
    let bless = std::env::var_os("BINKY_BLESS").is_some();
    let mut failures = Vec::new();
    for case in cases() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let (code, stdout, stderr) = run_init(&case);
        let err_text = (code != 0 || !stderr.is_empty()).then(|| format!("exit: {code}\n{stderr}"));
        let toml_path = case.join("expected.toml");
        let err_path = case.join("expected.err");
        if bless {
            for (path, text) in [
                (&toml_path, Some(&stdout).filter(|s| !s.is_empty())),
                (&err_path, err_text.as_ref()),
            ] {
                match text {
                    Some(t) => std::fs::write(path, t).unwrap(),
                    None => {
                        let _ = std::fs::remove_file(path);
                    }
                }
            }
            continue;
        }
        let want_toml = std::fs::read_to_string(&toml_path).unwrap_or_default();
        let want_err = std::fs::read_to_string(&err_path).ok();
        if stdout != want_toml {
            failures.push(format!("{name}: stdout differs:\n{stdout}"));
        }
        if err_text != want_err {
            failures.push(format!("{name}: exit/stderr differ:\n{err_text:?}"));
        }
        if !stdout.is_empty() {
            for v in secret_values(&case) {
                if stdout.contains(&v) {
                    failures.push(format!("{name}: the value {v:?} was copied"));
                }
            }
            // What init prints is what `binky check` accepts, run as a
            // user would on the written file.
            let tmp = tempfile::tempdir().unwrap();
            std::fs::write(tmp.path().join("binky.toml"), &stdout).unwrap();
            let check = binky()
                .args(["check", "binky.toml"])
                .current_dir(tmp.path())
                .output()
                .unwrap();
            if !check.status.success() {
                failures.push(format!(
                    "{name}: binky check refuses it:\n{}",
                    String::from_utf8_lossy(&check.stdout)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Writing (not `--stdout`): a file appears only when init succeeds, an
/// existing one is kept without `--force`, and `--force` replaces it.
#[test]
fn init_writes_refuses_to_overwrite_and_force_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("compose.yaml"),
        "services:\n  cache:\n    image: redis:7\n",
    )
    .unwrap();
    let ok = binky().arg("init").current_dir(dir).output().unwrap();
    assert!(ok.status.success(), "{ok:?}");
    let written = std::fs::read_to_string(dir.join("binky.toml")).unwrap();
    assert!(written.contains("adapter = \"redis\""), "{written}");
    std::fs::write(dir.join("binky.toml"), "# mine\n").unwrap();
    let again = binky().arg("init").current_dir(dir).output().unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(dir.join("binky.toml")).unwrap(),
        "# mine\n"
    );
    let forced = binky()
        .args(["init", "--force"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(forced.status.success());
    assert_eq!(
        std::fs::read_to_string(dir.join("binky.toml")).unwrap(),
        written
    );
    // A compose file init cannot use writes nothing.
    std::fs::remove_file(dir.join("binky.toml")).unwrap();
    std::fs::write(dir.join("compose.yaml"), "services: [\n").unwrap();
    let bad = binky().arg("init").current_dir(dir).output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(!dir.join("binky.toml").exists());
    assert_eq!(
        std::fs::read_dir(dir).unwrap().count(),
        1,
        "nothing but the compose file"
    );
}
