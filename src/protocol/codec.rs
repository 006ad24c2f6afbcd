//! Newline-delimited JSON framing with a size cap, in blocking (CLI) and async
//! (daemon) flavours.

use super::MAX_FRAME;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{self, BufRead, Read, Write};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Encodes one frame (JSON + `\n`).
pub fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut buf = serde_json::to_vec(value).map_err(|e| invalid(e.to_string()))?;
    buf.push(b'\n');
    Ok(buf)
}

/// A frame that arrived whole but is not the JSON its reader expects: the
/// connection is still in step (worth an error reply), unlike a frame cut
/// short or over the cap. Carried inside the `io::Error` the readers
/// return; [`is_malformed`] tells it apart by type.
#[derive(Debug)]
pub struct MalformedFrame(serde_json::Error);

impl std::fmt::Display for MalformedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed frame: {}", self.0)
    }
}

impl std::error::Error for MalformedFrame {}

/// Whether `e` is a [`MalformedFrame`] a reader returned.
pub fn is_malformed(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<MalformedFrame>())
}

fn decode<T: DeserializeOwned>(line: &[u8]) -> io::Result<T> {
    serde_json::from_slice(line)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, MalformedFrame(e)))
}

/// Writes one frame (blocking).
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, value: &T) -> io::Result<()> {
    w.write_all(&encode(value)?)?;
    w.flush()
}

/// Reads one frame (blocking). `Ok(None)` at a clean end of stream.
pub fn read_frame<R: BufRead, T: DeserializeOwned>(r: &mut R) -> io::Result<Option<T>> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(MAX_FRAME as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > MAX_FRAME {
        return Err(invalid(format!("frame over {MAX_FRAME} bytes")));
    }
    if line.last() != Some(&b'\n') {
        return Err(invalid("connection closed mid-frame"));
    }
    decode(&line).map(Some)
}

/// Writes one frame (async).
pub async fn write_frame_async<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> io::Result<()> {
    w.write_all(&encode(value)?).await?;
    w.flush().await
}

/// Reads one frame (async). `Ok(None)` at a clean end of stream.
pub async fn read_frame_async<R, T>(r: &mut R) -> io::Result<Option<T>>
where
    R: tokio::io::AsyncBufRead + Unpin,
    T: DeserializeOwned,
{
    use tokio::io::AsyncReadExt;
    let mut line = Vec::new();
    let n = r
        .take(MAX_FRAME as u64 + 1)
        .read_until(b'\n', &mut line)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > MAX_FRAME {
        return Err(invalid(format!("frame over {MAX_FRAME} bytes")));
    }
    if line.last() != Some(&b'\n') {
        return Err(invalid("connection closed mid-frame"));
    }
    decode(&line).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Reply, Request, Response};

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &Request::Status {
                project: None,
                usage: false,
            },
        )
        .unwrap();
        write_frame(&mut buf, &Reply::Ok(Response::Done)).unwrap();
        let mut r = io::Cursor::new(buf);
        let a: Request = read_frame(&mut r).unwrap().unwrap();
        let b: Reply = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(
            a,
            Request::Status {
                project: None,
                usage: false,
            }
        );
        assert_eq!(b, Reply::Ok(Response::Done));
        assert!(read_frame::<_, Request>(&mut r).unwrap().is_none());
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let big = vec![b'x'; MAX_FRAME + 10];
        let err = read_frame::<_, Request>(&mut io::Cursor::new(big)).unwrap_err();
        assert!(err.to_string().contains("frame over"));
        let err =
            read_frame::<_, Request>(&mut io::Cursor::new(b"{\"verb\"".to_vec())).unwrap_err();
        assert!(err.to_string().contains("mid-frame"));
        let err = read_frame::<_, Request>(&mut io::Cursor::new(b"{\"verb\":\"nope\"}\n".to_vec()))
            .unwrap_err();
        assert!(is_malformed(&err), "{err}");
        // Cut short or too big: not a whole frame, so not malformed.
        let cut =
            read_frame::<_, Request>(&mut io::Cursor::new(b"{\"verb\"".to_vec())).unwrap_err();
        assert!(!is_malformed(&cut));
    }
}
