//! The server's stdio: every line bounded ([`MAX_MCP_MESSAGE`]) and checked
//! before rmcp sees it.
//!
//! [`MAX_MCP_MESSAGE`]: crate::protocol::limits::MAX_MCP_MESSAGE

/// How much of an oversized message's end is kept, to find its `id`.
const TAIL: usize = 4096;

/// Reads one line of at most `max` bytes into `buf` (without its `\n`, or
/// `\r\n`), consuming the rest of a longer line without keeping it but for
/// its last [`TAIL`] bytes in `tail`. The line's full length, or `None` at
/// the end of input.
async fn read_line_bounded<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
    tail: &mut Vec<u8>,
) -> std::io::Result<Option<usize>> {
    use tokio::io::AsyncBufReadExt;
    buf.clear();
    tail.clear();
    let mut total = 0;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok((total > 0).then_some(total));
        }
        let (line, used, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (&avail[..i], i + 1, true),
            None => (avail, avail.len(), false),
        };
        let room = (max + 1).saturating_sub(buf.len());
        buf.extend_from_slice(&line[..line.len().min(room)]);
        tail.extend_from_slice(&line[line.len().saturating_sub(TAIL)..]);
        if tail.len() > TAIL {
            tail.drain(..tail.len() - TAIL);
        }
        total += line.len();
        r.consume(used);
        if done {
            // A CRLF line is as long as its LF twin.
            if tail.last() == Some(&b'\r') {
                total -= 1;
                buf.truncate(total);
            }
            return Ok(Some(total));
        }
    }
}

/// The `id` of a JSON-RPC message from its first bytes or else its last,
/// for the error that answers a message too large to parse: most clients
/// write `id` near the start; one that writes it after the parameters has
/// it near the end.
fn message_id(head: &[u8], tail: &[u8]) -> serde_json::Value {
    let head = String::from_utf8_lossy(&head[..head.len().min(TAIL)]);
    match head.find("\"id\"").map(|at| id_at(&head[at + 4..])) {
        Some(id) if !id.is_null() => id,
        _ => {
            let tail = String::from_utf8_lossy(tail);
            tail.rfind("\"id\"")
                .map(|at| id_at(&tail[at + 4..]))
                .unwrap_or(serde_json::Value::Null)
        }
    }
}

/// The JSON-RPC id (a number or a string without escapes) after `"id"`.
fn id_at(after: &str) -> serde_json::Value {
    let rest = after.trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return serde_json::Value::Null;
    };
    let rest = rest.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        return s
            .find('"')
            .map(|end| serde_json::Value::String(s[..end].to_owned()))
            .unwrap_or(serde_json::Value::Null);
    }
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits
        .parse::<i64>()
        .map(serde_json::Value::from)
        .unwrap_or(serde_json::Value::Null)
}

/// The server's stdio, with every line checked before rmcp sees it: a line
/// that is not JSON gets the JSON-RPC parse error (`-32700`, `id: null`) the
/// spec asks for — rmcp would skip it silently, leaving a client waiting —
/// and the server keeps serving. Whole lines go out to stdout one at a time,
/// so an error never splits one of rmcp's messages.
pub(super) fn checked_stdio() -> (
    (tokio::io::DuplexStream, tokio::io::DuplexStream),
    tokio::task::JoinHandle<()>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    // Room for one whole message, so rmcp never waits on half of one.
    const BUF: usize = crate::protocol::limits::MAX_MCP_MESSAGE + 1;
    let (to_rmcp, mut feed) = tokio::io::duplex(BUF);
    let (from_rmcp, rmcp_out) = tokio::io::duplex(BUF);
    let (errors, mut error_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        use crate::protocol::limits::MAX_MCP_MESSAGE;
        let mut input = tokio::io::BufReader::new(tokio::io::stdin());
        let (mut buf, mut tail) = (Vec::new(), Vec::new());
        while let Ok(Some(len)) =
            read_line_bounded(&mut input, MAX_MCP_MESSAGE, &mut buf, &mut tail).await
        {
            if len > MAX_MCP_MESSAGE {
                // Refused whole, before anything parses it or the daemon
                // sees it; the server keeps serving.
                let reply = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": message_id(&buf, &tail),
                    "error": {"code": -32600, "message": format!(
                        "message of {len} bytes refused: binky mcp reads at most {MAX_MCP_MESSAGE} bytes per message; nothing was done"
                    )},
                });
                let _ = errors.send(reply.to_string());
                continue;
            }
            let line = String::from_utf8_lossy(&buf);
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<serde_json::Value>(&line) {
                Ok(_) => {
                    if feed
                        .write_all(format!("{line}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                Err(e) => {
                    let reply = serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": null,
                        "error": {"code": -32700, "message": format!("Parse error: {e}")},
                    });
                    let _ = errors.send(reply.to_string());
                }
            }
        }
        // End of input: rmcp sees it and ends the session.
    });
    let written = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        let mut replies = tokio::io::BufReader::new(rmcp_out).lines();
        loop {
            let line = tokio::select! {
                l = replies.next_line() => match l {
                    Ok(Some(l)) => l,
                    _ => break,
                },
                Some(e) = error_rx.recv() => e,
            };
            if out.write_all(format!("{line}\n").as_bytes()).await.is_err()
                || out.flush().await.is_err()
            {
                break;
            }
        }
    });
    ((to_rmcp, from_rmcp), written)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<(usize, Vec<u8>, serde_json::Value)> {
        let mut r = tokio::io::BufReader::with_capacity(7, input);
        let (mut buf, mut tail, mut out) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(n) = read_line_bounded(&mut r, max, &mut buf, &mut tail)
            .await
            .unwrap()
        {
            out.push((n, buf.clone(), message_id(&buf, &tail)));
        }
        out
    }

    #[tokio::test]
    async fn a_line_is_measured_whole_kept_up_to_the_bound_and_its_id_found_at_either_end() {
        let pad = "p".repeat(40);
        let first = format!("{{\"id\":7,\"params\":\"{pad}\"}}");
        let last = format!("{{\"params\":\"{pad}\",\"id\":\"x-9\"}}");
        let input = format!("{first}\r\n{last}\nshort\n");
        let got = lines(input.as_bytes(), 20).await;
        // Past the bound: the full length (CR not counted), the first 21
        // bytes kept, the id from the start or from the end.
        assert_eq!(got[0].0, first.len());
        assert_eq!(got[0].1.len(), 21);
        assert_eq!(got[0].2, serde_json::json!(7));
        assert_eq!(got[1].0, last.len());
        assert_eq!(got[1].2, serde_json::json!("x-9"));
        // Within it: kept whole.
        assert_eq!((got[2].0, got[2].1.as_slice()), (5, &b"short"[..]));
        // At the bound exactly, CRLF or not: kept whole, not past it.
        let at = "a".repeat(20);
        let got = lines(format!("{at}\r\n{at}").as_bytes(), 20).await;
        assert_eq!(got[0].0, 20);
        assert_eq!(got[0].1, at.as_bytes());
        assert_eq!(got[1].0, 20, "a last line without its newline");
    }
}
