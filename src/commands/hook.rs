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
use crate::cli::{ClaudeHook, HookArgs, HookHost, HookInstallArgs};
use crate::output;
use crate::protocol::{ClientEnv, Request, UpRequest};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The most of stdin a hook reads: a payload is a few hundred bytes.
const PAYLOAD_LIMIT: u64 = 1 << 20;

/// The command each Claude Code hook entry runs.
const CREATE_COMMAND: &str = "binky hook claude worktree-create";
const REMOVE_COMMAND: &str = "binky hook claude worktree-remove";

/// `binky hook …`.
pub(crate) fn run(args: &HookArgs, project: Option<&str>) -> ExitCode {
    match &args.host {
        HookHost::Claude { action } => match action {
            ClaudeHook::WorktreeCreate => create(project),
            ClaudeHook::WorktreeRemove => remove(),
            ClaudeHook::Install(a) => install(a, project),
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
    let found = report.projects.iter().find_map(|pr| {
        pr.worlds
            .iter()
            .find(|w| !w.path.is_empty() && same(Path::new(&w.path), &path))
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

/// Whether two paths name one folder.
fn same(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    canon(a) == canon(b)
}

/// `binky hook claude install`: both hooks merged into Claude Code's
/// settings file, written whole ([`super::write_atomically`]), or
/// printed with `--dry-run`.
fn install(args: &HookInstallArgs, project: Option<&str>) -> ExitCode {
    let file = match settings_file(args, project).and_then(|f| through_link(&f)) {
        Ok(f) => f,
        Err((e, hint)) => return fail(&e, hint),
    };
    let before = match std::fs::read_to_string(&file) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            output::error(format!("cannot read {}: {e}", file.display()), None);
            return ExitCode::from(1);
        }
    };
    let merged = match merge(before.as_deref()) {
        Ok(m) => m,
        Err(e) => {
            output::error(
                format!("{}: {e}", file.display()),
                Some("fix the file by hand; binky changed nothing"),
            );
            return ExitCode::from(1);
        }
    };
    for other in &merged.others {
        anstream::eprintln!(
            "{} {} also has a {other} hook that is not binky's; Claude Code runs every one, so remove the one you do not want",
            output::paint(output::WARN, "warning:"),
            file.display()
        );
    }
    if args.dry_run {
        print!("{}", merged.text);
        anstream::eprintln!("(dry run: {} was not written)", file.display());
        return ExitCode::SUCCESS;
    }
    if !merged.changed {
        println!(
            "{} already runs binky's worktree hooks; nothing to do",
            file.display()
        );
        return ExitCode::SUCCESS;
    }
    if std::fs::metadata(&file).is_ok_and(|m| m.permissions().readonly()) {
        output::error(
            format!("{} is read-only; binky changed nothing", file.display()),
            Some("make it writable, or add the hooks by hand (`--dry-run` prints them)"),
        );
        return ExitCode::from(1);
    }
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| super::write_atomically(&file, &merged.text));
    if let Err(e) = written {
        output::error(format!("cannot write {}: {e}", file.display()), None);
        return ExitCode::from(1);
    }
    anstream::println!(
        "{} {}: WorktreeCreate runs `{CREATE_COMMAND}`, WorktreeRemove runs `{REMOVE_COMMAND}`",
        output::paint(output::OK, "✓"),
        file.display()
    );
    ExitCode::SUCCESS
}

/// Where `install` writes: `~/.claude/settings.json` with `--user`, else
/// the project repository's `.claude/settings.json` (or
/// `settings.local.json` with `--local`) at its main worktree's root.
fn settings_file(
    args: &HookInstallArgs,
    project: Option<&str>,
) -> Result<PathBuf, (String, &'static str)> {
    if args.user {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute())
            .ok_or((
                "HOME is not set to an absolute path, so there is no ~/.claude/settings.json"
                    .to_owned(),
                "set HOME, or install into the project's settings (without --user)",
            ))?;
        return Ok(home.join(".claude").join("settings.json"));
    }
    let start = match project {
        Some(p) if !Path::new(p).exists() => {
            return Err((
                format!("-p {p}: no such folder"),
                "install writes into the project's repository: pass its folder (or its binky.toml) with -p",
            ));
        }
        Some(p) => PathBuf::from(p),
        None => std::env::current_dir().map_err(|e| {
            (
                format!("no current folder: {e}"),
                "run it inside the project",
            )
        })?,
    };
    let start = if start.is_file() {
        start.parent().map(Path::to_path_buf).unwrap_or(start)
    } else {
        start
    };
    let loc = crate::worktree::locate(&start).map_err(|e| {
        (
            e.to_string(),
            "run it inside the project's git repository, or pass its folder with -p",
        )
    })?;
    let name = if args.local {
        "settings.local.json"
    } else {
        "settings.json"
    };
    Ok(loc.main_workdir.join(".claude").join(name))
}

/// The file a settings path names: a symbolic link's target (dotfiles
/// kept elsewhere are written where they live, the link kept).
///
/// # Errors
/// A link whose target is missing: said, naming both.
fn through_link(file: &Path) -> Result<PathBuf, (String, &'static str)> {
    match std::fs::symlink_metadata(file) {
        Ok(m) if m.file_type().is_symlink() => file.canonicalize().map_err(|e| {
            (
                format!(
                    "{} is a link to a file that is not there ({e})",
                    file.display()
                ),
                "point the link at your settings file, or remove it",
            )
        }),
        _ => Ok(file.to_path_buf()),
    }
}

/// JSON whose objects keep their keys in the order they were written, so a
/// merge moves nothing of the user's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Ordered {
    Object(indexmap::IndexMap<String, Ordered>),
    Array(Vec<Ordered>),
    Scalar(serde_json::Value),
}

