//! `binky.toml`: the model, its validation (`binky check`) and token rendering.
//!
//! Nothing here knows about the daemon or any running world: [`load`] and
//! [`validate::check_str`] are pure over the file's text, and
//! [`render::render`] is pure over a world's facts.

pub mod diagnostic;
pub mod dotenv;
pub mod locate;
pub mod model;
pub mod raw;
pub mod render;
pub mod validate;

pub use diagnostic::{Diagnostic, Severity};
pub use model::*;
pub use validate::{Report, check_str, users_of};

use std::path::{Path, PathBuf};

/// The config file's name.
pub const FILE_NAME: &str = "binky.toml";

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path tried.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No `binky.toml` in the folder or any parent.
    #[error("no {FILE_NAME} found in {start} or any parent folder")]
    NotFound {
        /// Where the search started.
        start: PathBuf,
    },
    /// The file has errors; the report holds them.
    #[error("{path} has {} error(s)", report.errors())]
    Invalid {
        /// The path read.
        path: PathBuf,
        /// Every finding.
        report: Box<Report>,
    },
}

/// Finds `binky.toml`: `start` itself if it is a file, else the nearest one in
/// `start` or its ancestors — its real ancestors: `a/b/../../../etc` climbs
/// from `/etc`, not back through `a/b`.
pub fn find(start: &Path) -> Result<PathBuf, LoadError> {
    let real = start.canonicalize();
    let start = real.as_deref().unwrap_or(start);
    if start.is_file() {
        return Ok(start.to_path_buf());
    }
    if !start.is_dir() {
        // A path that names no folder is a file the user expected to exist;
        // one that exists is a device, a FIFO or a socket (`/dev/null`).
        let source = if start.exists() {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file: name a binky.toml, or a folder holding one",
            )
        } else {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
        };
        return Err(LoadError::Read {
            path: start.to_path_buf(),
            source,
        });
    }
    for dir in start.ancestors() {
        let candidate = dir.join(FILE_NAME);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(LoadError::NotFound {
        start: start.to_path_buf(),
    })
}

/// Reads and checks the file at `path`.
pub fn check_file(path: &Path) -> Result<Report, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(check_str(&text, path))
}

/// [`check_file`] as `binky check` runs it: also warns about each
/// `${env.NAME}` that neither this process's environment nor one of the
/// file's `env_file`s sets (`up` from this shell would fail on it).
pub fn check_file_here(path: &Path) -> Result<Report, LoadError> {
    check_file_in_env(path, &|name| std::env::var(name).ok())
}

/// [`check_file`] against an environment (see
/// [`validate::check_str_in_env`]): `env`, else the file's `env_file`s.
/// `binky check` asks its own shell; `up` asks the environment it renders
/// with, so it can refuse before it makes anything.
pub fn check_file_in_env(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Report, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let Some(cfg) = check_str(&text, path).config else {
        return Ok(check_str(&text, path));
    };
    let files = cfg.project.env_file.iter().chain(
        cfg.services
            .values()
            .filter_map(|s| s.process()?.env_file.as_ref()),
    );
    let mut from_files = std::collections::BTreeMap::new();
    for f in files {
        if let Ok(t) = std::fs::read_to_string(resolve_against(&cfg.root, f)) {
            for (k, v) in dotenv::parse(&t).unwrap_or_default() {
                from_files.entry(k).or_insert(v);
            }
        }
    }
    let env = |name: &str| env(name).or_else(|| from_files.get(name).cloned());
    Ok(validate::check_str_in_env(&text, path, &env))
}

/// Reads, checks and returns the model, or every error found.
pub fn load(path: &Path) -> Result<Config, LoadError> {
    let report = check_file(path)?;
    match report.config {
        Some(c) => Ok(c),
        None => Err(LoadError::Invalid {
            path: path.to_path_buf(),
            report: Box::new(report),
        }),
    }
}
