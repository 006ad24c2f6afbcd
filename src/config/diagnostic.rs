//! Located, actionable findings about a `binky.toml`.

use super::locate::{Position, Step};
use serde::Serialize;
use std::fmt::Write as _;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file is invalid; `up` refuses it.
    Error,
    /// Valid, but very likely a mistake (a footgun).
    Warning,
}

/// One finding. Messages never quote a credential's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable kebab-case identifier, e.g. `unknown-dependency`.
    pub code: &'static str,
    /// What is wrong, naming the key.
    pub message: String,
    /// Dotted key path, e.g. `services.api.depends_on[1]`.
    pub key: String,
    /// 1-based line, when the key could be located.
    pub line: Option<usize>,
    /// 1-based column (characters), when the key could be located.
    pub column: Option<usize>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Diagnostic {
    /// Renders `file:line:col: severity[code]: message` and an indented hint.
    pub fn render(&self, file: &str) -> String {
        let mut out = String::new();
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(out, "{file}:{l}:{c}: ").unwrap(),
            _ => write!(out, "{file}: ").unwrap(),
        }
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(out, "{sev}[{}]: {}", self.code, self.message).unwrap();
        if let Some(h) = &self.hint {
            write!(out, "\n  hint: {h}").unwrap();
        }
        out
    }
}

/// Formats a key path as `a.b[2].c`.
pub fn key_string(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => write!(s, "[{i}]").unwrap(),
        }
    }
    s
}

/// Sets position fields from an optional [`Position`].
pub(crate) fn with_position(mut d: Diagnostic, pos: Option<Position>) -> Diagnostic {
    d.line = pos.map(|p| p.line);
    d.column = pos.map(|p| p.col);
    d
}

/// Whether `short` (3 letters or more) could abbreviate `long`: same first
/// letter, and its letters appear in `long` in order (`cmd` in `command`).
fn abbreviates(short: &str, long: &str) -> bool {
    if short.len() < 3 || short.len() >= long.len() || short.chars().next() != long.chars().next() {
        return false;
    }
    let mut rest = long.chars();
    short.chars().all(|c| rest.any(|l| l == c))
}

/// The closest candidate to `word`, if it is close enough to be a likely typo.
///
/// Close means a Jaro-Winkler similarity of at least 0.8, or few enough
/// edits (transpositions count as one, so `ulr` suggests `url`): one edit for
/// words up to five characters, two beyond; or `word` spells out an
/// abbreviated candidate (`comand` suggests `cmd`).
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let max_edits = if word.chars().count() <= 5 { 1 } else { 2 };
    candidates
        .into_iter()
        .map(|c| {
            let jw = strsim::jaro_winkler(word, c);
            let edits = strsim::osa_distance(word, c);
            // Rank edit-distance matches above similarity-only ones; an
            // abbreviated key spelled out (`comand`, `command` for `cmd`)
            // counts as close as one edit of a long word.
            let score = if edits <= max_edits {
                2.0 - edits as f64 * 0.1 + jw * 0.01
            } else if abbreviates(c, word) {
                1.5 + jw * 0.01
            } else {
                jw
            };
            (score, c)
        })
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}
