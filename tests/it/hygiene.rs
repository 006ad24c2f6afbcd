//! Process and terminal hygiene: descriptors Binky keeps and hands on, a
//! closed stdout, escape codes, flags that mean nothing.

use crate::harness::*;
use crate::project::*;
use std::process::Stdio;
#[cfg(unix)]
use {
    std::io::Read,
    std::os::fd::{AsRawFd, FromRawFd, OwnedFd},
    std::os::unix::process::{CommandExt, ExitStatusExt},
    std::time::Duration,
};

// Descriptors, pipes and SIGPIPE are Unix's: the tests of them are too.

/// The descriptors a process has open, by number.
#[cfg(unix)]
fn fds_of(pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    v.sort_unstable();
    v
}

/// A pipe whose ends are not close-on-exec (as a shell's `7>&1` leaves
/// them).
#[cfg(unix)]
#[allow(unsafe_code)] // A test's own process: see the SAFETY notes.
fn inheritable_pipe() -> (std::fs::File, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two new descriptors into the array.
    assert_eq!(unsafe { nix::libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both were just created and are owned here alone.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            OwnedFd::from_raw_fd(fds[1]),
        )
    }
}

#[cfg(unix)]
#[allow(unsafe_code)] // A test's own process: see the SAFETY notes.
#[test]
fn the_auto_started_daemon_and_its_services_keep_no_inherited_descriptor() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.web]\ncmd = \"exec python3 -m http.server ${{self.port}} --bind 127.0.0.1\"\nurl = \"web\"\nhealth = \"/\"\n",
        project_header("fds", 2)
    ));
    // `binky up x 7>&1 | cat` with no daemon running: the pipe's write end
    // is fd 7 of the CLI, and so of anything that inherits it.
    let (mut reader, writer) = inheritable_pipe();
    let pipe = {
        use std::os::unix::fs::MetadataExt;
        format!("pipe:[{}]", reader.metadata().unwrap().ino())
    };
    let raw = writer.as_raw_fd();
    let mut cmd = repo.cmd(&home, &["up", "x"]);
    // SAFETY: dup2 is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if nix::libc::dup2(raw, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = Out(cmd.output().unwrap());
    assert_eq!(out.code(), 0, "{out}");
    drop(writer);
    // Our copy is closed and the CLI has exited: the read end must see the
    // end of the stream now, not when the daemon (or a service) exits.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = reader.read_to_end(&mut buf);
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "something binky started still holds the caller's pipe"
    );
    let daemon = home.daemon_pid().unwrap();
    for fd in fds_of(daemon) {
        let target = std::fs::read_link(format!("/proc/{daemon}/fd/{fd}"));
        assert_ne!(
            target.ok().map(|t| t.display().to_string()),
            Some(pipe.clone()),
            "the daemon holds the caller's pipe as fd {fd}"
        );
    }
    // A service has stdin, stdout and stderr, and nothing else.
    let pid = repo.worlds(&home)["x"]["services"][0]["pid"]
        .as_u64()
        .unwrap() as u32;
    let fds = fds_of(pid);
    let extra: Vec<u32> = fds.into_iter().filter(|fd| *fd > 2).collect();
    // python's own listening socket is the one descriptor it opened itself.
    assert!(extra.len() <= 1, "service has extra fds {extra:?}");
    for fd in extra {
        let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
        assert!(
            target.to_string_lossy().starts_with("socket:"),
            "fd {fd} -> {}",
            target.display()
        );
    }
    repo.ok(&home, &["remove", "x", "--force"]);
}

