//! `binky up`, `reload`, `down`, `remove`, `verify`, `gc`.

use super::{fail_json, paths_or_exit, print_json};
use crate::cli::{NameArgs, RemoveArgs, ResetArgs, UpArgs};
use crate::client::Client;
use crate::output::{DIM, OK, paint};
use crate::protocol::{
    ClientEnv, Progress, Request, ResetRequest, Response, UpRequest, WorldOutcome, WorldRef,
};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Which world a command means: `--project PATH|NAME` or the current folder.
/// A `--project` path that holds no binky.toml is an error (exit 2) naming it.
/// With `json`, the error is the `{"error": {message, hint}}` object on
/// stdout that every `--json` caller gets.
pub(crate) fn world_ref(
    project: Option<&str>,
    name: &str,
    json: bool,
) -> Result<WorldRef, ExitCode> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    WorldRef::from_arg(project, &cwd, name).map_err(|e| {
        super::refuse(
            json,
            &e,
            "-p takes a project folder, its binky.toml, or the name of a project the daemon knows",
            2,
        )
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
            let text: String = crate::output::untrusted(&p.message)
                .chars()
                .take(70)
                .collect();
            let _ = write!(err, "\r\x1b[2K{} {text}", paint(DIM, "…"));
            self.shown = true;
        } else {
            let _ = writeln!(err, "· {}", crate::output::untrusted(&p.message));
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
    // A daemon that cannot be started fails this verb: said of its world,
    // as every other error of a lifecycle verb is.
    let mut client = Client::connect_or_start(&paths)
        .map_err(|e| fail_json(json, &crate::client::about(&req, e)))?;
    // Ctrl-C during `up`/`reload` cancels it in the daemon, which stops what
    // it started; a second Ctrl-C stops waiting for that.
    // SIGTERM and SIGHUP (a closed terminal, `timeout`) cancel the same way;
    // the exit status then says which signal (128 + its number).
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    if matches!(req, Request::Up(_) | Request::Reload(_) | Request::Reset(_)) {
        let canceller = client.canceller().map_err(|e| fail_json(json, &e))?;
        let (flag, verb) = (cancelled.clone(), req.verb());
        let name = req.world_name().unwrap_or_default().to_owned();
        crate::platform::on_interrupt(move |n, sig| {
            use std::io::Write;
            if n == 1 {
                flag.store(sig, std::sync::atomic::Ordering::SeqCst);
                // Said before the daemon is told, so it is never missing
                // from the output; after a SIGHUP the terminal may be gone,
                // so a failed write is ignored, never a panic.
                let _ = writeln!(
                    anstream::stderr(),
                    "\r\x1b[2K{} cancelling `{verb} {name}`: the daemon stops what it started, if anything (Ctrl-C again to stop waiting)",
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
        anstream::eprintln!("{} {}", paint(DIM, "note:"), crate::output::untrusted(n));
    }
}

/// `binky up` / `binky reload`.
pub fn up(args: &UpArgs, project: Option<&str>, reload: bool) -> ExitCode {
    let req = UpRequest {
        world: match world_ref(project, &args.name, args.json) {
            Ok(w) => w,
            Err(c) => return c,
        },
        group: args.group.clone(),
        caller: None,
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

/// `binky reset`.
pub fn reset(args: &ResetArgs, project: Option<&str>) -> ExitCode {
    let up = UpRequest {
        world: match world_ref(project, &args.name, args.json) {
            Ok(w) => w,
            Err(c) => return c,
        },
        group: args.group.clone(),
        caller: None,
        env: ClientEnv::current(),
        wait: true,
    };
    let req = Request::Reset(ResetRequest {
        up,
        services: args.services.clone(),
        all: args.all,
        force: args.force,
    });
    match call_world(req, args.json) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else {
                notes(&o);
                print_services(&o);
                anstream::println!("{} reset: {}", paint(OK, "✓"), o.world.name);
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// The command that runs `verb` on world `name` again as the user typed
/// it: with their `-p`, so the hint works from where they are. Each word
/// is quoted for the shell when it needs to be.
fn again(project: Option<&str>, verb: &str, name: &str) -> String {
    let word = |w: &str| {
        if !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_./-@:+=,".contains(&b))
        {
            w.to_owned()
        } else {
            super::env::shell_quote(w)
        }
    };
    match project {
        Some(p) => format!("binky -p {} {verb} {}", word(p), word(name)),
        None => format!("binky {verb} {}", word(name)),
    }
}

/// `binky down`.
pub fn down(args: &NameArgs, project: Option<&str>) -> ExitCode {
    let world = match world_ref(project, &args.name, args.json) {
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
                    "{} down: {} (files, ports and data kept{queue}; `{}` resumes it)",
                    paint(OK, "✓"),
                    o.world.name,
                    again(project, "up", &o.world.name)
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
            world: match world_ref(project, &args.name, args.json) {
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
                // Each with its adapter and server: two databases of one
                // project are told apart, and where each went is shown.
                let described: Vec<String> = if o.torn_down_on.is_empty() {
                    o.torn_down.clone()
                } else {
                    o.torn_down_on.iter().map(|t| t.describe()).collect()
                };
                let slices = match described.len() {
                    0 => String::new(),
                    1 => format!("slice {}, ", described[0]),
                    _ => format!("slices {}, ", described.join(", ")),
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
        world: match world_ref(project, &args.name, args.json) {
            Ok(w) => w,
            Err(c) => return c,
        },
        keep_going: args.keep_going,
        from_branch: args.from_branch,
        env: ClientEnv::current(),
    };
    let json = args.json;
    let res = client.call(&req, &mut |p| {
        if json {
            return;
        }
        // A check's output is untrusted text: shown, never acted on.
        let text = crate::output::untrusted(&p.message);
        if p.step == crate::protocol::ProgressStep::Output {
            anstream::println!("{text}");
        } else {
            anstream::println!("{}", paint(crate::output::BOLD, text));
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
                // Whose checks these were, beside the result.
                let whose = if r.from_branch {
                    " (the branch's own checks)"
                } else {
                    ""
                };
                if r.passed {
                    anstream::println!(
                        "{} verify passed: {} at {commit}{whose}",
                        paint(OK, "✓"),
                        args.name
                    );
                } else {
                    anstream::println!(
                        "{} verify failed: {} at {commit}{whose}",
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_again_hint_keeps_the_users_project_and_quotes_what_needs_it() {
        assert_eq!(super::again(None, "up", "feat/x"), "binky up feat/x");
        assert_eq!(
            super::again(Some("examples/hello"), "up", "try-it"),
            "binky -p examples/hello up try-it"
        );
        assert_eq!(
            super::again(Some("my project"), "up", "it's"),
            "binky -p 'my project' up 'it'\\''s'"
        );
    }
}
