//! Golden templates: pay for migrate + seed once, then copy per world.
//!
//! The template `<project>_golden_<clone_from>` is keyed by a hash of the
//! migrate and seed commands and the contents of the `clone_inputs` files. Its
//! marker `$BINKY_HOME/golden/<adapter>/<template>` ([`Marker`]) holds that
//! key, the key its schema was migrated at and the server it was built on; a
//! changed key (or a missing template) rebuilds it, on the server it was
//! built on first when `admin_url` now names another.

use sha2::{Digest, Sha256};
use std::path::Path;

/// What a template's marker file records, a line each: the template's key,
/// the key its schema was migrated at (empty when none), then the server's
/// address and the fingerprint of its credentials (see
/// [`super::server`]; absent in markers written before servers were
/// recorded, and for a template of no server).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marker {
    /// [`key`] of the template when it was built.
    pub key: String,
    /// The key its schema was migrated at ([`migrate_key`]).
    pub migrated: Option<String>,
    /// The server it was built on.
    pub server: Option<super::server::Server>,
}

impl Marker {
    /// Reads a marker's text; a missing line is an empty field.
    pub fn parse(text: &str) -> Self {
        let mut lines = text.lines().map(str::trim);
        let key = lines.next().unwrap_or("").to_owned();
        let migrated = lines.next().filter(|l| !l.is_empty()).map(str::to_owned);
        let address = lines.next().filter(|l| !l.is_empty());
        let credentials = lines.next().unwrap_or("");
        Marker {
            key,
            migrated,
            server: address.map(|a| super::server::Server {
                address: a.to_owned(),
                credentials: credentials.to_owned(),
            }),
        }
    }

    /// The marker's text, as [`Marker::parse`] reads it.
    pub fn render(&self) -> String {
        let (address, credentials) = self
            .server
            .as_ref()
            .map_or(("", ""), |s| (s.address.as_str(), s.credentials.as_str()));
        format!(
            "{}\n{}\n{address}\n{credentials}\n",
            self.key,
            self.migrated.as_deref().unwrap_or("")
        )
    }
}

/// The template's name.
pub fn template_name(project: &str, clone_from: &str) -> String {
    format!("{project}_golden_{clone_from}")
}

/// The template key: SHA-256 over the commands and every file matching the
/// `clone_inputs` globs under `root` (sorted by path, path and contents both
/// hashed, so a rename changes the key too).
pub fn key(
    migrate: Option<&str>,
    seed: Option<&str>,
    clone_inputs: &[String],
    root: &Path,
) -> String {
    let mut h = Sha256::new();
    for part in [migrate.unwrap_or(""), "\0", seed.unwrap_or(""), "\0"] {
        h.update(part.as_bytes());
    }
    if !clone_inputs.is_empty() {
        let mut b = globset::GlobSetBuilder::new();
        for g in clone_inputs {
            if let Ok(g) = globset::Glob::new(g) {
                b.add(g);
            }
        }
        if let Ok(set) = b.build() {
            let mut files = Vec::new();
            collect(root, root, &set, &mut files);
            files.sort();
            for rel in files {
                h.update(rel.as_bytes());
                h.update(b"\0");
                if let Ok(bytes) = std::fs::read(root.join(&rel)) {
                    h.update(&bytes);
                }
                h.update(b"\0");
            }
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The key a slice's schema is at once `migrate` ran in the worktree at
/// `root`: the migrate command plus the contents of the `clone_inputs` files
/// (the migrations, when they are listed), or — with no `clone_inputs` — the
/// worktree's commit, since any commit may carry a migration. A world whose
/// key moved runs `migrate` again (frameworks' migrate commands are no-ops
/// when current, so catching up is safe).
pub fn migrate_key(
    migrate: &str,
    clone_inputs: &[String],
    root: &Path,
    commit: Option<&str>,
) -> String {
    if clone_inputs.is_empty() {
        let mut h = Sha256::new();
        h.update(migrate.as_bytes());
        h.update(b"\0commit\0");
        h.update(commit.unwrap_or("").as_bytes());
        return h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    }
    key(Some(migrate), None, clone_inputs, root)
}

fn collect(root: &Path, dir: &Path, set: &globset::GlobSet, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        if name == ".git" || name == "node_modules" {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => collect(root, &p, set, out),
            Ok(t) if t.is_file() => {
                if let Ok(rel) = p.strip_prefix(root)
                    && set.is_match(rel)
                {
                    out.push(rel.to_string_lossy().into_owned());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_and_reads_the_old_two_line_form() {
        let m = Marker {
            key: "k".into(),
            migrated: Some("m".into()),
            server: Some(crate::adapters::server::Server {
                address: "postgres://127.0.0.1:5432".into(),
                credentials: "fp1:00".into(),
            }),
        };
        assert_eq!(Marker::parse(&m.render()), m);
        let old = Marker::parse("k\nm\n");
        assert_eq!((old.key.as_str(), old.server), ("k", None));
        assert_eq!(Marker::parse("k\n\n").migrated, None);
    }

    #[test]
    fn key_follows_commands_and_input_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("migrations")).unwrap();
        std::fs::write(d.path().join("migrations/001.sql"), "create table a(x);").unwrap();
        let inputs = vec!["migrations/*.sql".to_string()];
        let k1 = key(Some("m"), Some("s"), &inputs, d.path());
        assert_eq!(k1, key(Some("m"), Some("s"), &inputs, d.path()));
        assert_ne!(k1, key(Some("m2"), Some("s"), &inputs, d.path()));
        std::fs::write(d.path().join("migrations/001.sql"), "create table b(x);").unwrap();
        assert_ne!(k1, key(Some("m"), Some("s"), &inputs, d.path()));
        assert_ne!(
            key(Some("ab"), None, &[], d.path()),
            key(Some("a"), Some("b"), &[], d.path())
        );
    }
}
