//! `binky hook claude install`: Binky's two worktree hooks merged into
//! Claude Code's settings file, the user's own keys kept in their order.

use super::fail;
use crate::cli::HookInstallArgs;
use crate::output;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The command each Claude Code hook entry runs.
const CREATE_COMMAND: &str = "binky hook claude worktree-create";
const REMOVE_COMMAND: &str = "binky hook claude worktree-remove";

/// `binky hook claude install`: both hooks merged into Claude Code's
/// settings file, written whole ([`crate::commands::write_atomically`]), or
/// printed with `--dry-run`.
pub(super) fn install(args: &HookInstallArgs, project: Option<&str>) -> ExitCode {
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
        .and_then(|()| crate::commands::write_atomically(&file, &merged.text));
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
