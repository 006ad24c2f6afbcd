//! `env_file` parsing: dotenv lines, taken literally.
//!
//! The format is the common dotenv one: `KEY=value` lines, an optional
//! `export ` prefix, `#` comments, blank lines, and values that may be bare,
//! `'single-quoted'` or `"double-quoted"` (quoted values may span lines).
//!
//! Values are **never expanded**: a `$` is a `$`. `A=pa$$w` gives `pa$$w`,
//! `B='$HOME'` gives `$HOME` and `D="${HOME}"` gives `${HOME}`. A dotenv
//! parser that expands does so from the environment of the process that
//! parses — here the daemon, not the shell the user runs `binky` in — and it
//! silently corrupts passwords holding a `$`. To use another variable, write
//! `${env.NAME}` in binky.toml's `env` tables, which resolve from the
//! caller's shell.
//!
//! Errors name the line and, where there is one, the key — never a value,
//! which is often a credential.

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}{} {reason}", key.as_ref().map(|k| format!(" (key {k})")).unwrap_or_default())]
pub struct DotenvError {
    /// 1-based line number where the entry starts.
    pub line: usize,
    /// The entry's key, when the line has a valid one.
    pub key: Option<String>,
    /// What is wrong, without quoting the value.
    pub reason: String,
}

fn is_key(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.')
}

/// Parses dotenv `text` into `(key, value)` pairs in file order (a later
/// duplicate wins where the pairs are applied).
///
/// # Errors
/// A line that is not `KEY=value`, an invalid key, an unclosed quote, or
/// text after a closing quote.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, DotenvError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = i;
        let raw = lines[i].trim_start_matches('\u{feff}');
        i += 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let err = |key: Option<&str>, reason: &str| DotenvError {
            line: start + 1,
            key: key.map(str::to_owned),
            reason: reason.to_owned(),
        };
        let Some((key, rest)) = line.split_once('=') else {
            // Name the would-be key only when the line starts like one and
            // goes on (`DB_PASSWORD S3cret`): a lone word may be the value
            // itself, pasted without its key.
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            return Err(if is_key(first) && words.next().is_some() {
                err(Some(first), "has no `=`; write KEY=value")
            } else {
                err(None, "is not KEY=value")
            });
        };
        let key = key.trim();
        if !is_key(key) {
            return Err(err(
                None,
                "has an invalid key; keys are letters, digits, `_` and `.`, not starting with a digit",
            ));
        }
        let rest = rest.trim_start();
        let value = match rest.chars().next() {
            Some(q @ ('\'' | '"')) => {
                quoted(&rest[1..], q, &lines, &mut i).map_err(|why| err(Some(key), &why))?
            }
            _ => bare(rest),
        };
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

/// The value of a quote `q` opened, `rest` following it: it may run over
/// the next `lines` (from `*i`, which moves past them). Double quotes
/// unescape.
///
/// # Errors
/// The reason: an unclosed quote, or text after the closing one.
fn quoted(rest: &str, q: char, lines: &[&str], i: &mut usize) -> Result<String, String> {
    let mut body = rest.to_owned();
    let close = loop {
        if let Some(pos) = closing_quote(&body, q) {
            break pos;
        }
        if *i >= lines.len() {
            return Err(format!("has an unclosed {q} quote"));
        }
        body.push('\n');
        body.push_str(lines[*i]);
        *i += 1;
    };
    let after = body[close + 1..].trim();
    if !(after.is_empty() || after.starts_with('#')) {
        return Err("has text after the closing quote; quote the whole value".to_owned());
    }
    let inner = &body[..close];
    Ok(if q == '"' {
        unescape(inner)
    } else {
        inner.to_owned()
    })
}

/// A bare value: up to a ` #` comment, trimmed.
fn bare(rest: &str) -> String {
    let cut = rest
        .char_indices()
        .find(|(j, c)| *c == '#' && (*j == 0 || rest[..*j].ends_with([' ', '\t'])))
        .map_or(rest.len(), |(j, _)| j);
    rest[..cut].trim_end().to_owned()
}

/// Byte index of the quote closing a value that opened with `q`; in double
/// quotes a backslash escapes the next character.
fn closing_quote(body: &str, q: char) -> Option<usize> {
    let mut escaped = false;
    for (j, c) in body.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' && q == '"' {
            escaped = true;
        } else if c == q {
            return Some(j);
        }
    }
    None
}

/// Double-quoted escapes: `\n`, `\r`, `\t`, `\"`, `\\`; any other
/// backslash stays as written.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap()
    }

    #[test]
    fn dollars_stay_literal_in_every_form() {
        let got = kv("A=pa$$w\nB='$HOME'\nD=\"${HOME}\"\nE=$SOME_NAME\n");
        assert_eq!(
            got,
            vec![
                ("A".into(), "pa$$w".into()),
                ("B".into(), "$HOME".into()),
                ("D".into(), "${HOME}".into()),
                ("E".into(), "$SOME_NAME".into()),
            ]
        );
    }

    #[test]
    fn comments_export_quotes_and_multiline_values() {
        let got = kv(concat!(
            "# a comment\n",
            "\n",
            "export TOKEN = abc # trailing comment\n",
            "URL=http://h/#frag\n",
            "Q=\"say \\\"hi\\\"\\n\"\n",
        ));
        assert_eq!(
            got,
            vec![
                ("TOKEN".into(), "abc".into()),
                ("URL".into(), "http://h/#frag".into()),
                ("Q".into(), "say \"hi\"\n".into()),
            ]
        );
        let got = kv("CERT=\"line one\nline two\"\nNEXT=1\n");
        assert_eq!(got[0].1, "line one\nline two");
        assert_eq!(got[1], ("NEXT".into(), "1".into()));
        assert_eq!(kv("EMPTY=\nE2=''\n")[0].1, "");
    }

    #[test]
    fn errors_name_line_and_key_never_the_value() {
        let e = parse("OK=1\nDB_PASSWORD S3cretP4ss\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(e.key.as_deref(), Some("DB_PASSWORD"));
        assert!(!e.to_string().contains("S3cret"), "{e}");
        let e = parse("S3cretP4ss\n").unwrap_err();
        assert_eq!(e.key, None);
        assert!(!e.to_string().contains("S3cret"), "{e}");
        let e = parse("1BAD=S3cret\n").unwrap_err();
        assert!(!e.to_string().contains("S3cret"), "{e}");
        let e = parse("PW=\"S3cret\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (1, Some("PW")));
        assert!(!e.to_string().contains("S3cret"), "{e}");
        let e = parse("PW='S3cret' more\n").unwrap_err();
        assert!(!e.to_string().contains("S3cret"), "{e}");
    }
}
