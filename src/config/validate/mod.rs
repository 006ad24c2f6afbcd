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

mod graph;
mod lints;
mod service;
mod tokens;

use graph::*;
use lints::*;
use service::*;
use tokens::*;

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
    check(text, path, None)
}

/// [`check_str`] against an environment: warns about each `${env.NAME}`
/// that `env` has no value for, and checks a built-in adapter's
/// `admin_url` made only of literal text and `${env.NAME}` with the values
/// `env` gives, as `up` would. `binky check` asks the shell it runs in and
/// the `env_file`s, which is where `up` from that shell would look.
pub fn check_str_in_env(text: &str, path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Report {
    check(text, path, Some(env))
}

/// The value of an environment variable where `up` would run, if it has one.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn check(text: &str, path: &Path, env: Option<EnvLookup<'_>>) -> Report {
    let loc = Locator::new(text);
    let mut cx = Cx {
        loc: &loc,
        diags: Vec::new(),
        env,
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
    /// The value a variable `${env.NAME}` names has where `up` would run;
    /// `None`: not known (a pure check: every variable counts as set).
    env: Option<EnvLookup<'a>>,
}

impl Cx<'_> {
    /// Whether `${env.var}` has no value where `up` would run.
    fn env_unset(&self, var: &str) -> bool {
        self.env.is_some_and(|env| env(var).is_none())
    }

    /// `s` with each `${env.NAME}` replaced by its value, when `s` holds no
    /// other token and every variable has a value; else `None`.
    fn env_rendered(&self, s: &str) -> Option<String> {
        use super::render::Piece;
        let env = self.env?;
        let mut out = String::new();
        for piece in super::render::pieces(s) {
            match piece {
                Piece::Literal(t) => out.push_str(t),
                Piece::Token(o) => match classify(o.body) {
                    Some(Token::Env(var)) => out.push_str(&env(var)?),
                    _ => return None,
                },
            }
        }
        Some(out)
    }
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
    check_shared_slices(cx, &services);
    check_tokens(cx, range, &services, &declared);
    check_unowned_tokens(cx, &agents, &env, &services, &declared);
    check_literal_fields(cx);
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
