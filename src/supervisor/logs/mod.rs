//! Log files: open for append, roll by size, follow their name across a
//! rename (logrotate's default `create` mode), read tails.
//!
//! A log's name is never followed when it is a symbolic link: a link
//! planted at `logs/<project>/<world>/<service>.log` (by a service, an
//! agent) would otherwise make Binky append a service's output to whatever
//! file it names. See [`open_append`] for what happens to such a link.

mod read;
mod stamp;

#[cfg(test)]
pub(crate) use read::RUN_MARK;
pub(crate) use read::{current_run, mark_run, quote_head_tail, tail};
pub(crate) use stamp::{split_stamp, stamp};

use crate::platform;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
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
pub(crate) fn open_append(path: &Path) -> std::io::Result<File> {
    open_log(path, false, true)
}

/// [`open_append`], readable too (`read`), and with the line about a
/// replaced link written into the file only when `note` (a log of JSON
/// lines is left free of text lines; the warning is still logged).
///
/// # Errors
/// As [`open_append`].
pub(crate) fn open_log(path: &Path, read: bool, note: bool) -> std::io::Result<File> {
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
pub(crate) fn roll(path: &Path, max_bytes: u64, keep: u32) {
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

/// An append-only log that keeps to its *name*. It rolls itself to
/// `path.1`… (keeping `keep` generations) once it reaches `max_bytes`, and
/// when something else renamed or deleted `path` (logrotate's default
/// `create` mode, `mv web.log web.log.1`), it notices at its next write
/// and reopens `path`, so `binky logs` and `logs -f` keep finding the
/// output where they look. The service log writer and the daemon's own
/// `daemon.log` both write through it.
pub(crate) struct LogFile {
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
    pub(crate) fn open(path: &Path, max_bytes: u64, keep: u32) -> std::io::Result<Self> {
        roll(path, max_bytes, keep);
        let file = open_append(path)?;
        let meta = file.metadata()?;
        Ok(LogFile {
            path: path.to_path_buf(),
            id: platform::file_id(&meta),
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
    pub(crate) fn on_open(mut self, f: fn(&File)) -> Self {
        f(&self.file);
        self.on_open = Some(f);
        self
    }

    fn reopen(&mut self) -> std::io::Result<()> {
        let file = open_append(&self.path)?;
        let meta = file.metadata()?;
        self.id = platform::file_id(&meta);
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
            let same = std::fs::symlink_metadata(&self.path)
                .is_ok_and(|m| platform::file_id(&m) == self.id);
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
pub(crate) struct Follower {
    path: PathBuf,
    file: Option<File>,
    id: Option<(u64, u64)>,
    offset: u64,
}

impl Follower {
    /// Follows `path` from its current end.
    pub(crate) fn from_end(path: &Path) -> Self {
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
            .map(|m| platform::file_id(&m));
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
    pub(crate) fn mark(&self) -> Mark {
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
    pub(crate) fn resume(path: &Path, mark: Mark) -> (Self, bool) {
        let same = |p: &Path| {
            std::fs::symlink_metadata(p)
                .is_ok_and(|m| platform::file_id(&m) == (mark.dev, mark.ino))
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
    pub(crate) fn unread(&mut self, n: usize) {
        self.offset = self.offset.saturating_sub(n as u64);
    }

    /// Bytes appended since the last call (across a rotation).
    pub(crate) fn poll(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_rest(&mut out);
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| platform::file_id(&m));
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
pub(crate) struct Mark {
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
pub(crate) fn spawn_writer(
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

#[cfg(test)]
mod tests;
