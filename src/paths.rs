//! The one place `BINKY_HOME` and every path under it is resolved.
//!
//! Layout of `$BINKY_HOME` (default `~/.binky`, mode 0700):
//! `binky.sock` (the daemon's socket, 0600), `daemon.lock`, `start.lock`,
//! `daemon.log`, `registry.db` (SQLite, WAL), `events.log` (JSON lines),
//! `logs/<project>/<world>/<service>.log`, `golden/<adapter>/<template>`.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Environment variable that overrides the state directory.
pub(crate) const HOME_ENV: &str = "BINKY_HOME";

/// Longest socket path the kernel accepts (`sun_path` is 108 bytes on Linux,
/// including the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Paths under one state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paths {
    home: PathBuf,
}

impl Paths {
    /// Uses `$BINKY_HOME`, else `~/.binky`.
    ///
    /// # Errors
    /// Neither `BINKY_HOME` nor `HOME` is set.
    pub(crate) fn from_env() -> Result<Self> {
        if let Some(h) = std::env::var_os(HOME_ENV).filter(|h| !h.is_empty()) {
            return Ok(Self::at(h));
        }
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .context("neither BINKY_HOME nor HOME is set; set BINKY_HOME to a state folder")?;
        Ok(Self::at(Path::new(&home).join(".binky")))
    }

    /// Uses `home` as the state directory (made absolute).
    pub(crate) fn at(home: impl Into<PathBuf>) -> Self {
        let home = home.into();
        let home = if home.is_absolute() {
            home
        } else {
            std::env::current_dir()
                .map(|c| c.join(&home))
                .unwrap_or(home)
        };
        Paths { home }
    }

    /// Creates the state directory (mode 0700) if needed and checks the
    /// socket path fits.
    ///
    /// # Errors
    /// The folder cannot be created, or the socket path would be too long.
    pub(crate) fn ensure(&self) -> Result<()> {
        crate::platform::create_private_dir(&self.home)
            .with_context(|| format!("cannot create state folder {}", self.home.display()))?;
        let sock = self.socket();
        if sock.as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "socket path {} is {} bytes, over the {MAX_SOCKET_PATH}-byte limit for local sockets; set BINKY_HOME to a shorter folder",
                sock.display(),
                sock.as_os_str().len()
            );
        }
        Ok(())
    }

    /// The state directory.
    pub(crate) fn home(&self) -> &Path {
        &self.home
    }
    /// The daemon's local socket.
    pub(crate) fn socket(&self) -> PathBuf {
        self.home.join("binky.sock")
    }
    /// Held (flock) by the running daemon for its whole life.
    pub(crate) fn daemon_lock(&self) -> PathBuf {
        self.home.join("daemon.lock")
    }
    /// Held by a CLI while it starts a daemon, so two CLIs don't race.
    pub(crate) fn start_lock(&self) -> PathBuf {
        self.home.join("start.lock")
    }
    /// The daemon's own log (its stdout and stderr).
    pub(crate) fn daemon_log(&self) -> PathBuf {
        self.home.join("daemon.log")
    }
    /// The SQLite registry.
    pub(crate) fn registry(&self) -> PathBuf {
        self.home.join("registry.db")
    }
    /// The JSON-lines event log.
    pub(crate) fn events_log(&self) -> PathBuf {
        self.home.join("events.log")
    }
    /// Service logs of one world.
    pub(crate) fn world_logs(&self, project: &str, world_slug: &str) -> PathBuf {
        self.home.join("logs").join(project).join(world_slug)
    }
    /// Golden template markers of one adapter.
    pub(crate) fn golden_dir(&self, adapter: &str) -> PathBuf {
        self.home.join("golden").join(adapter)
    }
}
