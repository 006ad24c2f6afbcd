//! `${...}` tokens: each names a service, field and port that exist, and a
//! service's tokens name only what it depends on.

use super::unknown_tokens::check_unowned_token;
use super::*;

/// Every string field of a service that may carry tokens, with its key path.
pub(super) fn token_fields<'a>(name: &'a str, svc: &'a Service) -> Vec<(Vec<Step>, &'a str)> {
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
            for (k, v) in &r.options {
                option_strings(
                    keypath!["services", name, "options", k.as_str()].to_vec(),
                    v,
                    &mut out,
                );
            }
        }
    }
    out
}

/// Every string in an option's value, at any depth, with its key path.
fn option_strings<'a>(path: Vec<Step>, v: &'a toml::Value, out: &mut Vec<(Vec<Step>, &'a str)>) {
    match v {
        toml::Value::String(s) => out.push((path, s)),
        toml::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let mut p = path.clone();
                p.push(Step::Index(i));
                option_strings(p, x, out);
            }
        }
        toml::Value::Table(t) => {
            for (k, x) in t {
                let mut p = path.clone();
                p.push(Step::from(k.as_str()));
                option_strings(p, x, out);
            }
        }
        _ => {}
    }
}

pub(super) fn health_key(h: &Health) -> (Option<&'static str>, &str) {
    match &h.probe {
        Probe::Http(v) => (Some("http"), v),
        Probe::Tcp(v) => (Some("tcp"), v),
        Probe::Cmd(v) => (Some("cmd"), v),
    }
}

pub(super) fn check_tokens(cx: &mut Cx<'_>, range: Option<PortRange>, known: Known<'_>) {
    for (name, svc) in known.services {
        for (path, text) in token_fields(name, svc) {
            for occ in occurrences(text) {
                let at = At {
                    value: text,
                    start: occ.start,
                    end: occ.end,
                };
                check_token(cx, known, Some((name, svc)), &path, at, occ.body);
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

/// Tokens in `[agents] verify`, `[project] setup` and the project's
/// `[env]`: they render with no `self`, against the same services.
pub(super) fn check_unowned_tokens(
    cx: &mut Cx<'_>,
    agents: &Agents,
    setup: &[String],
    env: &IndexMap<String, String>,
    known: Known<'_>,
) {
    let verify = agents
        .verify
        .iter()
        .enumerate()
        .map(|(i, t)| (keypath!["agents", "verify", i].to_vec(), t))
        .chain(
            setup
                .iter()
                .enumerate()
                .map(|(i, t)| (keypath!["project", "setup", i].to_vec(), t)),
        );
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
            check_token(cx, known, None, &path, at, occ.body);
            // `setup` runs before any slice is made: a resource's fields
            // have no value yet, and running `up` again never gives them one.
            if matches!(path.get(1), Some(Step::Key(k)) if k == "setup")
                && let Some(Token::Service(svc, _)) = classify(occ.body)
                && known
                    .services
                    .get(svc)
                    .is_some_and(|s| s.resource().is_some())
            {
                cx.push_at(
                    (Severity::Error, "token-before-slice"),
                    &path,
                    Some(at),
                    format!(
                        "`{}` names resource `{svc}`, whose slice is made after setup runs: it has no value then",
                        at.text()
                    ),
                    Some(format!(
                        "use it in `{svc}`'s migrate or seed, or in a service's cmd; setup gets ports, BINKY_* and [env]"
                    )),
                );
            }
        }
    }
}

/// One `${…}` in a string of service `owner` (`None`: in `[agents]`).
pub(super) fn check_token(
    cx: &mut Cx<'_>,
    known: Known<'_>,
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
            Some((name, svc)) => check_field(
                cx,
                Reference {
                    user: name,
                    target: name,
                    service: svc,
                    is_self: true,
                },
                f,
                path,
                at,
            ),
            None => cx.push_at(
                (Severity::Warning, "self-outside-service"),
                path,
                Some(at),
                format!(
                    "`{raw}` is in {place}, where there is no `self`, so it is left as written"
                ),
                Some("name the service instead, e.g. `${api.url}`".to_owned()),
            ),
        },
        Some(Token::Service(target, f)) => match known.services.get(target) {
            Some(t) => {
                check_field(
                    cx,
                    Reference {
                        user,
                        target,
                        service: t,
                        is_self: false,
                    },
                    f,
                    path,
                    at,
                );
                if let Some((name, svc)) = owner
                    && t.resource().is_some()
                    && target != name
                    && svc.process().is_some()
                    && !depends_transitively(known.services, name, target)
                {
                    not_depended(cx, name, target, path, at);
                }
            }
            // Declared but invalid (its own error says why): nothing to add.
            None if known.declared.contains(target) => {}
            None => unknown_service(cx, known.declared, path, at, body, target),
        },
        Some(Token::Env(var)) if cx.env_unset(var) => cx.push_at(
            (Severity::Warning, "unset-env"),
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
        None => check_unowned_token(cx, known, owner, path, at, body),
    }
}

/// A process uses a resource's token without depending on it, so it may
/// start before the slice exists.
fn not_depended(cx: &mut Cx<'_>, name: &str, target: &str, path: &[Step], at: At<'_>) {
    let raw = at.text();
    cx.push_at(
        (Severity::Warning, "resource-not-depended"),
        path,
        Some(at),
        format!("`{name}` uses `{raw}` but does not depend on `{target}`, so it may start before the slice exists"),
        Some(format!("add \"{target}\" to services.{name}.depends_on")),
    );
}

/// A token naming `target`, which is not a service: the nearest declared
/// name, if one is near.
fn unknown_service(
    cx: &mut Cx<'_>,
    declared: &BTreeSet<&str>,
    path: &[Step],
    at: At<'_>,
    body: &str,
    target: &str,
) {
    let raw = at.text();
    let hint = suggest(target, declared.iter().copied())
        .map(|m| format!("did you mean `${{{}}}`?", body.replacen(target, m, 1)))
        .or_else(|| Some("it is left as written when rendered".to_owned()));
    cx.push_at(
        (Severity::Warning, "unknown-service-token"),
        path,
        Some(at),
        format!("`{raw}` names `{target}`, which is not a service"),
        hint,
    );
}

/// A token's reference to a service's field: who writes it (`user`, a
/// service or a place such as `[env]`), the service it names, and whether
/// it named it as `self`.
#[derive(Clone, Copy)]
pub(super) struct Reference<'a> {
    pub(super) user: &'a str,
    pub(super) target: &'a str,
    pub(super) service: &'a Service,
    pub(super) is_self: bool,
}

