//! Promises the README makes that no other test held: the environment a
//! process gets (and in what order), stop signals and timeouts, `restart =
//! "always"`, `--json` of `reload` and `remove`, shell completions.

use crate::harness::*;
use crate::project::*;
use std::time::{Duration, Instant};

/// `KEY=value` lines a service wrote with `env`, as a map.
fn env_file_map(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn a_process_gets_shell_then_env_files_then_binky_then_its_own_env_table() {
    let home = Home::new();
    let toml = format!(
        r#"{header}env_file = "project.env"

[services.api]
cmd = "pwd > $BINKY_WORKTREE/api-cwd.txt; env > $BINKY_WORKTREE/api-env.txt; exec python3 -m http.server ${{self.port}} --bind 127.0.0.1"
url = "api"
ports = ["debug"]
cwd = "sub"
env_file = "api.env"
health = {{ http = "/", timeout = "20s", interval = "50ms" }}
env = {{ D = "table", HOST = "${{api.host}}", WT = "${{worktree.path}}", WN = "${{worktree.name}}", PN = "${{project.name}}", DEBUG_PORT = "${{api.ports.debug}}", SELF_URL = "${{self.url}}" }}
"#,
        header = project_header("contract", 4)
    );
    let repo = Repo::with(
        "",
        &toml,
        &[
            ("project.env", "B=project\nC=project\nD=project\n"),
            // An env file never overrides what Binky sets: the port, the
            // world's names, its token.
            (
                "api.env",
                "C=service\nD=service\nPORT=1\nBINKY_PORT_API=2\nBINKY_WORLD=forged\nBINKY_WORLD_TOKEN=forged\n",
            ),
            ("sub/.keep", ""),
        ],
    );
    let up = Out(repo
        .cmd(&home, &["up", "Feature/Env"])
        .env("A", "shell")
        .env("B", "shell")
        .env("C", "shell")
        .env("D", "shell")
        .output()
        .unwrap());
    assert_eq!(up.code(), 0, "{up}");
    let world = &repo.worlds(&home)["Feature/Env"];
    let tree = std::path::PathBuf::from(world["path"].as_str().unwrap());
    // A lossy name (case, `/`) gets a hash suffix in its slug.
    let slug = world["slug"].as_str().unwrap().to_owned();
    assert!(slug.starts_with("feature-env"), "{slug}");
    let got = env_file_map(&std::fs::read_to_string(tree.join("api-env.txt")).unwrap());
    // The shell, then the project's env_file, then the service's, then the
    // rendered env table, which wins.
    assert_eq!(got["A"], "shell");
    assert_eq!(got["B"], "project");
    assert_eq!(got["C"], "service");
    assert_eq!(got["D"], "table");
    // Binky's own, and the tokens rendered at run time.
    let port: u16 = got["PORT"].parse().unwrap();
    assert!(port > 2, "{port}: an env file set PORT");
    assert_eq!(got["BINKY_PORT_API"], port.to_string());
    assert_ne!(
        got.get("BINKY_WORLD_TOKEN").map(String::as_str),
        Some("forged")
    );
    let debug: u16 = got["BINKY_PORT_API_DEBUG"].parse().unwrap();
    assert_ne!(debug, port);
    assert_eq!(got["DEBUG_PORT"], debug.to_string());
    assert_eq!(got["HOST"], format!("api.{slug}.contract.localhost"));
    let proxy = home.ok(&["config", "--json"]).json()["proxy_port"].clone();
    assert_eq!(
        got["SELF_URL"],
        format!("http://api.{slug}.contract.localhost:{proxy}")
    );
    assert_eq!(got["WN"], "Feature/Env");
    assert_eq!(got["PN"], "contract");
    assert_eq!(got["BINKY_PROJECT"], "contract");
    assert_eq!(got["BINKY_WORLD"], "Feature/Env");
    assert_eq!(got["BINKY_SERVICE"], "api");
    let wt = std::fs::canonicalize(&tree).unwrap();
    assert_eq!(std::fs::canonicalize(&got["WT"]).unwrap(), wt);
    assert_eq!(std::fs::canonicalize(&got["BINKY_WORKTREE"]).unwrap(), wt);
    assert_eq!(got["BINKY_HOME"], home.path().display().to_string());
    // `cwd` is relative to the project folder in the world's worktree.
    let cwd = std::fs::read_to_string(tree.join("api-cwd.txt")).unwrap();
    assert_eq!(std::fs::canonicalize(cwd.trim()).unwrap(), wt.join("sub"));
    repo.ok(&home, &["remove", "Feature/Env", "--force"]);
}

#[test]
fn stop_signal_reaches_the_service_and_stop_timeout_is_kept_by_down() {
    let home = Home::new();
    // `sig` exits on SIGINT, writing which signal it got; `deaf` ignores
    // SIGTERM, so only the SIGKILL after stop_timeout ends it.
    let toml = format!(
        r#"{}[services.sig]
cmd = "exec python3 sig.py"
stop_signal = "INT"
[services.deaf]
cmd = "exec python3 deaf.py"
stop_timeout = "1500ms"
"#,
        project_header("stops", 2)
    );
    let sig = "import signal, sys, time\ndef on(n, f):\n    open('got-signal.txt', 'w').write(signal.Signals(n).name)\n    sys.exit(0)\nsignal.signal(signal.SIGINT, on)\nsignal.signal(signal.SIGTERM, on)\nopen('sig-ready.txt', 'w').write('1')\nwhile True:\n    time.sleep(0.05)\n";
    let deaf = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen('deaf-ready.txt', 'w').write('1')\nwhile True:\n    time.sleep(0.05)\n";
    let repo = Repo::with("", &toml, &[("sig.py", sig), ("deaf.py", deaf)]);
    repo.ok(&home, &["up", "x"]);
    let tree = repo.worktree_root().join("x");
    // Both handlers are installed before the signals come (a SIGINT
    // before them would end python without a word).
    assert!(wait_until(Duration::from_secs(10), || tree
        .join("deaf-ready.txt")
        .exists()
        && tree.join("sig-ready.txt").exists()));
    let pids: Vec<u32> = repo.worlds(&home)["x"]["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["pid"].as_u64().map(|p| p as u32))
        .collect();
    assert_eq!(pids.len(), 2);
    let t0 = Instant::now();
    repo.ok(&home, &["down", "x"]);
    let took = t0.elapsed();
    assert_eq!(
        std::fs::read_to_string(tree.join("got-signal.txt")).unwrap(),
        "SIGINT"
    );
    // The SIGKILL followed the grace, not before it, and not much after.
    assert!(took >= Duration::from_millis(1400), "down took {took:?}");
    assert!(took < Duration::from_secs(8), "down took {took:?}");
    for p in pids {
        assert!(!alive(p), "pid {p} outlived down");
    }
}

#[test]
fn restart_always_brings_back_a_service_that_exits_cleanly() {
    let home = Home::new();
    let toml = format!(
        "{}[services.job]\ncmd = \"echo ran >> runs.txt; sleep 0.5; exit 0\"\nrestart = {{ policy = \"always\", backoff = \"100ms\", max_backoff = \"100ms\" }}\n",
        project_header("always", 1)
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    let runs = repo.worktree_root().join("x/runs.txt");
    assert!(
        wait_until(Duration::from_secs(15), || std::fs::read_to_string(&runs)
            .is_ok_and(|t| t.lines().count() >= 3)),
        "a clean exit was not restarted under `always`"
    );
    repo.ok(&home, &["down", "x"]);
}

#[test]
fn reload_and_remove_print_the_world_as_json() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n[services.db]\nadapter = \"sqlite\"\n",
        project_header("jsonverbs", 1)
    ));
    repo.ok(&home, &["up", "x"]);
    let reload = repo.ok(&home, &["reload", "x", "--json"]).json();
    assert_eq!(reload["world"]["name"], "x", "{reload}");
    assert_eq!(reload["world"]["state"], "running", "{reload}");
    assert_eq!(reload["project"], "jsonverbs");
    let removed = repo.ok(&home, &["remove", "x", "--json"]).json();
    assert_eq!(removed["world"]["name"], "x", "{removed}");
    assert_eq!(removed["world"]["state"], "removed", "{removed}");
    // Each service as it is now: not running, no slice, no process.
    for s in removed["world"]["services"].as_array().unwrap() {
        assert_eq!(s["state"], "stopped", "{removed}");
        assert!(s["pid"].is_null(), "{removed}");
    }
    assert_eq!(removed["world"]["services"].as_array().unwrap().len(), 2);
    assert!(!repo.worlds(&home).contains_key("x"));
}