/// Runs `binky args` with stdout a pipe whose reader is already gone.
#[cfg(unix)]
fn with_closed_stdout(home: &Home, repo: Option<&Repo>, args: &[&str]) -> std::process::Output {
    let (reader, writer) = inheritable_pipe();
    drop(reader);
    let mut cmd = match repo {
        Some(r) => r.cmd(home, args),
        None => home.cmd(args),
    };
    cmd.stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.db]\nadapter = \"sqlite\"\nmigrate = \"echo migrated\"\n",
        project_header("pipes", 1)
    ));
    repo.ok(&home, &["up", "x"]);
    let cases: Vec<(&[&str], bool)> = vec![
        (&["env", "x", "--dotenv"], true),
        (&["env", "x"], true),
        (&["status", "--json"], true),
        (&["status"], true),
        (&["config"], false),
        (&["config", "--json"], false),
        (&["check", "--json"], true),
        (&["check"], true),
        (&["metrics"], false),
        (&["daemon", "status"], false),
        (&["daemon", "status", "--json"], false),
        (&["completions", "bash"], false),
        (&["logs", "x"], true),
        (&["--help"], false),
    ];
    for (args, in_project) in cases {
        let out = with_closed_stdout(&home, in_project.then_some(&repo), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && out.status.code() != Some(101),
            "binky {args:?} on a closed stdout: {:?}\n{stderr}",
            out.status
        );
        // Ended by SIGPIPE, as `cat` would be, or finished having nothing
        // to write; never an error message.
        assert!(
            out.status.signal() == Some(13) || out.status.success(),
            "binky {args:?}: {:?}\n{stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "binky {args:?} printed:\n{stderr}");
    }
    repo.ok(&home, &["remove", "x"]);
}

/// Runs `cmd` with its standard output on `/dev/full` (every write fails
/// with ENOSPC): its exit code and what it said on stderr.
fn into_full_disk(cmd: &mut std::process::Command) -> (Option<i32>, String) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = cmd.stdout(full).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_stdout_that_cannot_be_written_is_one_line_and_exit_1_never_a_panic() {
    let home = Home::new();
    let repo = Repo::new(&format!(
        "{}[services.db]\nadapter = \"sqlite\"\n",
        project_header("full", 1)
    ));
    repo.ok(&home, &["up", "x"]);
    for args in [
        &["env", "x"][..],
        &["status"][..],
        &["env", "x", "--dotenv"][..],
        &["completions", "bash"][..],
    ] {
        let (code, stderr) = into_full_disk(repo.cmd(&home, args).env("RUST_BACKTRACE", "1"));
        assert_eq!(code, Some(1), "binky {args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("cannot write to standard output"),
            "{stderr}"
        );
    }
    repo.ok(&home, &["remove", "x"]);
}

#[test]
fn no_escape_codes_in_logs_pipes_or_under_no_color() {
    let home = Home::new();
    let has_escape = |s: &str| s.contains('\u{1b}');
    // `binky mcp` logs through tracing (rmcp's own debug lines too); its
    // stderr is a pipe here, so never colour, whatever BINKY_LOG says.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    for extra in [&[][..], &["--color", "never"][..]] {
        let mut args: Vec<&str> = extra.to_vec();
        args.push("mcp");
        // Without NO_COLOR (the harness sets it): only the pipe and
        // `--color never` say no colour.
        let mut child = home
            .cmd(&args)
            .env_remove("NO_COLOR")
            .env("BINKY_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{init}").unwrap();
        drop(stdin);
        let out = Out(child.wait_with_output().unwrap());
        assert!(
            !out.stderr().is_empty(),
            "debug logging printed nothing: {out}"
        );
        assert!(!has_escape(&out.stderr()), "{args:?}: {:?}", out.stderr());
    }
    // Even when colour is forced for the terminal output, daemon.log is plain.
    home.ok(&["daemon", "stop"]);
    let out = Out(home
        .cmd(&["--color", "always", "status"])
        .env("BINKY_LOG", "debug")
        .output()
        .unwrap());
    assert_eq!(out.code(), 0, "{out}");
    let log = std::fs::read_to_string(home.file("daemon.log")).unwrap();
    assert!(log.contains("daemon ready"), "{log}");
    assert!(!has_escape(&log), "daemon.log has escape codes:\n{log:?}");
}

#[test]
fn project_flag_is_refused_where_it_means_nothing() {
    let home = Home::new();
    for args in [
        &["-p", "somewhere", "config"][..],
        &["-p", "somewhere", "doctor"][..],
        &["-p", "somewhere", "daemon", "status"][..],
        &["-p", "somewhere", "metrics"][..],
        &["-p", "somewhere", "gc"][..],
        &["--project", "somewhere", "reserve", "--ram", "10"][..],
    ] {
        let out = home.run(args);
        assert_eq!(out.code(), 2, "{args:?}: {out}");
        assert!(
            out.stderr()
                .contains("-p/--project does not apply to `binky"),
            "{args:?}: {out}"
        );
    }
    // Nothing was started for them.
    assert!(home.daemon_pid().is_none());
}

