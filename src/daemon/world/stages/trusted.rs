//! The project's `binky.toml` as the main checkout's branch has it
//! committed: the copy a world's agent cannot edit. `verify` runs its
//! `[agents] verify` (the orchestrator's gate must not be the graded
//! branch's to change), and `up` says what a branch's own file changes
//! against it, so a person sees what the branch will run before trusting
//! it.

use super::locate::Located;
use crate::config;
use crate::protocol::ApiError;
use crate::worktree;

/// The main checkout's committed `binky.toml`.
pub(in crate::daemon::world) struct Committed {
    /// The branch the main checkout has (`HEAD` when detached).
    pub(in crate::daemon::world) branch: String,
    /// The file's text; `None` when that branch has no such file committed.
    pub(in crate::daemon::world) text: Option<String>,
}

/// Reads the project's `binky.toml` as committed on the main checkout's
/// branch.
///
/// # Errors
/// The main checkout is not a repository with a commit.
pub(in crate::daemon::world) fn committed(loc: &Located) -> Result<Committed, ApiError> {
    let rel = loc.subdir.join(config::FILE_NAME);
    let (branch, text) = worktree::committed_file(&loc.main, &rel).map_err(|e| {
        ApiError::new(format!(
            "cannot read {} as the main checkout's branch has it: {e}",
            rel.display()
        ))
    })?;
    Ok(Committed { branch, text })
}

/// The parts of `branch_text` that differ from `main_text`, both the text
/// of a `binky.toml`, as `services.web (cmd, env)`, `services.worker
/// (added)`, `agents (verify)`: top-level tables compared key by key,
/// services one by one. Empty when they say the same (comments, order and
/// spacing do not count). A file that does not parse as TOML differs as a
/// whole (`binky.toml (not valid TOML)`).
pub(in crate::daemon::world) fn changes(main_text: &str, branch_text: &str) -> Vec<String> {
    let (Ok(main), Ok(branch)) = (
        main_text.parse::<toml::Table>(),
        branch_text.parse::<toml::Table>(),
    ) else {
        return if main_text == branch_text {
            Vec::new()
        } else {
            vec![format!("{} (not valid TOML)", config::FILE_NAME)]
        };
    };
    let mut out = Vec::new();
    let tables = main
        .keys()
        .chain(branch.keys().filter(|k| !main.contains_key(*k)));
    for top in tables {
        let (a, b) = (main.get(top), branch.get(top));
        if a == b {
            continue;
        }
        if top == "services" {
            let (a, b) = (table(a), table(b));
            let names = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
            for name in names {
                if let Some(what) = differs(a.get(name), b.get(name)) {
                    out.push(format!("services.{name} ({what})"));
                }
            }
        } else if let Some(what) = differs(a, b) {
            out.push(format!("{top} ({what})"));
        }
    }
    out
}

/// `v` as a table (empty when it is none).
fn table(v: Option<&toml::Value>) -> toml::Table {
    v.and_then(|v| v.as_table()).cloned().unwrap_or_default()
}

/// How `b` differs from `a`: `added`, `removed`, or the keys that differ.
fn differs(a: Option<&toml::Value>, b: Option<&toml::Value>) -> Option<String> {
    match (a, b) {
        (None, None) => None,
        (None, Some(_)) => Some("added".into()),
        (Some(_), None) => Some("removed".into()),
        (Some(a), Some(b)) if a == b => None,
        (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => {
            let keys: Vec<&str> = a
                .keys()
                .chain(b.keys().filter(|k| !a.contains_key(*k)))
                .filter(|k| a.get(*k) != b.get(*k))
                .map(String::as_str)
                .collect();
            Some(keys.join(", "))
        }
        _ => Some("changed".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::changes;

    #[test]
    fn changes_name_each_service_and_table_that_differs_and_nothing_else() {
        let main = "[project]\nname = \"p\"\n\n[services.web]\ncmd = \"run\"\nurl = \"web\"\n\n[agents]\nverify = [\"make test\"]\n";
        assert_eq!(changes(main, main), Vec::<String>::new());
        // Comments, spacing and order are not changes.
        let same = "# edited\n[agents]\nverify = [ \"make test\" ]\n[project]\nname = \"p\"\n[services.web]\nurl = \"web\"\ncmd = \"run\"\n";
        assert_eq!(changes(main, same), Vec::<String>::new());
        let branch = "[project]\nname = \"p\"\n\n[services.web]\ncmd = \"run --fast\"\nurl = \"web\"\nenv = { A = \"1\" }\n\n[services.worker]\ncmd = \"w\"\n\n[agents]\nverify = [\"true\"]\n";
        assert_eq!(
            changes(main, branch),
            [
                "services.web (cmd, env)",
                "services.worker (added)",
                "agents (verify)"
            ]
        );
        assert_eq!(
            changes(branch, main),
            [
                "services.web (cmd, env)",
                "services.worker (removed)",
                "agents (verify)"
            ]
        );
        assert_eq!(changes(main, "[project"), ["binky.toml (not valid TOML)"]);
    }
}
