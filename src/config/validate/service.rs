//! Services: processes (command, health probe, restart policy, watch) and
//! resources (adapter, options, data commands), and the `[agents]` table.

use super::*;
use crate::config::render::value_has_binky_token;

pub(super) fn build_service(cx: &mut Cx<'_>, name: &str, rs: &RawService) -> Option<Service> {
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

pub(super) fn build_process(cx: &mut Cx<'_>, name: &str, cmd: &str, rs: &RawService) -> Process {
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
    check_port_names(cx, name, &ports);
    let env = build_env(cx, &keypath!["services", name, "env"], rs.env.as_ref());
    let depends_on = rs.depends_on.clone().unwrap_or_default();
    let health = rs.health.as_ref().and_then(|h| build_health(cx, name, h));
    let restart = match &rs.restart {
        None => Some(Restart::default()),
        Some(r) => build_restart(cx, name, r),
    };
    let stop_signal = rs
        .stop_signal
        .as_ref()
        .map_or(Some(StopSignal::default()), |s| {
            build_stop_signal(cx, name, s)
        });
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
        sleep: rs.sleep.unwrap_or(true),
    }
}

/// Each extra port's name: a service-style name, declared once.
fn check_port_names(cx: &mut Cx<'_>, name: &str, ports: &[String]) {
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
}

