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
            ClaudeHook::WorktreeRemove => remove(project),
            ClaudeHook::Install(a) => install(a, project),
        },
    }
}

/// Reads the hook's one JSON object from stdin: only that object (a host
/// that keeps its end of the pipe open is not waited on past it).
///
/// # Errors
/// Not JSON, not an object, or over [`PAYLOAD_LIMIT`]: said for stderr.
fn payload(input: impl Read) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut de = serde_json::Deserializer::from_reader(input.take(PAYLOAD_LIMIT));
    match serde_json::Value::deserialize(&mut de) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err("the hook's input on stdin is JSON but not an object; Claude Code sends one JSON object".into()),
        Err(e) => Err(format!(
            "the hook's input on stdin is not JSON ({e}); Claude Code sends one JSON object"
        )),
    }
}

/// A string field of the payload, the first of `keys` that is one and not
/// blank.
fn field<'a>(p: &'a serde_json::Map<String, serde_json::Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| {
        p.get(*k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.trim().is_empty())
    })
}

/// The folder the host ran in (`cwd`, when absolute and there), else ours:
/// where the project's binky.toml is looked for.
fn host_dir(p: &serde_json::Map<String, serde_json::Value>) -> PathBuf {
    field(p, &["cwd"])
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d.is_dir())
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."))
}

fn fail(message: &str, hint: &str) -> ExitCode {
    output::error(message, Some(hint));
    ExitCode::from(2)
}

/// `binky hook claude worktree-create`: the world's worktree made now (its
/// progress on stderr), its absolute path the one line on stdout, the
/// world brought up behind it by the daemon.
fn create(project: Option<&str>) -> ExitCode {
    let p = match payload(std::io::stdin().lock()) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                &e,
                "run it as Claude Code's WorktreeCreate hook: `binky hook claude install`",
            );
        }
    };
    let Some(name) = field(&p, &["name", "worktree_name"]) else {
        return fail(
            "the hook's input has no `name` (or `worktree_name`): the name of the worktree to make",
            "Claude Code sends it; to make a world by hand, run `binky up <branch>`",
        );
    };
    let dir = host_dir(&p);
    let world = match std::env::set_current_dir(&dir) {
        Ok(()) => world_ref(project, name, false),
        Err(e) => {
            return fail(
                &format!("cannot enter the hook's cwd {}: {e}", dir.display()),
                "run the hook from the project's folder",
            );
        }
    };
    let world = match world {
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
fn remove(project: Option<&str>) -> ExitCode {
    let p = match payload(std::io::stdin().lock()) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                &e,
                "run it as Claude Code's WorktreeRemove hook: `binky hook claude install`",
            );
        }
    };
    let Some(path) = field(&p, &["worktree_path"]).map(PathBuf::from) else {
        return fail(
            "the hook's input has no `worktree_path`: the worktree to remove",
            "Claude Code sends it; to remove a world by hand, run `binky remove <branch>`",
        );
    };
    let branch = match crate::worktree::here(&path) {
        Ok(crate::worktree::Here::Linked { path: at, branch }) if same(&at, &path) => branch,
        _ => {
            output::error(
                format!(
                    "{} is not a worktree with a branch checked out, so it is no world's; binky leaves it alone",
                    path.display()
                ),
                Some("remove it with `git worktree remove` if it is yours"),
            );
            return ExitCode::from(1);
        }
    };
    if let Err(e) = std::env::set_current_dir(&path) {
        return fail(
            &format!("cannot enter {}: {e}", path.display()),
            "check the worktree's permissions",
        );
    }
    let world = match world_ref(project, &branch, false) {
        Ok(w) => w,
        Err(c) => return c,
    };
    let req = Request::Remove {
        world,
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
                output::untrusted(&branch),
                path.display()
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
    let file = match settings_file(args, project) {
        Ok(f) => f,
        Err(e) => return fail(&e, "run it inside the project's git repository, or pass -p"),
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
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| super::write_atomically(&file, &merged.text));
    if let Err(e) = written {
        output::error(format!("cannot write {}: {e}", file.display()), None);
        return ExitCode::from(1);
    }
    println!(
        "{} {}: WorktreeCreate runs `{CREATE_COMMAND}`, WorktreeRemove runs `{REMOVE_COMMAND}`",
        output::paint(output::OK, "✓"),
        file.display()
    );
    ExitCode::SUCCESS
}

/// Where `install` writes: `~/.claude/settings.json` with `--user`, else
/// the project repository's `.claude/settings.json` (or
/// `settings.local.json` with `--local`) at its main worktree's root.
fn settings_file(args: &HookInstallArgs, project: Option<&str>) -> Result<PathBuf, String> {
    if args.user {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .ok_or("HOME is not set, so there is no ~/.claude/settings.json")?;
        return Ok(Path::new(&home).join(".claude").join("settings.json"));
    }
    let start = match project {
        Some(p) => PathBuf::from(p),
        None => std::env::current_dir().map_err(|e| format!("no current folder: {e}"))?,
    };
    let start = if start.is_file() {
        start.parent().map(Path::to_path_buf).unwrap_or(start)
    } else {
        start
    };
    let loc = crate::worktree::locate(&start).map_err(|e| e.to_string())?;
    let name = if args.local {
        "settings.local.json"
    } else {
        "settings.json"
    };
    Ok(loc.main_workdir.join(".claude").join(name))
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
        Some(t) => serde_json::from_str(t)
            .map_err(|e| format!("not JSON at line {}, column {}: {e}", e.line(), e.column()))?,
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
        if commands.iter().any(|c| c.trim() == command) {
            continue;
        }
        if !commands.is_empty() {
            others.push(event);
        }
        let entry = serde_json::json!({ "hooks": [{ "type": "command", "command": command }] });
        list.push(serde_json::from_value(entry).map_err(|e| e.to_string())?);
        changed = true;
    }
    let text = serde_json::to_string_pretty(&root).map_err(|e| e.to_string())? + "\n";
    Ok(Merged {
        text,
        changed,
        others,
    })
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
        assert_eq!(field(&p, &["name", "worktree_name"]), Some("feat-a"));
        let p = payload(&b"{\"worktree_name\": \"feat-b\", \"name\": \"  \"}"[..]).unwrap();
        assert_eq!(field(&p, &["name", "worktree_name"]), Some("feat-b"));
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
