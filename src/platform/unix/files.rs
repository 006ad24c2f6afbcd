//! Copying files the cheapest way the filesystem allows: a copy-on-write
//! clone (`FICLONE`, on btrfs, XFS, bcachefs, ZFS 2.2+) shares the source's
//! blocks and costs almost nothing; elsewhere, a byte copy. And what Binky
//! reads of a file beyond its size and kind: its identity and its mode.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The identity of a file, `(device, inode)`: equal for two names of one
/// file, different for a new file made at the same name. A log writer and
/// a follower compare it to notice a rotation by rename; a log cursor
/// carries it, so it must fit two integers.
pub(crate) fn file_id(m: &Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// The permission bits of a file: read, write and execute for owner, group
/// and others, with setuid, setgid and sticky (`0o7777` at most).
pub(crate) fn mode_bits(m: &Metadata) -> u32 {
    m.permissions().mode() & 0o7777
}

/// Whether neither the file's group nor other users may read, write or
/// enter it (mode `0o?00`): a folder holding the daemon's socket and
/// secrets must be.
pub(crate) fn is_private(m: &Metadata) -> bool {
    m.permissions().mode() & 0o077 == 0
}

/// Whether anyone may run the file (an execute bit is set).
pub(crate) fn is_executable(m: &Metadata) -> bool {
    m.permissions().mode() & 0o111 != 0
}

/// Sets the permission bits of open file `f` to `mode` (as [`mode_bits`]
/// gives them), through the handle, so a name changed since cannot
/// redirect it.
///
/// # Errors
/// The file's owner is another user, or the filesystem is read-only.
pub(crate) fn set_file_mode(f: &File, mode: u32) -> io::Result<()> {
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// How a file was copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileCopy {
    /// A copy-on-write clone: shares the source's blocks until either side
    /// writes.
    Reflink,
    /// Every byte read and written.
    Bytes,
}

impl FileCopy {
    /// How it reads in progress output: `reflink` or `copy`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FileCopy::Reflink => "reflink",
            FileCopy::Bytes => "copy",
        }
    }
}

/// Copies regular file `src` to `dst` (created or truncated, with `src`'s
/// permission bits): a copy-on-write clone where the filesystem makes one,
/// else a byte copy. A symbolic link at `dst` is refused, never written
/// through (see [`super::is_link_refusal`]).
///
/// # Errors
/// `src` cannot be read, or `dst` cannot be created or written.
pub(crate) fn clone_file(src: &Path, dst: &Path) -> io::Result<FileCopy> {
    let mode = std::fs::metadata(src)?.permissions().mode();
    let to = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode & 0o7777)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(dst)?;
    let how = clone_into(src, &to)?;
    // The mode asked at creation passed through the umask: set it whole.
    to.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
    Ok(how)
}

/// Fills `to` — a file just made, empty and open for writing — with the
/// bytes of regular file `src`: a copy-on-write clone where the filesystem
/// makes one, else a byte copy. Its mode is the caller's to set.
///
/// # Errors
/// `src` cannot be read, or `to` cannot be written.
pub(crate) fn clone_into(src: &Path, mut to: &File) -> io::Result<FileCopy> {
    let mut from = File::open(src)?;
    if reflink(&from, to) {
        return Ok(FileCopy::Reflink);
    }
    // `copy_file_range` where the kernel has it (std does that for us).
    io::copy(&mut from, &mut to)?;
    Ok(FileCopy::Bytes)
}

/// `FICLONE`: `to` becomes a clone of `from`; `false` where the filesystem
/// (or the pair: two filesystems) cannot.
#[cfg(target_os = "linux")]
fn reflink(from: &File, to: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: both descriptors are open for the whole call; FICLONE reads
    // the source descriptor as its argument and writes no memory of ours.
    let r = unsafe { nix::libc::ioctl(to.as_raw_fd(), nix::libc::FICLONE, from.as_raw_fd()) };
    r == 0
}

#[cfg(not(target_os = "linux"))]
fn reflink(_from: &File, _to: &File) -> bool {
    false
}

/// The filesystem a path is on, as far as copying goes: its name and
/// whether it can share blocks between files (copy-on-write clones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filesystem {
    /// `xfs`, `btrfs`, `ext4`, … (`statfs`'s magic number, read as a name;
    /// `other` for one Binky does not know).
    pub(crate) name: &'static str,
    /// `Some(true)`: it makes copy-on-write clones (btrfs, bcachefs; XFS
    /// made with `reflink=1`, the default since xfsprogs 5.1). `Some(false)`:
    /// it cannot (ext4, tmpfs, …). `None`: it depends (ZFS 2.2+ with block
    /// cloning on) or Binky does not know it.
    pub(crate) shares_blocks: Option<bool>,
}

/// The filesystem holding `path` (its nearest existing ancestor); `None`
/// where it cannot be read (no such path and no ancestor Binky may see).
#[cfg(target_os = "linux")]
pub(crate) fn filesystem(path: &Path) -> Option<Filesystem> {
    let mut p = path;
    while !p.exists() {
        p = p.parent()?;
    }
    let magic = nix::sys::statfs::statfs(p).ok()?.filesystem_type().0;
    // The kernel's magic numbers (include/uapi/linux/magic.h); ZFS and
    // bcachefs are out of tree.
    #[allow(clippy::unreadable_literal)]
    let (name, shares_blocks) = match magic as u64 {
        0x58465342 => ("xfs", Some(true)),
        0x9123683e => ("btrfs", Some(true)),
        0xca451a4e => ("bcachefs", Some(true)),
        0x2fc12fc1 => ("zfs", None),
        0xef53 => ("ext4", Some(false)),
        0x01021994 => ("tmpfs", Some(false)),
        0x794c7630 => ("overlayfs", Some(false)),
        0x6969 => ("nfs", None),
        _ => ("other", None),
    };
    Some(Filesystem {
        name,
        shares_blocks,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn filesystem(_path: &Path) -> Option<Filesystem> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_holds_the_same_bytes_and_mode_and_is_independent() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, b"golden").unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o750)).unwrap();
        let how = clone_file(&a, &b).unwrap();
        assert!(matches!(how, FileCopy::Reflink | FileCopy::Bytes));
        assert_eq!(std::fs::read(&b).unwrap(), b"golden");
        assert_eq!(
            std::fs::metadata(&b).unwrap().permissions().mode() & 0o777,
            0o750
        );
        std::fs::write(&b, b"changed").unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"golden");
    }
}
