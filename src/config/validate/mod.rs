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
mod literals;
mod service;
mod tokens;
mod unknown_tokens;
pub use tokens::users_of;

use lints::*;

mod build;
mod parse_errors;
use build::{build, build_env, check_globs, parse_duration};
use parse_errors::table_label;

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

/// The services a token may name: those that parsed, and every name
/// declared (a service that failed to parse has its own error; a token
/// naming it gets none).
#[derive(Clone, Copy)]
struct Known<'a> {
    services: &'a IndexMap<String, Service>,
    declared: &'a BTreeSet<&'a str>,
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

    /// Records a finding of `severity` and `code` at `path`, or at the
    /// piece of its value `at` names (a token in a string) when there is
    /// one.
    fn push_at(
        &mut self,
        (severity, code): (Severity, &'static str),
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
        self.push_at((Severity::Error, code), path, None, msg, hint);
    }

    fn warn(&mut self, code: &'static str, path: &[Step], msg: String, hint: Option<String>) {
        self.push_at((Severity::Warning, code), path, None, msg, hint);
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

/// Whether `s` is an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_env_key(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Names a token could never mean a service by, because they are token heads.
pub(crate) const RESERVED_NAMES: &[&str] = &["self", "env", "worktree", "project"];

#[cfg(test)]
mod tests {
    use super::*;
    use parse_errors::redact_value;

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
    fn users_of_a_slice_are_its_dependents_and_those_naming_it() {
        let src = r#"
[project]
name = "shop"
[services.db]
adapter = "sqlite"
[services.cache]
adapter = "redis"
[services.api]
cmd = "true"
depends_on = ["db"]
[services.web]
cmd = "true"
depends_on = ["api"]
[services.report]
cmd = "echo ${db.url}"
[services.worker]
cmd = "true"
depends_on = ["cache"]
env = { API = "${api.url}" }
[services.docs]
cmd = "true"
"#;
        let report = check_str(src, Path::new("binky.toml"));
        let cfg = report.config.expect("valid");
        let users = |r: &[&str]| {
            users_of(&cfg, &r.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .into_iter()
                .collect::<Vec<_>>()
        };
        // api depends on db, web on api; report names db's URL without
        // depending on it. worker only names api's URL: not a user.
        assert_eq!(users(&["db"]), ["api", "report", "web"]);
        assert_eq!(users(&["cache"]), ["worker"]);
        assert_eq!(users(&["db", "cache"]), ["api", "report", "web", "worker"]);
        assert!(users(&[]).is_empty());
        // The project's [env] goes to every process: naming db there makes
        // every one of them a user.
        let with_env = format!("{src}[env]\nDATABASE_URL = \"${{db.url}}\"\n");
        let cfg = check_str(&with_env, Path::new("binky.toml"))
            .config
            .expect("valid");
        let all = users_of(&cfg, &["db".to_owned()]);
        assert_eq!(all.len(), 5, "{all:?}");
        assert!(users_of(&cfg, &["cache".to_owned()]).contains("worker"));
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
