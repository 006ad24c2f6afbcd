//! Golden templates: pay for migrate + seed once, then copy per world.
//!
//! A template is keyed by a hash of the migrate and seed commands and the
//! contents of the `clone_inputs` files, and named by that key
//! (`<project>_golden_<clone_from>_<key>`, [`template_name`]): branches
//! whose migrations differ each keep their own template instead of
//! rebuilding one shared template back and forth. Its marker
//! `$BINKY_HOME/golden/<adapter>/<template>` ([`Marker`]) holds the key, the
//! key its schema was migrated at, the server it was built on, and whose it
//! is; `gc` drops a template no world's current key names.

use sha2::{Digest, Sha256};
use std::path::Path;

/// What a template's marker file records, a line each: the template's key,
/// the key its schema was migrated at (empty when none), the server's
/// address and the fingerprint of its credentials (see [`super::server`];
/// empty for a template of no server), then its project and resource
/// service. Markers written by older versions lack the later lines: a
/// missing line is an empty field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marker {
    /// [`key`] of the template when it was built.
    pub key: String,
    /// The key its schema was migrated at ([`migrate_key`]).
    pub migrated: Option<String>,
    /// The server it was built on.
    pub server: Option<super::server::Server>,
    /// The project it belongs to (`None` in an older marker: its name's
    /// head says).
    pub project: Option<String>,
    /// The resource service it was built for (`None` in an older marker).
    pub service: Option<String>,
}

impl Marker {
    /// Reads a marker's text; a missing line is an empty field.
    pub fn parse(text: &str) -> Self {
        let mut lines = text.lines().map(str::trim);
        let key = lines.next().unwrap_or("").to_owned();
        let migrated = lines.next().filter(|l| !l.is_empty()).map(str::to_owned);
        let address = lines.next().filter(|l| !l.is_empty());
        let credentials = lines.next().unwrap_or("");
        let mut field = || lines.next().filter(|l| !l.is_empty()).map(str::to_owned);
        let (project, service) = (field(), field());
        Marker {
            key,
            migrated,
            server: address.map(|a| super::server::Server {
                address: a.to_owned(),
                credentials: credentials.to_owned(),
            }),
            project,
            service,
        }
    }

    /// The marker's text, as [`Marker::parse`] reads it.
    pub fn render(&self) -> String {
        let (address, credentials) = self
            .server
            .as_ref()
            .map_or(("", ""), |s| (s.address.as_str(), s.credentials.as_str()));
        format!(
            "{}\n{}\n{address}\n{credentials}\n{}\n{}\n",
            self.key,
            self.migrated.as_deref().unwrap_or(""),
            self.project.as_deref().unwrap_or(""),
            self.service.as_deref().unwrap_or("")
        )
    }
}

/// What the last clone of a template cost, as `up` measured it: kept
/// beside its marker (`<marker>.clone`, JSON) for `binky doctor`, which
/// says where clones are full copies and what would make them share
/// blocks. Replaced by each clone; removed with the marker.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct CloneReport {
    /// The project the template belongs to.
    pub project: String,
    /// Its resource service.
    pub service: String,
    /// The template's name.
    pub template: String,
    /// How the copy was made ([`super::Cloned::how`]).
    pub how: String,
    /// How long the copy took, ms.
    pub ms: u64,
    /// The disk the copy took, bytes (the filesystem's free space before
    /// and after), when Binky could see the folder.
    pub added: Option<u64>,
    /// The template's size, bytes, when the server says.
    pub size: Option<u64>,
    /// Whether the copy shared the template's blocks: what the adapter
    /// said, overruled by the measure where that is plain (see
    /// [`shares_blocks`]).
    pub shares_blocks: Option<bool>,
    /// What would make a clone share blocks, where it does not.
    pub advice: Option<String>,
}

/// The build log of the template whose marker is `marker`
/// (`<marker>.log`).
pub fn log_path(marker: &Path) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{}.log", marker.display()))
}

/// The [`CloneReport`] of the template whose marker is `marker`
/// (`<marker>.clone`).
pub fn report_path(marker: &Path) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{}.clone", marker.display()))
}

/// Whether file `name` in a markers folder is a file kept beside a marker
/// (a log or a clone report), not a marker.
pub fn beside_marker(name: &str) -> bool {
    name.ends_with(".log") || name.ends_with(".clone")
}

/// Removes what is kept beside `marker` (its log and clone report), before
/// the marker itself: a `gc` killed between the two leaves the marker,
/// which the next finds, never a file no marker names.
pub fn remove_beside(marker: &Path) {
    for f in [log_path(marker), report_path(marker)] {
        let _ = std::fs::remove_file(f);
    }
}

/// The smallest template whose clone's measured disk decides whether it
/// shared blocks: below it, the filesystem's own bookkeeping (a
/// checkpoint, a log) is of the same order as the copy.
pub const MEASURABLE_BYTES: u64 = 8 * 1024 * 1024;