#[test]
fn completions_are_valid_scripts_for_each_shell() {
    let home = Home::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = home.ok(&["completions", shell]);
        let script = out.stdout();
        assert!(script.contains("binky"), "{shell}: {script}");
        assert!(script.contains("remove"), "{shell} lists the verbs");
        // Where the shell is here, it must parse what we print.
        let checker = match shell {
            "bash" => Some(("bash", "-n")),
            "zsh" => Some(("zsh", "-n")),
            _ => None,
        };
        if let Some((sh, flag)) = checker {
            if std::process::Command::new(sh)
                .arg("-c")
                .arg("true")
                .output()
                .is_err()
            {
                skip(&format!("{sh} is not installed"));
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let f = dir.path().join("completion");
            std::fs::write(&f, &script).unwrap();
            let check = std::process::Command::new(sh)
                .arg(flag)
                .arg(&f)
                .output()
                .unwrap();
            assert!(
                check.status.success(),
                "{sh} -n: {}",
                String::from_utf8_lossy(&check.stderr)
            );
        }
    }
}

#[test]
fn doctor_exits_1_when_a_check_fails_and_says_how_to_fix_it() {
    let home = Home::new();
    // A socket bound to the proxy's port but not listening: the daemon
    // cannot bind it, and nothing answers there.
    let port = free_port();
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            &format!("import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', {port}))\nprint('bound', flush=True)\ntime.sleep(120)"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "bound");
    let start = Out(home
        .cmd(&["daemon", "start"])
        .env("BINKY_PROXY_PORT", port.to_string())
        .output()
        .unwrap());
    assert_eq!(start.code(), 0, "{start}");
    let out = Out(home
        .cmd(&["doctor", "--json"])
        .env("BINKY_PROXY_PORT", port.to_string())
        .output()
        .unwrap());
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.code(), 1, "{out}");
    let v = out.json();
    assert_eq!(v["ok"], false, "{v}");
    let proxy = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "proxy")
        .cloned()
        .unwrap_or_default();
    assert_eq!(proxy["status"], "fail", "{v}");
    assert!(
        proxy["fix"]
            .as_str()
            .unwrap_or("")
            .contains("binky port --proxy"),
        "{proxy}"
    );
}

