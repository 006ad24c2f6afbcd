//! Service log files: open for append, roll at (re)start, read tails.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Opens `path` for appending (mode 0600), creating its folder.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

fn generation(path: &Path, n: u32) -> PathBuf {
    PathBuf::from(format!("{}.{n}", path.display()))
}

/// Rolls `path` to `path.1` (shifting older ones, keeping `keep`) when it is
/// at least `max_bytes`.
pub fn roll(path: &Path, max_bytes: u64, keep: u32) {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size < max_bytes {
        return;
    }
    let _ = std::fs::remove_file(generation(path, keep));
    for n in (1..keep).rev() {
        let _ = std::fs::rename(generation(path, n), generation(path, n + 1));
    }
    let _ = std::fs::rename(path, generation(path, 1));
}

/// The last `n` lines of `path` (reads at most the final 256 KiB).
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut f) = File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(256 * 1024);
    let _ = f.seek(SeekFrom::Start(start));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(n);
    lines[skip..].iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn rolls_keeping_three() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.log");
        for i in 0..5 {
            let mut f = open_append(&p).unwrap();
            f.write_all(format!("gen {i}\n").repeat(10).as_bytes())
                .unwrap();
            drop(f);
            roll(&p, 20, 3);
        }
        assert!(!p.exists());
        assert!(
            std::fs::read_to_string(generation(&p, 1))
                .unwrap()
                .starts_with("gen 4")
        );
        assert!(
            std::fs::read_to_string(generation(&p, 3))
                .unwrap()
                .starts_with("gen 2")
        );
        assert!(!generation(&p, 4).exists());
    }

    #[test]
    fn tail_gives_last_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.log");
        std::fs::write(&p, "a\nb\nc\n").unwrap();
        assert_eq!(tail(&p, 2), vec!["b", "c"]);
        assert!(tail(&d.path().join("none"), 2).is_empty());
    }
}
