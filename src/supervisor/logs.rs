//! Log files: open for append, roll by size, follow their name across a
//! rename (logrotate's default `create` mode), read tails.
//!
//! A log's name is never followed when it is a symbolic link: a link
//! planted at `logs/<project>/<world>/<service>.log` (by a service, an
//! agent) would otherwise make Binky append a service's output to whatever
//! file it names. See [`open_append`] for what happens to such a link.

use crate::platform;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Opens `path` for appending (mode 0600), creating its folder.
///
/// A symbolic link at `path` is never followed. A log's name in Binky's own
/// folder is Binky's, and its output belongs there, where `binky logs`
/// reads it: so the link is removed — the link only, never what it names —
/// a fresh file is made in its place, and that file's first line says what
/// was found (the link and its target), as a warning in the log of the
/// process that found it does (the daemon's, when it starts a service).
/// The output is kept, and the link's target is untouched.
///
/// # Errors
/// The folder or file cannot be made or opened; a link is planted again
/// each time it is replaced (three times).
pub fn open_append(path: &Path) -> std::io::Result<File> {
    open_log(path, false, true)
}

/// [`open_append`], readable too (`read`), and with the line about a
/// replaced link written into the file only when `note` (a log of JSON
/// lines is left free of text lines; the warning is still logged).
///
/// # Errors
/// As [`open_append`].
pub fn open_log(path: &Path, read: bool, note: bool) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut replaced = None;
    for _ in 0..3 {
        match platform::open_append_nofollow(path, read) {
            Err(e) if platform::is_link_refusal(&e) => {
                let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
                if !is_link {
                    return Err(e);
                }
                let target = std::fs::read_link(path)
                    .map_or_else(|_| "?".into(), |t| t.display().to_string());
                tracing::warn!(
                    path = %path.display(),
                    %target,
                    "a log's name is a symbolic link: not followed; replaced by a new file"
                );
                // The link itself goes (remove_file does not follow it).
                std::fs::remove_file(path)?;
                replaced = Some(target);
            }
            Err(e) => return Err(e),
            Ok(mut f) => {
                if let (Some(target), true) = (replaced, note) {
                    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
                    let _ = writeln!(
                        f,
                        "{now} binky: {} was a symbolic link to {target}; Binky does not write through links: it removed the link (not its target) and writes here",
                        path.display()
                    );
                }
                return Ok(f);
            }
        }
    }
    Err(std::io::Error::other(format!(
        "{} is a symbolic link again each time Binky replaces it; Binky does not write through links",
        path.display()
    )))
}

fn generation(path: &Path, n: u32) -> PathBuf {
    PathBuf::from(format!("{}.{n}", path.display()))
}

/// Rolls `path` to `path.1` (shifting older ones, keeping `keep`) when it is
/// at least `max_bytes`.
pub fn roll(path: &Path, max_bytes: u64, keep: u32) {
    // The name's own size: a link is not followed to a big file.
    let size = std::fs::symlink_metadata(path)
        .map(|m| m.len())
        .unwrap_or(0);
    if size < max_bytes {
        return;
    }
    let _ = std::fs::remove_file(generation(path, keep));
    for n in (1..keep).rev() {
        let _ = std::fs::rename(generation(path, n), generation(path, n + 1));
    }
    let _ = std::fs::rename(path, generation(path, 1));
}

/// How often, at most, a [`LogFile`] checks that its name still leads to
/// the file it writes. A check is one `stat`; it happens on a write, so an
/// idle writer costs nothing, and a rename is noticed at the first write
/// after it (within this long while the service keeps writing).
const NAME_CHECK: Duration = Duration::from_millis(250);

/// The identity of a file: device and inode.
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// An append-only log that keeps to its *name*. It rolls itself to
/// `path.1`… (keeping `keep` generations) once it reaches `max_bytes`, and
/// when something else renamed or deleted `path` (logrotate's default
/// `create` mode, `mv web.log web.log.1`), it notices at its next write
/// and reopens `path`, so `binky logs` and `logs -f` keep finding the
/// output where they look. The service log writer and the daemon's own
/// `daemon.log` both write through it.
pub struct LogFile {
    path: PathBuf,
    file: File,
    id: (u64, u64),
    size: u64,
    max_bytes: u64,
    keep: u32,
    checked: Instant,
    on_open: Option<fn(&File)>,
}

