//! How a command that talks to the daemon ends on an error it cannot get
//! past: said once on stderr, with the exit code the CLI reference gives.
//! Shared by `commands` and the dashboard.

use crate::output;
use crate::paths::Paths;
use crate::protocol::ApiError;
use std::process::ExitCode;

/// Prints an [`ApiError`] with its hint; exit code 1.
pub(crate) fn fail(e: &ApiError) -> ExitCode {
    output::error(&e.message, e.hint.as_deref());
    ExitCode::from(1)
}

/// The state folder's paths (`BINKY_HOME`, else `~/.binky`), or its
/// error said on stderr with exit code 2 (a usage error: the variable is
/// wrong).
pub(crate) fn paths_or_exit() -> Result<Paths, ExitCode> {
    Paths::from_env().map_err(|e| {
        output::error(format!("{e:#}"), None);
        ExitCode::from(2)
    })
}
