//! Where a key lives in the source text, so every diagnostic can name a line
//! and column. The model is parsed with `toml` (serde); this module keeps a
//! second, span-preserving parse from `toml_edit` and answers look-ups by key
//! path.

use std::ops::Range;
use toml_edit::{Item, Value};

/// A 1-based line and column (column counted in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
}

/// One step of a key path: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

impl From<&str> for Step {
    fn from(s: &str) -> Self {
        Step::Key(s.to_owned())
    }
}
impl From<String> for Step {
    fn from(s: String) -> Self {
        Step::Key(s)
    }
}
impl From<usize> for Step {
    fn from(i: usize) -> Self {
        Step::Index(i)
    }
}

/// Builds a key path: `path!["services", name, "depends_on", 0]`.
#[macro_export]
#[doc(hidden)]
macro_rules! keypath {
    ($($s:expr),* $(,)?) => { [$($crate::config::locate::Step::from($s)),*] };
}

/// The source text with a span index.
pub struct Locator<'a> {
    text: &'a str,
    doc: Option<toml_edit::Document<&'a str>>,
}

impl<'a> Locator<'a> {
    /// Parses `text` for spans. A syntax error leaves a locator that only
    /// converts offsets.
    pub fn new(text: &'a str) -> Self {
        // toml_edit only ever sees text the TOML parser accepted: on some
        // malformed input (e.g. "e= =[\0{e.\nr=e.", found by fuzzing)
        // toml_edit 0.23 panics ("all items have spans") instead of
        // returning an error.
        let doc = if text.parse::<toml::Table>().is_ok() {
            toml_edit::Document::parse(text).ok()
        } else {
            None
        };
        Locator { text, doc }
    }