#[test]
fn domain_and_worktree_root_hold_end_to_end_and_gc_sweeps_only_a_clean_stray_there() {
    let home = Home::new();
    let trees = tempfile::Builder::new()
        .prefix("bkt")
        .tempdir_in("/tmp")
        .unwrap();
    let root = trees.path().join("worlds");
    let toml = format!(
        "{}domain = \"shop.test\"\nworktree_root = \"{}\"\n{}",
        project_header("custom", 4),
        root.display(),
        http_service("web", "")
    );
    let repo = Repo::new(&toml);
    repo.ok(&home, &["up", "x"]);
    let w = &repo.worlds(&home)["x"];
    let path = std::path::PathBuf::from(w["path"].as_str().unwrap());
    assert_eq!(path.parent().unwrap(), root.as_path(), "{w}");
    let web = w["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "web")
        .unwrap()
        .clone();
    assert_eq!(web["host"], "web.x.shop.test", "{w}");
    // Routed by that name.
    let port = home.ok(&["config", "--json"]).json()["proxy_port"]
        .as_u64()
        .unwrap() as u16;
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut c, b"GET / HTTP/1.0\r\nHost: web.x.shop.test\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = std::io::Read::read_to_string(&mut c, &mut reply);
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    // Two worktrees in that root that no world owns: one clean, one with
    // work in it.
    let clean = root.join("stray-clean");
    let dirty = root.join("stray-dirty");
    git(
        &repo.main,
        &["worktree", "add", "-q", clean.to_str().unwrap(), "-b", "s1"],
    );
    git(
        &repo.main,
        &["worktree", "add", "-q", dirty.to_str().unwrap(), "-b", "s2"],
    );
    std::fs::write(dirty.join("unsaved.txt"), "work").unwrap();
    // gc says what it kept and why, and exits 1 for it.
    let gc = repo.run(&home, &["gc", "--json"]);
    assert_eq!(gc.code(), 1, "{gc}");
    let items = gc.json();
    let field = |p: &std::path::Path, f: &str| {
        items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["what"] == p.display().to_string())
            .map(|i| i[f].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(field(&clean, "outcome"), "swept", "{items}");
    assert!(field(&dirty, "outcome").contains("uncommitted"), "{items}");
    // What was done, for scripts, beside the words.
    assert_eq!(
        (field(&clean, "kind"), field(&clean, "result")),
        ("worktree".to_owned(), "swept".to_owned()),
        "{items}"
    );
    assert_eq!(field(&dirty, "result"), "not_swept", "{items}");
    assert!(!clean.exists(), "the clean stray was kept: {gc}");
    assert!(
        dirty.join("unsaved.txt").exists(),
        "the dirty stray was swept: {gc}"
    );
    assert!(path.exists(), "gc touched a live world: {gc}");
    assert_eq!(repo.worlds(&home)["x"]["state"], "running");
    repo.ok(&home, &["remove", "x", "--force"]);
}

#[test]
fn reload_takes_a_group_as_up_does() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("regroup", 1)
    ));
    repo.ok(&home, &["up", "x"]);
    assert!(repo.worlds(&home)["x"]["group"].is_null());
    repo.ok(&home, &["reload", "x", "--group", "agents"]);
    let w = &repo.worlds(&home)["x"];
    assert_eq!(w["group"], "agents", "{w}");
    assert_eq!(w["state"], "running", "{w}");
}

