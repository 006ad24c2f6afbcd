//! `binky hook`: an agent host's own worktree hooks, served by Binky, so
//! the worktrees the host asks for are worlds.
//!
//! Claude Code (checked against its hooks reference and its runtime as of
//! 2.1.x): with a `WorktreeCreate` hook configured, `claude --worktree
//! <name>` and subagents with `isolation: worktree` run the hook instead of
//! `git worktree add`. The hook gets one JSON object on stdin — the
//! proposed name as `name` (what the runtime sends) or `worktree_name`
//! (what the reference documents), with `session_id`, `transcript_path`,
//! `cwd`, `hook_event_name` and, in some versions, `base_path` and
//! `source_ref` — and must print only the absolute path of the worktree it
//! made on stdout; any non-zero exit fails the creation. `WorktreeRemove`
//! gets `worktree_path`; its failure is only logged. Fields Binky does not
//! read are ignored: the worktree goes where Binky puts every world's
//! (`[project] worktree_root`), on a new branch from the main worktree's
//! HEAD as Claude Code's own does.

use super::world::{call_world, world_ref};
use crate::cli::{ClaudeHook, HookArgs, HookHost};
use crate::output;
use crate::protocol::{ClientEnv, Request, UpRequest};
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod settings;

/// The most of stdin a hook reads: a payload is a few hundred bytes.
const PAYLOAD_LIMIT: u64 = 1 << 20;

/// `binky hook …`.
pub(crate) fn run(args: &HookArgs, project: Option<&str>) -> ExitCode {
    match &args.host {
        HookHost::Claude { action } => match action {
            ClaudeHook::WorktreeCreate => create(project),
            ClaudeHook::WorktreeRemove => remove(),
            ClaudeHook::Install(a) => settings::install(a, project),
        },
    }
}

/// Reads the hook's one JSON object from `input`: only that object (a
/// host that keeps its end of the pipe open is not waited on past it).
///
/// # Errors
/// Not JSON, not an object, or over [`PAYLOAD_LIMIT`]: said for stderr.
fn payload(input: impl Read) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut input = input.take(PAYLOAD_LIMIT);
    let mut de = serde_json::Deserializer::from_reader(&mut input);
    match serde_json::Value::deserialize(&mut de) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err("the hook's input on stdin is JSON but not an object; Claude Code sends one JSON object".into()),
        Err(_) if input.limit() == 0 => Err(format!(
            "the hook's input on stdin is over {} KiB; Claude Code sends one small JSON object",
            PAYLOAD_LIMIT / 1024
        )),
        Err(e) => Err(format!(
            "the hook's input on stdin is not JSON ({e}); Claude Code sends one JSON object"
        )),
    }
}

/// The payload on stdin, refused at once where stdin is a terminal (a
/// person who ran the hook by hand would otherwise wait on nothing).
fn stdin_payload() -> Result<serde_json::Map<String, serde_json::Value>, String> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        return Err("the hook reads Claude Code's JSON on stdin, and stdin is a terminal".into());
    }
    payload(std::io::stdin().lock())
}

/// A string field of the payload: the first of `keys` that is there and
/// not blank.
///
/// # Errors
/// One of `keys` is there but not a string.
fn field<'a>(
    p: &'a serde_json::Map<String, serde_json::Value>,
    keys: &[&str],
) -> Result<Option<&'a str>, String> {
    for k in keys {
        match p.get(*k) {
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => return Ok(Some(s)),
            Some(serde_json::Value::String(_) | serde_json::Value::Null) | None => {}
            Some(_) => return Err(format!("the hook's input has a `{k}` that is not a string")),
        }
    }
    Ok(None)
}

/// The folder the host ran in, where the project's binky.toml is looked
/// for: the payload's `cwd`, else ours.
///
/// # Errors
/// `cwd` is given but is not an absolute path to a folder: said, naming
/// it, never replaced by another folder (which could be another project).
fn host_dir(p: &serde_json::Map<String, serde_json::Value>) -> Result<PathBuf, String> {
    match field(p, &["cwd"])? {
        Some(d) if Path::new(d).is_absolute() && Path::new(d).is_dir() => Ok(PathBuf::from(d)),
        Some(d) => Err(format!(
            "the hook's `cwd` ({}) is not an absolute path to a folder",
            output::untrusted(d)
        )),
        None => std::env::current_dir().map_err(|e| format!("no current folder: {e}")),
    }
}

/// An error on stderr with its hint; exit 2 (the input is wrong).
fn fail(message: &str, hint: &str) -> ExitCode {
    output::error(message, Some(hint));
    ExitCode::from(2)
}

