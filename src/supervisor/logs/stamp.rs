//! Timestamps on log lines: `binky log-writer` stamps each line a service
//! prints as it arrives; readers split the stamp off again.

use std::io::Read;

/// Length of the timestamp prefix [`stamp`] writes (`2026-11-30T04:50:00.123Z `).
pub(crate) const STAMP_LEN: usize = 25;

/// Splits a stamped line into its timestamp and text. Lines without a stamp
/// (written by something else) give `None` and the whole line.
pub(crate) fn split_stamp(line: &str) -> (Option<&str>, &str) {
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
pub(crate) fn stamp(mut input: impl Read, out: &mut impl std::io::Write) -> std::io::Result<()> {
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
mod tests {
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