/// `stop_signal`: one Binky knows (`None` after saying which it does).
fn build_stop_signal(cx: &mut Cx<'_>, name: &str, s: &str) -> Option<StopSignal> {
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

pub(super) fn build_health(cx: &mut Cx<'_>, name: &str, h: &RawHealth) -> Option<Health> {
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

pub(super) fn build_restart(cx: &mut Cx<'_>, name: &str, r: &RawRestart) -> Option<Restart> {
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
pub(super) fn check_adapter_options(
    cx: &mut Cx<'_>,
    name: &str,
    adapter: &str,
    options: Option<&toml::Table>,
) {
    let Some(options) = options else { return };
    let Some(entry) = crate::adapters::catalog::find(adapter) else {
        // An external adapter reads what it likes; Binky reads `timeout`.
        if let Some(v) = options.get("timeout")
            && !value_has_binky_token(v)
            && let Err(want) = crate::adapters::catalog::OptionKind::Duration.check(v)
        {
            cx.error(
                "invalid-duration",
                &keypath!["services", name, "options", "timeout"],
                format!("options.timeout must be {want}"),
                None,
            );
        }
        return;
    };
    for (key, v) in options {
        let Some(spec) = entry.options.iter().find(|o| o.name == key) else {
            let known: Vec<&str> = entry.options.iter().map(|o| o.name).collect();
            let hint = match suggest(key, known.iter().copied()) {
                Some(s) => Some(format!("did you mean `{s}`?")),
                None if known.is_empty() => Some(format!("the {adapter} adapter reads no options")),
                None => Some(format!("the {adapter} adapter reads {}", known.join(", "))),
            };
            cx.error(
                "unknown-option",
                &keypath!["services", name, "options", key.as_str()],
                format!("the {adapter} adapter has no option `{key}`"),
                hint,
            );
            continue;
        };
        // A value with a token is known only once rendered: `up` checks it.
        if value_has_binky_token(v) {
            continue;
        }
        if let Err(want) = spec.kind.check(v) {
            let hint = match spec.kind {
                crate::adapters::catalog::OptionKind::Choice(c) => {
                    Some(format!("e.g. {key} = \"{}\"", c[0]))
                }
                _ => None,
            };
            cx.error(
                "invalid-option",
                &keypath!["services", name, "options", key.as_str()],
                format!(
                    "options.{key} for the {adapter} adapter ({}) must be {want}",
                    spec.help
                ),
                hint,
            );
        }
    }
}

/// An adapter that is neither built in nor an external
/// `binky-adapter-<name>` on this `PATH` is one `up` refuses: an error when
/// the name is a near miss of a built-in one (`postgress`), else a warning,
/// since the external adapter may be installed before `up` runs.
fn check_adapter_exists(cx: &mut Cx<'_>, name: &str, adapter: &str) {
    use crate::adapters::{catalog, external};
    if !is_service_name(adapter)
        || catalog::find(adapter).is_some()
        || external::External::find(adapter, None).is_some()
    {
        return;
    }
    let path = keypath!["services", name, "adapter"];
    let external = format!("{}{adapter}", external::PREFIX);
    match suggest(adapter, catalog::names()) {
        Some(near) => cx.error(
            "unknown-adapter",
            &path,
            format!("no adapter named `{adapter}`"),
            Some(format!(
                "did you mean `{near}`? (an external adapter would be an executable {external} on PATH)"
            )),
        ),
        None => cx.warn(
            "unknown-adapter",
            &path,
            format!(
                "no adapter named `{adapter}` is built in, and no {external} is on PATH: `up` will refuse it until one is"
            ),
            Some(format!(
                "built-in adapters: {}",
                catalog::names().join(", ")
            )),
        ),
    }
}

pub(super) fn build_resource(
    cx: &mut Cx<'_>,
    name: &str,
    adapter: &str,
    rs: &RawService,
) -> Resource {
    if !is_service_name(adapter) {
        cx.error(
            "invalid-name",
            &keypath!["services", name, "adapter"],
            format!("adapter name `{adapter}` is not valid (lowercase letters, digits, `-`, `_`)"),
            None,
        );
    }
    check_adapter_exists(cx, name, adapter);
    check_resource_admin_url(cx, name, adapter, rs);
    let clone_inputs = rs.clone_inputs.clone().unwrap_or_default();
    check_data_keys(cx, name, rs, &clone_inputs);
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

/// A resource's `admin_url`: present where its adapter needs one, and (when
/// literal, or made of `${env.NAME}`s this environment sets) a URL the
/// adapter takes.
fn check_resource_admin_url(cx: &mut Cx<'_>, name: &str, adapter: &str, rs: &RawService) {
    if rs.admin_url.is_none()
        && crate::adapters::catalog::find(adapter).is_some_and(|e| e.facts.needs_admin_url())
    {
        cx.error(
            "missing-admin-url",
            &keypath!["services", name, "adapter"],
            format!("the {adapter} adapter needs admin_url: which server, as whom"),
            Some(format!(
                "add admin_url = \"${{env.{}_ADMIN_URL}}\" and export that variable in your shell",
                crate::slug::env_key(name)
            )),
        );
    }
    if let (Some(url), Some(e)) = (&rs.admin_url, crate::adapters::catalog::find(adapter)) {
        // What `up` would refuse, said before a worktree is made: a literal
        // URL, or one made of `${env.NAME}`s with the values this
        // environment gives them (named by their tokens, never shown).
        let (value, from) = if crate::config::render::has_binky_token(url) {
            (
                cx.env_rendered(url),
                format!(" (admin_url = \"{url}\" as this environment sets it)"),
            )
        } else {
            (Some(url.clone()), String::new())
        };
        if let Some(value) = value
            && let Err(why) = e.check_admin_url(&crate::address::AdminUrl::new(value.as_str()))
        {
            let why = crate::secrets::redact_url(&why, Some(&value));
            cx.error(
                "invalid-admin-url",
                &keypath!["services", name, "admin_url"],
                format!("{adapter}: {why}{from}"),
                None,
            );
        }
    }
}

/// A resource's data keys: `clone_from` a short name, `migrate` and `seed`
/// not empty, `clone_inputs` globs that mean something with `clone_from`.
fn check_data_keys(cx: &mut Cx<'_>, name: &str, rs: &RawService, clone_inputs: &[String]) {
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
        clone_inputs,
        false,
    );
}

pub(super) fn build_agents(
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
