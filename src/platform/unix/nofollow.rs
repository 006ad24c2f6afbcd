//! Writing files without following symbolic links.
//!
//! Binky writes under `BINKY_HOME` (logs, markers, the Caddyfile, locks)
//! and inside worktrees (`[project] copy`). A symbolic link planted at one
//! of those names — by a service, an agent, or a branch that committed it —
//! must not turn a write into one somewhere else. So every such file is
//! opened with `O_NOFOLLOW` (a link at the name itself is refused, never
//! followed), or made by name inside a folder opened as a verified handle
//! ([`DirHandle`]: each folder on the way opened with `O_NOFOLLOW`, then
//! every name resolved against that handle, not against a path that could
//! change under it). What a caller does on a refusal — replace the link,
//! refuse the entry — is its own decision; [`is_link_refusal`] tells one.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

/// Whether `e` is the error an `O_NOFOLLOW` open gives on a symbolic link
/// (`ELOOP` on Linux and macOS; `EMLINK` on FreeBSD). [`DirHandle::descend`]
/// reports a link on the way the same way.
pub(crate) fn is_link_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(nix::errno::Errno::from_raw),
        Some(nix::errno::Errno::ELOOP | nix::errno::Errno::EMLINK)
    )
}

/// Opens `path` for appending (write only, or also for reading with
/// `read`), created with mode 0600 when missing. A symbolic link at `path`
/// is not followed: the open fails and [`is_link_refusal`] says so. The
/// folders on the way are the caller's (under `BINKY_HOME`, made by Binky
/// with mode 0700).
///
/// # Errors
/// As `open(2)`; a link at `path` in particular.
pub(crate) fn open_append_nofollow(path: &Path, read: bool) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .read(read)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// Opens `path` for reading, refusing a symbolic link at `path` (a log
/// reader must not hand out the file a planted link names).
///
/// # Errors
/// As `open(2)`; a link at `path` in particular.
pub(crate) fn open_read_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// Creates `path`, which must not exist (not even as a dangling link), for
/// writing with `mode`.
///
/// # Errors
/// `AlreadyExists` when something has the name; as `open(2)` otherwise.
pub(crate) fn create_new_nofollow(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// Writes `bytes` to `path` as a whole new file (mode 0600): written under
/// a temporary name in the same folder, then renamed over `path`. A rename
/// replaces whatever has the name — a symbolic link included — and never
/// writes through it, and a reader never sees half a file.
///
/// # Errors
/// The temporary file cannot be made or written, or the rename fails (the
/// temporary file is then removed).
pub(crate) fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = path.with_file_name(replacing_name(&name.to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = create_new_nofollow(&tmp, 0o600).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The temporary name [`write_replacing`] gives `name` while process `pid`
/// writes it.
fn replacing_name(name: &str, pid: u32) -> String {
    format!(".{name}.{pid}.tmp")
}

/// For a file name [`write_replacing`] gives its temporary file: the pid of
/// the process that was writing it. A folder lister (`gc`) skips such a
/// file while that process lives, and may remove it once it is gone (a
/// crash between the write and the rename left it).
pub(crate) fn replacing_writer(file_name: &str) -> Option<u32> {
    let inner = file_name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (name, pid) = inner.rsplit_once('.')?;
    let pid: u32 = pid.parse().ok()?;
    (!name.is_empty() && replacing_name(name, pid) == file_name).then_some(pid)
}

/// A folder opened as a handle, so names are resolved against it and not
/// against a path a link could redirect later: what Binky makes inside a
/// worktree is made through one.
pub(crate) struct DirHandle(OwnedFd);

/// Flags of a folder opened to resolve names against.
fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

impl DirHandle {
    /// Opens folder `path` (links on the way to it are followed: it is the
    /// root the caller trusts, such as a worktree Binky made).
    ///
    /// # Errors
    /// As `open(2)`: missing, not a folder, not readable.
    pub(crate) fn open(path: &Path) -> io::Result<DirHandle> {
        nix::fcntl::open(path, dir_flags(), Mode::empty())
            .map(DirHandle)
            .map_err(io::Error::from)
    }

    /// The folder `rel` beneath this one, each component opened without
    /// following a link (`O_NOFOLLOW`), made with `mode` where missing when
    /// `create` is given. Only plain names are accepted: `..`, a root or a
    /// prefix is refused (`InvalidInput`).
    ///
    /// # Errors
    /// A component is a symbolic link ([`is_link_refusal`]) or not a
    /// folder (`NotADirectory`), or cannot be made or opened. The error
    /// says nothing of where: the caller knows `rel`, and
    /// [`DirHandle::first_link`] finds the link to name.
    pub(crate) fn descend(&self, rel: &Path, create: Option<u32>) -> io::Result<DirHandle> {
        let mut at = DirHandle(self.0.try_clone()?);
        for c in rel.components() {
            let name = match c {
                Component::Normal(n) => n,
                Component::CurDir => continue,
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is not a plain relative path", rel.display()),
                    ));
                }
            };
            at = match at.child(name) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && create.is_some() => {
                    let mode = Mode::from_bits_truncate(create.unwrap_or(0o755) as _);
                    match nix::sys::stat::mkdirat(at.0.as_fd(), name, mode) {
                        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    at.child(name)?
                }
                r => r?,
            };
        }
        Ok(at)
    }

    /// Opens sub-folder `name` without following a link.
    fn child(&self, name: &OsStr) -> io::Result<DirHandle> {
        match openat(
            self.0.as_fd(),
            name,
            dir_flags() | OFlag::O_NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(DirHandle(fd)),
            // With O_DIRECTORY, Linux reports a link as "not a folder":
            // say what it is.
            Err(nix::errno::Errno::ENOTDIR) if self.is_link(name) => {
                Err(nix::errno::Errno::ELOOP.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether `name` here is a symbolic link (not followed).
    fn is_link(&self, name: &OsStr) -> bool {
        nix::sys::stat::fstatat(
            self.0.as_fd(),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .is_ok_and(|st| (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFLNK)
    }

    /// The first component of `rel` beneath this folder that is a symbolic
    /// link, with where it points (for a message); `None` when there is none
    /// up to the first missing one.
    pub(crate) fn first_link(
        &self,
        rel: &Path,
    ) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
        let mut at = DirHandle(self.0.try_clone().ok()?);
        let mut walked = std::path::PathBuf::new();
        for c in rel.components() {
            let Component::Normal(name) = c else {
                continue;
            };
            walked.push(name);
            if at.is_link(name) {
                let target = nix::fcntl::readlinkat(at.0.as_fd(), name).ok()?;
                return Some((walked, target.into()));
            }
            at = at.child(name).ok()?;
        }
        None
    }

    /// Makes folder `name` here (it must not exist) with `mode` and opens it.
    ///
    /// # Errors
    /// `AlreadyExists`, or as `mkdirat(2)` and `openat(2)`.
    pub(crate) fn create_dir(&self, name: &OsStr, mode: u32) -> io::Result<DirHandle> {
        nix::sys::stat::mkdirat(self.0.as_fd(), name, Mode::from_bits_truncate(mode as _))?;
        self.child(name)
    }

    /// Creates file `name` here for writing with `mode`; it must not exist,
    /// not even as a dangling link.
    ///
    /// # Errors
    /// `AlreadyExists`, or as `openat(2)`.
    pub(crate) fn create_file(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let fd = openat(
            self.0.as_fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode as _),
        )?;
        Ok(File::from(fd))
    }

    /// Makes symbolic link `name` here pointing at `target` (copied as
    /// written, never resolved).
    ///
    /// # Errors
    /// `AlreadyExists`, or as `symlinkat(2)`.
    pub(crate) fn symlink(&self, target: &Path, name: &OsStr) -> io::Result<()> {
        nix::unistd::symlinkat(target, self.0.as_fd(), name).map_err(io::Error::from)
    }

    /// Renames `from` to `to`, both names in this folder.
    ///
    /// # Errors
    /// As `renameat(2)`.
    pub(crate) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        nix::fcntl::renameat(self.0.as_fd(), from, self.0.as_fd(), to).map_err(io::Error::from)
    }

    /// Sets this folder's permission bits.
    ///
    /// # Errors
    /// As `fchmod(2)`.
    pub(crate) fn set_mode(&self, mode: u32) -> io::Result<()> {
        nix::sys::stat::fchmod(self.0.as_fd(), Mode::from_bits_truncate(mode as _))
            .map_err(io::Error::from)
    }

    /// Whether `name` here exists (a link counts, and is not followed).
    pub(crate) fn has(&self, name: &OsStr) -> bool {
        nix::sys::stat::fstatat(
            self.0.as_fd(),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_link_at_the_name_is_refused_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        let link = d.path().join("a.log");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = open_append_nofollow(&link, false).unwrap_err();
        assert!(is_link_refusal(&e), "{e}");
        let e = open_read_nofollow(&link).unwrap_err();
        assert!(is_link_refusal(&e), "{e}");
        assert!(create_new_nofollow(&link, 0o600).is_err());
        write_replacing(&link, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        assert!(!link.symlink_metadata().unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "new");
        let mut f = open_append_nofollow(&link, false).unwrap();
        f.write_all(b"+").unwrap();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "new+");
    }

    #[test]
    fn a_temporary_name_names_its_writer_and_nothing_else_does() {
        let name = replacing_name("p_golden_main_33b1ff9100ab", 4759);
        assert_eq!(replacing_writer(&name), Some(4759));
        for other in [
            "p_golden_main_33b1ff9100ab",
            "p_golden_main_33b1ff9100ab.log",
            ".x.tmp",
            "..4759.tmp",
            ".x.4759x.tmp",
            "x.4759.tmp",
        ] {
            assert_eq!(replacing_writer(other), None, "{other}");
        }
    }

    #[test]
    fn a_walk_beneath_a_folder_stops_at_a_link() {
        let d = tempfile::tempdir().unwrap();
        let (root, out) = (d.path().join("root"), d.path().join("out"));
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::os::unix::fs::symlink(&out, root.join("a/link")).unwrap();
        let h = DirHandle::open(&root).unwrap();
        let made = h.descend(Path::new("a/b/c"), Some(0o755)).unwrap();
        made.create_file(OsStr::new("f"), 0o644).unwrap();
        assert!(root.join("a/b/c/f").is_file());
        let e = h.descend(Path::new("a/link/x"), Some(0o755)).err().unwrap();
        assert!(is_link_refusal(&e), "{e}");
        assert!(!out.join("x").exists());
        assert_eq!(
            h.first_link(Path::new("a/link/x")),
            Some(("a/link".into(), out.clone()))
        );
        assert_eq!(h.first_link(Path::new("a/b/c")), None);
        assert!(h.descend(Path::new("../x"), Some(0o755)).is_err());
    }
}
