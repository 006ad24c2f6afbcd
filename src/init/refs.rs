//! Which of an app's `environment` values point at another service, and
//! the token each becomes: a resource's client URL (`${db.url}`), an
//! app's bare address (`${api.local_url}`), Kafka's bootstrap list, a host
//! in a variable that names one. Anything more is the value's own, which
//! is never copied, so such a value is listed by key and not rewritten.

use super::compose::Service;
use super::plan::{Planned, Role};

/// The `environment` of `s`: entries that name another service, as
/// tokens; the keys of the rest; and the resources they name (an app
/// named by URL needs no `depends_on`: its port is known before anything
/// starts, and adding one would make two apps that name each other a
/// cycle).
pub(super) fn environment(
    s: &Service,
    all: &[Service],
    planned: &[Planned],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> (Vec<(String, String)>, Vec<String>, Vec<usize>) {
    let mut env = Vec::new();
    let mut dropped = Vec::new();
    let mut refs = Vec::new();
    for (key, value) in &s.environment {
        let token = value
            .as_ref()
            .and_then(|v| v.value(lookup).ok())
            .and_then(|v| reference(key, &v.text, all, planned));
        // `PORT` and `BINKY_*` are Binky's to set.
        let binkys = key == "PORT" || key.starts_with("BINKY_");
        match token {
            Some((t, j)) if crate::config::validate::is_env_key(key) && !binkys => {
                env.push((key.clone(), t));
                if matches!(planned[j].role, Role::Resource { .. }) {
                    refs.push(j);
                }
            }
            _ => dropped.push(key.clone()),
        }
    }
    (env, dropped, refs)
}

/// Whether variable `key` names a host (so a value that is just a
/// service's name is its host, not a word such as `DB_CONNECTION=mysql`).
fn names_a_host(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    [
        "HOST", "HOSTNAME", "HOSTS", "SERVER", "SERVERS", "ADDR", "ADDRESS", "SEEDS", "BROKERS",
    ]
    .iter()
    .any(|end| k == *end || k.ends_with(&format!("_{end}")))
}

/// The token for value `v` of variable `key` when it points at another
/// service, with that service's index: a URL whose host is the service (a
/// resource's by its client's scheme and port, an app's as its bare
/// address), Kafka's `host:port` bootstrap list, or the bare host in a
/// variable that names a host. Anything more (a path, a query, another
/// port of the server) is the value's own, which is never copied, so such
/// a value is left out rather than half-rewritten.
fn reference(key: &str, v: &str, all: &[Service], planned: &[Planned]) -> Option<(String, usize)> {
    let v = v.trim();
    // A resource that shares another's slice is reached as that one.
    let find = |host: &str| {
        all.iter()
            .position(|s| s.aliases.iter().any(|a| a.eq_ignore_ascii_case(host)))
            .map(|j| planned[j].shares.unwrap_or(j))
    };
    if v.contains("://") {
        if v.contains(',') {
            return None;
        }
        let u = url::Url::parse(v).ok()?;
        let j = find(u.host_str()?)?;
        let p = &planned[j];
        let n = &p.name;
        let scheme = u.scheme().split('+').next().unwrap_or_default();
        let token = match &p.role {
            Role::Resource { client: c, .. } => {
                let ours = c.schemes.contains(&scheme)
                    && u.port().is_none_or(|port| port == c.port)
                    && u.query().is_none();
                ours.then(|| format!("${{{n}.url}}"))?
            }
            _ => {
                let bare = matches!(scheme, "http" | "https")
                    && matches!(u.path(), "" | "/")
                    && u.query().is_none()
                    && u.fragment().is_none();
                (bare && p.url.is_some()).then(|| format!("${{{n}.local_url}}"))?
            }
        };
        return Some((token, j));
    }
    // `host:port[,host:port]`, all one service.
    let hosts: Option<Vec<(usize, u16)>> = v
        .split(',')
        .map(|hp| {
            let (h, p) = hp.trim().rsplit_once(':')?;
            Some((find(h)?, p.parse::<u16>().ok()?))
        })
        .collect();
    if let Some(hs) = hosts
        && let Some(&(j, _)) = hs.first()
        && hs.iter().all(|(x, _)| *x == j)
    {
        let p = &planned[j];
        let n = &p.name;
        let token = match p.role {
            Role::Resource {
                implementation,
                client,
                ..
            } => (implementation == "kafka" && hs.iter().all(|(_, q)| *q == client.port))
                .then(|| format!("${{{n}.url}}"))?,
            _ if p.url.is_some() && hs.len() == 1 => format!("localhost:${{{n}.port}}"),
            _ => return None,
        };
        return Some((token, j));
    }
    if !names_a_host(key) {
        return None;
    }
    let j = find(v)?;
    let p = &planned[j];
    let token = match p.role {
        Role::Resource { .. } => format!("${{{}.host}}", p.name),
        _ if p.url.is_some() => "localhost".to_owned(),
        _ => return None,
    };
    Some((token, j))
}