/// Checks field `f` of the service `r` names, for the token at `at`.
pub(super) fn check_field(
    cx: &mut Cx<'_>,
    r: Reference<'_>,
    f: Field<'_>,
    path: &[Step],
    at: At<'_>,
) {
    let Reference {
        user,
        target,
        service: t,
        is_self,
    } = r;
    let raw = at.text();
    // A token in the service's own strings (`self`) gets its own code: the
    // fix is in the same table.
    let (who, no_port) = if is_self {
        (format!("`{user}`"), "self-port-without-port")
    } else {
        (format!("service `{target}`"), "service-without-port")
    };
    match f {
        Field::Ports(port) => check_port_name(cx, r, port, &who, path, at),
        Field::Port | Field::LocalUrl => {
            if t.resource().is_some() {
                cx.push_at(
                    (Severity::Warning, "resource-has-no-port"),
                    path,
                    Some(at),
                    format!("`{raw}`: `{target}` is a resource; it has an address, not a port"),
                    Some(format!("use `${{{target}.url}}`")),
                );
            } else if !t.has_port() {
                cx.push_at(
                    (Severity::Warning, no_port),
                    path,
                    Some(at),
                    format!("`{raw}`: {who} has no port (it declares neither `url` nor `ports`), so the token is left as written"),
                    Some(format!("add url = \"{target}\" or ports = [\"http\"] to services.{target}")),
                );
            }
        }
        Field::Slice(field) => check_slice_field(cx, r, field, &who, path, at),
        Field::Url | Field::Host => {
            if t.process().is_some() && !t.has_port() {
                cx.push_at(
                    (Severity::Warning, no_port),
                    path,
                    Some(at),
                    format!("`{raw}`: {who} has no url or port, so the token is left as written"),
                    Some(format!("add url = \"{target}\" to services.{target}")),
                );
            }
        }
    }
}

