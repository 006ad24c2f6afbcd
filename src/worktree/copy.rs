//! `[project] copy`: what a new worktree lacks that the main checkout has
//! (`.env.local`, `node_modules`, a build cache), copied in once when the
//! worktree is made, so its first `up` does not pay a full install.
//!
//! Files are cloned copy-on-write where the filesystem can
//! ([`crate::platform::clone_file`]), else copied. Nothing is overwritten,
//! and no symlink is followed: a link inside a copied folder is copied as a
//! link, and a listed path that leads out of the repository (through a
//! symlink, or written with `..`) is refused.

use crate::platform::{FileCopy, clone_file};
use std::path::{Component, Path, PathBuf};

/// What one `copy` entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The path, relative to the project folder.
    pub path: String,
    /// Files (and links) written.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// How: [`FileCopy::Reflink`] when every file was cloned.
    pub how: FileCopy,
    /// What became of it.
    pub outcome: Outcome,
}

/// What became of one `copy` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Copied into the worktree.
    Copied,
    /// It was already in the worktree: left as it was.
    Present,
    /// Nothing in the main checkout matches the glob (`path` is the glob).
    NoMatch,
}

impl Copied {
    /// One line for `up`'s progress: `node_modules: 12034 files, 201 MB
    /// (reflink)`, or why nothing was copied.
    pub fn describe(&self) -> String {
        match self.outcome {
            Outcome::Present => {
                return format!("{}: already in the worktree, left as it is", self.path);
            }
            Outcome::NoMatch => {
                return format!("{}: nothing in the main checkout matches it", self.path);
            }
            Outcome::Copied => {}
        }
        format!(
            "{}: {} file(s), {:.1} MB ({})",
            self.path,
            self.files,
            self.bytes as f64 / 1e6,
            self.how.as_str()
        )
    }
}

/// Why a `copy` could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("[project] copy: {0}")]
pub struct CopyError(pub String);

/// Why glob `glob` (a `[project] copy` entry) is not one Binky copies:
/// empty, absolute, with a `..` component, into `.git`, or not a glob.
pub fn check_glob(glob: &str) -> Option<String> {
    if glob.trim().is_empty() {
        return Some("an empty path".into());
    }
    let p = Path::new(glob);
    if p.is_absolute() {
        return Some(format!(
            "`{glob}` is absolute: paths are relative to the project folder"
        ));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Some(format!(
            "`{glob}` climbs out with `..`: only paths under binky.toml's folder are copied"
        ));
    }
    if p.components().any(|c| c.as_os_str() == ".git") {
        return Some(format!(
            "`{glob}` reaches into .git, which git itself manages"
        ));
    }
    for part in glob.split('/') {
        if let Err(e) = globset::Glob::new(part) {
            return Some(format!("`{glob}` is not a glob: {e}"));
        }
    }
    None
}

/// Copies into worktree folder `to` every path under main checkout folder
/// `from` that one of `globs` matches, each only if `to` lacks it. `repo`
/// is the main checkout's top (a path must resolve inside it).
///
/// # Errors
/// A glob is not valid ([`check_glob`]), a matched path resolves outside
/// `repo`, or a file cannot be read or written (named). What was copied
/// before the failure stays: it was absent before, and the next `up` of
/// a new worktree starts again.
pub fn copy_paths(
    from: &Path,
    to: &Path,
    repo: &Path,
    globs: &[String],
) -> Result<Vec<Copied>, CopyError> {
    let repo = repo
        .canonicalize()
        .map_err(|e| CopyError(format!("{}: {e}", repo.display())))?;
    let mut found: Vec<PathBuf> = Vec::new();
    let mut out = Vec::new();
    for g in globs {
        if let Some(why) = check_glob(g) {
            return Err(CopyError(why));
        }
        let parts: Vec<&str> = g
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        let before = found.len();
        matching(from, PathBuf::new(), &parts, &mut found);
        if found.len() == before {
            out.push(Copied {
                path: g.clone(),
                files: 0,
                bytes: 0,
                how: FileCopy::Bytes,
                outcome: Outcome::NoMatch,
            });
        }
    }
    found.sort();
    found.dedup();
    // A folder copied whole carries what is under it.
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in found {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    for rel in kept {
        let src = from.join(&rel);
        let real = src
            .canonicalize()
            .map_err(|e| CopyError(format!("{}: {e}", src.display())))?;
        if !real.starts_with(&repo) {
            return Err(CopyError(format!(
                "{} leads out of the repository (to {}); Binky copies only what is inside it",
                rel.display(),
                real.display()
            )));
        }
        let dst = to.join(&rel);
        let mut c = Copied {
            path: rel.display().to_string(),
            files: 0,
            bytes: 0,
            how: FileCopy::Reflink,
            outcome: if dst.symlink_metadata().is_ok() {
                Outcome::Present
            } else {
                Outcome::Copied
            },
        };
        if c.outcome == Outcome::Copied {
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| CopyError(format!("{}: {e}", parent.display())))?;
            }
            // Copied under a temporary name, then renamed: an interrupted
            // copy never leaves a half folder that a later `up` would take
            // for the real one.
            let tmp = dst.with_file_name(format!(
                ".{}.binky-copy",
                dst.file_name().unwrap_or_default().to_string_lossy()
            ));
            remove_any(&tmp);
            let copied = copy_tree(&src, &tmp, &mut c).and_then(|()| {
                std::fs::rename(&tmp, &dst)
                    .map_err(|e| CopyError(format!("{}: {e}", dst.display())))
            });
            if let Err(e) = copied {
                remove_any(&tmp);
                return Err(e);
            }
        }
        out.push(c);
    }
    Ok(out)
}

