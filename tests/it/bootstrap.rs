//! A new worktree made ready to work in: `[project] copy` brings what the
//! main checkout has and git does not (`.env.local`, `node_modules`) without
//! overwriting anything or leaving the repository; `[project] setup` runs
//! once, before slices and services, with the world's environment, and runs
//! again after it failed.

use crate::harness::*;
use crate::project::*;

fn world_path(repo: &Repo, home: &Home, world: &str) -> std::path::PathBuf {
    repo.worlds(home)[world]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("no world {world}"))
        .into()
}

#[test]
fn copy_brings_untracked_files_into_a_new_worktree_and_never_overwrites() {
    let home = Home::new();
    let toml = format!(
        "{}copy = [\".env.local\", \"node_modules\", \"README.md\", \"packages/*/node_modules\"]\n[services.app]\ncmd = \"test -f node_modules/left-pad/index.js && exec sleep 600\"\n",
        project_header("copier", 1)
    );
    let repo = Repo::with(
        "",
        &toml,
        &[
            (".gitignore", "node_modules/\n.env.local\n"),
            ("README.md", "committed\n"),
            ("packages/web/package.json", "{}\n"),
        ],
    );
    // What the user has in the main checkout and git does not carry.
    let m = &repo.main;
    std::fs::create_dir_all(m.join("node_modules/left-pad")).unwrap();
    std::fs::write(
        m.join("node_modules/left-pad/index.js"),
        "module.exports = 1;\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("left-pad", m.join("node_modules/pad")).unwrap();
    std::fs::create_dir_all(m.join("packages/web/node_modules/x")).unwrap();
    std::fs::write(m.join("packages/web/node_modules/x/i.js"), "x\n").unwrap();
    std::fs::write(m.join(".env.local"), "SECRET_ISH=1\n").unwrap();
    // An edit not committed: the worktree keeps the committed file.
    std::fs::write(m.join("README.md"), "edited in main\n").unwrap();
    let out = repo.run(&home, &["up", "w"]);
    assert_eq!(out.code(), 0, "{out}");
    let err = out.stderr();
    assert!(
        err.contains("copy node_modules: 2 file(s)")
            && (err.contains("(reflink)") || err.contains("(copy)")),
        "{out}"
    );
    assert!(err.contains("README.md: already in the worktree"), "{out}");
    let wt = world_path(&repo, &home, "w");
    assert_eq!(
        std::fs::read_to_string(wt.join(".env.local")).unwrap(),
        "SECRET_ISH=1\n"
    );
    assert_eq!(
        std::fs::read_link(wt.join("node_modules/pad")).unwrap(),
        std::path::PathBuf::from("left-pad")
    );
    assert!(wt.join("packages/web/node_modules/x/i.js").is_file());
    assert_eq!(
        std::fs::read_to_string(wt.join("README.md")).unwrap(),
        "committed\n"
    );
    // The worktree's own changes are never overwritten by a later `up`.
    std::fs::write(wt.join(".env.local"), "MINE=1\n").unwrap();
    repo.ok(&home, &["down", "w"]);
    repo.ok(&home, &["up", "w"]);
    assert_eq!(
        std::fs::read_to_string(wt.join(".env.local")).unwrap(),
        "MINE=1\n"
    );
    repo.ok(&home, &["remove", "w", "--force"]);
}

#[test]
fn copy_refuses_a_path_that_leads_out_of_the_repository() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("creds"), "top secret\n").unwrap();
    let toml = format!(
        "{}copy = [\"creds\"]\n[services.app]\ncmd = \"exec sleep 600\"\n",
        project_header("escape", 1)
    );
    let repo = Repo::with("", &toml, &[(".gitignore", "creds\n")]);
    std::os::unix::fs::symlink(outside.path().join("creds"), repo.main.join("creds")).unwrap();
    let out = repo.run(&home, &["up", "w"]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr().contains("leads out of the repository"),
        "{out}"
    );
    let wt = world_path(&repo, &home, "w");
    assert!(!wt.join("creds").exists());
    // `binky check` refuses what no repository path can be.
    let bad = format!(
        "{}copy = [\"../shared\", \"/etc/passwd\"]\n",
        project_header("escape", 1)
    );
    std::fs::write(repo.project.join("binky.toml"), bad).unwrap();
    let check = repo.run(&home, &["check"]);
    assert_eq!(check.code(), 1, "{check}");
    let said = check.stdout();
    assert!(said.contains("`../shared` climbs out"), "{check}");
    assert!(said.contains("`/etc/passwd` is absolute"), "{check}");
}

