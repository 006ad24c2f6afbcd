//! Copy-on-write clones: whether the folder a clone lands in can share the
//! template's blocks, and the one wording of what would make it, for every
//! adapter whose clone is a copy of files (PostgreSQL's `FILE_COPY`, the
//! sqlite adapter's file).

use std::path::Path;

/// The filesystems that share blocks between files, as advice names them.
pub const FILESYSTEMS: &str = "XFS made with reflink=1 (the default since xfsprogs 5.1), btrfs, ZFS 2.2+ with block cloning, or bcachefs";

/// What Binky can tell of the folder `dir` (a local server's data
/// directory, the sqlite adapter's folder) for copy-on-write: whether its
/// filesystem shares blocks (`None`: it cannot tell), and a clause saying
/// so (`/mnt/pg is on xfs, which shares blocks`).
pub fn folder(dir: &Path) -> (Option<bool>, String) {
    let text = dir.display().to_string();
    let shown = crate::output::untrusted(&text);
    match crate::platform::filesystem(dir) {
        None => (None, format!("Binky cannot read the filesystem of {shown}")),
        Some(fs) => {
            let can = match fs.shares_blocks {
                Some(true) => "which shares blocks",
                Some(false) => "which cannot share blocks between files",
                None => "which may share blocks (Binky cannot tell)",
            };
            (
                fs.shares_blocks,
                format!("{shown} is on {}, {can}", fs.name),
            )
        }
    }
}

/// Bytes as a person reads them in advice: `532 MB`, `1.3 GB`.
pub fn size(bytes: u64) -> String {
    const MB: f64 = 1_000_000.0;
    #[allow(clippy::cast_precision_loss)]
    let mb = bytes as f64 / MB;
    if mb >= 1000.0 {
        format!("{:.1} GB", mb / 1000.0)
    } else if mb >= 10.0 {
        format!("{mb:.0} MB")
    } else {
        format!("{mb:.1} MB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_a_person_would_say_them() {
        assert_eq!(size(0), "0.0 MB");
        assert_eq!(size(160_000), "0.2 MB");
        assert_eq!(size(532_000_000), "532 MB");
        assert_eq!(size(1_300_000_000), "1.3 GB");
    }

    #[test]
    fn a_folder_names_its_filesystem() {
        let d = tempfile::tempdir().unwrap();
        let (shares, said) = folder(d.path());
        let fs = crate::platform::filesystem(d.path()).expect("a temporary folder's filesystem");
        assert_eq!(shares, fs.shares_blocks);
        assert!(said.contains(fs.name), "{said}");
    }
}
