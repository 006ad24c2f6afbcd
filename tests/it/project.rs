//! Real git repositories with a binky.toml, for world tests.

#![allow(dead_code)]

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A git repository in a temp folder with one commit holding `binky.toml`
/// (in `subdir`, "" for the root) and any extra files.
pub struct Repo {
    dir: tempfile::TempDir,
    /// The main worktree.
    pub main: PathBuf,
    /// The project folder (holding binky.toml).
    pub project: PathBuf,
}

/// Runs git in `dir`, asserting success; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Repo {
    /// A repository whose project lives in `subdir`.
    pub fn with(subdir: &str, toml: &str, files: &[(&str, &str)]) -> Repo {
        Self::with_in(Path::new("/tmp"), subdir, toml, files)
    }

    /// [`Repo::with`] in folder `parent` (a filesystem the test needs its
    /// worktrees on).
    pub fn with_in(parent: &Path, subdir: &str, toml: &str, files: &[(&str, &str)]) -> Repo {
        let dir = tempfile::Builder::new()
            .prefix("bkr")
            .tempdir_in(parent)
            .unwrap();
        let main = dir.path().join("app");
        let project = main.join(subdir);
        std::fs::create_dir_all(&project).unwrap();
        git(&main, &["init", "-q", "-b", "main"]);
        std::fs::write(project.join("binky.toml"), toml).unwrap();
        for (name, text) in files {
            let p = project.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        git(&main, &["add", "-A"]);
        git(&main, &["commit", "-qm", "init"]);
        Repo { dir, main, project }
    }

    /// A repository with the project at its root.
    pub fn new(toml: &str) -> Repo {
        Self::with("", toml, &[])
    }

    /// The folder holding binky.toml.
    pub fn project_dir(&self) -> &Path {
        &self.project
    }

    /// Where Binky puts worktrees by default.
    pub fn worktree_root(&self) -> PathBuf {
        self.dir.path().join("app.worktrees")
    }

    /// `binky ARGS` run inside the project folder.
    pub fn cmd(&self, home: &Home, args: &[&str]) -> Command {
        let mut c = home.cmd(args);
        c.current_dir(&self.project);
        c
    }

    /// Runs `binky ARGS` in the project folder.
    pub fn run(&self, home: &Home, args: &[&str]) -> Out {
        Out(self.cmd(home, args).output().unwrap())
    }

    /// Runs `binky ARGS` in the project folder with `env` added.
    pub fn run_with(&self, home: &Home, args: &[&str], env: &[(&str, &str)]) -> Out {
        Out(self
            .cmd(home, args)
            .envs(env.iter().copied())
            .output()
            .unwrap())
    }

    /// Runs and asserts exit 0.
    pub fn ok(&self, home: &Home, args: &[&str]) -> Out {
        let out = self.run(home, args);
        assert_eq!(out.code(), 0, "binky {args:?} failed:\n{out}");
        out
    }

    /// `binky status --json` for this project's worlds: name → world JSON.
    pub fn worlds(&self, home: &Home) -> serde_json::Map<String, serde_json::Value> {
        let st = self.ok(home, &["status", "--json"]).json();
        let mut out = serde_json::Map::new();
        for p in st["projects"].as_array().unwrap() {
            for w in p["worlds"].as_array().unwrap() {
                out.insert(w["name"].as_str().unwrap().to_owned(), w.clone());
            }
        }
        out
    }
}

/// A `[project]` header with a private port range of `n` free ports, so
/// parallel tests never compete for ports.
pub fn project_header(name: &str, n: u16) -> String {
    let (lo, hi) = free_range(n);
    format!("[project]\nname = \"{name}\"\nport_range = [{lo}, {hi}]\n")
}

