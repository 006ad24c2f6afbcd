//! Building the [`Config`] model from the raw shape: the project table,
//! the environment, durations and globs, collecting every finding.

use super::graph::*;
use super::lints::*;
use super::service::*;
use super::tokens::*;
use super::{Cx, Known, is_dns_label, is_env_key};
use crate::config::diagnostic::{Diagnostic, Severity, key_string, with_position};
use crate::config::locate::Step;
use crate::config::model::*;
use crate::config::raw::{self, RawConfig};
use crate::keypath;
use indexmap::IndexMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

pub(super) fn parse_duration(
    cx: &mut Cx<'_>,
    path: &[Step],
    d: &raw::DurationText,
) -> Option<Duration> {
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
pub(super) fn check_globs(cx: &mut Cx<'_>, path: &[Step], globs: &[String], exclusions: bool) {
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

/// PostgreSQL reserves role names starting with `pg_`: project `pg` would
/// name every world's own role (`<project>_<world>`) so, and fail at `up`.
fn check_reserved_roles(cx: &mut Cx<'_>, project: &str, services: &IndexMap<String, Service>) {
    if project != "pg" {
        return;
    }
    for (name, svc) in services {
        let Some(r) = svc.resource() else { continue };
        let postgres =
            crate::adapters::catalog::find(&r.adapter).is_some_and(|e| e.name == "postgres");
        let acl = r
            .options
            .get("acl")
            .and_then(|v| v.as_bool())
            .unwrap_or(true);
        if postgres && acl {
            cx.error(
                "reserved-name",
                &keypath!["services", name.as_str(), "adapter"],
                "each world of project `pg` would get the PostgreSQL role `pg_<world>`, and PostgreSQL reserves role names that start with `pg_`".to_owned(),
                Some("give the project another [project] name, or set options = { acl = false } on this resource".to_owned()),
            );
        }
    }
}

pub(super) fn build(cx: &mut Cx<'_>, raw: RawConfig, path: &Path) -> Option<Config> {
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
    check_reserved_roles(cx, &raw.project.name, &services);
    let known = Known {
        services: &services,
        declared: &declared,
    };
    check_tokens(cx, range, known);
    let setup = raw.project.setup.clone().unwrap_or_default();
    check_unowned_tokens(cx, &agents, &setup, &env, known);
    super::literals::check_literal_fields(cx);
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
pub(super) fn build_env(
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

/// `[project] port_range`: the default when absent; `None` (after an
/// error) when it is not two ports with lo ≤ hi. A range below 1024 is
/// warned about.
fn build_port_range(cx: &mut Cx<'_>, range: Option<[i64; 2]>) -> Option<PortRange> {
    let Some([lo, hi]) = range else {
        return Some(DEFAULT_PORT_RANGE);
    };
    if !(1..=65535).contains(&lo) || !(1..=65535).contains(&hi) || lo > hi {
        cx.error(
            "invalid-port-range",
            &keypath!["project", "port_range"],
            format!("port_range [{lo}, {hi}] must be two ports 1–65535 with lo ≤ hi"),
            Some(format!(
                "the default is [{}, {}]",
                DEFAULT_PORT_RANGE.lo, DEFAULT_PORT_RANGE.hi
            )),
        );
        return None;
    }
    if lo < 1024 {
        cx.warn(
            "privileged-ports",
            &keypath!["project", "port_range"],
            format!("port_range starts at {lo}: ports below 1024 need privileges to bind"),
            Some("start the range at 1024 or above".to_owned()),
        );
    }
    Some(PortRange {
        lo: lo as u16,
        hi: hi as u16,
    })
}

/// The project, or `None` after errors; and the port range to lint literal
/// ports against (`None` when `port_range` itself is invalid).
pub(super) fn build_project(
    cx: &mut Cx<'_>,
    p: &raw::RawProject,
) -> (Option<Project>, Option<PortRange>) {
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
    let port_range = build_port_range(cx, p.port_range);
    ok &= port_range.is_some();
    for (i, g) in p.copy.iter().flatten().enumerate() {
        if let Some(why) = crate::worktree::copy::check_glob(g) {
            ok = false;
            cx.error(
                "invalid-copy",
                &keypath!["project", "copy", i],
                format!("copy: {why}"),
                Some(
                    "list paths inside the project, relative to binky.toml's folder, e.g. \"node_modules\" or \".env.local\""
                        .to_owned(),
                ),
            );
        }
    }
    for (i, c) in p.setup.iter().flatten().enumerate() {
        if c.trim().is_empty() {
            ok = false;
            cx.error(
                "empty-cmd",
                &keypath!["project", "setup", i],
                "a project.setup command is empty".to_owned(),
                None,
            );
        }
    }
    let idle_after = idle_after(cx, p.idle_after.as_ref());
    let project = ok.then(|| Project {
        name: p.name.clone(),
        domain,
        https: p.https.unwrap_or(false),
        port_range: port_range.unwrap_or(DEFAULT_PORT_RANGE),
        worktree_root: p.worktree_root.clone(),
        env_file: p.env_file.clone(),
        copy: p.copy.clone().unwrap_or_default(),
        setup: p.setup.clone().unwrap_or_default(),
        idle_after,
    });
    (project, port_range)
}

/// `[project] idle_after`: a duration of at least [`MIN_IDLE_AFTER`], or
/// `"off"` (as unset).
fn idle_after(cx: &mut Cx<'_>, d: Option<&raw::DurationText>) -> Option<Duration> {
    let d = d?;
    if d.0.trim().eq_ignore_ascii_case("off") {
        return None;
    }
    let path = keypath!["project", "idle_after"];
    let v = parse_duration(cx, &path, d)?;
    if v < MIN_IDLE_AFTER {
        cx.error(
            "idle-after-too-short",
            &path,
            format!(
                "idle_after `{}` is shorter than {}: a world would sleep between two requests",
                d.0,
                humantime::format_duration(MIN_IDLE_AFTER)
            ),
            Some(r#"write "20m" (a laptop's usual), at least "1s", or "off""#.to_owned()),
        );
        return None;
    }
    Some(v)
}
