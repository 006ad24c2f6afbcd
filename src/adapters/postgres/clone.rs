//! How a world's database is copied from its golden template, and what
//! that costs: `CREATE DATABASE … TEMPLATE … STRATEGY` chosen from the
//! server's version, the template's size and whether its data directory
//! can share blocks.
//!
//! PostgreSQL 18 added `file_copy_method = clone`: with `STRATEGY
//! FILE_COPY`, each file of the template is copied with `copy_file_range`,
//! which on a filesystem that shares blocks (XFS with reflink, btrfs, …)
//! is a copy-on-write clone: milliseconds and no disk, whatever the size.
//! The setting is a session's own (`USERSET`), so Binky sets it on the
//! connection that clones; nothing of the server's is changed.

use super::{quote, sql_err};
use crate::adapters::kit::cow;
use crate::adapters::{AdapterError, Cloned, Slice};
use std::path::{Path, PathBuf};

/// Template size (bytes) from which `FILE_COPY` beats `WAL_LOG` where a
/// clone copies every byte. Measured with benchmarks/worlds.py
/// (`--strategies`): WAL_LOG writes every page to the WAL, which costs more
/// the bigger the template; FILE_COPY copies files but forces two
/// checkpoints, a fixed cost that dominates for small ones.
pub const FILE_COPY_FROM_BYTES: i64 = 16 * 1024 * 1024;

/// The first version with `file_copy_method` (PostgreSQL 18).
const CLONE_FROM_VERSION: i32 = 180_000;

/// What the server says about cloning its template.
pub(super) struct Plan {
    /// `server_version_num`.
    version: i32,
    /// The template's size, bytes (`pg_database_size`: its files' logical
    /// size, what a full copy costs).
    size: i64,
    /// The server's data directory, when it is on this machine and the
    /// admin may read `data_directory`.
    data_dir: Option<PathBuf>,
    /// Whether that folder shares blocks (`None`: unknown or remote).
    shares_blocks: Option<bool>,
    /// The `STRATEGY` clause's word; `None` before PostgreSQL 15, which
    /// only copies files.
    strategy: Option<&'static str>,
}

impl Plan {
    /// Reads the server's version, the template's size and where its data
    /// lives, then chooses the strategy from the `clone_strategy` option
    /// (`auto`, `wal_log`, `file_copy`). `auto` takes `FILE_COPY` where it
    /// is a copy-on-write clone (PostgreSQL 18 on a filesystem that shares
    /// blocks), and otherwise by size ([`FILE_COPY_FROM_BYTES`]).
    ///
    /// # Errors
    /// The server cannot be read, or the option names no strategy.
    pub(super) async fn read(
        c: &tokio_postgres::Client,
        template: &Slice,
    ) -> Result<Plan, AdapterError> {
        let row = c
            .query_one(
                "SELECT current_setting('server_version_num')::int, pg_database_size($1)",
                &[&template.name],
            )
            .await
            .map_err(|e| sql_err("reading the template's size", e))?;
        let (version, size): (i32, i64) = (row.get(0), row.get(1));
        let data_dir = data_directory(c, template).await;
        let shares_blocks = data_dir.as_deref().and_then(|d| cow::folder(d).0);
        let wanted = template
            .options
            .get("clone_strategy")
            .and_then(|v| v.as_str())
            .unwrap_or("auto");
        let cow = version >= CLONE_FROM_VERSION && shares_blocks == Some(true);
        let strategy = match wanted {
            _ if version < 150_000 => None,
            "wal_log" => Some("WAL_LOG"),
            "file_copy" => Some("FILE_COPY"),
            "auto" if cow || size >= FILE_COPY_FROM_BYTES => Some("FILE_COPY"),
            "auto" => Some("WAL_LOG"),
            other => {
                return Err(AdapterError::new(format!(
                    "postgres: clone_strategy = \"{other}\" is not one of auto, wal_log, file_copy"
                )));
            }
        };
        Ok(Plan {
            version,
            size,
            data_dir,
            shares_blocks,
            strategy,
        })
    }

    /// Whether the copy goes through `file_copy_method = clone`
    /// (PostgreSQL 18+, `FILE_COPY`).
    fn clones(&self) -> bool {
        self.version >= CLONE_FROM_VERSION && self.strategy == Some("FILE_COPY")
    }