/// `${SVC.ports.NAME}`: the service declares that port.
fn check_port_name(
    cx: &mut Cx<'_>,
    r: Reference<'_>,
    port: &str,
    who: &str,
    path: &[Step],
    at: At<'_>,
) {
    let (t, target, raw) = (r.service, r.target, at.text());
    if t.resource().is_some() || !t.port_names().iter().any(|p| p == port) {
        let declared = t.port_names();
        let hint = if declared.is_empty() {
            format!("add ports = [\"{port}\"] to services.{target}")
        } else {
            format!("declared ports of `{target}`: {}", declared.join(", "))
        };
        cx.push_at(
            (Severity::Error, "unknown-port"),
            path,
            Some(at),
            format!("`{raw}`: {who} declares no port named `{port}`"),
            Some(hint),
        );
    }
}

/// `${SVC.FIELD}` of a slice (`prefix`, `bucket`): the service is a
/// resource whose adapter fills that field (an external one may fill any).
fn check_slice_field(
    cx: &mut Cx<'_>,
    r: Reference<'_>,
    field: &str,
    who: &str,
    path: &[Step],
    at: At<'_>,
) {
    let (t, target, raw) = (r.service, r.target, at.text());
    let adapter = t.resource().map(|r| r.adapter.as_str());
    let entry = adapter.and_then(crate::adapters::catalog::find);
    let known = entry.map_or(&[][..], |e| e.fields);
    // An external adapter may fill any field; a built-in one only
    // those the catalog lists.
    if known.contains(&field) || (adapter.is_some() && entry.is_none()) {
        return;
    }
    let (msg, hint) = match adapter {
        None => (
            format!("`{raw}`: {who} is a process; only a resource's slice has a `{field}`"),
            None,
        ),
        Some(a) => (
            format!("`{raw}`: the {a} adapter's slices have no `{field}`"),
            Some(if known.is_empty() {
                format!("use `${{{target}.url}}`")
            } else {
                format!("the {a} adapter's slices have {}", known.join(", "))
            }),
        ),
    };
    cx.push_at(
        (Severity::Error, "unknown-field"),
        path,
        Some(at),
        msg,
        hint,
    );
}

/// Whether `from` reaches `to` through depends_on edges.
pub(super) fn depends_transitively(
    services: &IndexMap<String, Service>,
    from: &str,
    to: &str,
) -> bool {
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

/// The processes of `cfg` that use any of `resources`, by name: each that
/// names one in a token of its own fields (`cmd`, `env`, `health`, `cwd`)
/// or depends on one, and every process that depends on those in turn —
/// or every process, when the project's `[env]` (which they all get) names
/// one. What `binky reset` stops while it remakes a slice: a service that
/// only names a slice's URL without `depends_on` (a lint warns of it) holds
/// connections to it all the same. Naming another *process* is no use of
/// it here: its port stays the same through a restart.
pub fn users_of(cfg: &Config, resources: &[String]) -> BTreeSet<String> {
    let names = |text: &str| -> Vec<String> {
        occurrences(text)
            .filter_map(|o| match classify(o.body) {
                Some(Token::Service(svc, _)) => Some(svc.to_owned()),
                _ => None,
            })
            .collect()
    };
    let processes = cfg
        .services
        .iter()
        .filter(|(_, s)| s.process().is_some())
        .map(|(n, _)| n.clone());
    if cfg
        .env
        .values()
        .any(|v| names(v).iter().any(|n| resources.contains(n)))
    {
        return processes.collect();
    }
    // Each process's direct uses: what it depends on and what it names.
    let uses: Vec<(String, BTreeSet<String>)> = cfg
        .services
        .iter()
        .filter(|(_, s)| s.process().is_some())
        .map(|(n, s)| {
            let mut u: BTreeSet<String> = s.depends_on().iter().cloned().collect();
            for (_, text) in token_fields(n, s) {
                u.extend(names(text).into_iter().filter(|t| resources.contains(t)));
            }
            (n.clone(), u)
        })
        .collect();
    let mut used: BTreeSet<String> = resources.iter().cloned().collect();
    let mut out = BTreeSet::new();
    // Until nothing new: a process using anything used is itself used.
    loop {
        let before = out.len();
        for (n, u) in &uses {
            if !out.contains(n) && u.iter().any(|x| used.contains(x)) {
                out.insert(n.clone());
                used.insert(n.clone());
            }
        }
        if out.len() == before {
            return out;
        }
    }
}