    /// The span-preserving parse, when the text is valid TOML.
    pub fn document(&self) -> Option<&toml_edit::Document<&'a str>> {
        self.doc.as_ref()
    }

    /// The source text.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Converts a byte offset into a line and column. Offsets past the end
    /// clamp to the end.
    pub fn position(&self, offset: usize) -> Position {
        let offset = offset.min(self.text.len());
        let mut offset = offset;
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        Position { line, col }
    }

    /// The span of the value at `path` (the key's span when `key` is true).
    /// Walks as deep as the path resolves; a path that stops early gives the
    /// deepest span found, so a diagnostic always lands near its cause.
    pub fn span(&self, path: &[Step], key: bool) -> Option<Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut item: &Item = doc.as_item();
        let mut best: Option<Range<usize>> = None;
        for (i, step) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            let next = match step {
                Step::Key(k) => {
                    let Some((kk, it)) = item.as_table_like().and_then(|t| t.get_key_value(k))
                    else {
                        return best;
                    };
                    if last && key {
                        return kk.span().or(best);
                    }
                    // Headers like `[services.api]` have no value span; fall
                    // back to the key's own span.
                    best = it.span().or_else(|| kk.span()).or(best);
                    it
                }
                Step::Index(n) => {
                    let Some(v) = item.as_array().and_then(|a| a.get(*n)) else {
                        return best;
                    };
                    best = v.span().or(best);
                    // Array elements are values; re-enter the walk through a
                    // table-like view only if the element is an inline table.
                    match v {
                        Value::InlineTable(t) => {
                            return self.span_in_inline(t, &path[i + 1..], key).or(best);
                        }
                        _ if last => return best,
                        _ => return best,
                    }
                }
            };
            item = next;
        }
        best
    }

    fn span_in_inline(
        &self,
        table: &toml_edit::InlineTable,
        path: &[Step],
        key: bool,
    ) -> Option<Range<usize>> {
        let (first, rest) = path.split_first()?;
        let Step::Key(k) = first else { return None };
        let (kk, it) = table.get_key_value(k)?;
        if rest.is_empty() {
            return if key { kk.span() } else { it.span() };
        }
        match it {
            Item::Value(Value::InlineTable(t)) => self.span_in_inline(t, rest, key).or(it.span()),
            _ => it.span(),
        }
    }

    /// The position of the value (or key) at `path`.
    pub fn locate(&self, path: &[Step], key: bool) -> Option<Position> {
        self.span(path, key).map(|s| self.position(s.start))
    }

    /// The position of `needle` inside the value at `path`, for diagnostics
    /// about one token in a string. Falls back to the value's own position.
    pub fn locate_within(&self, path: &[Step], needle: &str) -> Option<Position> {
        let span = self.span(path, false)?;
        let raw = self.text.get(span.clone())?;
        match raw.find(needle) {
            Some(i) => Some(self.position(span.start + i)),
            None => Some(self.position(span.start)),
        }
    }

    /// The position of byte `offset` of `value`, the string at `path`. Exact
    /// when the source spells the string without escapes (the usual case);
    /// otherwise the first `needle` in the source text, as
    /// [`Locator::locate_within`].
    pub fn locate_in_value(
        &self,
        path: &[Step],
        value: &str,
        offset: usize,
        needle: &str,
    ) -> Option<Position> {
        if let Some(span) = self.span(path, false)
            && let Some(raw) = self.text.get(span.clone())
        {
            for q in ["\"\"\"", "'''", "\"", "'"] {
                if raw.len() >= 2 * q.len()
                    && raw.starts_with(q)
                    && raw.ends_with(q)
                    && raw.get(q.len()..raw.len() - q.len()) == Some(value)
                    && offset <= value.len()
                {
                    return Some(self.position(span.start + q.len() + offset));
                }
            }
        }
        self.locate_within(path, needle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "[project]\nname = \"acme\"\n\n[services.api]\ncmd = \"run ${self.port}\"\ndepends_on = [\"db\", \"cache\"]\nhealth = { http = \"/\", timeout = \"5s\" }\n\n[services.db]\nadapter = \"sqlite\"\n";

    #[test]
    fn positions_are_one_based() {
        let l = Locator::new(SRC);
        assert_eq!(l.position(0), Position { line: 1, col: 1 });
        assert_eq!(l.position(10), Position { line: 2, col: 1 });
    }

    #[test]
    fn finds_keys_values_and_elements() {
        let l = Locator::new(SRC);
        assert_eq!(
            l.locate(&keypath!["services", "api", "cmd"], true),
            Some(Position { line: 5, col: 1 })
        );
        assert_eq!(
            l.locate(&keypath!["services", "api", "cmd"], false),
            Some(Position { line: 5, col: 7 })
        );
        assert_eq!(
            l.locate(&keypath!["services", "api", "depends_on", 1usize], false),
            Some(Position { line: 6, col: 21 })
        );
        assert_eq!(
            l.locate(&keypath!["services", "api", "health", "timeout"], true),
            Some(Position { line: 7, col: 24 })
        );
        assert_eq!(
            l.locate_within(&keypath!["services", "api", "cmd"], "${self.port}"),
            Some(Position { line: 5, col: 12 })
        );
    }

    #[test]
    fn locates_each_repeat_of_a_token() {
        let src = "[s]\na = \"${x.url} ${x.url}\"\nb = \"\\\"q\\\" ${x.url}\"\n";
        let l = Locator::new(src);
        let path = keypath!["s", "a"];
        let v = "${x.url} ${x.url}";
        assert_eq!(
            l.locate_in_value(&path, v, 9, "${x.url}"),
            Some(Position { line: 2, col: 15 })
        );
        // With escapes the source differs from the value: first match.
        let path = keypath!["s", "b"];
        assert_eq!(
            l.locate_in_value(&path, "\"q\" ${x.url}", 4, "${x.url}"),
            Some(Position { line: 3, col: 12 })
        );
    }

    #[test]
    fn malformed_text_gives_no_spans_and_no_panic() {
        let l = Locator::new("\ne= =[\0{e.\nr=e.");
        assert!(l.document().is_none());
        assert_eq!(l.locate(&keypath!["e"], false), None);
    }

    #[test]
    fn missing_path_falls_back_to_deepest_found() {
        let l = Locator::new(SRC);
        let p = l
            .locate(&keypath!["services", "api", "nope"], false)
            .unwrap();
        assert_eq!(p.line, 4);
    }
}