/// The README's quick start, command by command, on `examples/hello` as
/// shipped (its default port range, its string `health` form).
#[test]
fn the_readme_quick_start_works_as_written() {
    let home = Home::new();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        files.push((name, std::fs::read_to_string(e.path()).unwrap()));
    }
    let toml = std::fs::read_to_string(src.join("binky.toml")).unwrap();
    let rest: Vec<(&str, &str)> = files
        .iter()
        .filter(|(n, _)| !n.ends_with("binky.toml"))
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    // A clone of this repository: the project in examples/hello.
    let repo = Repo::with("examples/hello", &toml, &rest);
    let binky = |args: &[&str]| {
        let mut c = home.cmd(args);
        c.current_dir(&repo.main);
        Out(c.output().unwrap())
    };
    let up = binky(&["-p", "examples/hello", "up", "try-it"]);
    assert_eq!(up.code(), 0, "{up}");
    let said = up.stdout();
    assert!(said.contains("✓ up: try-it (3 service(s))"), "{up}");
    assert!(said.contains("http://api.try-it.hello.localhost"), "{up}");
    let status = binky(&["status"]);
    assert!(status.stdout().contains("try-it  [running]"), "{status}");
    let page = binky(&["-p", "examples/hello", "curl", "try-it", "web", "/"]);
    assert_eq!(page.code(), 0, "{page}");
    assert!(
        page.stdout().starts_with("<h1>world try-it</h1>") && page.stdout().contains("hello"),
        "{page}"
    );
    let logs = binky(&["-p", "examples/hello", "logs", "try-it", "-n", "2"]);
    assert!(logs.stdout().contains("web | "), "{logs}");
    let env = binky(&["-p", "examples/hello", "env", "try-it"]).json();
    assert!(
        env["services"]["db"]
            .as_str()
            .unwrap()
            .starts_with("sqlite://"),
        "{env}"
    );
    assert!(
        env["services"]["web"]
            .as_str()
            .unwrap()
            .starts_with("http://web.try-it.hello.localhost")
    );
    let dotenv = binky(&["-p", "examples/hello", "env", "try-it", "--dotenv"]).stdout();
    for k in [
        "DB_URL='",
        "API_URL='",
        "WEB_URL='",
        "BINKY_WORKTREE='",
        "BINKY_WORLD='try-it'",
    ] {
        assert!(dotenv.contains(k), "{k}: {dotenv}");
    }
    let verify = binky(&["-p", "examples/hello", "verify", "try-it"]);
    assert_eq!(verify.code(), 0, "{verify}");
    let down = binky(&["-p", "examples/hello", "down", "try-it"]);
    assert!(down.stdout().contains("✓ down: try-it"), "{down}");
    // Its hint works from where the user is: with their `-p`.
    assert!(
        down.stdout()
            .contains("`binky -p examples/hello up try-it` resumes it"),
        "{down}"
    );
    let removed = binky(&["-p", "examples/hello", "remove", "try-it"]);
    assert!(removed.stdout().contains("✓ removed: try-it"), "{removed}");
    // The last step: `remove` keeps the branch, git's own command deletes it.
    let branch = std::process::Command::new("git")
        .args(["branch", "-D", "try-it"])
        .current_dir(&repo.main)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&branch.stdout);
    assert!(
        branch.status.success() && said.starts_with("Deleted branch try-it (was "),
        "{said}{}",
        String::from_utf8_lossy(&branch.stderr)
    );
}

