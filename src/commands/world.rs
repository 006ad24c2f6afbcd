//! `binky up`, `reload`, `down`, `remove`, `env`, `logs`.

use super::{fail_json, paths_or_exit, print_json};
use crate::cli::{EnvArgs, LogsArgs, NameArgs, RemoveArgs, UpArgs};
use crate::client::Client;
use crate::output::{DIM, OK, paint};
use crate::protocol::{ClientEnv, Progress, Request, Response, UpRequest, WorldOutcome, WorldRef};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Which world a command means: `--project PATH|NAME` or the current folder.
/// A `--project` path that holds no binky.toml is an error (exit 2) naming it.
pub(crate) fn world_ref(project: Option<&str>, name: &str) -> Result<WorldRef, ExitCode> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    WorldRef::from_arg(project, &cwd, name).map_err(|e| {
        crate::output::error(
            e,
            Some("-p takes a project folder, its binky.toml, or the name of a project the daemon knows"),
        );
        ExitCode::from(2)
    })
}

/// Shows progress: one rewritten line on a terminal, plain lines otherwise.
struct ProgressView {
    tty: bool,
    shown: bool,
}

impl ProgressView {
    fn new() -> Self {
        ProgressView {
            tty: std::io::stderr().is_terminal(),
            shown: false,
        }
    }
    fn show(&mut self, p: &Progress) {
        let mut err = anstream::stderr();
        if self.tty {
            let text: String = p.message.chars().take(70).collect();
            let _ = write!(err, "\r\x1b[2K{} {text}", paint(DIM, "…"));
            self.shown = true;
        } else {
            let _ = writeln!(err, "· {}", p.message);
        }
        let _ = err.flush();
    }
    fn clear(&mut self) {
        if self.tty && self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.shown = false;
        }
    }
}

fn call_world(req: Request, json: bool) -> Result<WorldOutcome, ExitCode> {
    let paths = paths_or_exit()?;
    let mut client = Client::connect_or_start(&paths).map_err(|e| fail_json(json, &e))?;
    // Ctrl-C during `up`/`reload` cancels it in the daemon, which stops what
    // it started; a second Ctrl-C stops waiting for that.
    // SIGTERM and SIGHUP (a closed terminal, `timeout`) cancel the same way;
    // the exit status then says which signal (128 + its number).
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    if matches!(req, Request::Up(_) | Request::Reload(_)) {
        let canceller = client.canceller().map_err(|e| fail_json(json, &e))?;
        let (flag, verb, name) = (cancelled.clone(), req.verb(), world_name(&req));
        crate::platform::on_interrupt(move |n, sig| {
            use std::io::Write;
            if n == 1 {
                flag.store(sig, std::sync::atomic::Ordering::SeqCst);
                // Said before the daemon is told, so it is never missing
                // from the output; after a SIGHUP the terminal may be gone,
                // so a failed write is ignored, never a panic.
                let _ = writeln!(
                    anstream::stderr(),
                    "\r\x1b[2K{} cancelling `{verb} {name}`: stopping what it started (Ctrl-C again to stop waiting)",
                    paint(DIM, if sig == 2 { "^C" } else { "signal" })
                );
                canceller.cancel();
            } else {
                let _ = writeln!(
                    anstream::stderr(),
                    "not waiting: the daemon finishes cancelling `{verb} {name}`; `binky status` shows it"
                );
                std::process::exit(128 + sig);
            }
        });
    }
    let mut view = ProgressView::new();
    let res = client.call(&req, &mut |p| view.show(p));
    view.clear();
    match res {
        Ok(Response::World(o)) => Ok(o),
        Ok(other) => Err(super::unexpected(&other)),
        Err(e) if cancelled.load(std::sync::atomic::Ordering::SeqCst) != 0 => {
            fail_json(json, &e);
            let sig = cancelled.load(std::sync::atomic::Ordering::SeqCst);
            Err(ExitCode::from(u8::try_from(128 + sig).unwrap_or(130)))
        }
        Err(e) => Err(fail_json(json, &e)),
    }
}

/// The world a lifecycle request names.
fn world_name(req: &Request) -> String {
    match req {
        Request::Up(r) | Request::Reload(r) => r.world.name.clone(),
        Request::Down(w) | Request::Remove { world: w, .. } => w.name.clone(),
        _ => String::new(),
    }
}

