//! `binky init`: a starting `binky.toml` from the compose file a project
//! already has.
//!
//! Data flows one way: [`compose::locate`] finds the files,
//! [`compose::read`] loads and merges them (override files, `extends`),
//! `plan` decides what each service becomes (a resource by the image
//! table in `adapters::catalog`, a tool, or an app), and `write` prints
//! the TOML. Two rules hold by construction and are checked before
//! anything is written: the text passes `binky check`, and no value from
//! `.env`, an `env_file` or `environment` is in it (interpolated text is
//! used to decide, never written).

pub mod compose;
mod extends;
mod fields;
mod flow;
pub mod interpolate;
mod merge;
mod plan;
mod ports;
mod refs;
mod write;
pub mod yaml;

pub use compose::ComposeError;
pub use plan::{Planned, Role};

use std::path::{Path, PathBuf};

/// What `init` made of a compose project.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The `binky.toml` text.
    pub toml: String,
    /// The compose files read, base first.
    pub files: Vec<PathBuf>,
    /// Each service and what it became.
    pub services: Vec<Planned>,
    /// What the user should know that the file does not say (printed as
    /// warnings).
    pub notes: Vec<String>,
}

/// Reads the compose project of `dir` (or exactly `file`) and writes a
/// `binky.toml` for it, as text. `env` is the shell's environment, which
/// compose lets win over `.env` when interpolating; both only decide.
///
/// # Errors
/// No compose file; a file that is not YAML, in the legacy format, or has
/// an `extends` that cannot be followed; an interpolation compose itself
/// would refuse in a field `init` reads (the image, a port); a result
/// `binky check` refuses (a bug, reported as such).
pub fn generate(
    dir: &Path,
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Generated, ComposeError> {
    let project = compose::read(compose::locate(dir, file, env)?)?;
    make(&project, dir, env)
}

/// [`generate`] over one compose file's text, as if it were `dir`'s
/// `compose.yaml` with no `.env` (the fuzzer's way in).
///
/// # Errors
/// As [`generate`].
pub fn generate_from_text(
    dir: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Generated, ComposeError> {
    let project = compose::read_text(&dir.join("compose.yaml"), text)?;
    make(&project, dir, env)
}

/// The binky.toml of a read project, checked.
fn make(
    project: &compose::Project,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Generated, ComposeError> {
    let files = project.files.clone();
    let lookup = |name: &str| compose::variable(env, &project.dotenv, name);
    let planned = plan::plan(project, &lookup)?;
    let toml = write::write(project, &planned, dir);
    let report = crate::config::check_str(&toml, &dir.join(crate::config::FILE_NAME));
    if report.errors() > 0 {
        let first = report
            .diagnostics
            .iter()
            .find(|d| d.severity == crate::config::Severity::Error)
            .map(|d| d.message.clone())
            .unwrap_or_default();
        return Err(ComposeError {
            file: files[0].clone(),
            line: None,
            message: format!(
                "binky init made a binky.toml that `binky check` refuses ({first}): this is a bug in binky"
            ),
            hint:
                "please report it with the compose file; `binky init --stdout` shows what was made"
                    .into(),
        });
    }
    Ok(Generated {
        toml,
        files,
        services: planned,
        notes: project.notes.clone(),
    })
}
