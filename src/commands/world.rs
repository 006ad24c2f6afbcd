//! What the verbs on one world share: which world a command means, the
//! request with its progress drawn, and how an outcome is printed.

use super::{fail_json, paths_or_exit};
use crate::client::Client;
use crate::output::{DIM, paint};
use crate::protocol::{
    ApiError, ClientEnv, ErrorKind, Progress, Request, Response, UpRequest, WorldOutcome, WorldRef,
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
        let e = ApiError::new(e)
            .hint("-p takes a project folder, its binky.toml, or the name of a project the daemon knows")
            .with_kind(ErrorKind::InvalidInput);
        super::refuse(json, &e, 2)
    })
}

/// The world a verb given no name means: the branch of the linked git
/// worktree the current folder is in (`binky up` inside a worktree an
/// agent host made). Refused (exit 2, said as [`super::refuse`] says) in
/// the main worktree, on a detached HEAD, and outside git.
pub(super) fn name_here(json: bool) -> Result<String, ExitCode> {
    use crate::worktree::Here;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let refuse = |message: String, hint: &str| {
        let e = ApiError::new(message)
            .hint(hint)
            .with_kind(ErrorKind::InvalidInput);
        super::refuse(json, &e, 2)
    };
    match crate::worktree::here(&cwd) {
        Ok(Here::Linked { branch, .. }) => Ok(branch),
        Ok(Here::Main(path)) => Err(refuse(
            format!(
                "no world named, and {} is the repository's main worktree, which is no world's",
                path.display()
            ),
            "name the world (`binky up <branch>` makes its worktree), or run it inside a worktree of the branch",
        )),
        Ok(Here::Detached(path)) => Err(refuse(
            format!(
                "no world named, and the worktree at {} has no branch checked out (a detached HEAD)",
                path.display()
            ),
            "check a branch out there (`git switch -c <branch>`), or name the world",
        )),
        Err(e) => Err(refuse(
            format!("no world named, and the current folder is not in a git worktree: {e}"),
            "name the world: `binky up <branch>`",
        )),
    }
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

pub(super) fn call_world(req: Request, json: bool) -> Result<WorldOutcome, ExitCode> {
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
pub(super) fn print_services(o: &WorldOutcome) {
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

pub(super) fn notes(o: &WorldOutcome) {
    for n in &o.notes {
        anstream::eprintln!("{} {}", paint(DIM, "note:"), crate::output::untrusted(n));
    }
}

/// The request `up`, `reload` and `reset` send: the world, its group,
/// the caller's environment, and whether to wait for a queued world.
pub(super) fn up_request(
    project: Option<&str>,
    name: &str,
    json: bool,
    group: Option<String>,
    wait: bool,
) -> Result<UpRequest, ExitCode> {
    Ok(UpRequest {
        detach: false,
        idle_after: None,
        world: world_ref(project, name, json)?,
        group,
        caller: None,
        env: ClientEnv::current(),
        wait,
    })
}

/// The command that runs `verb` on world `name` again as the user typed
/// it: with their `-p`, so the hint works from where they are. Each word
/// is quoted for the shell when it needs to be.
pub(super) fn again(project: Option<&str>, verb: &str, name: &str) -> String {
    let word = |w: &str| {
        if !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_./-@:+=,".contains(&b))
        {
            w.to_owned()
        } else {
            crate::output::shell_quote(w)
        }
    };
    match project {
        Some(p) => format!("binky -p {} {verb} {}", word(p), word(name)),
        None => format!("binky {verb} {}", word(name)),
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