    /// The session setting that makes `FILE_COPY` clone, where it does (a
    /// statement of its own: `CREATE DATABASE` refuses to share a
    /// multi-statement query, which runs as one transaction). In a
    /// filesystem that cannot share blocks it is the kernel's copy
    /// (`copy_file_range`), no slower than PostgreSQL's own.
    pub(super) fn setting(&self) -> Option<&'static str> {
        self.clones().then_some("SET file_copy_method = clone")
    }

    /// The statement that makes `slice` from `template`.
    pub(super) fn statement(&self, template: &str, slice: &str) -> String {
        let strategy = self
            .strategy
            .map(|s| format!(" STRATEGY {s}"))
            .unwrap_or_default();
        format!(
            "CREATE DATABASE {} TEMPLATE {}{strategy}",
            quote(slice),
            quote(template)
        )
    }

    /// How the copy was made and what it costs, with advice where it is a
    /// full copy.
    pub(super) fn cloned(&self) -> Cloned {
        let size = u64::try_from(self.size).ok();
        let sql = match self.strategy {
            Some(s) => format!("TEMPLATE STRATEGY {s}"),
            None => "TEMPLATE".to_owned(),
        };
        let shares_blocks = if self.clones() {
            self.shares_blocks
        } else {
            Some(false)
        };
        let how = match shares_blocks {
            Some(true) => "reflink".to_owned(),
            None => format!("{sql}, file_copy_method = clone"),
            Some(false) => sql,
        };
        Cloned {
            how,
            shares_blocks,
            size,
            advice: (shares_blocks != Some(true)).then(|| self.advice(size.unwrap_or(0))),
        }
    }

    /// What would make a clone on this server copy-on-write, from where it
    /// stands: the server's version, the strategy, the data directory's
    /// filesystem (when Binky can see it).
    fn advice(&self, size: u64) -> String {
        let cost = format!(
            "a clone here copies the template's every byte ({})",
            cow::size(size)
        );
        let folder = match &self.data_dir {
            Some(d) => cow::folder(d).1,
            None => "Binky cannot see the server's data directory from here (not a local server, or the admin may not read data_directory)".to_owned(),
        };
        if self.version < CLONE_FROM_VERSION {
            return format!(
                "{cost}: PostgreSQL {} has no copy-on-write clone; PostgreSQL 18 with its data directory on {} clones without copying (binky sets file_copy_method = clone on its own session). Here {folder}",
                self.version / 10_000,
                cow::FILESYSTEMS
            );
        }
        if self.strategy != Some("FILE_COPY") {
            return format!(
                "{cost}: clone_strategy = \"wal_log\" writes every page to the WAL; remove it (auto takes FILE_COPY, which clones). Here {folder}"
            );
        }
        format!(
            "{cost}: PostgreSQL 18 clones with file_copy_method = clone, which binky sets, but only on {}. Here {folder}",
            cow::FILESYSTEMS
        )
    }
}

/// The server's data directory when it is this machine's: the admin URL
/// names a loopback host or a socket folder, the admin may read
/// `data_directory` (a superuser, or `pg_read_all_settings`) and the
/// folder is here. `None` otherwise: a remote server's folder is not this
/// machine's to measure.
async fn data_directory(c: &tokio_postgres::Client, slice: &Slice) -> Option<PathBuf> {
    let config = slice.admin_url.as_ref()?.postgres_config().ok()?;
    let local = config.get_hosts().iter().all(|h| match h {
        tokio_postgres::config::Host::Tcp(h) => {
            h == "localhost"
                || h.trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        tokio_postgres::config::Host::Unix(_) => true,
    });
    if !local {
        return None;
    }
    let row = c
        .query_one("SELECT current_setting('data_directory')", &[])
        .await
        .ok()?;
    let dir = PathBuf::from(row.get::<_, String>(0));
    Path::new(&dir).is_absolute().then_some(())?;
    dir.exists().then_some(dir)
}

/// [`data_directory`] for [`crate::adapters::Adapter::data_path`].
pub(super) async fn data_path(slice: &Slice) -> Option<PathBuf> {
    let c = super::connect(slice).await.ok()?;
    data_directory(&c, slice).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(version: i32, strategy: Option<&'static str>, shares: Option<bool>) -> Plan {
        Plan {
            version,
            size: 546_000_000,
            data_dir: None,
            shares_blocks: shares,
            strategy,
        }
    }

    #[test]
    fn only_postgres_18_with_file_copy_on_a_sharing_filesystem_is_a_reflink() {
        let p = plan(180_001, Some("FILE_COPY"), Some(true));
        assert_eq!(p.cloned().how, "reflink");
        assert_eq!(p.cloned().advice, None);
        assert_eq!(p.setting(), Some("SET file_copy_method = clone"));
        assert_eq!(
            p.statement("t", "w"),
            "CREATE DATABASE \"w\" TEMPLATE \"t\" STRATEGY FILE_COPY"
        );

        let ext4 = plan(180_001, Some("FILE_COPY"), Some(false));
        assert_eq!(ext4.cloned().shares_blocks, Some(false));
        assert!(ext4.cloned().advice.unwrap().contains("only on XFS"));

        let remote = plan(180_001, Some("FILE_COPY"), None);
        assert_eq!(
            remote.cloned().how,
            "TEMPLATE STRATEGY FILE_COPY, file_copy_method = clone"
        );
        assert_eq!(remote.cloned().shares_blocks, None);

        let pg15 = plan(150_020, Some("FILE_COPY"), Some(true));
        assert_eq!(pg15.cloned().how, "TEMPLATE STRATEGY FILE_COPY");
        assert_eq!(pg15.setting(), None);
        let advice = pg15.cloned().advice.unwrap();
        assert!(
            advice.contains("PostgreSQL 15 has no copy-on-write clone"),
            "{advice}"
        );
        assert!(advice.contains("546 MB"), "{advice}");

        let wal = plan(180_001, Some("WAL_LOG"), Some(true));
        assert_eq!(wal.cloned().shares_blocks, Some(false));
        assert!(wal.cloned().advice.unwrap().contains("wal_log"));
    }
}