/// What [`merge`] made.
#[derive(Debug)]
struct Merged {
    /// The settings, pretty-printed, ending in a newline.
    text: String,
    /// Whether anything was added.
    changed: bool,
    /// The events that also have a hook that is not binky's.
    others: Vec<&'static str>,
}

/// `settings` (none: an empty file) with a `WorktreeCreate` and a
/// `WorktreeRemove` entry running binky added, unless one already runs it.
/// Every other key, hook and entry is kept, in its order.
///
/// # Errors
/// Not JSON (its line and column), or `hooks` or an event's entry list of
/// another type than Claude Code reads.
fn merge(settings: Option<&str>) -> Result<Merged, String> {
    let mut root = match settings.filter(|t| !t.trim().is_empty()) {
        None => Ordered::Object(indexmap::IndexMap::new()),
        Some(t) => serde_json::from_str(t).map_err(|e| format!("not JSON: {e}"))?,
    };
    let Ordered::Object(top) = &mut root else {
        return Err("the settings are not a JSON object".into());
    };
    let hooks = top
        .entry("hooks".to_owned())
        .or_insert_with(|| Ordered::Object(indexmap::IndexMap::new()));
    let Ordered::Object(hooks) = hooks else {
        return Err("`hooks` is not an object".into());
    };
    let (mut changed, mut others) = (false, Vec::new());
    for (event, command) in [
        ("WorktreeCreate", CREATE_COMMAND),
        ("WorktreeRemove", REMOVE_COMMAND),
    ] {
        let list = hooks
            .entry(event.to_owned())
            .or_insert_with(|| Ordered::Array(Vec::new()));
        let Ordered::Array(list) = list else {
            return Err(format!("`hooks.{event}` is not a list"));
        };
        let commands: Vec<String> = list.iter().flat_map(commands_of).collect();
        if commands.iter().any(|c| runs(c, command)) {
            continue;
        }
        if !commands.is_empty() {
            others.push(event);
        }
        list.push(entry(command));
        changed = true;
    }
    let text = serde_json::to_string_pretty(&root).map_err(|e| e.to_string())? + "\n";
    Ok(Merged {
        text,
        changed,
        others,
    })
}

