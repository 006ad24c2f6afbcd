//! `sqlite`: one SQLite file per world, under `$BINKY_HOME/slices/sqlite/`.
//! Needs no server. A clone is a copy-on-write clone of the golden file
//! (`FICLONE`) where the filesystem shares blocks (XFS with reflink, btrfs,
//! …), and a copy elsewhere.

use super::{Adapter, AdapterError, Cloned, Slice};
use async_trait::async_trait;
use std::path::PathBuf;

/// The sqlite adapter.
pub struct Sqlite;

fn file(slice: &Slice) -> PathBuf {
    slice.data_dir.join(format!("{}.sqlite3", slice.name))
}

fn io(e: std::io::Error, what: &str, p: &std::path::Path) -> AdapterError {
    AdapterError::new(format!("sqlite: cannot {what} {}: {e}", p.display()))
}

#[async_trait]
impl Adapter for Sqlite {
    fn name(&self) -> &str {
        "sqlite"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let p = file(slice);
        std::fs::create_dir_all(&slice.data_dir).map_err(|e| io(e, "create", &slice.data_dir))?;
        // Opening creates a valid empty database.
        let conn = rusqlite::Connection::open(&p).map_err(|e| {
            AdapterError::new(format!("sqlite: cannot create {}: {e}", p.display()))
        })?;
        conn.query_row("PRAGMA user_version", [], |_| Ok(()))
            .map_err(|e| AdapterError::new(format!("sqlite: {}: {e}", p.display())))?;
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        Ok(format!("sqlite://{}", file(slice).display()))
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let p = file(slice);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let f = PathBuf::from(format!("{}{suffix}", p.display()));
            match std::fs::remove_file(&f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(e, "remove", &f)),
            }
        }
        Ok(())
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        Ok(file(slice).exists())
    }

    async fn data_path(&self, slice: &Slice) -> Option<PathBuf> {
        Some(slice.data_dir.clone())
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let src = file(template);
        // Fold the template's WAL into the main file so one file is the whole
        // database.
        let conn = rusqlite::Connection::open(&src)
            .map_err(|e| AdapterError::new(format!("sqlite: {}: {e}", src.display())))?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(|e| AdapterError::new(format!("sqlite: checkpoint {}: {e}", src.display())))?;
        drop(conn);
        let dst = file(slice);
        std::fs::create_dir_all(&slice.data_dir).map_err(|e| io(e, "create", &slice.data_dir))?;
        let how = crate::platform::clone_file(&src, &dst).map_err(|e| io(e, "copy to", &dst))?;
        let shares = how == crate::platform::FileCopy::Reflink;
        let size = std::fs::metadata(&dst).ok().map(|m| m.len());
        Ok(Cloned {
            how: how.as_str().to_owned(),
            shares_blocks: Some(shares),
            size,
            advice: (!shares).then(|| {
                format!(
                    "a clone here copies the template's every byte ({}): {}; on {} each world's file would share the template's blocks",
                    super::kit::cow::size(size.unwrap_or(0)),
                    super::kit::cow::folder(&slice.data_dir).1,
                    super::kit::cow::FILESYSTEMS
                )
            }),
        })
    }
}