#[test]
fn the_dashboard_piped_says_what_scripts_use() {
    let home = Home::new();
    // The dashboard draws on a terminal; piped, it says what scripts use.
    let out = home.run(&["dashboard"]);
    assert_eq!(out.code(), 1, "{out}");
    assert!(out.stderr().contains("binky status --watch"), "{out}");
}

/// The names of an ELF64 little-endian file's sections (`.text`,
/// `.symtab`, `.debug_info`), read from its section headers.
fn elf_section_names(bytes: &[u8]) -> Vec<String> {
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((bytes[4], bytes[5]), (2, 1), "not ELF64 little-endian");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let start = strtab + u32_at(header(i));
            let end = start + bytes[start..].iter().position(|b| *b == 0).unwrap();
            String::from_utf8_lossy(&bytes[start..end]).into_owned()
        })
        .collect()
}

/// The binary `cargo install` makes carries neither symbols nor debug info
/// (99 MB with line tables, 35.3 with symbols, 24.1 without them and with
/// thin LTO; see benchmarks/README.md), and a panic in it still says why: the message
/// and its place are data, not symbols (`binky completions bash >
/// /dev/full` panics in `print!`, and the hook names the failed write). Built
/// with the release profile as every setting that reaches cargo has it
/// (Cargo.toml, `.cargo/config.toml`, the environment), only unoptimised
/// and without link-time optimisation, which change neither, so the test
/// takes minutes, not a quarter of an hour.
#[test]
fn the_release_build_ships_stripped_and_a_panic_still_says_why() {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("release-hygiene");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--bin",
            "binky",
        ])
        .args(["--config", "profile.release.opt-level=0"])
        .args(["--config", "profile.release.incremental=true"])
        .args(["--config", "profile.release.codegen-units=256"])
        .args(["--config", "profile.release.lto=false"])
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo build --release: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = target.join("release/binky");
    let sections = elf_section_names(&std::fs::read(&path).unwrap());
    assert!(sections.iter().any(|s| s == ".text"), "{sections:?}");
    let kept: Vec<&String> = sections
        .iter()
        .filter(|s| *s == ".symtab" || s.starts_with(".debug_"))
        .collect();
    assert!(kept.is_empty(), "the release binary carries {kept:?}");
    let (code, stderr) =
        into_full_disk(std::process::Command::new(&path).args(["completions", "bash"]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("binky: cannot write to standard output: No space left on device"),
        "{stderr}"
    );
}

/// Every test that calls `harness::skip` must be listed in
/// `.config/nextest.toml`, whose override shows its output at the end of a
/// run: otherwise a local skip would pass in silence.
#[test]
fn every_test_that_can_skip_shows_its_output() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/.config/nextest.toml")).unwrap();
    // The filter of the override that shows a passing test's output: a
    // name elsewhere in the file (another override) shows nothing.
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    let overrides = parsed["profile"]["default"]["overrides"]
        .as_array()
        .unwrap();
    let shown: Vec<&str> = overrides
        .iter()
        .filter(|o| o.get("success-output").and_then(|v| v.as_str()) == Some("final"))
        .filter_map(|o| o.get("filter").and_then(|v| v.as_str()))
        .collect();
    assert_eq!(
        shown.len(),
        1,
        "one override shows the output of tests that can skip"
    );
    let config = shown[0];
    let mut missing = Vec::new();
    let mut found = 0;
    for entry in std::fs::read_dir(format!("{root}/tests/it"))
        .unwrap()
        .flatten()
    {
        let path = entry.path();
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        if module == "harness" || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Split at each test function; a body is everything up to the next
        // function. A helper that skips is seen at its callers.
        for part in text.split("#[test]\nfn ").skip(1) {
            let name = part.split('(').next().unwrap_or("");
            let body = part.split("\n#[test]").next().unwrap_or(part);
            let body = body.split("\nfn ").next().unwrap_or(body);
            // `skip(…)`, or a helper that calls it and says so by its name.
            if body.lines().any(|l| {
                l.trim_start().starts_with("skip(")
                    || l.contains(concat!("skips_without", "_room("))
            }) {
                found += 1;
                let entry = format!("test(={module}::{name})");
                let listed = config.split('|').any(|t| t.trim() == entry);
                if !listed {
                    missing.push(entry);
                }
            }
        }
    }
    assert!(found >= 10, "found only {found} tests that can skip");
    assert!(
        missing.is_empty(),
        "add these to .config/nextest.toml's skip override: {missing:?}"
    );
}

