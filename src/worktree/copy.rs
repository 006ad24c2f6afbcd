//! `[project] copy`: what a new worktree lacks that the main checkout has
//! (`.env.local`, `node_modules`, a build cache), copied in once when the
//! worktree is made, so its first `up` does not pay a full install.
//!
//! Files are cloned copy-on-write where the filesystem can
//! ([`crate::platform::clone_into`]), else copied. Nothing is overwritten,
//! and no symlink is followed, on either side: a link inside a copied
//! folder is copied as a link; a listed path that leads out of the
//! repository (through a symlink, or written with `..`) is refused; and in
//! the worktree everything is made through a verified folder handle
//! ([`DirHandle`]), so a folder on the way that is a symbolic link — one the
//! world's branch committed (`vendor -> /tmp/outside`) — is refused, wherever
//! it points, and nothing is written through it. A refused entry does not
//! stop the others: each says what became of it, and
//! [`not_copied`] sums up what was and was not copied.

use crate::platform::{DirHandle, FileCopy, clone_into, is_link_refusal, mode_bits, set_file_mode};
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// What one `copy` entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Copied {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Copied into the worktree.
    Copied,
    /// It was already in the worktree: left as it was.
    Present,
    /// Nothing in the main checkout matches the glob (`path` is the glob).
    NoMatch,
    /// Refused or failed, and why: it leads out of the repository, a folder
    /// on its way in the worktree is a symbolic link, or a file could not
    /// be read or written. Nothing of it is left in the worktree.
    NotCopied(String),
}

impl Copied {
    /// One line for `up`'s progress: `node_modules: 12034 files, 201 MB
    /// (reflink)`, or why nothing was copied.
    pub(crate) fn describe(&self) -> String {
        match &self.outcome {
            Outcome::Present => {
                return format!("{}: already in the worktree, left as it is", self.path);
            }
            Outcome::NoMatch => {
                return format!("{}: nothing in the main checkout matches it", self.path);
            }
            Outcome::NotCopied(why) => return format!("{}: not copied: {why}", self.path),
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
pub(crate) struct CopyError(pub String);

/// When some of `done` were not copied: an error naming each of them with
/// why, and what was copied (or already there) all the same. `None` when
/// nothing was refused.
pub(crate) fn not_copied(done: &[Copied]) -> Option<CopyError> {
    let refused: Vec<String> = done
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::NotCopied(why) => Some(format!("{} ({why})", c.path)),
            _ => None,
        })
        .collect();
    if refused.is_empty() {
        return None;
    }
    let listed = |o: &dyn Fn(&Outcome) -> bool| {
        let names: Vec<&str> = done
            .iter()
            .filter(|c| o(&c.outcome))
            .map(|c| c.path.as_str())
            .collect();
        if names.is_empty() {
            "nothing".to_owned()
        } else {
            names.join(", ")
        }
    };
    Some(CopyError(format!(
        "not copied: {}; copied: {}; already in the worktree: {}",
        refused.join("; "),
        listed(&|o| *o == Outcome::Copied),
        listed(&|o| *o == Outcome::Present),
    )))
}

/// Why glob `glob` (a `[project] copy` entry) is not one Binky copies:
/// empty, absolute, with a `..` component, into `.git`, or not a glob.
pub(crate) fn check_glob(glob: &str) -> Option<String> {
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
/// is the main checkout's top (a path must resolve inside it). Every entry
/// is tried: one that is refused or fails is reported with its
/// [`Outcome::NotCopied`] and the others are still copied ([`not_copied`]
/// sums them up).
///
/// # Errors
/// Before anything is copied: a glob is not valid ([`check_glob`]), or the
/// repository or the worktree cannot be opened.
pub(crate) fn copy_paths(
    from: &Path,
    to: &Path,
    repo: &Path,
    globs: &[String],
) -> Result<Vec<Copied>, CopyError> {
    let repo = repo
        .canonicalize()
        .map_err(|e| CopyError(format!("{}: {e}", repo.display())))?;
    let root = DirHandle::open(to).map_err(|e| CopyError(format!("{}: {e}", to.display())))?;
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
        let mut c = Copied {
            path: rel.display().to_string(),
            files: 0,
            bytes: 0,
            how: FileCopy::Reflink,
            outcome: Outcome::Copied,
        };
        if let Err(why) = copy_one(from, to, &root, &repo, &rel, &mut c) {
            c.outcome = Outcome::NotCopied(why);
            c.files = 0;
            c.bytes = 0;
        }
        out.push(c);
    }
    Ok(out)
}

/// Copies `rel` from `from` into the worktree `root` (folder `to`), unless
/// it is there already ([`Outcome::Present`]). `Err` says why it was not
/// copied; nothing of it is then left in the worktree.
fn copy_one(
    from: &Path,
    to: &Path,
    root: &DirHandle,
    repo: &Path,
    rel: &Path,
    c: &mut Copied,
) -> Result<(), String> {
    let src = from.join(rel);
    let real = src.canonicalize().map_err(|e| e.to_string())?;
    if !real.starts_with(repo) {
        return Err(format!(
            "it leads out of the repository (to {}); Binky copies only what is inside it",
            real.display()
        ));
    }
    let (Some(name), parent) = (rel.file_name(), rel.parent().unwrap_or(Path::new(""))) else {
        return Err("not a path Binky copies".into());
    };
    // The destination's folders, each opened without following a link.
    let refused = |e: std::io::Error| -> String {
        if is_link_refusal(&e)
            && let Some((link, target)) = root.first_link(parent)
        {
            return format!(
                "{} in the worktree is a symbolic link (to {}); Binky makes nothing through a link, so nothing lands outside the worktree",
                link.display(),
                target.display()
            );
        }
        format!("{} in the worktree: {e}", parent.display())
    };
    let dir = match root.descend(parent, None) {
        Ok(d) if d.has(name) => {
            c.outcome = Outcome::Present;
            return Ok(());
        }
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            root.descend(parent, Some(0o777)).map_err(refused)?
        }
        Err(e) => return Err(refused(e)),
    };
    // Copied under a temporary name, then renamed: an interrupted copy
    // never leaves a half folder that a later `up` would take for the
    // real one.
    let tmp = format!(".{}.binky-copy", name.to_string_lossy());
    let tmp = OsStr::new(&tmp);
    // A leftover of an interrupted copy: by path, through the folders just
    // opened without a link on the way.
    let tmp_path = to.join(parent).join(tmp);
    remove_any(&tmp_path);
    let copied = copy_tree(&src, &dir, tmp, rel, c).and_then(|()| {
        dir.rename(tmp, name)
            .map_err(|e| format!("{}: {e}", rel.display()))
    });
    if copied.is_err() {
        remove_any(&tmp_path);
    }
    copied
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

/// Copies `src` to the absent `name` in folder `dir`: a file cloned or
/// copied, a link as a link (never followed), a folder with its mode and
/// everything in it — each made by name in its verified parent. `shown` is
/// where it lands, relative to the worktree, for messages.
fn copy_tree(
    src: &Path,
    dir: &DirHandle,
    name: &OsStr,
    shown: &Path,
    c: &mut Copied,
) -> Result<(), String> {
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let made = |e: std::io::Error| format!("{} in the worktree: {e}", shown.display());
    let meta = src.symlink_metadata().map_err(|e| err(src, e))?;
    let t = meta.file_type();
    let mode = mode_bits(&meta);
    if t.is_symlink() {
        let target = std::fs::read_link(src).map_err(|e| err(src, e))?;
        dir.symlink(&target, name).map_err(made)?;
        c.files += 1;
    } else if t.is_dir() {
        // Private while it fills; its own mode once full.
        let sub = dir.create_dir(name, 0o700).map_err(made)?;
        for e in std::fs::read_dir(src).map_err(|e| err(src, e))?.flatten() {
            let n = e.file_name();
            copy_tree(&e.path(), &sub, &n, &shown.join(&n), c)?;
        }
        sub.set_mode(mode).map_err(made)?;
    } else if t.is_file() {
        let f = dir.create_file(name, 0o600).map_err(made)?;
        if clone_into(src, &f).map_err(|e| err(src, e))? == FileCopy::Bytes {
            c.how = FileCopy::Bytes;
        }
        set_file_mode(&f, mode).map_err(made)?;
        c.files += 1;
        c.bytes += meta.len();
    }
    // Sockets, FIFOs and devices are not a project's files: skipped.
    Ok(())
}

// Every fixture holds a symbolic link, made the Unix way.
#[cfg(all(test, unix))]
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
        let done = copy_paths(&main, &wt, &main, &["outside".into()]).unwrap();
        assert!(
            matches!(&done[0].outcome, Outcome::NotCopied(why) if why.contains("leads out of the repository")),
            "{done:?}"
        );
        let e = not_copied(&done).unwrap();
        assert!(
            e.0.contains("outside (it leads out of the repository"),
            "{e}"
        );
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

