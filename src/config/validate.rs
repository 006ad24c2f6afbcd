//! `binky check`: parse, validate and lint a `binky.toml`.
//!
//! Validation turns the raw serde shape into the [`Config`] model and collects
//! every finding it can in one pass, each located by key path and line. Errors
//! make the file unusable; warnings flag footguns in a valid file.

use super::diagnostic::{Diagnostic, Severity, key_string, suggest, with_position};
use super::locate::{Locator, Step};
use super::model::*;
use super::raw::{self, RawConfig, RawHealth, RawRestart, RawService};
use super::render::{Field, Token, classify, occurrences};
use crate::keypath;
use indexmap::IndexMap;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

/// The outcome of checking one file.
#[derive(Debug)]
pub struct Report {
    /// The model, when there were no errors.
    pub config: Option<Config>,
    /// Every finding, errors first, then by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    /// Number of errors.
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }
    /// Number of warnings.
    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }
    fn count(&self, s: Severity) -> usize {
        self.diagnostics.iter().filter(|d| d.severity == s).count()
    }
}

/// Checks `text`, the contents of the file at `path`. Never panics on any
/// input (a fuzz target holds it to that). Pure: it does not look at the
/// environment (see [`check_str_in_env`]).
pub fn check_str(text: &str, path: &Path) -> Report {
    check_str_in_env(text, path, &|_| true)
}

/// [`check_str`], also warning about each `${env.NAME}` for which `is_set`
/// says no: `binky check` asks the shell it runs in and the `env_file`s,
/// which is where `up` from that shell would look.
pub fn check_str_in_env(text: &str, path: &Path, is_set: &dyn Fn(&str) -> bool) -> Report {
    let loc = Locator::new(text);
    let mut cx = Cx {
        loc: &loc,
        diags: Vec::new(),
        env_is_set: is_set,
    };
    // Every unknown key at once (serde stops at the first), each with its
    // nearest known key.
    if cx.unknown_keys() {
        return cx.finish(None);
    }
    let raw: RawConfig = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            cx.parse_error(&e);
            return cx.finish(None);
        }
    };
    let config = build(&mut cx, raw, path);
    cx.finish(config)
}

/// A piece `value[start..end]` of a string value, e.g. one token.
#[derive(Clone, Copy)]
struct At<'s> {
    value: &'s str,
    start: usize,
    end: usize,
}

impl<'s> At<'s> {
    fn text(&self) -> &'s str {
        self.value.get(self.start..self.end).unwrap_or_default()
    }
}

struct Cx<'a> {
    loc: &'a Locator<'a>,
    diags: Vec<Diagnostic>,
    /// Whether a variable `${env.NAME}` names has a value where `up` would
    /// run.
    env_is_set: &'a dyn Fn(&str) -> bool,
}