/// Removes a file, link or folder left by an interrupted copy, if any.
fn remove_any(p: &Path) {
    match p.symlink_metadata() {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

/// Adds to `out` the paths under `root` (relative to it) matching the
/// glob's components `parts`: a component at a time, `**` for any depth.
/// `.git` is never entered, nor a symlinked folder.
fn matching(root: &Path, rel: PathBuf, parts: &[&str], out: &mut Vec<PathBuf>) {
    let Some((first, rest)) = parts.split_first() else {
        out.push(rel);
        return;
    };
    let here = root.join(&rel);
    if *first == "**" {
        matching(root, rel.clone(), rest, out);
        for (name, is_dir) in entries(&here) {
            let sub = rel.join(name);
            // A folder already matched is copied whole: not searched.
            if is_dir && !out.contains(&sub) {
                matching(root, sub, parts, out);
            }
        }
        return;
    }
    let Ok(m) = globset::Glob::new(first).map(|g| g.compile_matcher()) else {
        return;
    };
    for (name, is_dir) in entries(&here) {
        if m.is_match(&name) && (rest.is_empty() || is_dir) {
            matching(root, rel.join(name), rest, out);
        }
    }
}

/// A folder's entries but `.git` and any folder holding a `.git` of its own
/// (another worktree — the worlds' own, when `worktree_root` is inside the
/// repository — a submodule or a nested repository: not this checkout's
/// files), each with whether it is a real folder (not a link to one).
fn entries(dir: &Path) -> Vec<(String, bool)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_name() != ".git")
        .filter_map(|e| {
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && e.path().join(".git").symlink_metadata().is_ok() {
                return None;
            }
            Some((e.file_name().to_string_lossy().into_owned(), is_dir))
        })
        .collect()
}

