//! How errors from below become the [`ApiError`]s the daemon replies with:
//! one `From` per domain's error type, so a verb uses `?` and each kind of
//! failure says what to do in one place.

use crate::adapters::{AdapterError, AdapterErrorKind};
use crate::config;
use crate::ports::PortError;
use crate::protocol::{ApiError, ErrorKind};
use crate::registry::RegistryError;
use crate::worktree::WorktreeError;
use std::path::Path;

/// Through `?`: scrubbed of every secret the daemon knows (see
/// `crate::secrets`), since the error does not carry its slice. Prefer
/// `adapter_error` in the world code, which also names the service and
/// masks the slice's `admin_url` whether registered or not.
impl From<AdapterError> for ApiError {
    fn from(e: AdapterError) -> Self {
        let kind = match e.kind {
            AdapterErrorKind::Refused => ErrorKind::Refused,
            AdapterErrorKind::Environmental => ErrorKind::Environmental,
            AdapterErrorKind::NotOurs => ErrorKind::NeedsForce,
        };
        ApiError::new(crate::secrets::scrub(&e.message).into_owned()).with_kind(kind)
    }
}

/// The registry's failure as the reply: its text (which names the file)
/// and what to do, by kind. Scrubbed as every reply is, at the server
/// boundary.
impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        let hint = match &e {
            // Each of these says what to do in its own text.
            RegistryError::Corrupt { .. }
            | RegistryError::Locked { .. }
            | RegistryError::TooNew { .. } => None,
            RegistryError::Sqlite { .. } => Some(
                "`binky doctor` checks the disk and permissions of BINKY_HOME; daemon.log there has the details",
            ),
        };
        let api = ApiError::new(chain(&e)).with_kind(ErrorKind::Environmental);
        match hint {
            Some(h) => api.hint(h),
            None => api,
        }
    }
}

/// A port allocation failure: an exhausted range says how to widen it.
impl From<PortError> for ApiError {
    fn from(e: PortError) -> Self {
        match e {
            PortError::Registry(e) => e.into(),
            PortError::Exhausted { .. } => ApiError::new(e.to_string()).hint(
                "widen `[project] port_range` in binky.toml, or `binky remove` worlds you no longer need",
            ),
        }
    }
}

/// A daemon task that panicked or was cancelled under a verb: a bug,
/// whose trace is in `daemon.log`.
impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> Self {
        ApiError::new(format!("an internal task failed: {e}"))
            .hint(
                "this is a bug in binky: daemon.log under BINKY_HOME has its trace; please report it",
            )
            .with_kind(ErrorKind::Bug)
    }
}

/// An invalid `binky.toml` as the reply: each error with its key and
/// line, and the command that shows them all.
impl From<config::LoadError> for ApiError {
    fn from(e: config::LoadError) -> Self {
        match e {
            config::LoadError::Invalid { path, report } => {
                let shown = path.display().to_string();
                let lines: Vec<String> = report
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == config::Severity::Error)
                    .map(|d| d.render(&shown))
                    .collect();
                ApiError::new(format!("{shown} is not valid:\n{}", lines.join("\n")))
                    .hint(format!("run `binky check {shown}` and fix what it reports"))
                    .with_kind(ErrorKind::InvalidInput)
            }
            other => ApiError::new(chain(&other)),
        }
    }
}

/// A worktree failure as the reply, with the generic way to look closer.
/// `up` names the world a taken folder belongs to before it falls back on
/// this (see `world::up`).
impl From<WorktreeError> for ApiError {
    fn from(e: WorktreeError) -> Self {
        let hint = match &e {
            WorktreeError::CheckedOutElsewhere { .. } => {
                "switch that checkout to another branch, or run `binky up` with a different name"
            }
            WorktreeError::InvalidBranch { .. } => {
                "pick a name git takes as a branch (`git check-ref-format --branch <name>` says), e.g. `feat-login`"
            }
            _ => "check the repository with `git worktree list` and `git status`",
        };
        let kind = match &e {
            WorktreeError::InvalidBranch { .. } => ErrorKind::InvalidInput,
            _ => ErrorKind::Other,
        };
        ApiError::new(chain(&e)).hint(hint).with_kind(kind)
    }
}

/// A file the daemon keeps under `BINKY_HOME` (a log, a marker) that it
/// could not `verb` (open, write): named, with where to look.
pub(crate) fn file_error(verb: &str, path: &Path, e: std::io::Error) -> ApiError {
    ApiError::new(format!("cannot {verb} {}: {e}", path.display()))
        .hint("`binky doctor` checks the disk and permissions of BINKY_HOME")
}

/// An error's text followed by each cause its text does not already
/// quote, so no cause is lost and none is said twice.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_error_keeps_its_kind_as_the_reply_s_kind() {
        let of = |e: AdapterError| ApiError::from(e).kind;
        assert_eq!(of(AdapterError::new("no")), ErrorKind::Refused);
        assert_eq!(
            of(AdapterError::environmental("unreachable")),
            ErrorKind::Environmental
        );
        // Not Binky's: only the user's `--force` leaves it to them.
        assert_eq!(
            of(AdapterError::not_ours(
                "postgres",
                "127.0.0.1:5432",
                "db",
                "no marker"
            )),
            ErrorKind::NeedsForce
        );
    }

    #[test]
    fn an_adapter_error_converted_by_question_mark_is_scrubbed() {
        crate::secrets::register_url("postgresql://app:Q9uestionMarkPw@db:5432/x");
        let quoted =
            AdapterError::new("cannot connect with postgresql://app:Q9uestionMarkPw@db:5432/x");
        let api: ApiError = quoted.into();
        assert!(!api.message.contains("Q9uestionMarkPw"), "{}", api.message);
        assert!(api.message.contains("***"), "{}", api.message);
    }

    #[test]
    fn a_registry_error_keeps_its_file_and_cause_and_says_what_to_do() {
        let path = std::path::PathBuf::from("/home/u/.binky/registry.db");
        let locked: ApiError = RegistryError::Locked {
            path: path.clone(),
            detail: "database is locked".into(),
        }
        .into();
        assert!(locked.message.contains("/home/u/.binky/registry.db"));
        assert!(locked.message.contains("database is locked"));
        // Its own text says what to do; no second hint.
        assert!(locked.message.contains("retry"), "{locked:?}");
        assert_eq!(locked.hint, None);
        let other: ApiError = RegistryError::Sqlite {
            path,
            source: rusqlite::Error::InvalidQuery,
        }
        .into();
        assert!(
            other.message.contains("registry.db")
                && other.message.contains("Query is not read-only"),
            "{other:?}"
        );
        assert!(
            other
                .hint
                .as_deref()
                .is_some_and(|h| h.contains("binky doctor"))
        );
    }

    #[test]
    fn an_exhausted_port_range_says_how_to_widen_it() {
        let e: ApiError = PortError::Exhausted {
            project: "swarm".into(),
            lo: 41000,
            hi: 41003,
        }
        .into();
        assert_eq!(
            e.message,
            "port range 41000–41003 exhausted for project swarm"
        );
        assert!(e.hint.unwrap().contains("port_range"));
    }

    #[test]
    fn a_cause_is_added_once_and_only_when_the_text_lacks_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Quoting(#[source] std::io::Error);
        let io = || std::io::Error::other("disk full");
        assert_eq!(chain(&Outer(io())), "outer: disk full");
        assert_eq!(chain(&Quoting(io())), "outer: disk full");
    }
}