impl Cx<'_> {
    /// Reports every key no table accepts; true when it found any. Tables
    /// whose keys are the user's (`env`, `options`) are not walked.
    fn unknown_keys(&mut self) -> bool {
        let Some(doc) = self.loc.document() else {
            return false;
        };
        let mut found: Vec<(Vec<String>, &'static str)> = Vec::new();
        fn walk(
            t: &dyn toml_edit::TableLike,
            kind: &'static str,
            path: &mut Vec<String>,
            found: &mut Vec<(Vec<String>, &'static str)>,
        ) {
            let known = raw::known_keys(kind);
            for (k, item) in t.iter() {
                path.push(k.to_owned());
                if !known.contains(&k) {
                    found.push((path.clone(), kind));
                } else {
                    let child = match (kind, k) {
                        ("", "project") => Some("project"),
                        ("", "agents") => Some("agents"),
                        ("service", "health") => Some("health"),
                        ("service", "restart") => Some("restart"),
                        _ => None,
                    };
                    if let (Some(ck), Some(ct)) = (child, item.as_table_like()) {
                        walk(ct, ck, path, found);
                    } else if kind.is_empty()
                        && k == "services"
                        && let Some(services) = item.as_table_like()
                    {
                        for (name, svc) in services.iter() {
                            if let Some(st) = svc.as_table_like() {
                                path.push(name.to_owned());
                                walk(st, "service", path, found);
                                path.pop();
                            }
                        }
                    }
                }
                path.pop();
            }
        }
        walk(doc.as_table(), "", &mut Vec::new(), &mut found);
        for (path, kind) in &found {
            let name = path.last().cloned().unwrap_or_default();
            let known = raw::known_keys(kind);
            let hint = match suggest(&name, known.iter().copied()) {
                Some(s) => Some(format!("did you mean `{s}`?")),
                None => Some(format!("known keys here: {}", known.join(", "))),
            };
            let steps: Vec<Step> = path.iter().map(|p| Step::Key(p.clone())).collect();
            let pos = self.loc.locate(&steps, true);
            let d = Diagnostic {
                severity: Severity::Error,
                code: "unknown-key",
                message: format!("unknown key `{name}` in {}", table_label(path)),
                key: path.join("."),
                line: None,
                column: None,
                hint,
            };
            self.diags.push(with_position(d, pos));
        }
        !found.is_empty()
    }

    fn push(
        &mut self,
        severity: Severity,
        code: &'static str,
        path: &[Step],
        message: String,
        hint: Option<String>,
    ) {
        self.push_at(severity, code, path, None, message, hint);
    }

    /// Like `push`, but locates a piece of the value (a token in a string).
    fn push_at(
        &mut self,
        severity: Severity,
        code: &'static str,
        path: &[Step],
        at: Option<At<'_>>,
        message: String,
        hint: Option<String>,
    ) {
        let pos = match at {
            Some(a) => self.loc.locate_in_value(path, a.value, a.start, a.text()),
            None => self.loc.locate(path, false),
        };
        let d = Diagnostic {
            severity,
            code,
            message,
            key: key_string(path),
            line: None,
            column: None,
            hint,
        };
        self.diags.push(with_position(d, pos));
    }

    fn error(&mut self, code: &'static str, path: &[Step], msg: String, hint: Option<String>) {
        self.push(Severity::Error, code, path, msg, hint);
    }

    fn warn(&mut self, code: &'static str, path: &[Step], msg: String, hint: Option<String>) {
        self.push(Severity::Warning, code, path, msg, hint);
    }

    fn finish(mut self, config: Option<Config>) -> Report {
        self.diags.sort_by(|a, b| {
            (a.severity, a.line, a.column, a.code).cmp(&(b.severity, b.line, b.column, b.code))
        });
        self.diags.dedup();
        let has_errors = self.diags.iter().any(|d| d.severity == Severity::Error);
        Report {
            config: if has_errors { None } else { config },
            diagnostics: self.diags,
        }
    }

    /// Turns a serde/TOML error into a located diagnostic with a suggestion.
    /// Messages speak TOML (`a table`, `an array`), name the key, and never
    /// quote a string value: it may be a credential in the wrong place.
    fn parse_error(&mut self, e: &toml::de::Error) {
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
            let name = rest.split('`').next().unwrap_or_default().to_owned();
            let table = if key_path.iter().any(|s| matches!(s, Step::Index(_))) {
                "unknown"
            } else {
                table_kind(&names)
            };
            let known = raw::known_keys(table);
            let hint = match suggest(&name, known.iter().copied()) {
                Some(s) => Some(format!("did you mean `{s}`?")),
                None if !known.is_empty() => Some(format!("known keys here: {}", known.join(", "))),
                None => None,
            };
            let where_ = table_label(&names);
            (
                "unknown-key",
                format!("unknown key `{name}` in {where_}"),
                hint,
            )
        } else if let Some(rest) = msg.strip_prefix("missing field `") {
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
        } else if let Some(rest) = msg.strip_prefix("invalid type: ") {
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
            ("invalid-type", m, type_hint(&names))
        } else if let Some(rest) = msg.strip_prefix("invalid length ") {
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
            ("invalid-type", m, type_hint(&names))
        } else if msg == "duplicate key" {
            // The span is the repeated key; quote it when it is a short name.
            let name = span
                .as_ref()
                .and_then(|s| self.loc.text().get(s.clone()))
                .filter(|k| !k.is_empty() && k.len() <= 64 && !k.contains('\n'));
            let m = match name {
                Some(k) => format!("duplicate key `{k}`"),
                None => "duplicate key".to_owned(),
            };
            (
                "syntax",
                m,
                Some("a key or table may be defined only once; merge the two".to_owned()),
            )
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
    fn loc_key_at(&self, offset: usize) -> Option<Vec<Step>> {
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

/// serde's name for an expected type, in TOML's words.
fn toml_type(expected: &str) -> String {
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
fn found_type(found: &str) -> String {
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
fn redact_value(msg: &str) -> String {
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
fn type_hint(path: &[String]) -> Option<String> {
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
fn table_kind(path: &[String]) -> &'static str {
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

fn table_label(path: &[String]) -> String {
    if path.len() <= 1 {
        "the top level".to_owned()
    } else {
        format!("[{}]", path[..path.len() - 1].join("."))
    }
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_service_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
}

fn is_env_key(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Names a token could never mean a service by, because they are token heads.
const RESERVED_NAMES: &[&str] = &["self", "env", "worktree", "project"];

fn parse_duration(cx: &mut Cx<'_>, path: &[Step], d: &raw::DurationText) -> Option<Duration> {
    match humantime::parse_duration(d.0.trim()) {
        Ok(v) => Some(v),
        Err(e) => {
            cx.error(
                "invalid-duration",
                path,
                format!("`{}` is not a duration ({e})", d.0),
                Some(r#"write a number with a unit: "500ms", "30s", "2m""#.to_owned()),
            );
            None
        }
    }
}

/// Globs at `path`; with `exclusions`, a leading `!` excludes (as `watch`
/// reads it: see `supervisor::WatchSet`), else it is refused — globset
/// would take it literally and match nothing.
fn check_globs(cx: &mut Cx<'_>, path: &[Step], globs: &[String], exclusions: bool) {
    for (i, g) in globs.iter().enumerate() {
        let mut p = path.to_vec();
        p.push(Step::Index(i));
        let body = match g.strip_prefix('!') {
            Some(rest) if exclusions => rest,
            Some(_) => {
                cx.error(
                    "invalid-glob",
                    &p,
                    format!("`{g}`: a leading `!` (exclusion) works in `watch` only; here it would match nothing"),
                    Some("list only the files to include".to_owned()),
                );
                continue;
            }
            None => g.as_str(),
        };
        if let Err(e) = globset::Glob::new(body) {
            cx.error(
                "invalid-glob",
                &p,
                format!("`{g}` is not a valid glob: {}", e.kind()),
                None,
            );
        }
    }
}

fn build(cx: &mut Cx<'_>, raw: RawConfig, path: &Path) -> Option<Config> {
    let (project, range) = build_project(cx, &raw.project);
    let mut services = IndexMap::new();
    for (name, rs) in &raw.services {
        if let Some(s) = build_service(cx, name, rs) {
            services.insert(name.clone(), s);
        }
    }
    let agents = build_agents(cx, raw.agents.as_ref(), &raw.services);
    let env = build_env(cx, &keypath!["env"], raw.env.as_ref());
    // Binky sets these for each process itself; one value for every process
    // would be wrong for all of them (and `binky env` would print both).
    for k in env.keys() {
        if k == "PORT" || k.starts_with("BINKY_") {
            cx.error(
                "reserved-name",
                &keypath!["env", k.as_str()],
                format!("`{k}` is set by Binky for each process; [env] cannot set it"),
                Some(
                    "use another name, or set it in one service's `env` (which wins there)"
                        .to_owned(),
                ),
            );
        }
    }
    // The cross-service checks run even when the project or some services
    // had errors (recorded already), so one pass reports as much as it can.
    let declared: BTreeSet<&str> = raw.services.keys().map(|k| k.as_str()).collect();
    check_graph(cx, &services, &declared);
    check_urls(cx, &services);
    check_tokens(cx, range, &services, &declared);
    check_unowned_tokens(cx, &agents, &env, &services, &declared);
    check_credentials(cx, &raw);
    let project = project?;
    let root = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."))
        .to_path_buf();
    Some(Config {
        path: path.to_path_buf(),
        root,
        project,
        services,
        agents,
        env,
    })
}

/// An `env` table (a service's, or the project's `[env]`) at `at`: keys
/// must be variable names; values are kept as text (numbers and booleans
/// too).
fn build_env(
    cx: &mut Cx<'_>,
    at: &[Step],
    table: Option<&IndexMap<String, raw::EnvValue>>,
) -> IndexMap<String, String> {
    let mut env = IndexMap::new();
    for (k, v) in table.into_iter().flatten() {
        if !is_env_key(k) {
            // About the name, so located at the key rather than its value.
            let mut path = at.to_vec();
            path.push(Step::from(k.as_str()));
            let d = Diagnostic {
                severity: Severity::Error,
                code: "invalid-name",
                message: format!("`{k}` is not a valid environment variable name"),
                key: key_string(&path),
                line: None,
                column: None,
                hint: Some("use letters, digits and `_`, not starting with a digit".to_owned()),
            };
            let pos = cx.loc.locate(&path, true);
            cx.diags.push(with_position(d, pos));
        }
        env.insert(k.clone(), v.0.clone());
    }
    env
}

/// The project, or `None` after errors; and the port range to lint literal
/// ports against (`None` when `port_range` itself is invalid).
fn build_project(cx: &mut Cx<'_>, p: &raw::RawProject) -> (Option<Project>, Option<PortRange>) {
    let mut ok = true;
    if !is_dns_label(&p.name) {
        ok = false;
        let what = if p.name.is_empty() {
            "project name is empty; it".to_owned()
        } else {
            format!("project name `{}`", p.name)
        };
        cx.error(
            "invalid-name",
            &keypath!["project", "name"],
            format!(
                "{what} must be a lowercase DNS label (a-z, 0-9, `-`; at most 63; not starting or ending with `-`)"
            ),
            Some(format!("try `{}`", crate::slug::dns_label_hint(&p.name))),
        );
    }
    let domain = match &p.domain {
        Some(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d.is_empty() || d.len() > 253 || !d.split('.').all(is_dns_label) {
                ok = false;
                cx.error(
                    "invalid-name",
                    &keypath!["project", "domain"],
                    format!("domain `{d}` is not a valid hostname"),
                    Some(format!("the default is `{}.localhost`", p.name)),
                );
            }
            d
        }
        None => format!("{}.localhost", p.name),
    };
    let mut range_ok = true;
    let port_range = match p.port_range {
        None => DEFAULT_PORT_RANGE,
        Some([lo, hi]) => {
            if !(1..=65535).contains(&lo) || !(1..=65535).contains(&hi) || lo > hi {
                ok = false;
                range_ok = false;
                cx.error(
                    "invalid-port-range",
                    &keypath!["project", "port_range"],
                    format!("port_range [{lo}, {hi}] must be two ports 1–65535 with lo ≤ hi"),
                    Some(format!(
                        "the default is [{}, {}]",
                        DEFAULT_PORT_RANGE.lo, DEFAULT_PORT_RANGE.hi
                    )),
                );
                DEFAULT_PORT_RANGE
            } else {
                if lo < 1024 {
                    cx.warn(
                        "privileged-ports",
                        &keypath!["project", "port_range"],
                        format!(
                            "port_range starts at {lo}: ports below 1024 need privileges to bind"
                        ),
                        Some("start the range at 1024 or above".to_owned()),
                    );
                }
                PortRange {
                    lo: lo as u16,
                    hi: hi as u16,
                }
            }
        }
    };
    let project = ok.then(|| Project {
        name: p.name.clone(),
        domain,
        https: p.https.unwrap_or(false),
        port_range,
        worktree_root: p.worktree_root.clone(),
        env_file: p.env_file.clone(),
    });
    (project, range_ok.then_some(port_range))
}

fn build_service(cx: &mut Cx<'_>, name: &str, rs: &RawService) -> Option<Service> {
    let base = keypath!["services", name];
    if !is_service_name(name) || RESERVED_NAMES.contains(&name) {
        let (why, hint) = if RESERVED_NAMES.contains(&name) {
            (
                format!("service name `{name}` is reserved (it is a token prefix)"),
                "`self`, `env`, `worktree` and `project` start tokens such as ${env.HOME}; rename the service".to_owned(),
            )
        } else {
            let mut try_ = crate::slug::dns_label_hint(name);
            if !try_.starts_with(|c: char| c.is_ascii_lowercase()) {
                try_.insert_str(0, "svc-");
            }
            (
                format!(
                    "service name `{name}` must start with a lowercase letter and use only a-z, 0-9, `-`, `_` (at most 63)"
                ),
                format!("try [services.{try_}]"),
            )
        };
        cx.error("invalid-name", &base, why, Some(hint));
    }
    let present = rs.present_keys();
    match (&rs.cmd, &rs.adapter) {
        (Some(_), Some(_)) => {
            cx.error(
                "cmd-and-adapter",
                &keypath!["services", name, "adapter"],
                format!("service `{name}` has both `cmd` and `adapter`: a service is a process or a resource, never both"),
                Some("split it into two services, e.g. a resource `db` and a process that depends on it".to_owned()),
            );
            None
        }
        (None, None) => {
            cx.error(
                "cmd-or-adapter",
                &base,
                format!("service `{name}` has neither `cmd` nor `adapter`"),
                Some("add `cmd = \"…\"` for a process, or `adapter = \"postgres\"` (etc.) for a resource".to_owned()),
            );
            None
        }
        (Some(cmd), None) => {
            for k in present.iter().filter(|k| raw::RESOURCE_KEYS.contains(k)) {
                cx.error(
                    "resource-key-on-process",
                    &keypath!["services", name, *k],
                    format!("`{k}` is only valid on a resource (a service with `adapter`), and `{name}` is a process"),
                    Some("move it to the resource service it belongs to".to_owned()),
                );
            }
            // Best effort even when invalid: cross-service checks still see
            // this service, and `finish` withholds the model on any error.
            Some(Service {
                name: name.to_owned(),
                kind: ServiceKind::Process(build_process(cx, name, cmd, rs)),
            })
        }
        (None, Some(adapter)) => {
            for k in present.iter().filter(|k| raw::PROCESS_KEYS.contains(k)) {
                cx.error(
                    "process-key-on-resource",
                    &keypath!["services", name, *k],
                    format!("`{k}` is only valid on a process (a service with `cmd`), and `{name}` is a resource"),
                    Some("resources are provisioned, not run; put it on the process that uses this resource".to_owned()),
                );
            }
            Some(Service {
                name: name.to_owned(),
                kind: ServiceKind::Resource(build_resource(cx, name, adapter, rs)),
            })
        }
    }
}

fn build_process(cx: &mut Cx<'_>, name: &str, cmd: &str, rs: &RawService) -> Process {
    if cmd.trim().is_empty() {
        cx.error(
            "empty-cmd",
            &keypath!["services", name, "cmd"],
            format!("service `{name}` has an empty `cmd`"),
            None,
        );
    }
    if let Some(url) = &rs.url
        && !is_dns_label(url)
    {
        cx.error(
            "invalid-name",
            &keypath!["services", name, "url"],
            format!("url label `{url}` must be a lowercase DNS label (a-z, 0-9, `-`)"),
            Some(format!(
                "it becomes `<label>.<world>.<domain>`; try `{}`",
                crate::slug::dns_label_hint(url)
            )),
        );
    }
    let ports = rs.ports.clone().unwrap_or_default();
    let mut seen = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let path = keypath!["services", name, "ports", i];
        if !is_service_name(p) {
            cx.error(
                "invalid-name",
                &path,
                format!(
                    "port name `{p}` must start with a lowercase letter and use a-z, 0-9, `-`, `_`"
                ),
                None,
            );
        } else if !seen.insert(p.as_str()) {
            cx.error(
                "duplicate-port",
                &path,
                format!("port `{p}` is declared twice"),
                None,
            );
        }
    }
    let env = build_env(cx, &keypath!["services", name, "env"], rs.env.as_ref());
    let depends_on = rs.depends_on.clone().unwrap_or_default();
    let health = rs.health.as_ref().and_then(|h| build_health(cx, name, h));
    let restart = match &rs.restart {
        None => Some(Restart::default()),
        Some(r) => build_restart(cx, name, r),
    };
    let stop_signal = match &rs.stop_signal {
        None => Some(StopSignal::default()),
        Some(s) => {
            let v = StopSignal::parse(s);
            if v.is_none() {
                cx.error(
                    "invalid-signal",
                    &keypath!["services", name, "stop_signal"],
                    format!("`{s}` is not a stop signal Binky knows"),
                    Some(format!("use one of {}", StopSignal::KNOWN.join(", "))),
                );
            }
            v
        }
    };
    let stop_timeout = match &rs.stop_timeout {
        None => Some(DEFAULT_STOP_TIMEOUT),
        Some(d) => parse_duration(cx, &keypath!["services", name, "stop_timeout"], d),
    };
    let watch = rs.watch.clone().unwrap_or_default();
    check_globs(cx, &keypath!["services", name, "watch"], &watch, true);
    Process {
        cmd: cmd.to_owned(),
        cwd: rs.cwd.clone(),
        url: rs.url.clone(),
        ports,
        depends_on,
        env,
        env_file: rs.env_file.clone(),
        health,
        restart: restart.unwrap_or_default(),
        watch,
        stop_signal: stop_signal.unwrap_or_default(),
        stop_timeout: stop_timeout.unwrap_or(DEFAULT_STOP_TIMEOUT),
    }
}

fn build_health(cx: &mut Cx<'_>, name: &str, h: &RawHealth) -> Option<Health> {
    let base = keypath!["services", name, "health"];
    match h {
        RawHealth::Url(u) => Some(Health {
            probe: Probe::Http(u.clone()),
            timeout: DEFAULT_HEALTH_TIMEOUT,
            interval: DEFAULT_HEALTH_INTERVAL,
        }),
        RawHealth::Table(t) => {
            let kinds: Vec<(&str, &String)> = [("http", &t.http), ("tcp", &t.tcp), ("cmd", &t.cmd)]
                .into_iter()
                .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
                .collect();
            let probe = match kinds.as_slice() {
                [("http", v)] => Some(Probe::Http((*v).clone())),
                [("tcp", v)] => Some(Probe::Tcp((*v).clone())),
                [(_, v)] => Some(Probe::Cmd((*v).clone())),
                [] => {
                    cx.error(
                        "invalid-health",
                        &base,
                        format!("health of `{name}` names no probe"),
                        Some("set exactly one of `http`, `tcp` or `cmd`".to_owned()),
                    );
                    None
                }
                _ => {
                    let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
                    cx.error(
                        "invalid-health",
                        &base,
                        format!(
                            "health of `{name}` names {} probes ({}); a health check is one probe",
                            names.len(),
                            names.join(", ")
                        ),
                        Some("keep exactly one of `http`, `tcp` or `cmd`".to_owned()),
                    );
                    None
                }
            };
            let timeout = match &t.timeout {
                None => Some(DEFAULT_HEALTH_TIMEOUT),
                Some(d) => parse_duration(cx, &keypath!["services", name, "health", "timeout"], d),
            };
            let interval = match &t.interval {
                None => Some(DEFAULT_HEALTH_INTERVAL),
                Some(d) => parse_duration(cx, &keypath!["services", name, "health", "interval"], d),
            };
            if interval.is_some_and(|i| i.is_zero()) {
                cx.error(
                    "invalid-duration",
                    &keypath!["services", name, "health", "interval"],
                    format!("health interval of `{name}` must be greater than zero"),
                    Some(format!(
                        "the default is {}",
                        humantime::format_duration(DEFAULT_HEALTH_INTERVAL)
                    )),
                );
                return None;
            }
            Some(Health {
                probe: probe?,
                timeout: timeout?,
                interval: interval?,
            })
        }
    }
}

fn build_restart(cx: &mut Cx<'_>, name: &str, r: &RawRestart) -> Option<Restart> {
    let policy_err = |cx: &mut Cx<'_>, path: &[Step], p: &str| {
        cx.error(
            "invalid-restart",
            path,
            format!("`{p}` is not a restart policy"),
            Some(r#"use "no", "on-failure" or "always""#.to_owned()),
        );
    };
    match r {
        RawRestart::Policy(p) => match RestartPolicy::parse(p) {
            Some(policy) => Some(Restart {
                policy,
                ..Restart::default()
            }),
            None => {
                policy_err(cx, &keypath!["services", name, "restart"], p);
                None
            }
        },
        RawRestart::Table(t) => {
            let d = Restart::default();
            let policy = match &t.policy {
                None => Some(d.policy),
                Some(p) => {
                    let v = RestartPolicy::parse(p);
                    if v.is_none() {
                        policy_err(cx, &keypath!["services", name, "restart", "policy"], p);
                    }
                    v
                }
            };
            let mut dur = |key: &'static str, v: &Option<raw::DurationText>, def: Duration| match v
            {
                None => Some(def),
                Some(x) => parse_duration(cx, &keypath!["services", name, "restart", key], x),
            };
            let backoff = dur("backoff", &t.backoff, d.backoff);
            let max_backoff = dur("max_backoff", &t.max_backoff, d.max_backoff);
            let failure_window = dur("failure_window", &t.failure_window, d.failure_window);
            let max_failures = match t.max_failures {
                None => Some(d.max_failures),
                Some(n) if (1..=1_000_000).contains(&n) => Some(n as u32),
                Some(n) => {
                    cx.error(
                        "invalid-restart",
                        &keypath!["services", name, "restart", "max_failures"],
                        format!("max_failures = {n} must be at least 1"),
                        None,
                    );
                    None
                }
            };
            Some(Restart {
                policy: policy?,
                backoff: backoff?,
                max_backoff: max_backoff?,
                max_failures: max_failures?,
                failure_window: failure_window?,
            })
        }
    }
}

/// The options Binky's own adapters read: a typo here would otherwise only
/// show as a silent fallback at `up`.
fn check_adapter_options(
    cx: &mut Cx<'_>,
    name: &str,
    adapter: &str,
    options: Option<&toml::Table>,
) {
    let Some(options) = options else { return };
    let strategies: &[&str] =
        crate::adapters::catalog::find(adapter).map_or(&[], |e| e.clone_strategies);
    if let Some(v) = options.get("clone_strategy")
        && !strategies.is_empty()
        && !v.as_str().is_some_and(|s| strategies.contains(&s))
    {
        cx.error(
            "invalid-option",
            &keypath!["services", name, "options", "clone_strategy"],
            format!(
                "clone_strategy for the {adapter} adapter must be one of {}",
                strategies.join(", ")
            ),
            Some(format!("e.g. clone_strategy = \"{}\"", strategies[0])),
        );
    }
    if let Some(v) = options.get("timeout")
        && v.as_str()
            .is_none_or(|s| humantime::parse_duration(s.trim()).is_err())
    {
        cx.error(
            "invalid-duration",
            &keypath!["services", name, "options", "timeout"],
            "options.timeout must be a duration such as \"30s\" or \"5m\"".to_owned(),
            None,
        );
    }
}

fn build_resource(cx: &mut Cx<'_>, name: &str, adapter: &str, rs: &RawService) -> Resource {
    if !is_service_name(adapter) {
        cx.error(
            "invalid-name",
            &keypath!["services", name, "adapter"],
            format!("adapter name `{adapter}` is not valid (lowercase letters, digits, `-`, `_`)"),
            None,
        );
    }
    if let Some(c) = &rs.clone_from
        && !is_service_name(c)
    {
        cx.error(
            "invalid-name",
            &keypath!["services", name, "clone_from"],
            format!("clone_from `{c}` must be a short lowercase name (it is part of the template's name)"),
            Some("e.g. clone_from = \"golden\"".to_owned()),
        );
    }
    for (key, v) in [("migrate", &rs.migrate), ("seed", &rs.seed)] {
        if v.as_ref().is_some_and(|s| s.trim().is_empty()) {
            cx.error(
                "empty-cmd",
                &keypath!["services", name, key],
                format!("`{key}` of `{name}` is empty"),
                Some("remove the key, or give it a command".to_owned()),
            );
        }
    }
    let clone_inputs = rs.clone_inputs.clone().unwrap_or_default();
    if !clone_inputs.is_empty() && rs.clone_from.is_none() {
        cx.warn(
            "clone-inputs-without-clone-from",
            &keypath!["services", name, "clone_inputs"],
            format!("`{name}` lists clone_inputs but has no clone_from, so they have no effect"),
            Some("add clone_from = \"golden\" or remove clone_inputs".to_owned()),
        );
    }
    if clone_inputs.is_empty() && rs.clone_from.is_some() && rs.migrate.is_some() {
        cx.warn(
            "clone-from-without-inputs",
            &keypath!["services", name, "clone_from"],
            format!(
                "`{name}` clones a golden template but lists no clone_inputs: a new migration does not rebuild the template, so every clone from another commit runs migrate again to catch up"
            ),
            Some(
                "list the migration files, e.g. clone_inputs = [\"**/migrations/**\"] (Django), [\"db/migrate/**\"] (Rails), [\"prisma/migrations/**\"], [\"alembic/versions/**\"]"
                    .to_owned(),
            ),
        );
    }
    check_globs(
        cx,
        &keypath!["services", name, "clone_inputs"],
        &clone_inputs,
        false,
    );
    check_adapter_options(cx, name, adapter, rs.options.as_ref());
    Resource {
        adapter: adapter.to_owned(),
        admin_url: rs.admin_url.clone(),
        migrate: rs.migrate.clone(),
        seed: rs.seed.clone(),
        clone_from: rs.clone_from.clone(),
        clone_inputs,
        options: rs.options.clone().unwrap_or_default(),
    }
}

fn build_agents(
    cx: &mut Cx<'_>,
    a: Option<&raw::RawAgents>,
    services: &IndexMap<String, RawService>,
) -> Agents {
    let Some(a) = a else {
        return Agents::default();
    };
    if let Some(expose) = &a.expose {
        for (i, s) in expose.iter().enumerate() {
            if !services.contains_key(s) {
                let hint = suggest(s, services.keys().map(|k| k.as_str()))
                    .map(|m| format!("did you mean `{m}`?"))
                    .or_else(|| {
                        Some(if services.is_empty() {
                            "there are no services; remove it".to_owned()
                        } else {
                            let names: Vec<&str> = services.keys().map(|k| k.as_str()).collect();
                            format!("services are: {}", names.join(", "))
                        })
                    });
                cx.error(
                    "unknown-service",
                    &keypath!["agents", "expose", i],
                    format!("agents.expose names `{s}`, which is not a service"),
                    hint,
                );
            }
        }
    }
    for (i, v) in a.verify.iter().flatten().enumerate() {
        if v.trim().is_empty() {
            cx.error(
                "empty-cmd",
                &keypath!["agents", "verify", i],
                "an agents.verify command is empty".to_owned(),
                None,
            );
        }
    }
    Agents {
        expose: a.expose.clone(),
        verify: a.verify.clone().unwrap_or_default(),
    }
}

/// Unknown dependencies, self-dependencies, duplicates and cycles.
fn check_graph(cx: &mut Cx<'_>, services: &IndexMap<String, Service>, declared: &BTreeSet<&str>) {
    for (name, svc) in services {
        let mut seen = BTreeSet::new();
        for (i, dep) in svc.depends_on().iter().enumerate() {
            let path = keypath!["services", name.as_str(), "depends_on", i];
            if dep == name {
                cx.error(
                    "dependency-cycle",
                    &path,
                    format!("`{name}` depends on itself"),
                    None,
                );
            } else if !declared.contains(dep.as_str()) {
                let others = || declared.iter().copied().filter(|d| *d != name);
                let hint = suggest(dep, others()).map(|m| format!("did you mean `{m}`?"));
                cx.error(
                    "unknown-dependency",
                    &path,
                    format!("`{name}` depends on `{dep}`, which is not a service"),
                    hint.or_else(|| {
                        let others: Vec<&str> = others().collect();
                        Some(if others.is_empty() {
                            format!("`{name}` is the only service; declare [services.{dep}] or remove it")
                        } else {
                            format!("other services are: {}", others.join(", "))
                        })
                    }),
                );
            } else if !seen.insert(dep.as_str()) {
                cx.warn(
                    "duplicate-dependency",
                    &path,
                    format!("`{name}` lists `{dep}` in depends_on twice"),
                    None,
                );
            }
        }
    }
    for cycle in find_cycles(services) {
        let first = &cycle[0];
        let idx = services[first]
            .depends_on()
            .iter()
            .position(|d| *d == cycle[1 % cycle.len()])
            .unwrap_or(0);
        let mut shown = cycle.clone();
        shown.push(first.clone());
        cx.error(
            "dependency-cycle",
            &keypath!["services", first.as_str(), "depends_on", idx],
            format!("dependency cycle: {}", shown.join(" → ")),
            Some("remove one of these depends_on entries; a service may still name another's port or URL without depending on it".to_owned()),
        );
    }
}

/// Elementary cycles found by DFS, each reported once, rotated to start at
/// its first service in file order. Self-loops are reported elsewhere.
pub(crate) fn find_cycles(services: &IndexMap<String, Service>) -> Vec<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let index: HashMap<&str, usize> = services
        .keys()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    let mut mark = vec![Mark::New; services.len()];
    let mut stack: Vec<usize> = Vec::new();
    let mut cycles: Vec<Vec<String>> = Vec::new();
    fn dfs(
        v: usize,
        services: &IndexMap<String, Service>,
        index: &HashMap<&str, usize>,
        mark: &mut [Mark],
        stack: &mut Vec<usize>,
        cycles: &mut Vec<Vec<String>>,
    ) {
        mark[v] = Mark::Active;
        stack.push(v);
        for dep in services[v].depends_on() {
            let Some(&w) = index.get(dep.as_str()) else {
                continue;
            };
            if w == v {
                continue;
            }
            match mark[w] {
                Mark::New => dfs(w, services, index, mark, stack, cycles),
                Mark::Active => {
                    let pos = stack.iter().position(|&x| x == w).unwrap_or(0);
                    let mut cyc: Vec<usize> = stack[pos..].to_vec();
                    let min_pos = cyc
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, x)| **x)
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    cyc.rotate_left(min_pos);
                    let names: Vec<String> = cyc
                        .iter()
                        .map(|&i| services.get_index(i).unwrap().0.clone())
                        .collect();
                    if !cycles.contains(&names) {
                        cycles.push(names);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        mark[v] = Mark::Done;
    }
    for v in 0..services.len() {
        if mark[v] == Mark::New {
            dfs(v, services, &index, &mut mark, &mut stack, &mut cycles);
        }
    }
    cycles
}

fn check_urls(cx: &mut Cx<'_>, services: &IndexMap<String, Service>) {
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for (name, svc) in services {
        if let Some(url) = svc.process().and_then(|p| p.url.as_deref()) {
            if let Some(first) = owner.get(url) {
                cx.error(
                    "duplicate-url",
                    &keypath!["services", name.as_str(), "url"],
                    format!("url label `{url}` is used by both `{first}` and `{name}`; hostnames must be unique"),
                    Some(format!("give `{name}` its own label, e.g. url = \"{name}\"")),
                );
            } else {
                owner.insert(url, name);
            }
        }
    }
}

/// Every string field of a service that may carry tokens, with its key path.
fn token_fields<'a>(name: &'a str, svc: &'a Service) -> Vec<(Vec<Step>, &'a str)> {
    let mut out: Vec<(Vec<Step>, &str)> = Vec::new();
    match &svc.kind {
        ServiceKind::Process(p) => {
            out.push((keypath!["services", name, "cmd"].to_vec(), &p.cmd));
            if let Some(c) = &p.cwd {
                out.push((keypath!["services", name, "cwd"].to_vec(), c));
            }
            for (k, v) in &p.env {
                out.push((keypath!["services", name, "env", k.as_str()].to_vec(), v));
            }
            if let Some(h) = &p.health {
                let (key, v) = health_key(h);
                let path = match key {
                    None => keypath!["services", name, "health"].to_vec(),
                    Some(k) => keypath!["services", name, "health", k].to_vec(),
                };
                out.push((path, v));
            }
        }
        ServiceKind::Resource(r) => {
            for (k, v) in [
                ("admin_url", &r.admin_url),
                ("migrate", &r.migrate),
                ("seed", &r.seed),
            ] {
                if let Some(v) = v {
                    out.push((keypath!["services", name, k].to_vec(), v));
                }
            }
        }
    }
    out
}

fn health_key(h: &Health) -> (Option<&'static str>, &str) {
    match &h.probe {
        Probe::Http(v) => (Some("http"), v),
        Probe::Tcp(v) => (Some("tcp"), v),
        Probe::Cmd(v) => (Some("cmd"), v),
    }
}

fn check_tokens(
    cx: &mut Cx<'_>,
    range: Option<PortRange>,
    services: &IndexMap<String, Service>,
    declared: &BTreeSet<&str>,
) {
    for (name, svc) in services {
        for (path, text) in token_fields(name, svc) {
            for occ in occurrences(text) {
                let at = At {
                    value: text,
                    start: occ.start,
                    end: occ.end,
                };
                check_token(
                    cx,
                    services,
                    declared,
                    Some((name, svc)),
                    &path,
                    at,
                    occ.body,
                );
            }
            if let Some(range) = range
                && matches!(path.get(2), Some(Step::Key(k)) if k == "cmd")
            {
                check_literal_ports(cx, range, name, svc.has_port(), &path, text);
            }
        }
        if let Some(p) = svc.process()
            && let Some(h) = &p.health
        {
            check_health_target(cx, name, svc, h);
        }
    }
}

/// Tokens in `[agents] verify` and the project's `[env]`: they render with
/// no `self`, against the same services.
fn check_unowned_tokens(
    cx: &mut Cx<'_>,
    agents: &Agents,
    env: &IndexMap<String, String>,
    services: &IndexMap<String, Service>,
    declared: &BTreeSet<&str>,
) {
    let verify = agents
        .verify
        .iter()
        .enumerate()
        .map(|(i, t)| (keypath!["agents", "verify", i].to_vec(), t));
    let env = env
        .iter()
        .map(|(k, t)| (keypath!["env", k.as_str()].to_vec(), t));
    for (path, text) in verify.chain(env) {
        for occ in occurrences(text) {
            let at = At {
                value: text,
                start: occ.start,
                end: occ.end,
            };
            check_token(cx, services, declared, None, &path, at, occ.body);
        }
    }
}

/// One `${…}` in a string of service `owner` (`None`: in `[agents]`).
fn check_token(
    cx: &mut Cx<'_>,
    services: &IndexMap<String, Service>,
    declared: &BTreeSet<&str>,
    owner: Option<(&str, &Service)>,
    path: &[Step],
    at: At<'_>,
    body: &str,
) {
    let raw = at.text();
    let place = key_string(path);
    let user = owner.map_or(place.as_str(), |(n, _)| n);
    match classify(body) {
        Some(Token::SelfField(f)) => match owner {
            Some((name, svc)) => check_field(cx, name, name, svc, f, path, at, true),
            None => cx.push_at(
                Severity::Warning,
                "self-outside-service",
                path,
                Some(at),
                format!(
                    "`{raw}` is in {place}, where there is no `self`, so it is left as written"
                ),
                Some("name the service instead, e.g. `${api.url}`".to_owned()),
            ),
        },
        Some(Token::Service(target, f)) => match services.get(target) {
            Some(t) => {
                check_field(cx, user, target, t, f, path, at, false);
                if let Some((name, svc)) = owner
                    && t.resource().is_some()
                    && target != name
                    && svc.process().is_some()
                    && !depends_transitively(services, name, target)
                {
                    cx.push_at(
                        Severity::Warning,
                        "resource-not-depended",
                        path,
                        Some(at),
                        format!("`{name}` uses `{raw}` but does not depend on `{target}`, so it may start before the slice exists"),
                        Some(format!("add \"{target}\" to services.{name}.depends_on")),
                    );
                }
            }
            // Declared but invalid (its own error says why): nothing to add.
            None if declared.contains(target) => {}
            None => {
                let hint = suggest(target, declared.iter().copied())
                    .map(|m| format!("did you mean `${{{}}}`?", body.replacen(target, m, 1)))
                    .or_else(|| Some("it is left as written when rendered".to_owned()));
                cx.push_at(
                    Severity::Warning,
                    "unknown-service-token",
                    path,
                    Some(at),
                    format!("`{raw}` names `{target}`, which is not a service"),
                    hint,
                );
            }
        },
        Some(Token::Env(var)) if !(cx.env_is_set)(var) => cx.push_at(
            Severity::Warning,
            "unset-env",
            path,
            Some(at),
            format!(
                "`{raw}` is not set in this shell nor in an env_file, so `binky up` from here fails"
            ),
            Some(format!(
                "export {var} in the shell you run binky from, or put it in env_file"
            )),
        ),
        Some(_) => {}
        None => check_unowned_token(cx, declared, path, at, body),
    }
}

/// Fields a service token may ask for, as written after `SVC.`.
const SERVICE_FIELDS: &[&str] = &["port", "ports.NAME", "url", "local_url", "host"];

/// A `${HEAD.REST}` that `classify` rejects but whose head is Binky's (`self`,
/// `env`, `worktree`, `project`, or a service): almost surely a typo, which
/// would otherwise be left in the rendered text unnoticed.
fn check_unowned_token(
    cx: &mut Cx<'_>,
    declared: &BTreeSet<&str>,
    path: &[Step],
    at: At<'_>,
    body: &str,
) {
    let raw = at.text();
    let Some((head, rest)) = body.split_once('.') else {
        return;
    };
    let (known, hint): (&[&str], Option<String>) = match head {
        "env" => (
            &[],
            Some("an environment variable name uses letters, digits and `_`, not starting with a digit".to_owned()),
        ),
        "worktree" => (&["name", "path"], None),
        "project" => (&["name"], None),
        "self" => (SERVICE_FIELDS, None),
        h if declared.contains(h) => (SERVICE_FIELDS, None),
        _ => return,
    };
    let hint = hint.or_else(|| {
        if let Some(port) = rest.strip_prefix("ports.") {
            return Some(format!(
                "`{port}` cannot be a port name: port names use letters, digits, `-` and `_`"
            ));
        }
        let candidates = known.iter().map(|k| k.trim_end_matches(".NAME"));
        Some(match suggest(rest, candidates) {
            Some("ports") => {
                format!("did you mean `${{{head}.ports.NAME}}` (NAME a declared port)?")
            }
            Some(m) => format!("did you mean `${{{head}.{m}}}`?"),
            None => format!(
                "`{head}` has: {}",
                known
                    .iter()
                    .map(|k| format!("{head}.{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    });
    cx.push_at(
        Severity::Warning,
        "unknown-token",
        path,
        Some(at),
        format!("`{raw}` is not a token Binky knows, so it is left as written"),
        hint,
    );
}

#[allow(clippy::too_many_arguments)]
fn check_field(
    cx: &mut Cx<'_>,
    user: &str,
    target: &str,
    t: &Service,
    f: Field<'_>,
    path: &[Step],
    at: At<'_>,
    is_self: bool,
) {
    let raw = at.text();
    let who = if is_self {
        format!("`{user}`")
    } else {
        format!("service `{target}`")
    };
    match f {
        Field::Ports(port) => {
            if t.resource().is_some() || !t.port_names().iter().any(|p| p == port) {
                let declared = t.port_names();
                let hint = if declared.is_empty() {
                    format!("add ports = [\"{port}\"] to services.{target}")
                } else {
                    format!("declared ports of `{target}`: {}", declared.join(", "))
                };
                cx.push_at(
                    Severity::Error,
                    "unknown-port",
                    path,
                    Some(at),
                    format!("`{raw}`: {who} declares no port named `{port}`"),
                    Some(hint),
                );
            }
        }
        Field::Port | Field::LocalUrl => {
            if t.resource().is_some() {
                cx.push_at(
                    Severity::Warning,
                    "resource-has-no-port",
                    path,
                    Some(at),
                    format!("`{raw}`: `{target}` is a resource; it has an address, not a port"),
                    Some(format!("use `${{{target}.url}}`")),
                );
            } else if !t.has_port() {
                let code = if is_self {
                    "self-port-without-port"
                } else {
                    "service-without-port"
                };
                cx.push_at(
                    Severity::Warning,
                    code,
                    path,
                    Some(at),
                    format!("`{raw}`: {who} has no port (it declares neither `url` nor `ports`), so the token is left as written"),
                    Some(format!("add url = \"{target}\" or ports = [\"http\"] to services.{target}")),
                );
            }
        }
        Field::Url | Field::Host => {
            if t.process().is_some() && !t.has_port() {
                let code = if is_self {
                    "self-port-without-port"
                } else {
                    "service-without-port"
                };
                cx.push_at(
                    Severity::Warning,
                    code,
                    path,
                    Some(at),
                    format!("`{raw}`: {who} has no url or port, so the token is left as written"),
                    Some(format!("add url = \"{target}\" to services.{target}")),
                );
            }
        }
    }
}

/// Whether `from` reaches `to` through depends_on edges.
fn depends_transitively(services: &IndexMap<String, Service>, from: &str, to: &str) -> bool {
    let mut stack = vec![from];
    let mut seen = BTreeSet::new();
    while let Some(s) = stack.pop() {
        if !seen.insert(s) {
            continue;
        }
        for d in services.get(s).map(|x| x.depends_on()).unwrap_or(&[]) {
            if d == to {
                return true;
            }
            stack.push(d);
        }
    }
    false
}

/// Literal numbers in `cmd` that fall inside the project's port range: a port
/// hard-coded where the allocator's should be.
fn check_literal_ports(
    cx: &mut Cx<'_>,
    range: PortRange,
    name: &str,
    has_port: bool,
    path: &[Step],
    cmd: &str,
) {
    let mut stripped = String::with_capacity(cmd.len());
    // Blank out tokens so `${self.ports.p8080}`-like bodies don't count.
    let mut last = 0;
    for occ in occurrences(cmd) {
        stripped.push_str(&cmd[last..occ.start]);
        stripped.extend(std::iter::repeat_n(' ', occ.end - occ.start));
        last = occ.end;
    }
    stripped.push_str(&cmd[last..]);
    let bytes = stripped.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let boundary_before = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
            let boundary_after = i == bytes.len() || !bytes[i].is_ascii_alphanumeric();
            let num = &stripped[start..i];
            if boundary_before
                && boundary_after
                && num.len() <= 5
                && let Ok(n) = num.parse::<u32>()
                && range.contains(n)
            {
                cx.push_at(
                    Severity::Warning,
                    "literal-port",
                    path,
                    Some(At {
                        value: cmd,
                        start,
                        end: i,
                    }),
                    format!(
                        "`{name}` runs with the literal port {n}, inside port_range [{}, {}]; the allocator may hand that port to another world",
                        range.lo, range.hi
                    ),
                    Some(if has_port {
                        "use ${self.port} (or ${self.ports.NAME}) instead".to_owned()
                    } else {
                        format!("declare url = \"{name}\" or ports = [\"http\"] on `{name}`, then use ${{self.port}}")
                    }),
                );
            }
        } else {
            i += 1;
        }
    }
}

/// A health probe aimed at a port that is not the service's own.
fn check_health_target(cx: &mut Cx<'_>, name: &str, svc: &Service, h: &Health) {
    let (key, target) = match &h.probe {
        Probe::Http(v) => ("http", v.as_str()),
        Probe::Tcp(v) => ("tcp", v.as_str()),
        Probe::Cmd(_) => return,
    };
    let path = keypath!["services", name, "health", key];
    if key == "http" && target.starts_with('/') {
        if !svc.has_port() {
            cx.error(
                "health-without-port",
                &path,
                format!("health probe `{target}` is a path on `{name}`'s own port, but `{name}` has no port"),
                Some(format!("add url = \"{name}\" or ports = [\"http\"], or give a full URL")),
            );
        }
        return;
    }
    let mut names_other = None;
    for occ in occurrences(target) {
        match classify(occ.body) {
            Some(Token::SelfField(
                Field::Port | Field::Ports(_) | Field::LocalUrl | Field::Url,
            )) => {
                return;
            }
            Some(Token::Service(other, _)) if other != name => {
                names_other = Some(At {
                    value: target,
                    start: occ.start,
                    end: occ.end,
                });
            }
            Some(Token::Service(_, _)) => return,
            _ => {}
        }
    }
    if let Some(at) = names_other {
        let other = at.text();
        cx.push_at(
            Severity::Warning,
            "health-port-mismatch",
            &path,
            Some(at),
            format!("health probe of `{name}` targets `{other}`, another service's port, so it can pass while `{name}` is down"),
            Some("probe ${self.port}".to_owned()),
        );
        return;
    }
    if let Some((port, at)) = literal_port_in(target) {
        cx.push_at(
            Severity::Warning,
            "health-port-mismatch",
            &path,
            Some(at),
            format!("health probe of `{name}` targets the literal port {port}, not the port Binky assigns `{name}`"),
            Some("use ${self.port}: each world gets its own port".to_owned()),
        );
    }
}

/// The port in `host:port` or `scheme://host:port/…`, if written literally,
/// and where it is in `target`.
fn literal_port_in(target: &str) -> Option<(u32, At<'_>)> {
    let from = target.find("://").map_or(0, |i| i + 3);
    let authority = target[from..].split(['/', '?', '#']).next().unwrap_or("");
    let colon = authority.rfind(':')?;
    let port = &authority[colon + 1..];
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let start = from + colon + 1;
    let at = At {
        value: target,
        start,
        end: start + port.len(),
    };
    port.parse().ok().map(|p| (p, at))
}

const SECRET_KEY_WORDS: &[&str] = &["PASSWORD", "PASSWD", "SECRET", "TOKEN", "KEY"];

/// A literal credential in `admin_url` or `env`. Messages name the key, never
/// the value.
fn check_credentials(cx: &mut Cx<'_>, raw: &RawConfig) {
    for (name, s) in &raw.services {
        if let Some(url) = &s.admin_url
            && url_has_literal_password(url)
        {
            cx.warn(
                "literal-credential",
                &keypath!["services", name.as_str(), "admin_url"],
                format!("services.{name}.admin_url contains a literal password; binky.toml is committed"),
                Some(format!(
                    "write admin_url = \"${{env.{}_ADMIN_URL}}\" and export that variable in your shell",
                    name.to_ascii_uppercase().replace('-', "_")
                )),
            );
        }
        for (k, v) in s.env.iter().flatten() {
            let upper = k.to_ascii_uppercase();
            let named_secret = SECRET_KEY_WORDS.iter().any(|w| upper.contains(w));
            let literal = !v.0.trim().is_empty() && !v.0.contains("${");
            if (named_secret && literal) || url_has_literal_password(&v.0) {
                cx.warn(
                    "literal-credential",
                    &keypath!["services", name.as_str(), "env", k.as_str()],
                    format!("services.{name}.env.{k} looks like a credential with a literal value; binky.toml is committed"),
                    Some(if is_env_key(k) {
                        format!("write {k} = \"${{env.{k}}}\" and export {k} in your shell, or move it to an env_file")
                    } else {
                        "read it from the environment with ${env.NAME} and export NAME in your shell, or move it to an env_file".to_owned()
                    }),
                );
            }
        }
    }
}

/// `scheme://user:password@host` with a non-empty password that is not a token.
fn url_has_literal_password(s: &str) -> bool {
    let Some((_, rest)) = s.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return false;
    };
    match userinfo.split_once(':') {
        Some((_, pw)) => !pw.is_empty() && !pw.contains("${"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(src: &str) -> Vec<&'static str> {
        check_str(src, Path::new("binky.toml"))
            .diagnostics
            .iter()
            .map(|d| d.code)
            .collect()
    }

    fn messages(src: &str) -> String {
        check_str(src, Path::new("binky.toml"))
            .diagnostics
            .iter()
            .map(|d| d.render("binky.toml"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn type_errors_never_quote_strings() {
        for src in [
            "[project]\nname=\"a\"\nhttps = \"hunter2\"\n",
            "[project]\nname=\"a\"\n[services.x]\ncmd=\"y\"\nenv = \"PW=hunter2\"\n",
            "[project]\nname=\"a\"\n[services.x]\ncmd=\"y\"\ndepends_on = \"hunter2\"\n",
            "[project]\nname=\"a\"\nport_range = \"hunter2\"\n",
            "project = \"hunter2\"\n",
        ] {
            let m = messages(src);
            assert!(m.contains("invalid-type"), "{m}");
            assert!(!m.contains("hunter2"), "{m}");
        }
        assert_eq!(
            redact_value(r#"invalid value: string "pw", expected x"#),
            r#"invalid value: string "…", expected x"#
        );
    }

    #[test]
    fn malformed_toml_that_panicked_toml_edit() {
        // toml_edit 0.23 panics on this; the locator must never hand it over.
        let r = check_str("\ne= =[\0{e.\nr=e.", Path::new("binky.toml"));
        assert_eq!(r.diagnostics[0].code, "syntax");
    }

    #[test]
    fn zero_interval_reported_beside_a_bad_timeout() {
        let src = "[project]\nname=\"a\"\n[services.x]\ncmd=\"y\"\nurl=\"x\"\nhealth={http=\"/\", timeout=\"soon\", interval=\"0s\"}\n";
        let m = messages(src);
        assert!(m.contains("`soon` is not a duration"), "{m}");
        assert!(
            m.contains("interval of `x` must be greater than zero"),
            "{m}"
        );
    }

    #[test]
    fn invalid_project_does_not_hide_service_errors() {
        let src = "[project]\nname=\"A B\"\n[services.x]\ncmd=\"y\"\ndepends_on=[\"nope\"]\n";
        assert_eq!(codes(src), vec!["invalid-name", "unknown-dependency"]);
    }

    #[test]
    fn password_detection() {
        assert!(url_has_literal_password("postgres://u:p@h/db"));
        assert!(!url_has_literal_password("postgres://u:${env.P}@h/db"));
        assert!(!url_has_literal_password("postgres://u@h/db"));
        assert!(!url_has_literal_password("${env.PG}"));
    }

    #[test]
    fn minimal_is_valid() {
        let r = check_str("[project]\nname = \"acme\"\n", Path::new("binky.toml"));
        assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
        let c = r.config.unwrap();
        assert_eq!(c.project.domain, "acme.localhost");
        assert_eq!(c.project.port_range, DEFAULT_PORT_RANGE);
    }

    #[test]
    fn cycle_reported_once() {
        let src = "[project]\nname=\"a\"\n[services.a]\ncmd=\"x\"\ndepends_on=[\"b\"]\n[services.b]\ncmd=\"x\"\ndepends_on=[\"c\"]\n[services.c]\ncmd=\"x\"\ndepends_on=[\"a\"]\n";
        let r = check_str(src, Path::new("binky.toml"));
        let msgs: Vec<_> = r.diagnostics.iter().map(|d| d.message.clone()).collect();
        assert_eq!(msgs, vec!["dependency cycle: a → b → c → a"]);
        assert_eq!(r.diagnostics[0].line, Some(5));
    }

    #[test]
    fn literal_port_only_in_range() {
        let base = "[project]\nname=\"a\"\nport_range=[20000,20100]\n[services.w]\nurl=\"w\"\ncmd=";
        assert_eq!(
            codes(&format!("{base}\"serve --port 20050\"\n")),
            vec!["literal-port"]
        );
        assert!(codes(&format!("{base}\"serve --port 8080 --workers 20\"\n")).is_empty());
    }
}
