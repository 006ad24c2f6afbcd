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

/// [`tail`] with timestamps removed: what the service printed.
pub fn tail_text(path: &Path, n: usize) -> Vec<String> {
    tail(path, n)
        .into_iter()
        .map(|l| split_stamp(&l).1.to_owned())
        .collect()
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

/// Length of the timestamp prefix [`stamp`] writes (`2026-11-30T04:50:00.123Z `).
pub const STAMP_LEN: usize = 25;

/// Splits a stamped line into its timestamp and text. Lines without a stamp
/// (written by something else) give `None` and the whole line.
pub fn split_stamp(line: &str) -> (Option<&str>, &str) {
    let b = line.as_bytes();
    if b.len() >= STAMP_LEN
        && b[4] == b'-'
        && b[10] == b'T'
        && b[STAMP_LEN - 2] == b'Z'
        && b[STAMP_LEN - 1] == b' '
        && line.is_char_boundary(STAMP_LEN)
    {
        (Some(&line[..STAMP_LEN - 1]), &line[STAMP_LEN..])
    } else {
        (None, line)
    }
}

/// Copies `input` to `out` line by line, each line prefixed with the UTC time
/// it arrived (RFC 3339, milliseconds), so `binky logs` can interleave
/// services by time. Runs in `binky log-writer`, a small process of its own
/// between a service and its log file: not the daemon, so a restarting daemon
/// loses no output. Returns at end of input (the service and all its
/// descendants closed their output).
pub fn stamp(mut input: impl Read, out: &mut impl std::io::Write) -> std::io::Result<()> {
    /// A line longer than this is split, so memory stays bounded.
    const MAX_LINE: usize = 64 * 1024;
    let mut buf = vec![0u8; 16 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let mut pending = Vec::new();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        for &b in &buf[..n] {
            line.push(b);
            if b == b'\n' || line.len() >= MAX_LINE {
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                pending.extend_from_slice(now.as_bytes());
                pending.push(b' ');
                pending.append(&mut line);
            }
        }
        if !pending.is_empty() {
            out.write_all(&pending)?;
            out.flush()?;
            pending.clear();
        }
    }
    if !line.is_empty() {
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        line.push(b'\n');
        out.write_all(now.as_bytes())?;
        out.write_all(b" ")?;
        out.write_all(&line)?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod stamp_tests {
    use super::*;

    #[test]
    fn stamps_each_line_and_round_trips() {
        let mut out = Vec::new();
        stamp(&b"one\ntwo\npartial"[..], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        for (l, want) in lines.iter().zip(["one", "two", "partial"]) {
            let (ts, rest) = split_stamp(l);
            assert!(ts.unwrap().ends_with('Z'), "{l}");
            assert_eq!(rest, want);
        }
        assert_eq!(split_stamp("plain"), (None, "plain"));
    }
}
