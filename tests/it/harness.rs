//! A small harness every integration test reuses: a private `BINKY_HOME`, the
//! real binary run as a subprocess with a clean environment, and waits on
//! conditions (never fixed sleeps).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn binky_exe() -> &'static str {
    env!("CARGO_BIN_EXE_binky")
}

/// A free TCP port on loopback (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One test's state folder. Dropping it stops its daemon (and kills it if it
/// does not stop).
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    /// A fresh, short (socket paths are limited to ~107 bytes) state folder.
    pub fn new() -> Self {
        Self::new_in(Path::new("/tmp"))
    }

    /// A fresh state folder in folder `parent` (a filesystem a test needs
    /// its slices on); keep `parent` short, for the socket.
    pub fn new_in(parent: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("bk")
            .tempdir_in(parent)
            .expect("tempdir");
        Home { dir }
    }

    /// The state folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A file under the state folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The names in folder `dir` under the state folder, sorted; none when
    /// it does not exist.
    pub fn listed(&self, dir: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.file(dir))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// `binky ARGS` with only this home's variables set: every inherited
    /// `BINKY_*` is removed so a developer's own settings never leak in.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.program(binky_exe(), args)
    }

    /// `program ARGS` (an MCP client, a wrapper that runs binky) with the
    /// environment `cmd` gives binky: this home, no other `BINKY_*`.
    pub fn program(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("BINKY_") {
                c.env_remove(k);
            }
        }
        c.args(args)
            .env("BINKY_HOME", self.path())
            .env("NO_COLOR", "1")
            .env("BINKY_PROXY_PORT", free_port().to_string())
            .env("BINKY_HTTPS_PORT", free_port().to_string())
            .stdin(Stdio::null());
        c
    }

    /// Runs `binky ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Out {
        Out(self.cmd(args).output().expect("spawn binky"))
    }

    /// Runs `binky ARGS` and asserts it exits 0.
    pub fn ok(&self, args: &[&str]) -> Out {
        let out = self.run(args);
        assert_eq!(out.code(), 0, "binky {args:?} failed:\n{out}");
        out
    }

    /// Admission limited by parallelism alone: `max_parallel` `n`, no RAM
    /// or disk reserve (so tests do not depend on this machine's room).
    pub fn max_parallel_only(&self, n: u32) {
        self.ok(&[
            "reserve",
            "--max-parallel",
            &n.to_string(),
            "--ram",
            "0",
            "--disk",
            "0",
        ]);
    }

    /// `binky daemon start` with `env` set for the daemon (a fault point,
    /// a shorter interval); asserts it started.
    pub fn start_daemon_with(&self, env: &[(&str, &str)]) {
        let mut c = self.cmd(&["daemon", "start"]);
        c.envs(env.iter().copied());
        let out = Out(c.output().unwrap());
        assert_eq!(out.code(), 0, "{out}");
    }

    /// The running daemon's pid, from its lock file.
    pub fn daemon_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.file("daemon.lock")).ok()?;
        let pid: u32 = text.trim().parse().ok()?;
        alive(pid).then_some(pid)
    }

    /// The event log's lines, parsed.
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.file("events.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("event line is JSON"))
            .collect()
    }

    /// The golden template world `world`'s slice of `service` was last
    /// cloned from, as its `cloned` event names it.
    pub fn cloned_from(&self, world: &str, service: &str) -> String {
        let events = self.events();
        events
            .iter()
            .rev()
            .find(|e| e["event"] == "cloned" && e["worktree"] == world && e["service"] == service)
            .and_then(|e| e["template"].as_str())
            .unwrap_or_else(|| panic!("no `cloned` event for {world}/{service}: {events:?}"))
            .to_owned()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let pid = self.daemon_pid();
        let _ = self.cmd(&["daemon", "stop"]).output();
        if let Some(pid) = pid
            && !wait_until(Duration::from_secs(5), || !alive(pid))
        {
            kill9(pid);
        }
        // Stopping the daemon leaves services running (by design); a test
        // must not, so kill every process group the registry still records.
        for pgid in self.recorded_groups() {
            let _ = Command::new("kill")
                .args(["-9", "--", &format!("-{pgid}")])
                .status();
        }
    }
}

impl Home {
    /// Process groups of services the registry says are running.
    pub fn recorded_groups(&self) -> Vec<u32> {
        let Ok(conn) = rusqlite::Connection::open(self.file("registry.db")) else {
            return Vec::new();
        };
        let Ok(mut stmt) = conn.prepare("SELECT pgid FROM services WHERE pgid IS NOT NULL") else {
            return Vec::new();
        };
        stmt.query_map([], |r| r.get::<_, u32>(0))
            .map(|rows| rows.flatten().filter(|p| *p > 1).collect())
            .unwrap_or_default()
    }
}

