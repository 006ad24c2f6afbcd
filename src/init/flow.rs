//! What compose's YAML loader accepts in flow collections and a strict
//! YAML 1.2 loader refuses: a flow sequence or mapping spread over lines
//! whose later lines (the closing `]` above all) sit at or left of the key
//! that opened it, or are indented with tabs. Sentry's self-hosted
//! `docker-compose.yml` writes
//!
//! ```yaml
//!     healthcheck:
//!       test: [
//!           "CMD-SHELL",
//!           "wget -q -O- http://seaweedfs:9340/healthz || exit 1",
//!       ]
//! ```
//!
//! which Go's yaml (compose) and PyYAML load, and saphyr refuses ("invalid
//! indentation"). Inside a flow collection the whitespace at the start of
//! a line separates tokens and means nothing else (a quoted or plain
//! scalar folded over lines trims it too), so indenting such a line
//! further changes no value: [`relax`] does only that, and keeps every
//! line where it was, so an error still names the file's own line.

use std::borrow::Cow;

/// `text` with each continuation line of a multi-line flow collection
/// indented past the line that opened it (tabs at its start made spaces).
/// Lines outside flow collections, block scalars and quoted scalars are
/// left as they are; `text` itself when nothing needs to move.
pub(super) fn relax(text: &str) -> Cow<'_, str> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut scan = Scan::default();
    let mut changed = false;
    for line in text.split_inclusive('\n') {
        let moved = scan.line(line);
        changed |= moved.is_some();
        out.push_str(moved.as_deref().unwrap_or(line));
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// Where the scan stands between lines.
#[derive(Default)]
struct Scan {
    /// Open `[`/`{` of the current flow collection.
    depth: usize,
    /// Indentation of the line that opened it.
    opener: usize,
    /// Inside a quoted scalar that runs on to the next line.
    quote: Option<char>,
    /// Inside a block scalar (`|`, `>`) opened on a line with this
    /// indentation: lines indented further (or blank) are its text.
    block: Option<usize>,
}

/// The leading spaces and tabs of `line`, and how many spaces there are
/// before the first other character.
fn indent_of(line: &str) -> (usize, usize) {
    let lead = line.len() - line.trim_start_matches([' ', '\t']).len();
    let spaces = line.len() - line.trim_start_matches(' ').len();
    (lead, spaces)
}

impl Scan {
    /// Scans one line (with its newline); `Some` with the line re-indented
    /// when it must move.
    fn line(&mut self, line: &str) -> Option<String> {
        let body = line.trim_end_matches(['\n', '\r']);
        let (lead, spaces) = indent_of(body);
        let blank = body[lead..].is_empty() || body[lead..].starts_with('#');
        if self.depth > 0 {
            let moved = (!blank && (spaces <= self.opener || lead != spaces))
                .then(|| format!("{}{}", " ".repeat(self.opener + 1), &line[lead..]));
            let mut rest = &body[lead..];
            if self.quote.is_some() {
                rest = self.in_quote(rest);
                if self.quote.is_some() {
                    return moved;
                }
            }
            self.flow(rest);
            return moved;
        }
        if self.quote.is_some() {
            // A quoted scalar in block context spread over lines.
            self.in_quote(body);
            return None;
        }
        if let Some(parent) = self.block {
            if blank || spaces > parent {
                return None;
            }
            self.block = None;
        }
        self.block_line(body, spaces);
        None
    }

    /// A line in block context: finds where its value starts and whether
    /// that opens a flow collection, a block scalar or a quoted scalar.
    fn block_line(&mut self, body: &str, indent: usize) {
        let mut rest = body.trim_start_matches(' ');
        // Sequence entries: `- - [a, b]`.
        while let Some(r) = rest.strip_prefix("- ").or(rest.strip_prefix("-\t")) {
            rest = r.trim_start();
        }
        if rest.starts_with('#') {
            return;
        }
        // `key: value`: the value starts after the first `: ` outside a
        // quoted key.
        if let Some(v) = value_after_key(rest) {
            rest = v;
        }
        // Properties before the node: `&anchor`, `!tag`.
        while rest.starts_with('&') || rest.starts_with('!') {
            rest = rest
                .split_once([' ', '\t'])
                .map_or("", |(_, r)| r.trim_start());
        }
        match rest.chars().next() {
            Some('[' | '{') => {
                self.opener = indent;
                self.flow(rest);
            }
            Some('|' | '>') => self.block = Some(indent),
            Some(q @ ('"' | '\'')) => {
                self.quote = Some(q);
                self.in_quote(&rest[1..]);
            }
            _ => {}
        }
    }

    /// Scans flow text: depth, quoted scalars, a comment ending the line.
    fn flow(&mut self, text: &str) {
        let mut rest = text;
        let mut prev = ' ';
        while let Some(c) = rest.chars().next() {
            let n = c.len_utf8();
            match c {
                '#' if prev == ' ' || prev == '\t' => return,
                '[' | '{' => self.depth += 1,
                ']' | '}' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return;
                    }
                }
                // A quote starts a scalar only where a scalar may start.
                '"' | '\'' if matches!(prev, ' ' | '\t' | '[' | '{' | ',' | ':') => {
                    self.quote = Some(c);
                    rest = self.in_quote(&rest[n..]);
                    if self.quote.is_some() {
                        return;
                    }
                    prev = c;
                    continue;
                }
                _ => {}
            }
            prev = c;
            rest = &rest[n..];
        }
    }

    /// Scans the inside of the quoted scalar `self.quote` from `text` (just
    /// after its opening quote, or a line it runs on to); returns what
    /// follows its closing quote, or `""` with the quote still open.
    fn in_quote<'t>(&mut self, text: &'t str) -> &'t str {
        let Some(q) = self.quote else {
            return text;
        };
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if q == '"' && c == '\\' {
                chars.next();
                continue;
            }
            if c == q {
                if q == '\'' && chars.peek().is_some_and(|(_, n)| *n == '\'') {
                    chars.next();
                    continue;
                }
                self.quote = None;
                return &text[i + 1..];
            }
        }
        ""
    }
}

