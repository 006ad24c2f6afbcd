//! The fields `init` reads of one compose service (image, build,
//! environment, ports, depends_on, healthcheck, profiles, secrets and the
//! names it answers to), each with the line it came from.

use super::compose::{Port, Service, Text};
use super::merge::keyed_entries;
use super::yaml::{Node, Value};

/// The fields `init` reads of service `name`.
pub(super) fn service(name: &str, node: &Node) -> Service {
    let text = |n: &Node| n.scalar_text().map(|raw| Text { raw, line: n.line });
    let mut s = Service {
        name: name.to_owned(),
        line: node.line,
        aliases: vec![name.to_owned()],
        ..Service::default()
    };
    s.image = node.get("image").and_then(text);
    s.build = node.get("build").map(|b| match &b.value {
        Value::Map(_) => b.get("context").and_then(text).unwrap_or(Text {
            raw: ".".into(),
            line: b.line,
        }),
        _ => text(b).unwrap_or(Text {
            raw: ".".into(),
            line: b.line,
        }),
    });
    if let Some(env) = node.get("environment") {
        s.environment = keyed_entries(env)
            .into_iter()
            .map(|(k, v)| (k, text(&v)))
            .collect();
    }
    if let Some(ef) = node.get("env_file") {
        let one = |n: &Node| match &n.value {
            Value::Map(_) => text(n.get("path")?),
            _ => text(n),
        };
        s.env_files = match ef.as_seq() {
            Some(items) => items.iter().filter_map(one).collect(),
            None => one(ef).into_iter().collect(),
        };
    }
    if let Some(ports) = node.get("ports") {
        match ports.as_seq() {
            Some(items) => s.ports = items.iter().filter_map(port).collect(),
            // Left for `plan` to refuse with its line.
            None if ports.value != Value::Null => s.ports_not_a_list = Some(ports.line),
            None => {}
        }
    }
    if let Some(d) = node.get("depends_on") {
        // A list of names reads as keys with no value; a mapping gives
        // each a `condition`.
        s.depends_on = keyed_entries(d)
            .into_iter()
            .map(|(k, v)| (k, v.get("condition").and_then(Node::scalar_text)))
            .collect();
    }
    s.healthcheck = healthcheck(node);
    s.profiles = node
        .get("profiles")
        .and_then(Node::as_seq)
        .map(|p| {
            p.iter()
                .filter_map(Node::scalar_text)
                .filter(|p| !p.trim().is_empty())
                .collect()
        })
        .unwrap_or_default();
    s.secrets = node
        .get("secrets")
        .and_then(Node::as_seq)
        .map(|p| {
            p.iter()
                .filter_map(|n| n.scalar_text().or_else(|| n.get("source")?.scalar_text()))
                .collect()
        })
        .unwrap_or_default();
    s.aliases.extend(aliases(node));
    s
}

/// The healthcheck's `test` words, unless it is disabled or `NONE`.
fn healthcheck(node: &Node) -> Option<Vec<Text>> {
    let text = |n: &Node| n.scalar_text().map(|raw| Text { raw, line: n.line });
    let h = node.get("healthcheck")?;
    if h.get("disable")
        .is_some_and(|d| d.value == Value::Bool(true))
    {
        return None;
    }
    let test = h.get("test")?;
    let words: Vec<Text> = match test.as_seq() {
        Some(items) => items.iter().filter_map(text).collect(),
        None => text(test).into_iter().collect(),
    };
    words
        .first()
        .is_none_or(|w| w.raw != "NONE")
        .then_some(words)
}

/// The other names a service answers to on compose's network: its
/// `hostname`, `container_name` and network aliases.
fn aliases(node: &Node) -> Vec<String> {
    let mut names: Vec<String> = ["hostname", "container_name"]
        .iter()
        .filter_map(|key| node.get(key).and_then(Node::scalar_text))
        .collect();
    if let Some(nets) = node.get("networks").and_then(Node::as_map) {
        for (_, n) in nets {
            if let Some(a) = n.get("aliases").and_then(Node::as_seq) {
                names.extend(a.iter().filter_map(Node::scalar_text));
            }
        }
    }
    names
}

/// One `ports:` entry as written.
fn port(n: &Node) -> Option<Port> {
    if n.as_map().is_some() {
        return Some(Port {
            raw: n.get("target")?.scalar_text()?,
            long_protocol: Some(
                n.get("protocol")
                    .and_then(Node::scalar_text)
                    .unwrap_or_else(|| "tcp".into()),
            ),
            line: n.line,
        });
    }
    Some(Port {
        raw: n.scalar_text()?,
        long_protocol: None,
        line: n.line,
    })
}