#[test]
fn setup_runs_once_before_services_with_the_world_env_and_again_after_a_failure() {
    let home = Home::new();
    let scratch = tempfile::tempdir().unwrap();
    let count = scratch.path().join("runs");
    let fail = scratch.path().join("fail");
    // The first command leaves a file a service needs; the second fails
    // while the file `fail` exists.
    let toml = format!(
        "{}setup = [\"echo \\\"$BINKY_WORLD ${{api.port}}\\\" > made-by-setup && echo ran >> \\\"$SETUP_COUNT\\\"\", \"if test -e \\\"$SETUP_FAIL\\\"; then echo failing on purpose; exit 3; fi\"]\n[services.api]\ncmd = \"test -f made-by-setup && exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"api\"\nhealth = {{ http = \"/\", timeout = \"20s\", interval = \"50ms\" }}\n",
        project_header("setups", 1)
    );
    let repo = Repo::with("", &toml, &[(".gitignore", "made-by-setup\n")]);
    let env = [
        ("SETUP_COUNT", count.to_str().unwrap()),
        ("SETUP_FAIL", fail.to_str().unwrap()),
    ];
    let runs = || {
        std::fs::read_to_string(&count)
            .unwrap_or_default()
            .lines()
            .count()
    };
    std::fs::write(&fail, "").unwrap();
    let out = repo.run_with(&home, &["up", "w"], &env);
    assert_ne!(out.code(), 0, "{out}");
    let err = out.stderr();
    assert!(err.contains("project.setup[1] failed"), "{out}");
    assert!(err.contains("failing on purpose"), "{out}");
    assert_eq!(runs(), 1);
    // Fixed: the next `up` runs setup again, then the world comes up.
    std::fs::remove_file(&fail).unwrap();
    let out = repo.run_with(&home, &["up", "w"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(runs(), 2);
    let wt = world_path(&repo, &home, "w");
    let made = std::fs::read_to_string(wt.join("made-by-setup")).unwrap();
    let port = repo.worlds(&home)["w"]["services"][0]["port"].clone();
    assert_eq!(made.trim(), format!("w {port}"), "{made}");
    let log = std::fs::read_to_string(home.file("logs/setups/w/setup.log")).unwrap();
    assert!(log.contains("failing on purpose"), "{log}");
    // Once it passed, it is not run again: not by down/up, not by reload.
    repo.ok(&home, &["down", "w"]);
    let out = repo.run_with(&home, &["up", "w"], &env);
    assert_eq!(out.code(), 0, "{out}");
    let out = repo.run_with(&home, &["reload", "w"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(runs(), 2);
    assert_eq!(
        home.events()
            .iter()
            .filter(|e| e["event"] == "setup_ran")
            .count(),
        1
    );
    // A new worktree gets it again.
    repo.ok(&home, &["remove", "w", "--force"]);
    let out = repo.run_with(&home, &["up", "w"], &env);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(runs(), 3);
    repo.ok(&home, &["remove", "w", "--force"]);
}

#[test]
fn ctrl_c_during_setup_stops_its_command_and_the_next_up_runs_it_again() {
    let home = Home::new();
    let marker = format!("SETUPSLEEP{}", std::process::id());
    let scratch = tempfile::tempdir().unwrap();
    let count = scratch.path().join("runs");
    // A long install: its first run is cancelled, a later one is quick.
    let toml = format!(
        "{}setup = [\"echo ran >> \\\"$SETUP_COUNT\\\"; if test ! -e \\\"$SETUP_COUNT.fast\\\"; then sh -c 'sleep 60 # {marker}'; fi\"]\n[services.app]\ncmd = \"exec sleep 600\"\n",
        project_header("setupcancel", 1)
    );
    let repo = Repo::new(&toml);
    let counter = count.to_str().unwrap();
    home.ok(&["daemon", "start"]);
    let mut child = Reaped(
        repo.cmd(&home, &["up", "w"])
            .env("SETUP_COUNT", counter)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_until(std::time::Duration::from_secs(20), || !pids_with(&marker)
            .is_empty()),
        "setup's command never started"
    );
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status();
    let started = std::time::Instant::now();
    let status = child.0.wait().unwrap();
    assert!(!status.success(), "{status}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "up waited for the whole setup command"
    );
    let w = &repo.worlds(&home)["w"];
    assert!(
        w["error"].as_str().unwrap_or("").contains("cancelled"),
        "{w}"
    );
    assert!(
        wait_until(std::time::Duration::from_secs(5), || pids_with(&marker)
            .is_empty()),
        "setup's command still runs: {:?}",
        pids_with(&marker)
    );
    assert!(!home.events().iter().any(|e| e["event"] == "setup_ran"));
    // Not passed, so the next `up` runs it again.
    std::fs::write(format!("{counter}.fast"), "").unwrap();
    let out = repo.run_with(&home, &["up", "w"], &[("SETUP_COUNT", counter)]);
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
    repo.ok(&home, &["remove", "w", "--force"]);
}

/// Issue 48: with `vendor -> <outside>` committed on the world's branch,
/// `copy = ["vendor/x.txt"]` created `<outside>/x.txt`. Now the entry is
/// refused, named with the link, nothing is written outside the worktree,
/// and the other entries are copied all the same.
#[test]
fn copy_never_writes_through_a_link_the_branch_committed() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}copy = [\"vendor/x.txt\", \".env.local\"]\n[services.app]\ncmd = \"exec sleep 600\"\n",
        project_header("linked", 1)
    );
    let repo = Repo::with("", &toml, &[(".gitignore", "/vendor/\n.env.local\n")]);
    // The world's branch commits `vendor` as a link out of the repository;
    // the main checkout has a real `vendor/x.txt`, untracked.
    git(&repo.main, &["checkout", "-q", "-b", "w"]);
    std::os::unix::fs::symlink(outside.path(), repo.main.join("vendor")).unwrap();
    git(&repo.main, &["add", "-f", "vendor"]);
    git(&repo.main, &["commit", "-qm", "vendor is a link"]);
    git(&repo.main, &["checkout", "-q", "main"]);
    assert!(repo.main.join("vendor").symlink_metadata().is_err());
    std::fs::create_dir_all(repo.main.join("vendor")).unwrap();
    std::fs::write(repo.main.join("vendor/x.txt"), "vendored\n").unwrap();
    std::fs::write(repo.main.join(".env.local"), "K=1\n").unwrap();
    let out = repo.run(&home, &["up", "w"]);
    assert!(
        !outside.path().join("x.txt").exists(),
        "copy wrote through the branch's link: {out}"
    );
    assert_ne!(out.code(), 0, "{out}");
    let err = out.stderr();
    assert!(
        err.contains(&format!(
            "vendor/x.txt (vendor in the worktree is a symbolic link (to {})",
            outside.path().display()
        )),
        "{out}"
    );
    assert!(err.contains("copied: .env.local"), "{out}");
    let wt = world_path(&repo, &home, "w");
    assert_eq!(
        std::fs::read_to_string(wt.join(".env.local")).unwrap(),
        "K=1\n"
    );
    repo.ok(&home, &["remove", "w", "--force"]);
}
