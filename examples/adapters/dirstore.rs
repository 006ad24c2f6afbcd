//! `binky-adapter-dirstore`: an external adapter written with
//! `binky::adapter_sdk`. A slice is a folder under the `root` option (default:
//! the data_dir Binky passes in); a clone copies the template's files.
//!
//! Build it with `cargo build --release --example binky-adapter-dirstore`,
//! put `target/release/examples/binky-adapter-dirstore` on PATH and write
//! `adapter = "dirstore"` in binky.toml.

use binky::adapter_sdk::{Adapter, AdapterError, Capabilities, Cloned, Facts, Slice, async_trait};
use std::path::{Path, PathBuf};

struct DirStore;

fn folder(slice: &Slice) -> PathBuf {
    let root = slice
        .options
        .get("root")
        .and_then(|v| v.as_str())
        .map(PathBuf::from)
        .unwrap_or_else(|| slice.data_dir.clone());
    root.join(&slice.name)
}

fn io(what: &str, p: &Path, e: std::io::Error) -> AdapterError {
    AdapterError::new(format!("dirstore: cannot {what} {}: {e}", p.display()))
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

#[async_trait]
impl Adapter for DirStore {
    fn name(&self) -> &str {
        "dirstore"
    }

    fn facts(&self) -> Facts {
        Facts {
            capabilities: Capabilities {
                clone: true,
                spares: false,
            },
            ..Facts::SERVER
        }
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let p = folder(slice);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("create", parent, e))?;
        }
        std::fs::create_dir(&p).map_err(|e| io("create", &p, e))
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        Ok(format!("file://{}", folder(slice).display()))
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let p = folder(slice);
        match std::fs::remove_dir_all(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &p, e)),
            _ => Ok(()),
        }
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        Ok(folder(slice).is_dir())
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let (from, to) = (folder(template), folder(slice));
        copy_tree(&from, &to).map_err(|e| io("copy the template into", &to, e))?;
        Ok(Cloned::said("folder copy"))
    }
}

fn main() {
    binky::adapter_sdk::run(DirStore)
}