/// Copies `src` to the absent `dst`: a file cloned or copied, a link as a
/// link (never followed), a folder with its mode and everything in it.
fn copy_tree(src: &Path, dst: &Path, c: &mut Copied) -> Result<(), CopyError> {
    let err = |p: &Path, e: std::io::Error| CopyError(format!("{}: {e}", p.display()));
    let meta = src.symlink_metadata().map_err(|e| err(src, e))?;
    let t = meta.file_type();
    if t.is_symlink() {
        let target = std::fs::read_link(src).map_err(|e| err(src, e))?;
        std::os::unix::fs::symlink(&target, dst).map_err(|e| err(dst, e))?;
        c.files += 1;
    } else if t.is_dir() {
        std::fs::create_dir(dst).map_err(|e| err(dst, e))?;
        for e in std::fs::read_dir(src).map_err(|e| err(src, e))?.flatten() {
            copy_tree(&e.path(), &dst.join(e.file_name()), c)?;
        }
        std::fs::set_permissions(dst, meta.permissions()).map_err(|e| err(dst, e))?;
    } else if t.is_file() {
        if clone_file(src, dst).map_err(|e| err(src, e))? == FileCopy::Bytes {
            c.how = FileCopy::Bytes;
        }
        c.files += 1;
        c.bytes += meta.len();
    }
    // Sockets, FIFOs and devices are not a project's files: skipped.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let (main, wt) = (d.path().join("main"), d.path().join("wt"));
        for p in ["node_modules/a/lib", "packages/x/node_modules/b", "src"] {
            std::fs::create_dir_all(main.join(p)).unwrap();
        }
        std::fs::write(main.join("node_modules/a/lib/index.js"), "a").unwrap();
        std::fs::write(main.join("packages/x/node_modules/b/i.js"), "b").unwrap();
        std::fs::write(main.join(".env.local"), "K=v").unwrap();
        std::fs::write(main.join("src/main.rs"), "fn main(){}").unwrap();
        std::os::unix::fs::symlink("a/lib", main.join("node_modules/link")).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        (d, main, wt)
    }

    #[test]
    fn copies_what_matches_links_as_links_and_never_overwrites() {
        let (_d, main, wt) = tree();
        std::fs::write(wt.join(".env.local"), "mine").unwrap();
        let globs: Vec<String> = [".env.local", "node_modules", "packages/*/node_modules"]
            .map(String::from)
            .to_vec();
        let done = copy_paths(&main, &wt, &main, &globs).unwrap();
        let by: std::collections::HashMap<_, _> =
            done.iter().map(|c| (c.path.as_str(), c)).collect();
        assert_eq!(by[".env.local"].outcome, Outcome::Present);
        assert_eq!(
            std::fs::read_to_string(wt.join(".env.local")).unwrap(),
            "mine"
        );
        assert_eq!(by["node_modules"].files, 2);
        assert_eq!(
            std::fs::read_to_string(wt.join("node_modules/a/lib/index.js")).unwrap(),
            "a"
        );
        assert_eq!(
            std::fs::read_link(wt.join("node_modules/link")).unwrap(),
            PathBuf::from("a/lib")
        );
        assert!(wt.join("packages/x/node_modules/b/i.js").is_file());
        assert!(!wt.join("src").exists());
        // Run again: everything is present now, nothing is touched.
        let again = copy_paths(&main, &wt, &main, &globs).unwrap();
        assert!(
            again.iter().all(|c| c.outcome == Outcome::Present),
            "{again:?}"
        );
        let none = copy_paths(&main, &wt, &main, &["does-not-exist".into()]).unwrap();
        assert_eq!(none[0].outcome, Outcome::NoMatch);
        assert!(none[0].describe().contains("nothing in the main checkout"));
    }

    #[test]
    fn a_path_out_of_the_repository_is_refused() {
        let (d, main, wt) = tree();
        std::fs::write(d.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), main.join("outside")).unwrap();
        let e = copy_paths(&main, &wt, &main, &["outside".into()]).unwrap_err();
        assert!(e.0.contains("leads out of the repository"), "{e}");
        assert!(!wt.join("outside").exists());
        for bad in ["../x", "/etc/passwd", ".git/config", "", "a/[b"] {
            assert!(check_glob(bad).is_some(), "{bad}");
            assert!(
                copy_paths(&main, &wt, &main, &[bad.into()]).is_err(),
                "{bad}"
            );
        }
        assert_eq!(check_glob("packages/*/node_modules"), None);
        assert_eq!(check_glob("**/.env.local"), None);
    }

    #[test]
    fn double_star_finds_any_depth_but_not_in_git() {
        let (_d, main, wt) = tree();
        std::fs::create_dir_all(main.join(".git/node_modules")).unwrap();
        let mut found = Vec::new();
        matching(&main, PathBuf::new(), &["**", "node_modules"], &mut found);
        found.sort();
        assert_eq!(
            found,
            [
                PathBuf::from("node_modules"),
                "packages/x/node_modules".into()
            ]
        );
        let done = copy_paths(&main, &wt, &main, &["**/node_modules".into()]).unwrap();
        assert_eq!(done.len(), 2, "{done:?}");
    }

    #[test]
    fn another_checkout_inside_the_repository_is_not_searched() {
        // Worlds' worktrees under a `worktree_root` inside the repository
        // (each with a `.git` file), and a nested repository.
        let (_d, main, _wt) = tree();
        for (dir, git) in [(".worktrees/a", ".git"), ("vendor/lib", ".git/HEAD")] {
            std::fs::create_dir_all(main.join(dir).join("node_modules")).unwrap();
            let git = main.join(dir).join(git);
            std::fs::create_dir_all(git.parent().unwrap()).unwrap();
            std::fs::write(git, "gitdir: elsewhere\n").unwrap();
        }
        let mut found = Vec::new();
        matching(&main, PathBuf::new(), &["**", "node_modules"], &mut found);
        found.sort();
        assert_eq!(
            found,
            [
                PathBuf::from("node_modules"),
                "packages/x/node_modules".into()
            ]
        );
        let mut found = Vec::new();
        matching(&main, PathBuf::new(), &[".worktrees", "*"], &mut found);
        assert!(found.is_empty(), "{found:?}");
    }
}