/// Whether hook command `c` is binky's `ours`, with binky named as it
/// is, or by any path to it (`/usr/local/bin/binky hook claude …`).
fn runs(c: &str, ours: &str) -> bool {
    let words: Vec<&str> = c.split_whitespace().collect();
    let want: Vec<&str> = ours.split_whitespace().collect();
    words.len() == want.len()
        && words[1..] == want[1..]
        && Path::new(words[0].trim_matches(['"', '\''])).file_name()
            == Some(std::ffi::OsStr::new("binky"))
}

/// One matcher group running `command`, keys in the order Claude Code's
/// documentation writes them.
fn entry(command: &str) -> Ordered {
    let text = |t: &str| Ordered::Scalar(serde_json::Value::String(t.to_owned()));
    let hook: indexmap::IndexMap<String, Ordered> = [
        ("type".to_owned(), text("command")),
        ("command".to_owned(), text(command)),
    ]
    .into_iter()
    .collect();
    let group: indexmap::IndexMap<String, Ordered> = [(
        "hooks".to_owned(),
        Ordered::Array(vec![Ordered::Object(hook)]),
    )]
    .into_iter()
    .collect();
    Ordered::Object(group)
}

/// The commands of one matcher group (`{"hooks": [{"command": …}]}`).
fn commands_of(group: &Ordered) -> Vec<String> {
    let Ordered::Object(g) = group else {
        return Vec::new();
    };
    let Some(Ordered::Array(hooks)) = g.get("hooks") else {
        return Vec::new();
    };
    hooks
        .iter()
        .filter_map(|h| match h {
            Ordered::Object(h) => match h.get("command") {
                Some(Ordered::Scalar(serde_json::Value::String(c))) => Some(c.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
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

    #[test]
    fn install_into_nothing_writes_both_hooks() {
        let m = merge(None).unwrap();
        assert!(m.changed);
        let v: serde_json::Value = serde_json::from_str(&m.text).unwrap();
        assert_eq!(
            v["hooks"]["WorktreeCreate"][0]["hooks"][0]["command"],
            CREATE_COMMAND
        );
        assert_eq!(
            v["hooks"]["WorktreeRemove"][0]["hooks"][0]["type"],
            "command"
        );
    }

    #[test]
    fn install_keeps_every_key_in_its_order_and_runs_once() {
        let before = r#"{
  "permissions": {"allow": ["Bash(npm test)"]},
  "model": "opus",
  "hooks": {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}],
    "WorktreeCreate": [{"hooks": [{"type": "command", "command": "./mine.sh"}]}]
  },
  "env": {"B": "2", "A": "1"}
}"#;
        let m = merge(Some(before)).unwrap();
        assert!(m.changed);
        assert_eq!(m.others, vec!["WorktreeCreate"]);
        let keys: Vec<&str> = ["\"permissions\"", "\"model\"", "\"hooks\"", "\"env\""]
            .into_iter()
            .collect();
        let at: Vec<usize> = keys.iter().map(|k| m.text.find(k).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{}", m.text);
        assert!(m.text.find("\"B\"").unwrap() < m.text.find("\"A\"").unwrap());
        assert!(m.text.contains("./mine.sh") && m.text.contains("lint"));
        let by_path = m
            .text
            .replace("\"binky hook", "\"/usr/local/bin/binky hook");
        assert!(
            !merge(Some(&by_path)).unwrap().changed,
            "binky by its path is binky"
        );
        let again = merge(Some(&m.text)).unwrap();
        assert!(!again.changed);
        assert_eq!(again.text, m.text);
    }

    #[test]
    fn install_refuses_what_it_cannot_read_naming_where() {
        let e = merge(Some("{\n  \"hooks\": {,\n}")).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        assert!(
            merge(Some("{\"hooks\": []}"))
                .unwrap_err()
                .contains("`hooks`")
        );
        assert!(
            merge(Some("{\"hooks\": {\"WorktreeRemove\": {}}}"))
                .unwrap_err()
                .contains("hooks.WorktreeRemove")
        );
        assert!(merge(Some("[]")).unwrap_err().contains("not a JSON object"));
    }
}