/// Whether `pid` is a live (non-zombie) process.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state is the field after the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// SIGKILL.
pub fn kill9(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// A child process that is killed and reaped when dropped, so a test that
/// fails half-way leaves no follower or server of its own running.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A command running in the background whose stderr is read as it comes,
/// so a test can wait for what it says (`queued: …`) instead of sleeping.
pub struct Watched {
    child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Watched {
    /// Spawns `cmd` with stderr piped (and stdout discarded).
    pub fn spawn(cmd: Command) -> Watched {
        Self::reading(cmd, false)
    }

    /// Spawns `cmd` with stdout piped (and stderr discarded): `wait_for`
    /// and `finish` then read its stdout.
    pub fn spawn_stdout(cmd: Command) -> Watched {
        Self::reading(cmd, true)
    }

    fn reading(mut cmd: Command, stdout: bool) -> Watched {
        use std::io::Read;
        use std::process::Stdio;
        let (out, err) = if stdout {
            (Stdio::piped(), Stdio::null())
        } else {
            (Stdio::null(), Stdio::piped())
        };
        let mut child = cmd.stdout(out).stderr(err).spawn().expect("spawn");
        let mut pipe: Box<dyn Read + Send> = if stdout {
            Box::new(child.stdout.take().unwrap())
        } else {
            Box::new(child.stderr.take().unwrap())
        };
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Watched {
            child,
            stderr,
            reader: Some(reader),
        }
    }

    /// What it printed so far (on the stream it was spawned to read).
    pub fn text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Stops it (SIGKILL) and waits for it.
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        self.finish().1
    }

    /// Waits (up to `timeout`) until its stderr holds `needle`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.stderr.lock().unwrap().contains(needle))
    }

    /// Whether it has ended (without waiting).
    pub fn finished(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for it to end: its exit code (-1 if killed) and all of stderr.
    pub fn finish(mut self) -> (i32, String) {
        let status = self.child.wait().expect("wait");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let text = self.stderr.lock().unwrap().clone();
        (status.code().unwrap_or(-1), text)
    }
}

/// A finished command's output.
pub struct Out(pub Output);

impl Out {
    /// Exit code (-1 if killed by a signal).
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    /// stdout as text.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    /// stderr as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    /// stdout parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self}"))
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code(),
            self.stdout(),
            self.stderr()
        )
    }
}

/// A PATH with every program of this process's PATH but `name`: a folder of
/// symlinks under `dir` (first of each name wins, as in a PATH lookup). For
/// tests of what happens when an optional program is not installed.
/// Links the example external adapter `examples/adapters/<name>.py` into
/// `dir` as `binky-adapter-<name>`, for a `PATH` with `dir` on it.
pub fn link_example_adapter(dir: &Path, name: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/adapters")
        .join(format!("{name}.py"));
    std::os::unix::fs::symlink(script, dir.join(format!("binky-adapter-{name}"))).unwrap();
}

/// `PATH` with `dir` first.
pub fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A test tool built outside the clone: `$env` when set, else
/// `~/.cache/<cached>` (where `.ci/run` builds it), else `name` on `PATH`.
pub fn cached_tool(env: &str, cached: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(p.into());
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = PathBuf::from(home).join(".cache").join(cached);
        if p.is_file() {
            return Some(p);
        }
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub fn path_without(name: &str, dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    for d in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let file = e.file_name();
            let link = dir.join(&file);
            if file != name && !link.exists() && e.path().is_file() {
                let _ = std::os::unix::fs::symlink(e.path(), link);
            }
        }
    }
    dir.display().to_string()
}

/// Whether this run is CI's (`CI` or `BINKY_CI` set, as `.ci/run` does).
pub fn in_ci() -> bool {
    ["CI", "BINKY_CI"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| !x.is_empty() && x != "0" && x != "false"))
}

/// A test whose dependency (a server, a tool) is missing. In CI that is a
/// failure, never a pass: this panics. Locally the test skips: it says why
/// on stderr, numbered within this run, and `.config/nextest.toml` shows the
/// output of every test that can skip at the end of the run, so skips are
/// never silent. Call it, then `return`.
pub fn skip(reason: &str) {
    if in_ci() {
        panic!("a test dependency is missing in CI: {reason}");
    }
    let run = std::env::var("NEXTEST_RUN_ID").unwrap_or_else(|_| "cargo-test".into());
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("skips-{run}"));
    let n = {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .expect("skip record");
        let _ = writeln!(f, "{reason}");
        std::fs::read_to_string(&file)
            .map(|t| t.lines().count())
            .unwrap_or(1)
    };
    eprintln!("SKIP (#{n} in this run; CI would fail): {reason}");
}

/// Whether the official MCP Python SDK is installed; says so through
/// [`skip`] when it is not (a failure in CI).
pub fn mcp_sdk() -> bool {
    let there = python_has("mcp.client.stdio");
    if !there {
        skip("the MCP Python SDK is not installed (`pip install mcp`; .ci/run installs it)");
    }
    there
}

/// Whether python3 imports every module of `modules` (`"django, psycopg"`).
pub fn python_has(modules: &str) -> bool {
    std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a Python snippet with `args` as `sys.argv[1:]`; its stdout.
pub fn python(script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