impl LogFile {
    /// Opens `path` for appending (mode 0600, folder created), rolling it
    /// first when it is already `max_bytes` or more.
    ///
    /// # Errors
    /// The folder or file cannot be created or opened.
    pub fn open(path: &Path, max_bytes: u64, keep: u32) -> std::io::Result<Self> {
        roll(path, max_bytes, keep);
        let file = open_append(path)?;
        let meta = file.metadata()?;
        Ok(LogFile {
            path: path.to_path_buf(),
            id: file_id(&meta),
            size: meta.len(),
            file,
            max_bytes,
            keep,
            checked: Instant::now(),
            on_open: None,
        })
    }

    /// Calls `f` with the file now and after every reopen (the daemon points
    /// its stdout and stderr at the current `daemon.log` this way).
    pub fn on_open(mut self, f: fn(&File)) -> Self {
        f(&self.file);
        self.on_open = Some(f);
        self
    }

    fn reopen(&mut self) -> std::io::Result<()> {
        let file = open_append(&self.path)?;
        let meta = file.metadata()?;
        self.id = file_id(&meta);
        self.size = meta.len();
        self.file = file;
        if let Some(f) = self.on_open {
            f(&self.file);
        }
        Ok(())
    }

    /// Reopens when `path` no longer names the file being written; rolls
    /// when the file is full.
    fn keep_to_name(&mut self) -> std::io::Result<()> {
        if self.checked.elapsed() >= NAME_CHECK {
            self.checked = Instant::now();
            // Not followed: a link put at the name is not the file.
            let same = std::fs::symlink_metadata(&self.path).is_ok_and(|m| file_id(&m) == self.id);
            if !same {
                self.reopen()?;
            }
        }
        if self.size >= self.max_bytes {
            roll(&self.path, self.max_bytes, self.keep);
            self.reopen()?;
        }
        Ok(())
    }
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.keep_to_name()?;
        let n = self.file.write(buf)?;
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Reads a log by *name* as it grows (`binky logs -f`), as `tail -F` does:
/// when the file is renamed away (rotation), what was still written to it
/// is read to its end, then the new file at the same name from its start;
/// a truncated file is read again from its start.
pub struct Follower {
    path: PathBuf,
    file: Option<File>,
    id: Option<(u64, u64)>,
    offset: u64,
}

impl Follower {
    /// Follows `path` from its current end.
    pub fn from_end(path: &Path) -> Self {
        let mut f = Follower {
            path: path.to_path_buf(),
            file: None,
            id: None,
            offset: 0,
        };
        f.open_current();
        f.offset = f
            .file
            .as_ref()
            .and_then(|x| x.metadata().ok())
            .map_or(0, |m| m.len());
        f
    }

    fn open_current(&mut self) {
        self.file = platform::open_read_nofollow(&self.path).ok();
        self.id = self
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| file_id(&m));
        self.offset = 0;
    }

    fn read_rest(&mut self, out: &mut Vec<u8>) {
        let Some(f) = self.file.as_mut() else {
            return;
        };
        let len = f.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0; // truncated in place
        }
        if f.seek(SeekFrom::Start(self.offset)).is_ok() {
            let before = out.len();
            let _ = f.read_to_end(out);
            self.offset += (out.len() - before) as u64;
        }
    }

    /// Where this follower is: the file it reads and how far. With
    /// [`Follower::resume`], a caller that keeps no follower (an agent
    /// asking again later) carries on from here.
    pub fn mark(&self) -> Mark {
        let (dev, ino) = self.id.unwrap_or((0, 0));
        Mark {
            dev,
            ino,
            offset: self.offset,
        }
    }

    /// Follows `path` from `mark`: in the same file if it still has the
    /// name, or in its first rotated generation (`<path>.1`) if it was
    /// renamed there (its rest first, then the new file); else from the
    /// start of the file at the name, and `lost` is true (it rotated twice
    /// since, or was replaced).
    pub fn resume(path: &Path, mark: Mark) -> (Self, bool) {
        let same = |p: &Path| {
            std::fs::symlink_metadata(p).is_ok_and(|m| file_id(&m) == (mark.dev, mark.ino))
        };
        let rotated = PathBuf::from(format!("{}.1", path.display()));
        let at = if same(path) {
            Some(path.to_path_buf())
        } else if same(&rotated) {
            Some(rotated)
        } else {
            None
        };
        let mut f = Follower {
            path: path.to_path_buf(),
            file: None,
            id: None,
            offset: 0,
        };
        match at {
            Some(p) => {
                f.file = platform::open_read_nofollow(&p).ok();
                f.id = Some((mark.dev, mark.ino));
                f.offset = mark.offset;
                (f, false)
            }
            None => {
                f.open_current();
                (f, true)
            }
        }
    }

    /// Takes back the last `n` bytes read: a line still being written is
    /// read again, whole, next time.
    pub fn unread(&mut self, n: usize) {
        self.offset = self.offset.saturating_sub(n as u64);
    }

    /// Bytes appended since the last call (across a rotation).
    pub fn poll(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_rest(&mut out);
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| file_id(&m));
        if now.is_some() && now != self.id {
            // Rotated: the old file is finished (read above); take the new.
            self.open_current();
            self.read_rest(&mut out);
        }
        out
    }
}