    /// Issue 48: with `vendor -> <outside>` committed on the world's
    /// branch, `copy = ["vendor/x.txt"]` wrote `<outside>/x.txt`.
    #[test]
    fn a_link_in_the_worktree_is_never_written_through_and_the_rest_is_copied() {
        let (d, main, wt) = tree();
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        for dir in ["vendor", "deep/er"] {
            std::fs::create_dir_all(main.join(dir)).unwrap();
            std::fs::write(main.join(dir).join("x.txt"), "x").unwrap();
        }
        std::os::unix::fs::symlink(&outside, wt.join("vendor")).unwrap();
        std::fs::create_dir_all(wt.join("deep")).unwrap();
        std::os::unix::fs::symlink(&outside, wt.join("deep/er")).unwrap();
        let globs: Vec<String> = ["vendor/x.txt", ".env.local", "deep/er/x.txt", "src"]
            .map(String::from)
            .to_vec();
        let done = copy_paths(&main, &wt, &main, &globs).unwrap();
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "written through the link"
        );
        let by: std::collections::HashMap<_, _> =
            done.iter().map(|c| (c.path.as_str(), c)).collect();
        let why = |p: &str| match &by[p].outcome {
            Outcome::NotCopied(w) => w.clone(),
            o => panic!("{p}: {o:?}"),
        };
        assert!(
            why("vendor/x.txt").contains(&format!(
                "vendor in the worktree is a symbolic link (to {})",
                outside.display()
            )),
            "{}",
            why("vendor/x.txt")
        );
        assert!(why("deep/er/x.txt").contains("deep/er in the worktree is a symbolic link"));
        // The others are copied all the same.
        assert_eq!(by[".env.local"].outcome, Outcome::Copied);
        assert_eq!(by["src"].outcome, Outcome::Copied);
        assert!(wt.join(".env.local").is_file() && wt.join("src/main.rs").is_file());
        let e = not_copied(&done).unwrap().to_string();
        assert!(e.contains("not copied: deep/er/x.txt ("), "{e}");
        assert!(e.contains("; vendor/x.txt ("), "{e}");
        assert!(e.contains("copied: .env.local, src;"), "{e}");
        assert!(by["vendor/x.txt"].describe().contains("not copied"));
        assert!(not_copied(&[]).is_none());
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