#[test]
fn with_json_a_usage_error_is_json_on_stdout_and_nothing_else() {
    let home = Home::new();
    for args in [
        &["reset", "--json"][..],
        &["env", "x", "--json", "--dotenv"][..],
        &["status", "--json", "--no-such-flag"][..],
    ] {
        let out = home.run(args);
        assert_eq!(out.code(), 2, "binky {args:?}: {out}");
        assert!(out.stderr().is_empty(), "binky {args:?}: {out}");
        let v = out.json();
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(!msg.is_empty() && !msg.contains('\n'), "{v}");
        assert!(v["error"]["hint"].as_str().is_some(), "{v}");
    }
    // The required argument is named in the message.
    let v = home.run(&["reset", "--json"]).json();
    assert!(
        v["error"]["message"].as_str().unwrap().contains("<NAME>"),
        "{v}"
    );
}

#[test]
fn color_never_keeps_help_plain_on_a_terminal() {
    // On a pseudo-terminal clap would colour --help; `--color never` must
    // stop it as it stops Binky's own output.
    let script = r#"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.environ.pop("NO_COLOR", None)
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
"#;
    let run = |extra: &[&str]| {
        let mut c = std::process::Command::new("python3");
        c.arg("-c").arg(script).arg(binky_exe()).args(extra);
        c.env_remove("NO_COLOR");
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let coloured = run(&["--color", "always", "--help"]);
    assert!(coloured.contains("Usage"), "{coloured}");
    // The terminal is real enough to be coloured (else this test proves
    // nothing).
    assert!(
        coloured.contains('\u{1b}'),
        "no colour even asked: {coloured:?}"
    );
    let plain = run(&["--color", "never", "--help"]);
    assert!(plain.contains("Usage"), "{plain}");
    assert!(
        !plain.contains('\u{1b}'),
        "escape codes with --color never: {plain:?}"
    );
    let usage = run(&["--color", "never", "reset"]);
    assert!(usage.contains("required"), "{usage}");
    assert!(!usage.contains('\u{1b}'), "{usage:?}");
}

/// What a service prints is untrusted on a terminal: with colour on (as on
/// a terminal), `logs` and a failed `up`'s excerpt keep its colours but no
/// other escape sequence (a window title, the clipboard, a screen clear),
/// and a carriage return shows as `^M` rather than overwriting the line; a
/// bidi override (U+202E) as `<U+202E>`.
#[test]
fn service_output_cannot_drive_the_terminal() {
    let home = Home::new();
    let hostile = r"printf 'a\033]0;pwned\007b\033]52;c;Y2xpcA==\033\\c\033[2Jd\033[31mred\033[0m e\rf g\342\200\256h\n'";
    let toml = format!(
        "{}[services.loud]\ncmd = \"{}; exec sleep 600\"\n[services.bad]\ncmd = \"{}; exit 3\"\nrestart = \"no\"\n",
        crate::project::project_header("loud", 2),
        hostile.replace('\\', "\\\\").replace('"', "\\\""),
        hostile.replace('\\', "\\\\").replace('"', "\\\"")
    );
    let repo = crate::project::Repo::new(&toml);
    let up = Out(repo
        .cmd(&home, &["--color", "always", "up", "w"])
        .output()
        .unwrap());
    assert_eq!(up.code(), 1, "the bad service fails up: {up}");
    let logs = Out(repo
        .cmd(&home, &["--color", "always", "logs", "w", "loud"])
        .output()
        .unwrap());
    for text in [up.stderr(), logs.stdout()] {
        assert!(text.contains("abcd"), "{text:?}");
        assert!(text.contains("\u{1b}[31mred\u{1b}[0m e^Mf"), "{text:?}");
        // A bidi override is shown as what it is, as the dashboard does.
        assert!(text.contains("g<U+202E>h"), "{text:?}");
        for bad in ["\u{1b}]", "pwned", "\u{1b}[2J", "\r", "\u{202e}"] {
            assert!(!text.contains(bad), "{bad:?} in {text:?}");
        }
    }
}
