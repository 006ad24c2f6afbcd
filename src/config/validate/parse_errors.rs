//! A TOML or serde error as a located diagnostic: the key it is at, the
//! types in TOML's words, a suggestion, and never a quoted string value
//! (it may be a credential in the wrong place).

use super::Cx;
use crate::config::diagnostic::{Diagnostic, Severity, key_string, suggest};
use crate::config::locate::Step;
use crate::config::raw::{self};

impl Cx<'_> {
    /// Turns a serde/TOML error into a located diagnostic with a suggestion.
    /// Messages speak TOML (`a table`, `an array`), name the key, and never
    /// quote a string value: it may be a credential in the wrong place.
    pub(super) fn parse_error(&mut self, e: &toml::de::Error) {
        let msg = e.message().trim().to_owned();
        let span = e.span();
        let pos = span.as_ref().map(|s| self.loc.position(s.start));
        let key_path = span
            .as_ref()
            .and_then(|s| self.loc_key_at(s.start))
            .unwrap_or_default();
        let key = key_string(&key_path);
        let names: Vec<String> = key_path
            .iter()
            .map(|s| match s {
                Step::Key(k) => k.clone(),
                Step::Index(i) => format!("[{i}]"),
            })
            .collect();
        let (code, message, hint) = if let Some(rest) = msg.strip_prefix("unknown field `") {
            unknown_field(rest, &key_path, &names)
        } else if let Some(rest) = msg.strip_prefix("missing field `") {
            missing_field(rest)
        } else if let Some(rest) = msg.strip_prefix("invalid type: ") {
            invalid_type(rest, &key, &names)
        } else if let Some(rest) = msg.strip_prefix("invalid length ") {
            invalid_length(rest, &key, &names)
        } else if msg == "duplicate key" {
            // The span is the repeated key; quote it when it is a short name.
            let name = span
                .as_ref()
                .and_then(|s| self.loc.text().get(s.clone()))
                .filter(|k| !k.is_empty() && k.len() <= 64 && !k.contains('\n'));
            duplicate_key(name)
        } else if msg.starts_with("invalid value") {
            // serde's other value error quotes the value: drop it.
            let what = if key.is_empty() {
                "a value".to_owned()
            } else {
                format!("`{key}`")
            };
            (
                "invalid-type",
                format!("{what}: {}", redact_value(&msg)),
                type_hint(&names),
            )
        } else {
            // TOML syntax errors and anything else from the parser. The
            // parser's messages describe the syntax, never quote values.
            ("syntax", msg.replace('\n', " "), None)
        };
        let mut d = Diagnostic {
            severity: Severity::Error,
            code,
            message,
            key,
            line: None,
            column: None,
            hint,
        };
        d.line = pos.map(|p| p.line);
        d.column = pos.map(|p| p.col);
        self.diags.push(d);
    }

    /// The key path whose key or value starts at `offset`, found by walking
    /// the span-preserving parse (tables, inline tables and arrays).
    pub(super) fn loc_key_at(&self, offset: usize) -> Option<Vec<Step>> {
        use toml_edit::{Item, Value};
        let doc = self.loc.document()?;
        fn walk_value(v: &Value, offset: usize, prefix: &mut Vec<Step>) -> Option<Vec<Step>> {
            match v {
                Value::InlineTable(t) => walk_table(t, offset, prefix),
                Value::Array(a) => {
                    for (i, el) in a.iter().enumerate() {
                        prefix.push(Step::Index(i));
                        if el.span().is_some_and(|s| s.start == offset) {
                            return Some(prefix.clone());
                        }
                        if let Some(found) = walk_value(el, offset, prefix) {
                            return Some(found);
                        }
                        prefix.pop();
                    }
                    None
                }
                _ => None,
            }
        }
        fn walk_item(item: &Item, offset: usize, prefix: &mut Vec<Step>) -> Option<Vec<Step>> {
            match item {
                Item::Table(t) => walk_table(t, offset, prefix),
                Item::Value(v) => walk_value(v, offset, prefix),
                Item::ArrayOfTables(a) => {
                    for (i, t) in a.iter().enumerate() {
                        prefix.push(Step::Index(i));
                        if t.span().is_some_and(|s| s.start == offset) {
                            return Some(prefix.clone());
                        }
                        if let Some(found) = walk_table(t, offset, prefix) {
                            return Some(found);
                        }
                        prefix.pop();
                    }
                    None
                }
                Item::None => None,
            }
        }
        fn walk_table(
            t: &dyn toml_edit::TableLike,
            offset: usize,
            prefix: &mut Vec<Step>,
        ) -> Option<Vec<Step>> {
            for (k, item) in t.iter() {
                prefix.push(Step::Key(k.to_owned()));
                let key_span = t.key(k).and_then(|kk| kk.span());
                if key_span.as_ref().is_some_and(|s| s.start == offset)
                    || item.span().is_some_and(|s| s.start == offset)
                {
                    return Some(prefix.clone());
                }
                if let Some(found) = walk_item(item, offset, prefix) {
                    return Some(found);
                }
                prefix.pop();
            }
            None
        }
        walk_table(doc.as_table(), offset, &mut Vec::new())
    }
}