/// A run of `n` consecutive ports (at most 256) that no other test of this
/// run gets, free now. Blocks of 8 ports between 25000 and 32767 (below
/// Linux's ephemeral range) are claimed by creating a file per block in a
/// folder of this run (nextest runs each test in a process of its own, so
/// the claim must be on disk); a claimed block is never handed out again in
/// the run, and one in use outside the tests is skipped.
pub fn free_range(n: u16) -> (u16, u16) {
    use std::net::TcpListener;
    // Small blocks: a block is never given back within a run, and most
    // tests ask for 1 to 4 ports (968 blocks; 242 of 32 ran out).
    const BLOCK: u16 = 8;
    const FIRST: u16 = 25000;
    const BLOCKS: u16 = (32768 - FIRST) / BLOCK;
    assert!((1..=256).contains(&n), "free_range({n})");
    let need = n.div_ceil(BLOCK);
    let run = std::env::var("NEXTEST_RUN_ID").unwrap_or_else(|_| {
        // `cargo test`: one process runs every test; its pid is the run.
        format!("pid-{}", std::process::id())
    });
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(format!("ports-{run}"));
    if !dir.exists() {
        // Earlier runs' claims, a day old: swept by the first claim of a run.
        for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(86_400));
            if old && e.file_name().to_string_lossy().starts_with("ports-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    std::fs::create_dir_all(&dir).unwrap();
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
    let start = (seed % u64::from(BLOCKS)) as u16;
    for i in 0..BLOCKS {
        let first = (start + i) % BLOCKS;
        if first + need > BLOCKS {
            continue;
        }
        // Claim every block of the run, or give back what was taken.
        let mut claimed = Vec::new();
        for b in first..first + need {
            let f = dir.join(b.to_string());
            if std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&f)
                .is_ok()
            {
                claimed.push(f);
            } else {
                break;
            }
        }
        let lo = FIRST + first * BLOCK;
        let hi = lo + n - 1;
        if claimed.len() == usize::from(need)
            && (lo..=hi).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok())
        {
            return (lo, hi);
        }
        // A block in use outside the tests stays claimed (so nobody else
        // tries it); a partial claim is given back.
        if claimed.len() < usize::from(need) {
            for f in claimed {
                let _ = std::fs::remove_file(f);
            }
        }
    }
    panic!(
        "no free run of {n} ports left for this test run (in {})",
        dir.display()
    );
}

/// A process service serving HTTP on its port with a health probe.
pub fn http_service(name: &str, extra: &str) -> String {
    format!(
        "[services.{name}]\ncmd = \"exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"{name}\"\nhealth = {{ http = \"/\", timeout = \"20s\", interval = \"50ms\" }}\n{extra}\n"
    )
}

/// Pids of live processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmd).contains(marker)
            && alive(pid)
            && pid != std::process::id()
        {
            out.push(pid);
        }
    }
    out
}

/// Runs `binky ARGS` (with `env` added) under a daemon that aborts (as
/// `kill -9` would) at fault point `point`, and returns once that daemon is
/// dead. `remove:teardown`: the slice is recorded `teardown` and is still
/// whole on its server — what a real crash mid-remove leaves for `gc`.
pub fn crash_at(repo: &Repo, home: &Home, args: &[&str], point: &str, env: &[(&str, &str)]) {
    let _ = home.run(&["daemon", "stop"]);
    let started = Out(home
        .cmd(&["daemon", "start"])
        .env("BINKY_TEST_FAULT", point)
        .envs(env.iter().copied())
        .output()
        .unwrap());
    assert_eq!(started.code(), 0, "{started}");
    let crashed = home.daemon_pid().expect("a daemon");
    let out = Out(repo
        .cmd(home, args)
        .envs(env.iter().copied())
        .output()
        .unwrap());
    assert_ne!(
        out.code(),
        0,
        "{point}: {args:?} should have been cut short\n{out}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || !alive(crashed)),
        "{point}: the daemon did not die"
    );
}

/// Brings `world` up, then removes it under a daemon that dies mid-teardown
/// (`remove:teardown`): the world's slice is whole on its server and
/// recorded `teardown`, for `gc` to sweep.
pub fn up_then_crash_removing(repo: &Repo, home: &Home, world: &str, env: &[(&str, &str)]) {
    let up = repo.run_with(home, &["up", world], env);
    assert_eq!(up.code(), 0, "{up}");
    crash_at(
        repo,
        home,
        &["remove", world, "--force"],
        "remove:teardown",
        env,
    );
}

/// Runs `binky up` for each of `worlds` at the same moment, a CLI process
/// each (with `env` added), and asserts that every one succeeded.
pub fn up_at_once(repo: &Repo, home: &Home, worlds: &[&str], env: &[(&str, &str)]) {
    let ups: Vec<_> = worlds
        .iter()
        .map(|w| {
            let child = repo
                .cmd(home, &["up", w])
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (*w, child)
        })
        .collect();
    for (w, child) in ups {
        let out = Out(child.wait_with_output().unwrap());
        assert_eq!(out.code(), 0, "up {w}: {out}");
    }
}