/// Whether a clone shared the template's blocks: `said` by the adapter,
/// unless the disk it took (`added`) against the template's `size` says
/// plainly otherwise: at least half the size is a full copy, under a tenth
/// is a shared one. Nothing is concluded below [`MEASURABLE_BYTES`].
pub fn shares_blocks(said: Option<bool>, added: Option<u64>, size: Option<u64>) -> Option<bool> {
    match (added, size) {
        (Some(a), Some(s)) if s >= MEASURABLE_BYTES && a >= s / 2 => Some(false),
        (Some(a), Some(s)) if s >= MEASURABLE_BYTES && a < s / 10 => Some(true),
        _ => said,
    }
}

/// Hex digits of the key a template's name carries: 48 bits, so two keys
/// of one project and `clone_from` meet by chance about once in 10^7
/// pairs (and then the marker's full key tells them apart).
pub const NAME_KEY_LEN: usize = 12;

/// The longest template name: PostgreSQL's identifier limit, the shortest
/// of the servers that clone (MySQL allows 64; MongoDB and ClickHouse
/// databases, sqlite files more).
pub const NAME_MAX: usize = 63;

/// Template `clone_from` of `project` at `key`:
/// `<project>_golden_<clone_from>_<first 12 hex digits of key>`, cut to
/// [`NAME_MAX`] bytes with a hash of the whole when longer. `_` never
/// occurs in a world's slug, so no world's slice shares the name.
pub fn template_name(project: &str, clone_from: &str, key: &str) -> String {
    let short = &key[..key.len().min(NAME_KEY_LEN)];
    super::fit_identifier(&format!("{project}_golden_{clone_from}_{short}"), NAME_MAX)
}

/// The name of a spare clone of template `clone_from` of `project` at
/// `key` (issue 51): `<project>_spare_<clone_from>_<12 hex of key>_<tag>`,
/// cut as [`template_name`] is. `tag` tells spares of one template apart
/// (random, so a name is never reused). Like a template's, it holds `_`,
/// which no world's slug does, so no world's slice shares it.
pub fn spare_name(project: &str, clone_from: &str, key: &str, tag: &str) -> String {
    let short = &key[..key.len().min(NAME_KEY_LEN)];
    super::fit_identifier(
        &format!("{project}_spare_{clone_from}_{short}_{tag}"),
        NAME_MAX,
    )
}

/// The number of spare clones `options.spares` asks to keep of a template
/// (issue 51): 1 unless set; 0 turns them off.
pub fn spares_wanted(options: &toml::Table) -> u32 {
    options
        .get("spares")
        .and_then(toml::Value::as_integer)
        .map_or(1, |n| u32::try_from(n.clamp(0, 8)).unwrap_or(0))
}