/// A diagnostic's code, message and hint.
type Said = (&'static str, String, Option<String>);

/// `unknown field `x`, expected …`: the key, where, and the nearest known
/// key (or all of them).
fn unknown_field(rest: &str, key_path: &[Step], names: &[String]) -> Said {
    let name = rest.split('`').next().unwrap_or_default().to_owned();
    let table = if key_path.iter().any(|s| matches!(s, Step::Index(_))) {
        "unknown"
    } else {
        table_kind(names)
    };
    let known = raw::known_keys(table);
    let hint = match suggest(&name, known.iter().copied()) {
        Some(s) => Some(format!("did you mean `{s}`?")),
        None if !known.is_empty() => Some(format!("known keys here: {}", known.join(", "))),
        None => None,
    };
    let where_ = table_label(names);
    (
        "unknown-key",
        format!("unknown key `{name}` in {where_}"),
        hint,
    )
}

/// `missing field `x``: what to add, spelled out for `[project]`.
fn missing_field(rest: &str) -> Said {
    let name = rest.split('`').next().unwrap_or_default();
    let (m, hint) = match name {
        "project" => (
            "missing table [project]".to_owned(),
            Some("add:\n    [project]\n    name = \"myapp\"".to_owned()),
        ),
        "name" => (
            "[project] has no `name`".to_owned(),
            Some(
                "add name = \"myapp\" under [project]: a lowercase DNS label used in every hostname"
                    .to_owned(),
            ),
        ),
        _ => (format!("missing required key `{name}`"), None),
    };
    ("missing-key", m, hint)
}

/// `invalid type: X, expected Y`, in TOML's words.
fn invalid_type(rest: &str, key: &str, names: &[String]) -> Said {
    let (found, expected) = rest
        .split_once(", expected ")
        .unwrap_or((rest, "another type"));
    let m = format!(
        "{} must be {}, not {}",
        if key.is_empty() {
            "this value".to_owned()
        } else {
            format!("`{key}`")
        },
        toml_type(expected),
        found_type(found)
    );
    ("invalid-type", m, type_hint(names))
}

/// `invalid length N, expected …`: an array of the wrong size.
fn invalid_length(rest: &str, key: &str, names: &[String]) -> Said {
    let (n, expected) = rest
        .split_once(", expected ")
        .unwrap_or((rest, "another length"));
    let what = if key.is_empty() {
        "this array".to_owned()
    } else {
        format!("`{key}`")
    };
    let n = n.trim();
    let els = if n == "1" { "element" } else { "elements" };
    let m = format!("{what} has {n} {els}; expected {expected}");
    ("invalid-type", m, type_hint(names))
}

/// A key or table defined twice, named when its text is a short key.
fn duplicate_key(name: Option<&str>) -> Said {
    let m = match name {
        Some(k) => format!("duplicate key `{k}`"),
        None => "duplicate key".to_owned(),
    };
    (
        "syntax",
        m,
        Some("a key or table may be defined only once; merge the two".to_owned()),
    )
}

/// serde's name for an expected type, in TOML's words.
pub(super) fn toml_type(expected: &str) -> String {
    let e = expected.trim();
    if e.starts_with("struct ") || e == "a map" || e == "map" {
        return "a table".to_owned();
    }
    match e {
        "a sequence" | "sequence" => "an array".to_owned(),
        "i64" | "i32" | "u64" | "u32" | "u16" | "u8" | "i8" | "i16" | "an integer" => {
            "an integer".to_owned()
        }
        "f64" | "f32" => "a number".to_owned(),
        "a boolean" | "bool" => "`true` or `false`".to_owned(),
        _ => e.to_owned(),
    }
}

/// serde's description of what was found, in TOML's words, without the value
/// of a string (it may be a credential).
pub(super) fn found_type(found: &str) -> String {
    let f = found.trim();
    let kind = f.split([' ', '`', '"']).next().unwrap_or(f);
    match kind {
        "string" | "char" => "a string".to_owned(),
        "sequence" => "an array".to_owned(),
        "map" | "newtype" | "enum" => "a table".to_owned(),
        "boolean" => format!("the boolean {}", f.trim_start_matches("boolean").trim()),
        "integer" => format!("the integer {}", f.trim_start_matches("integer").trim()),
        "floating" => format!(
            "the float {}",
            f.trim_start_matches("floating point").trim()
        ),
        "unit" => "an empty value".to_owned(),
        _ => redact_value(f),
    }
}

/// Drops any `"…"`-quoted text from a parser message.
pub(super) fn redact_value(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut in_quote = false;
    for c in msg.chars() {
        if c == '"' {
            if !in_quote {
                out.push_str("\"…");
            } else {
                out.push('"');
            }
            in_quote = !in_quote;
        } else if !in_quote {
            out.push(c);
        }
    }
    out
}

/// What to write instead, for the keys whose type is easy to get wrong.
pub(super) fn type_hint(path: &[String]) -> Option<String> {
    let p: Vec<&str> = path.iter().map(|s| s.as_str()).collect();
    let h = match p.as_slice() {
        ["project"] | ["services"] | ["agents"] => {
            format!("`{}` is a table: write [{}] on its own line, then its keys", p[0], p[0])
        }
        ["project", "port_range"] => "write port_range = [20000, 24999] (first and last port)".to_owned(),
        ["project", "https"] => "write https = true or https = false".to_owned(),
        ["services", _] => {
            "each service is a table: [services.NAME] with `cmd` (a process) or `adapter` (a resource)".to_owned()
        }
        ["services", _, "cmd" | "migrate" | "seed"] => {
            format!("write the command line as one string: {} = \"serve --port ${{self.port}}\"", p[2])
        }
        ["services", _, "env"] => {
            "write env as a table: env = { NAME = \"value\" } or a [services.NAME.env] section".to_owned()
        }
        ["services", _, "env", _] => "an env value is a string, number or boolean".to_owned(),
        ["services", _, k @ ("ports" | "depends_on" | "watch" | "clone_inputs"), ..]
        | ["agents", k @ ("expose" | "verify"), ..] => {
            format!("write an array of strings: {k} = [\"…\", \"…\"]")
        }
        _ => return None,
    };
    Some(h)
}

/// Which table's known keys apply to a key path.
pub(super) fn table_kind(path: &[String]) -> &'static str {
    let parent: Vec<&str> = path[..path.len().saturating_sub(1)]
        .iter()
        .map(|s| s.as_str())
        .collect();
    match parent.as_slice() {
        [] => "",
        ["project"] => "project",
        ["agents"] => "agents",
        ["services", _] => "service",
        ["services", _, "health"] => "health",
        ["services", _, "restart"] => "restart",
        _ => "unknown",
    }
}

pub(super) fn table_label(path: &[String]) -> String {
    if path.len() <= 1 {
        "the top level".to_owned()
    } else {
        format!("[{}]", path[..path.len() - 1].join("."))
    }
}