/// In `key: value` (the key plain or quoted), the value; `None` when the
/// text is no such pair.
fn value_after_key(text: &str) -> Option<&str> {
    let mut quote: Option<char> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') if i == 0 => quote = Some(c),
            (None, '#') if i > 0 && text[..i].ends_with([' ', '\t']) => return None,
            (None, ':') => {
                let after = &text[i + 1..];
                if after.is_empty() {
                    return Some("");
                }
                if after.starts_with([' ', '\t']) {
                    return Some(after.trim_start());
                }
            }
            (None, '[' | '{') if i == 0 => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::relax;

    #[test]
    fn a_flow_sequence_closed_at_its_keys_indentation_is_moved_right() {
        let sentry = "services:\n  seaweedfs:\n    healthcheck:\n      test: [\n          \"CMD-SHELL\",\n          # a comment inside the flow sequence\n          \"wget -q -O- http://seaweedfs:9340/healthz || exit 1\",\n      ]\n      interval: 10s\n";
        let relaxed = relax(sentry);
        assert_eq!(
            relaxed.lines().nth(7),
            Some("       ]"),
            "the closing bracket moves one past `test:`"
        );
        assert_eq!(relaxed.lines().nth(8), Some("      interval: 10s"));
        assert_eq!(relaxed.lines().count(), sentry.lines().count());
    }

    #[test]
    fn what_needs_no_move_is_left_as_it_is() {
        for text in [
            "a: [1, 2]\nb: {c: d}\n",
            "a: [\n    1,\n    2]\nb: 3\n",
            "cmd: echo [not a flow\nnext: 1\n",
            "script: |\n  echo [\n  x\nnext: [1]\n",
            "s: \"a [ quoted\n  line\"\nt: 1\n",
            "- [a, b]\n- {c: d}\n",
            "k: 'it''s [' # comment [\nn: 1\n",
        ] {
            assert!(
                matches!(relax(text), std::borrow::Cow::Borrowed(_)),
                "{text:?} was changed to {:?}",
                relax(text)
            );
        }
    }

    #[test]
    fn tabs_and_nested_collections_in_a_flow_are_made_spaces() {
        let text = "x:\n  y: {\n\ta: [1,\n  2],\n  b: \"}\" }\n  z: 1\n";
        let relaxed = relax(text);
        assert_eq!(
            relaxed,
            "x:\n  y: {\n   a: [1,\n   2],\n   b: \"}\" }\n  z: 1\n"
        );
    }
}