#[test]
fn a_daemon_whose_binary_was_replaced_still_starts_services_and_doctor_says_so() {
    let home = Home::new();
    // A daemon started from a copy of the binary, which is then deleted (a
    // rebuild or reinstall while it runs).
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("binky");
    std::fs::copy(binky_exe(), &copy).unwrap();
    let probe = home.cmd(&[]);
    let mut start = std::process::Command::new(&copy);
    start.args(["daemon", "start"]);
    for (k, v) in probe.get_envs() {
        match v {
            Some(v) => start.env(k, v),
            None => start.env_remove(k),
        };
    }
    let started = Out(start.output().unwrap());
    assert_eq!(started.code(), 0, "{started}");
    std::fs::remove_file(&copy).unwrap();
    let repo = Repo::new(&format!(
        "{}{}",
        project_header("replaced", 2),
        http_service("web", "")
    ));
    // Its services' log writers are started from the binary it runs.
    repo.ok(&home, &["up", "x"]);
    let log = home.file("logs/replaced/x/web.log");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("\"GET / HTTP/1.1\" 200"))),
        "the service's output never reached its log"
    );
    let doctor = repo.run(&home, &["doctor", "--json"]).json();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "daemon binary")
        .cloned()
        .unwrap_or_default();
    assert_eq!(check["status"], "warn", "{doctor}");
    assert!(
        check["fix"]
            .as_str()
            .unwrap_or("")
            .contains("binky daemon stop"),
        "{check}"
    );
    repo.ok(&home, &["remove", "x", "--force"]);
}

#[test]
fn a_name_whose_folder_another_world_uses_is_refused_naming_that_world() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.s]\ncmd = \"exec sleep 600\"\n",
        project_header("clash", 1)
    ));
    repo.ok(&home, &["up", "feat/a"]);
    let slug = repo.worlds(&home)["feat/a"]["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    // A second name that slugs to the same folder.
    let out = repo.run(&home, &["up", &slug]);
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr().contains("is the worktree of world `feat/a`"),
        "{out}"
    );
    assert!(!repo.worlds(&home).contains_key(&slug));
    assert_eq!(repo.worlds(&home)["feat/a"]["state"], "running");
}

#[test]
fn a_service_that_fails_its_probe_is_not_served_at_its_url_but_stays_for_inspection() {
    let home = Home::new();
    let toml = format!(
        "{}[services.web]\ncmd = \"exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"web\"\nhealth = {{ http = \"/no-such-page\", timeout = \"1s\", interval = \"100ms\" }}\n",
        project_header("badprobe", 2)
    );
    let repo = Repo::new(&toml);
    let out = repo.run(&home, &["up", "x"]);
    assert_eq!(out.code(), 1, "{out}");
    let w = &repo.worlds(&home)["x"];
    assert_eq!(w["state"], "failed", "{w}");
    let own_port = w["services"][0]["port"].as_u64().unwrap() as u16;
    let get = |port: u16, host: &str| {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(
            &mut c,
            format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut reply = String::new();
        let _ = std::io::Read::read_to_string(&mut c, &mut reply);
        reply
    };
    // Its own port answers (inspect it there)…
    assert!(get(own_port, "localhost").starts_with("HTTP/1.0 200"));
    // …its URL does not pretend the world is up.
    let proxy = home.ok(&["config", "--json"]).json()["proxy_port"]
        .as_u64()
        .unwrap() as u16;
    let via = get(proxy, "web.x.badprobe.localhost");
    assert!(!via.starts_with("HTTP/1.1 200"), "{via}");
    assert!(via.contains("failed"), "{via}");
    repo.ok(&home, &["remove", "x", "--force"]);
}