/// A place in a log, as [`Follower::mark`] gives it: the file (device and
/// inode, so a rotation by rename is followed) and the offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The file's device.
    pub dev: u64,
    /// The file's inode.
    pub ino: u64,
    /// Bytes of it already read.
    pub offset: u64,
}

/// Starts `exe log-writer <log>` (the `binky` binary) reading a new pipe,
/// and returns the pipe's write end — for a process's stdout and stderr —
/// with the writer's child. The writer opens `log` as [`LogFile`] does
/// (never through a link). The writer is in a process group of its own:
/// stopping the service must not cut its last words; it exits when every
/// holder of the write end has closed it.
///
/// # Errors
/// The log's folder cannot be made, or the pipe or the writer cannot start.
pub fn spawn_writer(
    exe: &Path,
    log: &Path,
) -> std::io::Result<(std::io::PipeWriter, tokio::process::Child)> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let (reader, writer) = std::io::pipe()?;
    let mut c = crate::platform::command(exe);
    c.arg("log-writer")
        .arg(log)
        // It needs no environment, and must not look like the service it
        // serves (a later daemon finds Binky's processes by theirs).
        .env_clear()
        .stdin(std::process::Stdio::from(reader))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    let child = c.spawn()?;
    // `c` drops here, closing our copy of the read end.
    Ok((writer, child))
}

/// The last `n` lines of `path` (reads at most the final 256 KiB).
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut f) = platform::open_read_nofollow(path) else {
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

/// What starts the separator line [`mark_run`] writes before each
/// (re)start of a process: a line of text no program prints by chance.
pub const RUN_MARK: &str = "=== binky: ";

/// Appends a stamped separator line — `<time> === binky: <what> ===` — so a
/// log that holds several runs shows where each began, and
/// [`current_run`] can quote only the last. Best effort: a log that cannot
/// be written is reported where its process's output fails.
pub fn mark_run(path: &Path, what: &str) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = open_append(path) {
        use std::io::Write;
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        let _ = writeln!(f, "{now} {RUN_MARK}{what} ===");
    }
}

/// The lines of the last run in `path` (after its last [`mark_run`] line,
/// timestamps removed), from at most the final 256 KiB: what the process
/// started last printed, never an earlier run's words.
pub fn current_run(path: &Path) -> Vec<String> {
    let lines = tail_text(path, usize::MAX);
    let start = lines
        .iter()
        .rposition(|l| l.starts_with(RUN_MARK))
        .map_or(0, |i| i + 1);
    lines[start..].to_vec()
}