fn print_services(o: &WorldOutcome) {
    let width = o
        .world
        .services
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0);
    for s in &o.world.services {
        let mut line = format!("  {:<width$}", s.name);
        if s.kind == crate::protocol::ServiceKind::Process {
            if let Some(pid) = s.pid {
                line.push_str(&format!("  pid {pid}"));
            }
            if let Some(port) = s.port {
                line.push_str(&format!("  :{port}"));
            }
            if s.state != crate::protocol::ServiceState::Running {
                line.push_str(&format!("  {}", s.state));
            }
            if let Some(url) = &s.url {
                line.push_str(&format!("  {url}"));
            }
        } else {
            line.push_str(&format!("  {}", s.state));
        }
        println!("{line}");
    }
}

fn notes(o: &WorldOutcome) {
    for n in &o.notes {
        anstream::eprintln!("{} {n}", paint(DIM, "note:"));
    }
}

/// `binky up` / `binky reload`.
pub fn up(args: &UpArgs, project: Option<&str>, reload: bool) -> ExitCode {
    let req = UpRequest {
        world: match world_ref(project, &args.name) {
            Ok(w) => w,
            Err(c) => return c,
        },
        group: args.group.clone(),
        env: ClientEnv::current(),
        wait: !args.no_wait,
    };
    let req = if reload {
        Request::Reload(req)
    } else {
        Request::Up(req)
    };
    match call_world(req, args.json) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else if let Some(q) = &o.world.queue {
                anstream::println!(
                    "{} queued: {} is {} of {} — {}; `binky status` shows its place",
                    paint(DIM, "…"),
                    o.world.name,
                    q.position,
                    q.of,
                    q.reason
                );
            } else {
                notes(&o);
                print_services(&o);
                anstream::println!(
                    "{} {}: {} ({} service(s))",
                    paint(OK, "✓"),
                    if reload { "reloaded" } else { "up" },
                    o.world.name,
                    o.world.services.len()
                );
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky down`.
pub fn down(args: &NameArgs, project: Option<&str>) -> ExitCode {
    let world = match world_ref(project, &args.name) {
        Ok(w) => w,
        Err(c) => return c,
    };
    match call_world(Request::Down(world), args.json) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else if o.left_queue && o.world.path.is_empty() {
                anstream::println!(
                    "{} down: {} was queued and never made: it left the queue; nothing else existed",
                    paint(OK, "✓"),
                    o.world.name
                );
            } else {
                let queue = if o.left_queue {
                    "; its queued `up` left the queue"
                } else {
                    ""
                };
                anstream::println!(
                    "{} down: {} (files, ports and data kept{queue}; `binky up {}` resumes it)",
                    paint(OK, "✓"),
                    o.world.name,
                    o.world.name
                );
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky remove`.
pub fn remove(args: &RemoveArgs, project: Option<&str>) -> ExitCode {
    match call_world(
        Request::Remove {
            world: match world_ref(project, &args.name) {
                Ok(w) => w,
                Err(c) => return c,
            },
            force: args.force,
            env: ClientEnv::current(),
        },
        args.json,
    ) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else if o.left_queue && o.world.path.is_empty() {
                anstream::println!(
                    "{} removed: {} was queued and never made: it left the queue; there was no worktree, slice or port to release",
                    paint(OK, "✓"),
                    o.world.name
                );
            } else {
                notes(&o);
                // Only what this remove did: a world that never made a
                // slice (or whose slices were gone already) released none.
                let slices = match o.torn_down.len() {
                    0 => String::new(),
                    1 => format!("slice {}, ", o.torn_down[0]),
                    _ => format!("slices {}, ", o.torn_down.join(", ")),
                };
                anstream::println!(
                    "{} removed: {} (worktree, {slices}logs and ports released; the branch is kept){}",
                    paint(OK, "✓"),
                    o.world.name,
                    if o.left_queue {
                        "; its queued `up` left the queue"
                    } else {
                        ""
                    }
                );
                if !o.left_for_gc.is_empty() {
                    anstream::println!("  left for `binky gc`: {}", o.left_for_gc.join(", "));
                }
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky verify`.
pub fn verify(args: &crate::cli::VerifyArgs, project: Option<&str>) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let req = Request::Verify {
        world: match world_ref(project, &args.name) {
            Ok(w) => w,
            Err(c) => return c,
        },
        keep_going: args.keep_going,
        env: ClientEnv::current(),
    };
    let json = args.json;
    let res = client.call(&req, &mut |p| {
        if json {
            return;
        }
        if p.step == crate::protocol::ProgressStep::Output {
            println!("{}", p.message);
        } else {
            anstream::println!("{}", paint(crate::output::BOLD, &p.message));
        }
    });
    match res {
        Ok(Response::Verified(r)) => {
            if json {
                print_json(&r);
            } else {
                for c in &r.checks {
                    let mark = if c.passed {
                        paint(OK, "✓")
                    } else {
                        paint(crate::output::ERROR, "✗")
                    };
                    anstream::println!("{mark} {}  ({} ms)", c.command, c.duration_ms);
                }
                let commit = r
                    .commit
                    .as_deref()
                    .map(|c| &c[..c.len().min(12)])
                    .unwrap_or("?");
                if !r.uncommitted.is_empty() {
                    anstream::eprintln!(
                        "{} the worktree has uncommitted changes, so this result is for {commit} plus them:",
                        paint(DIM, "note:")
                    );
                    for c in &r.uncommitted {
                        anstream::eprintln!("  {c}");
                    }
                }
                if r.passed {
                    anstream::println!(
                        "{} verify passed: {} at {commit}",
                        paint(OK, "✓"),
                        args.name
                    );
                } else {
                    anstream::println!(
                        "{} verify failed: {} at {commit}",
                        paint(crate::output::ERROR, "✗"),
                        args.name
                    );
                }
            }
            if r.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Ok(other) => super::unexpected(&other),
        Err(e) => fail_json(json, &e),
    }
}

/// `binky gc`.
pub fn gc(args: &crate::cli::GcArgs) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let req = Request::Gc {
        dry_run: args.dry_run,
        env: ClientEnv::current(),
    };
    match client.request(&req) {
        Ok(Response::Swept(items)) => {
            if args.json {
                print_json(&items);
            } else if items.is_empty() {
                println!("nothing to sweep");
            } else {
                for i in &items {
                    println!(
                        "{:<13} {}
              {} — {}",
                        i.kind, i.what, i.why, i.outcome
                    );
                }
                if args.dry_run {
                    println!("(dry run: nothing was changed; run `binky gc` to sweep)");
                }
            }
            if items
                .iter()
                .any(|i| i.result == crate::protocol::SweepResult::NotSwept)
            {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Ok(other) => super::unexpected(&other),
        Err(e) => fail_json(args.json, &e),
    }
}

/// Quotes `v` for POSIX shells: single quotes, with `'` written as `'\''`.
/// Exact in bash, zsh and sh for any value, newlines included.
pub fn shell_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', r"'\''"))
}

/// `NAME_URL` for a service name: uppercased, other characters to `_`
/// (see [`crate::slug::env_key`]).
pub fn dotenv_name(service: &str) -> String {
    format!("{}_URL", crate::slug::env_key(service))
}

/// `binky env`.
pub fn env(args: &EnvArgs, project: Option<&str>) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let req = Request::Env {
        world: match world_ref(project, &args.name) {
            Ok(w) => w,
            Err(c) => return c,
        },
        env: ClientEnv::current(),
        reveal: args.reveal,
    };
    let shell = args.dotenv || args.export;
    let env = match client.request(&req) {
        Ok(Response::Env(e)) => e,
        Ok(other) => return super::unexpected(&other),
        // JSON is its default output, so errors are JSON too unless a shell
        // format was asked for (see tests: json_callers_get_errors_as_json).
        Err(e) => return fail_json(!shell, &e),
    };
    if shell {
        print!("{}", shell_lines(&env, args.export));
    } else {
        // In the services' order, as before `[env]` existed.
        let mut out: indexmap::IndexMap<String, serde_json::Value> = indexmap::IndexMap::new();
        for (svc, value) in &env.services {
            out.insert(svc.clone(), value.clone().into());
            // `bus.prefix`, as the token writes it: no service name has a dot.
            for (field, v) in env.fields.get(svc).into_iter().flatten() {
                out.insert(format!("{svc}.{field}"), v.clone().into());
            }
        }
        if !env.vars.is_empty() {
            out.insert(
                "env".into(),
                serde_json::to_value(&env.vars).unwrap_or_default(),
            );
        }
        print_json(&out);
    }
    ExitCode::SUCCESS
}

/// `binky env --dotenv` (or, with `export`, `--export`) lines: each exposed
/// service's `NAME_URL` (and a resource's `NAME_PREFIX`/`NAME_BUCKET`), the
/// project's `[env]`, then `BINKY_WORKTREE`,
/// `BINKY_WORLD` and `BINKY_PROJECT`. A withheld value becomes a comment
/// saying how to get it, so `eval` never sets a variable to nothing.
pub fn shell_lines(env: &crate::protocol::WorldEnv, export: bool) -> String {
    use std::fmt::Write;
    let prefix = if export { "export " } else { "" };
    let mut out = String::new();
    let mut line = |k: &str, v: &str| {
        let _ = writeln!(out, "{prefix}{k}={}", shell_quote(v));
    };
    for (svc, value) in &env.services {
        line(&dotenv_name(svc), value);
        for (field, v) in env.fields.get(svc).into_iter().flatten() {
            let key = format!(
                "{}_{}",
                crate::slug::env_key(svc),
                crate::slug::env_key(field)
            );
            line(&key, v);
        }
    }
    let mut withheld = Vec::new();
    for (k, v) in &env.vars {
        match v {
            Some(v) => line(k, v),
            None => withheld.push(k.as_str()),
        }
    }
    line("BINKY_WORKTREE", &env.worktree);
    line("BINKY_WORLD", &env.world);
    line("BINKY_PROJECT", &env.project);
    for k in withheld {
        let _ = writeln!(
            out,
            "# {k} is withheld: binky.toml takes its value from your environment; add --reveal to print it"
        );
    }
    out
}

/// The log folder of a world, found without the daemon.
fn log_dir(project: Option<&str>, name: &str) -> Result<(PathBuf, String), ExitCode> {
    let paths = paths_or_exit()?;
    let project_name = match project {
        Some(p) if !Path::new(p).exists() && !p.contains('/') => p.to_owned(),
        other => super::project_name(other.unwrap_or("."))?,
    };
    let slug = crate::slug::world_slug(name);
    Ok((paths.world_logs(&project_name, &slug), project_name))
}

/// `binky logs`.
pub fn logs(args: &LogsArgs, project: Option<&str>) -> ExitCode {
    let (dir, project_name) = match log_dir(project, &args.name) {
        Ok(v) => v,
        Err(c) => return c,
    };
    let mut files: Vec<(String, PathBuf)> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".log").map(|s| (s.to_owned(), e.path()))
            })
            .collect(),
        Err(_) => {
            crate::output::error(
                format!(
                    "no logs for world `{}` of project {project_name}",
                    args.name
                ),
                Some("`binky status` lists the worlds; logs appear once a world has been up"),
            );
            return ExitCode::from(1);
        }
    };
    files.sort();
    let all_names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    if let Some(s) = &args.service {
        files.retain(|(n, _)| n == s);
        if files.is_empty() {
            crate::output::error(
                format!("no log for service `{s}` in world `{}`", args.name),
                Some(&format!("services with logs: {}", all_names.join(", "))),
            );
            return ExitCode::from(1);
        }
    }
    let width = files.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    // Interleave by the time each line was written (the log writer stamps
    // every line); a stable sort keeps each file's own order.
    let mut merged: Vec<(String, usize, usize, String)> = Vec::new();
    for (i, (_, path)) in files.iter().enumerate() {
        let mut last_ts = String::new();
        for (j, line) in crate::supervisor::logs::tail(path, args.lines)
            .into_iter()
            .enumerate()
        {
            let (ts, text) = crate::supervisor::logs::split_stamp(&line);
            if let Some(ts) = ts {
                last_ts = ts.to_owned();
            }
            merged.push((last_ts.clone(), i, j, text.to_owned()));
        }
    }
    merged.sort();
    let mut out = anstream::stdout().lock();
    for (_, i, _, text) in merged {
        let svc = &files[i].0;
        let _ = writeln!(
            out,
            "{} {}",
            paint(DIM, format!("{svc:<width$} |")),
            crate::output::untrusted(&text)
        );
    }
    if !args.follow {
        return ExitCode::SUCCESS;
    }
    // Follow by name (as `tail -F`): lines as they are appended, in arrival
    // order, across a rotation of any log.
    let mut followers: Vec<crate::supervisor::logs::Follower> = files
        .iter()
        .map(|(_, p)| crate::supervisor::logs::Follower::from_end(p))
        .collect();
    let mut partial: Vec<String> = vec![String::new(); files.len()];
    loop {
        for (i, (svc, _)) in files.iter().enumerate() {
            let buf = followers[i].poll();
            if buf.is_empty() {
                continue;
            }
            partial[i].push_str(&String::from_utf8_lossy(&buf));
            while let Some(pos) = partial[i].find('\n') {
                let line: String = partial[i].drain(..=pos).collect();
                let text = crate::supervisor::logs::split_stamp(line.trim_end_matches('\n')).1;
                anstream::println!(
                    "{} {}",
                    paint(DIM, format!("{svc:<width$} |")),
                    crate::output::untrusted(text)
                );
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