/// `binky hook claude worktree-create`: the world's worktree made now (its
/// progress on stderr), its absolute path the one line on stdout, the
/// world brought up behind it by the daemon.
fn create(project: Option<&str>) -> ExitCode {
    let hint = "run it as Claude Code's WorktreeCreate hook: `binky hook claude install`";
    let p = match stdin_payload() {
        Ok(p) => p,
        Err(e) => return fail(&e, hint),
    };
    let name = match field(&p, &["name", "worktree_name"]) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return fail(
                "the hook's input has no `name` (or `worktree_name`): the name of the worktree to make",
                "Claude Code sends it; to make a world by hand, run `binky up <branch>`",
            );
        }
        Err(e) => return fail(&e, hint),
    };
    // Said without the name: a line break in it would forge lines of the
    // hook's output on the host's screen.
    if name.chars().any(char::is_control) {
        return fail(
            "the hook's `name` holds a control character, which no branch name may",
            "give the worktree a name git accepts",
        );
    }
    let dir = match host_dir(&p) {
        Ok(d) => d,
        Err(e) => return fail(&e, hint),
    };
    if let Err(e) = std::env::set_current_dir(&dir) {
        return fail(
            &format!("cannot enter the hook's cwd {}: {e}", dir.display()),
            "run the hook from the project's folder",
        );
    }
    let world = match world_ref(project, name, false) {
        Ok(w) => w,
        Err(c) => return c,
    };
    let req = Request::Up(UpRequest {
        world,
        group: None,
        caller: None,
        env: ClientEnv::current(),
        wait: false,
        detach: true,
        idle_after: None,
    });
    match call_world(req, false) {
        Ok(o) => {
            super::world::notes(&o);
            anstream::eprintln!(
                "binky: world {} is coming up in the background; `binky status` and `binky logs {}` show it",
                output::untrusted(&o.world.name),
                output::untrusted(&o.world.name)
            );
            println!("{}", o.world.path);
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky hook claude worktree-remove`: the world of the branch checked out
/// at `worktree_path` removed, never forced. Uncommitted work keeps it
/// (exit 1, said on stderr), and a worktree of no world is left alone.
fn remove() -> ExitCode {
    let hint = "run it as Claude Code's WorktreeRemove hook: `binky hook claude install`";
    let p = match stdin_payload() {
        Ok(p) => p,
        Err(e) => return fail(&e, hint),
    };
    let path = match field(&p, &["worktree_path"]) {
        Ok(Some(path)) => PathBuf::from(path),
        Ok(None) => {
            return fail(
                "the hook's input has no `worktree_path`: the worktree to remove",
                "Claude Code sends it; to remove a world by hand, run `binky remove <branch>`",
            );
        }
        Err(e) => return fail(&e, hint),
    };
    // The world whose worktree is that folder, whatever is checked out
    // there now (an agent may have switched branches in it).
    let report = match super::call(&Request::Status {
        project: None,
        usage: false,
    }) {
        Ok(crate::protocol::Response::Status(r)) => r,
        Ok(other) => return super::unexpected(&other),
        Err(c) => return c,
    };
    let wanted = canonical(&path);
    let found = report.projects.iter().find_map(|pr| {
        pr.worlds
            .iter()
            .find(|w| !w.path.is_empty() && canonical(Path::new(&w.path)) == wanted)
            .map(|w| (pr.name.clone(), w.name.clone()))
    });
    let Some((project, name)) = found else {
        output::error(
            format!(
                "no world has its worktree at {}; binky leaves it alone",
                output::untrusted(&path.display().to_string())
            ),
            Some("remove it with `git worktree remove` if it is yours"),
        );
        return ExitCode::from(1);
    };
    let req = Request::Remove {
        world: crate::protocol::WorldRef {
            project_dir: None,
            project: Some(project),
            name: name.clone(),
        },
        force: false,
        env: ClientEnv::current(),
    };
    match call_world(req, false) {
        Ok(o) => {
            anstream::eprintln!(
                "binky: removed world {} and its worktree (the branch is kept)",
                output::untrusted(&o.world.name)
            );
            ExitCode::SUCCESS
        }
        Err(c) => {
            anstream::eprintln!(
                "binky: the world {} and its worktree {} are kept",
                output::untrusted(&name),
                output::untrusted(&path.display().to_string())
            );
            c
        }
    }
}

/// `p` with links and `..` resolved, where it exists: two paths name one
/// folder when these are equal.
fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_one_json_object_and_what_follows_it_is_not_read() {
        let p = payload(&b"{\"name\": \"feat-a\", \"x\": 1} trailing junk"[..]).unwrap();
        assert_eq!(field(&p, &["name", "worktree_name"]), Ok(Some("feat-a")));
        let p = payload(&b"{\"worktree_name\": \"feat-b\", \"name\": \"  \"}"[..]).unwrap();
        assert_eq!(field(&p, &["name", "worktree_name"]), Ok(Some("feat-b")));
        let p = payload(&b"{\"name\": 5}"[..]).unwrap();
        assert!(field(&p, &["name"]).unwrap_err().contains("not a string"));
        let big = format!("{{\"name\": \"{}\"}}", "a".repeat(2 << 20));
        assert!(
            payload(big.as_bytes())
                .unwrap_err()
                .contains("over 1024 KiB")
        );
        assert!(payload(&b"feat-a"[..]).unwrap_err().contains("not JSON"));
        assert!(payload(&b"[1]"[..]).unwrap_err().contains("not an object"));
        assert!(payload(&b""[..]).unwrap_err().contains("not JSON"));
    }
}