/// The first `head` and last `tail` lines of `lines` (all of them when
/// they are few), with a line saying how many were left out between, each
/// prefixed `  | ` for quoting under an error. Starting lines often say the
/// cause (a missing variable), the last ones where it stopped.
pub fn quote_head_tail(lines: &[String], head: usize, tail: usize) -> String {
    let mut out = Vec::new();
    if lines.len() <= head + tail + 1 {
        out.extend(lines.iter().map(|l| format!("  | {l}")));
    } else {
        out.extend(lines[..head].iter().map(|l| format!("  | {l}")));
        out.push(format!(
            "  | … {} line(s) left out …",
            lines.len() - head - tail
        ));
        out.extend(
            lines[lines.len() - tail..]
                .iter()
                .map(|l| format!("  | {l}")),
        );
    }
    out.join("\n")
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
    fn a_log_file_rolls_by_size_and_follows_its_name_after_a_rename() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("web.log");
        let mut log = LogFile::open(&p, 100, 3).unwrap();
        log.write_all(b"before the move\n").unwrap();
        // logrotate's `create` mode: rename the file away.
        std::fs::rename(&p, generation(&p, 1)).unwrap();
        std::thread::sleep(NAME_CHECK);
        log.write_all(b"after the move\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "after the move\n");
        assert_eq!(
            std::fs::read_to_string(generation(&p, 1)).unwrap(),
            "before the move\n"
        );
        // Deleted: the same.
        std::fs::remove_file(&p).unwrap();
        std::thread::sleep(NAME_CHECK);
        log.write_all(b"after the delete\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "after the delete\n");
        // Size: rolled while written, never above max + one write.
        for i in 0..50 {
            log.write_all(format!("line {i:02} of a chatty service\n").as_bytes())
                .unwrap();
        }
        assert!(std::fs::metadata(&p).unwrap().len() <= 100 + 30);
        assert!(generation(&p, 3).exists());
        assert!(!generation(&p, 4).exists());
        let last = std::fs::read_to_string(&p).unwrap();
        assert!(last.ends_with("line 49 of a chatty service\n"), "{last}");
    }

    #[test]
    fn a_link_at_a_log_name_is_replaced_never_written_through() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "theirs\n").unwrap();
        let p = d.path().join("web.log");
        let mut log = LogFile::open(&p, 1000, 3).unwrap();
        log.write_all(b"one\n").unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        std::thread::sleep(NAME_CHECK);
        log.write_all(b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "theirs\n");
        assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("was a symbolic link to"), "{text}");
        assert!(text.ends_with("two\n"), "{text}");
        // Readers do not follow one either.
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        assert!(tail(&p, 5).is_empty());
        assert!(Follower::from_end(&p).poll().is_empty());
        // Opened afresh (a start): the same.
        mark_run(&p, "web starting");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "theirs\n");
        assert!(current_run(&p).is_empty());
    }

    #[test]
    fn a_follower_reads_across_a_rotation() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("web.log");
        std::fs::write(&p, "old\n").unwrap();
        let mut f = Follower::from_end(&p);
        assert!(f.poll().is_empty());
        let mut w = open_append(&p).unwrap();
        w.write_all(b"one\n").unwrap();
        std::fs::rename(&p, generation(&p, 1)).unwrap();
        w.write_all(b"two\n").unwrap(); // still into the renamed file
        std::fs::write(&p, "three\n").unwrap();
        assert_eq!(String::from_utf8(f.poll()).unwrap(), "one\ntwo\nthree\n");
        std::fs::write(&p, "").unwrap(); // truncated
        open_append(&p).unwrap().write_all(b"four\n").unwrap();
        assert_eq!(String::from_utf8(f.poll()).unwrap(), "four\n");
    }

    #[test]
    fn only_the_last_run_is_quoted_with_its_head_and_tail() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.log");
        std::fs::write(&p, "before any mark\n").unwrap();
        mark_run(&p, "web starting");
        open_append(&p)
            .unwrap()
            .write_all(b"run one failed\n")
            .unwrap();
        mark_run(&p, "web starting");
        let mut f = open_append(&p).unwrap();
        for i in 0..30 {
            writeln!(f, "2026-11-30T04:50:00.123Z line {i}").unwrap();
        }
        let run = current_run(&p);
        assert_eq!(run.len(), 30, "{run:?}");
        assert_eq!(run[0], "line 0");
        let all = std::fs::read_to_string(&p).unwrap();
        let marks: Vec<&str> = all.lines().filter(|l| l.contains(RUN_MARK)).collect();
        assert_eq!(marks.len(), 2);
        assert!(split_stamp(marks[0]).0.is_some(), "stamped: {}", marks[0]);
        let q = quote_head_tail(&run, 3, 4);
        assert!(
            q.starts_with("  | line 0\n  | line 1\n  | line 2\n  | … 23 line(s) left out …"),
            "{q}"
        );
        assert!(q.ends_with("  | line 29"), "{q}");
        assert!(!q.contains("run one"));
        // Few lines: all of them.
        assert_eq!(quote_head_tail(&run[..5], 3, 4).lines().count(), 5);
        // No mark at all: everything is the current run.
        std::fs::write(&p, "a\nb\n").unwrap();
        assert_eq!(current_run(&p), vec!["a", "b"]);
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