/// The template key: SHA-256 over the commands, the resource's name where
/// its slices carry it ([`crate::config::Config::slice_resource`]: two
/// databases of one adapter never share a template) and every file
/// matching the `clone_inputs` globs under `root` (sorted by path, path
/// and contents both hashed, so a rename changes the key too).
pub fn key(
    resource: Option<&str>,
    migrate: Option<&str>,
    seed: Option<&str>,
    clone_inputs: &[String],
    root: &Path,
) -> String {
    let mut h = Sha256::new();
    for part in [migrate.unwrap_or(""), "\0", seed.unwrap_or(""), "\0"] {
        h.update(part.as_bytes());
    }
    // Only a resource whose slices carry its name mixes it in, so the
    // template of a lone (or first) resource keeps the key it had.
    if let Some(r) = resource {
        h.update(format!("resource\0{r}\0").as_bytes());
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
            let (plain, wild): (Vec<&String>, Vec<&String>) =
                clone_inputs.iter().partition(|g| !has_wildcard(g));
            // A glob without a wildcard names one file: read, not searched for.
            for g in plain {
                if root.join(g).is_file() && set.is_match(g.as_str()) {
                    files.push(g.clone());
                }
            }
            for base in literal_bases(wild) {
                collect(root, &root.join(base), &set, &mut files);
            }
            files.sort();
            files.dedup();
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
    key(None, Some(migrate), None, clone_inputs, root)
}

/// Whether glob text holds a wildcard (or an escape, taken as one).
fn has_wildcard(glob: &str) -> bool {
    glob.contains(['*', '?', '[', '{', '\\'])
}

/// The folders the globs can match under: each glob's leading components
/// before the first one with a wildcard (`migrations/*.sql` →
/// `migrations`; `**/*.sql` → the root), with no folder listed under
/// another. So the key reads the few files it needs, not the whole worktree
/// (a `target/` folder can hold 100,000 files), and `status` can afford it.
fn literal_bases(globs: Vec<&String>) -> Vec<std::path::PathBuf> {
    let mut bases: Vec<std::path::PathBuf> = globs
        .iter()
        .map(|g| {
            let mut parts: Vec<&str> = g.split('/').collect();
            // The last component names files, never a folder to walk.
            parts.pop();
            parts
                .into_iter()
                .take_while(|p| !has_wildcard(p))
                .filter(|p| !p.is_empty() && *p != ".")
                .collect()
        })
        .collect();
    bases.sort();
    bases.dedup();
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    for b in bases {
        if !out.iter().any(|o| b.starts_with(o)) {
            out.push(b);
        }
    }
    out
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
    fn the_measure_overrules_the_adapter_only_where_it_is_plain() {
        let gb = Some(1_000_000_000);
        // ext4 said nothing (a remote server), but the disk fell by the size.
        assert_eq!(shares_blocks(None, Some(990_000_000), gb), Some(false));
        // Said to share, yet it took 600 MB of 1 GB: a full copy.
        assert_eq!(
            shares_blocks(Some(true), Some(600_000_000), gb),
            Some(false)
        );
        // A reflink's checkpoint and WAL: well under a tenth.
        assert_eq!(shares_blocks(None, Some(200_000), gb), Some(true));
        // Between the two, or not measured, or too small to tell: as said.
        assert_eq!(shares_blocks(Some(true), Some(300_000_000), gb), Some(true));
        assert_eq!(shares_blocks(Some(false), None, gb), Some(false));
        assert_eq!(
            shares_blocks(Some(false), Some(0), Some(1_000_000)),
            Some(false)
        );
    }

    #[test]
    fn a_marker_round_trips_and_reads_the_old_two_line_form() {
        let m = Marker {
            key: "k".into(),
            migrated: Some("m".into()),
            server: Some(crate::adapters::server::Server {
                address: "postgres://127.0.0.1:5432".into(),
                credentials: "fp1:00".into(),
            }),
            ..Marker::default()
        };
        assert_eq!(Marker::parse(&m.render()), m);
        let old = Marker::parse("k\nm\n");
        assert_eq!((old.key.as_str(), old.server), ("k", None));
        assert_eq!(Marker::parse("k\n\n").migrated, None);
        let owned = Marker {
            project: Some("shop".into()),
            service: Some("db".into()),
            ..m
        };
        assert_eq!(Marker::parse(&owned.render()), owned);
    }

    #[test]
    fn template_names_carry_the_key_and_fit_every_server() {
        let k1 = "0123456789abcdef".repeat(4);
        let k2 = "fedcba9876543210".repeat(4);
        assert_eq!(
            template_name("shop", "golden", &k1),
            "shop_golden_golden_0123456789ab"
        );
        assert_ne!(
            template_name("shop", "golden", &k1),
            template_name("shop", "golden", &k2)
        );
        let long = "p".repeat(63);
        for k in [&k1, &k2] {
            let n = template_name(&long, "golden", k);
            assert!(n.len() <= NAME_MAX, "{n}");
        }
        assert_ne!(
            template_name(&long, "golden", &k1),
            template_name(&long, "golden", &k2)
        );
    }

    #[test]
    fn the_key_reads_only_under_the_globs_literal_folders() {
        assert_eq!(
            literal_bases(
                ["migrations/*.sql", "migrations/v2/**", "**/*.prisma"]
                    .map(String::from)
                    .iter()
                    .collect()
            ),
            vec![std::path::PathBuf::new()]
        );
        assert_eq!(
            literal_bases(
                ["db/migrate/*.rb", "db/*.rb", "lib/{a,b}/*.sql"]
                    .map(String::from)
                    .iter()
                    .collect()
            ),
            vec![std::path::PathBuf::from("db"), "lib".into()]
        );
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("db/migrate")).unwrap();
        std::fs::write(d.path().join("db/migrate/1.rb"), "a").unwrap();
        let inputs = vec!["db/migrate/*.rb".to_string(), "schema.sql".into()];
        let k = key(None, Some("m"), None, &inputs, d.path());
        // A file outside the folders is not read, a change inside is.
        std::fs::write(d.path().join("other.rb"), "x").unwrap();
        assert_eq!(k, key(None, Some("m"), None, &inputs, d.path()));
        std::fs::write(d.path().join("db/migrate/2.rb"), "b").unwrap();
        let k2 = key(None, Some("m"), None, &inputs, d.path());
        assert_ne!(k, k2);
        std::fs::write(d.path().join("schema.sql"), "c").unwrap();
        assert_ne!(k2, key(None, Some("m"), None, &inputs, d.path()));
    }

    #[test]
    fn key_follows_commands_and_input_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("migrations")).unwrap();
        std::fs::write(d.path().join("migrations/001.sql"), "create table a(x);").unwrap();
        let inputs = vec!["migrations/*.sql".to_string()];
        let k1 = key(None, Some("m"), Some("s"), &inputs, d.path());
        assert_eq!(k1, key(None, Some("m"), Some("s"), &inputs, d.path()));
        assert_ne!(k1, key(None, Some("m2"), Some("s"), &inputs, d.path()));
        std::fs::write(d.path().join("migrations/001.sql"), "create table b(x);").unwrap();
        assert_ne!(k1, key(None, Some("m"), Some("s"), &inputs, d.path()));
        assert_ne!(
            key(None, Some("ab"), None, &[], d.path()),
            key(None, Some("a"), Some("b"), &[], d.path())
        );
    }
}
