//! What each compose service becomes in `binky.toml`, decided in full
//! before a line is written: its Binky name, its role (a resource by the
//! catalog's image table, a tool, or an app run on the host), and for an
//! app what carries over (a URL for a published HTTP port, `depends_on`,
//! `env` entries that name other services as tokens, an HTTP health
//! probe). Interpolated text only decides here: what is kept is either
//! the file's own text with nothing substituted, or a token Binky makes.

use super::compose::{ComposeError, Project, Service, Text};
use super::interpolate;
use crate::adapters::catalog;
use crate::adapters::images::{self, ImageIs};
use std::collections::BTreeSet;

/// What a compose service becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A slice of a server the user runs.
    Resource {
        /// `adapter = "…"`.
        adapter: &'static str,
        /// The server's name.
        server: &'static str,
        /// An extension the image adds.
        adds: Option<&'static str>,
        /// The catalog's example `admin_url`.
        example_url: &'static str,
        /// The token field naming the slice inside the server (`prefix`),
        /// when the adapter has one.
        field: Option<&'static str>,
        /// The adapter implementation (`mysql` for `mariadb`): a world has
        /// one slice of each.
        implementation: &'static str,
        /// How an app's configuration reaches the server.
        client: catalog::ClientUrl,
    },
    /// A tool for a server (an admin UI): written commented.
    Tool {
        /// What it is.
        what: &'static str,
    },
    /// Built, or an image that is no known server: written commented, with
    /// a TODO for the command that runs it on the host.
    App,
}

/// One service, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Its name in compose.
    pub compose_name: String,
    /// Its name in `binky.toml`.
    pub name: String,
    /// What it becomes.
    pub role: Role,
    /// Compose profiles it sits behind (then it is written commented).
    pub profiles: Vec<String>,
    /// `image:` as written.
    pub image: Option<String>,
    /// `build:` context as written.
    pub build: Option<String>,
    /// `${env.<NAME>}` holding a resource's `admin_url`.
    pub admin_var: String,
    /// `url` label, for a service that publishes a TCP port.
    pub url: Option<String>,
    /// Compose published a port (which Binky's allocator replaces).
    pub published: bool,
    /// Named extra ports, for further published TCP ports.
    pub extra_ports: Vec<String>,
    /// Binky names it starts after.
    pub depends_on: Vec<String>,
    /// `health` path on its own port.
    pub health: Option<String>,
    /// Why compose's healthcheck did not carry over, when it did not.
    pub health_note: Option<&'static str>,
    /// `env` entries: key and the token it becomes.
    pub env: Vec<(String, String)>,
    /// `environment` keys not carried (their values are never written).
    pub env_dropped: Vec<String>,
    /// `env_file` paths as written.
    pub env_files: Vec<String>,
    /// `secrets:` names.
    pub secrets: Vec<String>,
    /// For a second resource on an adapter an earlier one uses: that one's
    /// index. A world has one slice per adapter, so this one is written
    /// commented, and what names it is pointed at the first.
    pub shares: Option<usize>,
}

impl Planned {
    /// Whether the block is written commented out.
    pub fn commented(&self) -> bool {
        !matches!(self.role, Role::Resource { .. })
            || !self.profiles.is_empty()
            || self.shares.is_some()
    }
}

/// Decides every service of `project`.
///
/// # Errors
/// An image or port that needs a variable compose requires (`${TAG:?…}`)
/// and neither `.env` nor the shell sets, or whose `$` compose cannot
/// read; a port compose would refuse.
pub(super) fn plan(
    project: &Project,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Planned>, ComposeError> {
    let file = &project.files[0];
    // Profiles compose starts without being asked: `COMPOSE_PROFILES`.
    let active: Vec<String> = lookup("COMPOSE_PROFILES")
        .unwrap_or_default()
        .split(',')
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let mut taken = BTreeSet::new();
    let mut labels = BTreeSet::new();
    // `my-db` and `my_db` are one variable name: each resource its own.
    let mut admin_vars = BTreeSet::new();
    let mut out: Vec<Planned> = Vec::new();
    for s in &project.services {
        let role = role(file, s, lookup)?;
        let name = unique(binky_name(&s.name), &mut taken);
        let serving = serving(file, s, &role, lookup)?;
        out.push(Planned {
            compose_name: s.name.clone(),
            admin_var: unique(
                format!("{}_ADMIN_URL", crate::slug::env_key(&name)),
                &mut admin_vars,
            ),
            url: serving
                .serves
                .then(|| unique(crate::slug::dns_label_hint(&name), &mut labels)),
            name,
            role,
            profiles: if s.profiles.iter().any(|p| active.contains(p)) {
                Vec::new()
            } else {
                s.profiles.clone()
            },
            image: s.image.as_ref().map(|t| t.raw.clone()),
            build: s.build.as_ref().map(|t| t.raw.clone()),
            published: !s.ports.is_empty(),
            extra_ports: serving.extra_ports,
            depends_on: Vec::new(),
            health: serving.health,
            health_note: serving.health_note,
            env: Vec::new(),
            env_dropped: Vec::new(),
            env_files: s.env_files.iter().map(|t| t.raw.clone()).collect(),
            secrets: s.secrets.clone(),
            shares: None,
        });
    }
    share_slices(&mut out);
    link(project, &mut out, lookup);
    Ok(out)
}

/// What service `s` is: a server of the catalog's image table (unless it
/// is built), a tool, or an app.
fn role(
    file: &std::path::Path,
    s: &Service,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Role, ComposeError> {
    let image = match &s.image {
        Some(t) => Some(t.value(lookup).map_err(|e| {
            let hint = match e {
                interpolate::InterpError::Required { .. } => "set the variable in .env beside the compose file or in your shell, as `docker compose` needs too",
                interpolate::InterpError::Invalid(_) => "fix the `${…}` there (`$$` writes a literal `$`)",
            };
            ComposeError::at(
                file,
                Some(t.line),
                format!("the image of service `{}`: {e}", s.name),
                hint,
            )
        })?),
        None => None,
    };
    let rule = image.as_ref().and_then(|i| images::image(&i.text));
    Ok(match (rule.map(|r| r.is), &s.build) {
        (
            Some(ImageIs::Server {
                adapter,
                server,
                adds,
            }),
            None,
        ) => {
            let entry = catalog::find(adapter);
            Role::Resource {
                adapter,
                server,
                adds,
                example_url: entry.map_or("", |e| e.example_url),
                field: entry.and_then(|e| e.fields.first().copied()),
                implementation: entry.map_or(adapter, |e| e.name),
                client: entry.map_or(catalog::ClientUrl::NONE, |e| e.client),
            }
        }
        (Some(ImageIs::Tool { what }), None) => Role::Tool { what },
        _ => Role::App,
    })
}

/// How a tool or an app serves: whether it publishes a TCP port (then it
/// gets a `url`), its further ports, and its health probe.
struct Serving {
    serves: bool,
    extra_ports: Vec<String>,
    health: Option<String>,
    health_note: Option<&'static str>,
}

fn serving(
    file: &std::path::Path,
    s: &Service,
    role: &Role,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Serving, ComposeError> {
    let targets = tcp_targets(file, s, lookup)?;
    let serves = !matches!(role, Role::Resource { .. }) && !targets.is_empty();
    let check = match (&s.healthcheck, role) {
        (Some(words), Role::App | Role::Tool { .. }) => Some(http_check(words, &s.aliases, lookup)),
        _ => None,
    };
    // The port the app serves on: the one its healthcheck asks, else the
    // first that is no debugger's.
    let primary = match &check {
        Some(Ok((port, _))) if targets.contains(port) => Some(*port),
        _ => targets
            .iter()
            .copied()
            .find(|p| !NOT_PRIMARY.contains(p))
            .or(targets.first().copied()),
    };
    let extra_ports = if serves {
        targets
            .iter()
            .filter(|t| Some(**t) != primary)
            .map(|t| format!("port-{t}"))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    } else {
        Vec::new()
    };
    let (health, health_note) = match check {
        // No port of its own: nothing a probe could ask.
        _ if !serves => (None, None),
        Some(Ok((port, path))) if Some(port) == primary => (Some(path), None),
        Some(Ok(_)) => (None, Some(NOT_OWN_PORT)),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    };
    Ok(Serving {
        serves,
        extra_ports,
        health,
        health_note,
    })
}

/// The container ports `s` publishes over TCP, each once, in order.
///
/// # Errors
/// A `ports:` that is not a list, or an entry compose would refuse.
fn tcp_targets(
    file: &std::path::Path,
    s: &Service,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<u16>, ComposeError> {
    let port_err = |line, why: String| {
        ComposeError::at(
            file,
            Some(line),
            format!("a `ports:` entry of service `{}`: {why}", s.name),
            "write it as compose takes it: \"[HOST_IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]\", or the long form with `target:`",
        )
    };
    if let Some(line) = s.ports_not_a_list {
        return Err(port_err(line, "`ports:` must be a list".into()));
    }
    let mut targets = Vec::new();
    for p in &s.ports {
        let text = interpolate::interpolate(&p.raw, lookup)
            .map_err(|e| port_err(p.line, e.to_string()))?;
        let (target, protocol) = super::ports::parse_port(&text.text, p.long_protocol.as_deref())
            .map_err(|why| port_err(p.line, why))?;
        if protocol == "tcp" && !targets.contains(&target) {
            targets.push(target);
        }
    }
    Ok(targets)
}

/// One slice per adapter and world: the first live resource of each
/// implementation keeps it, later ones share it.
fn share_slices(out: &mut [Planned]) {
    let mut first: Vec<(&'static str, usize)> = Vec::new();
    for (i, p) in out.iter_mut().enumerate() {
        let Role::Resource { implementation, .. } = p.role else {
            continue;
        };
        if !p.profiles.is_empty() {
            continue;
        }
        match first.iter().find(|(a, _)| *a == implementation) {
            Some((_, j)) => p.shares = Some(*j),
            None => first.push((implementation, i)),
        }
    }
}

/// What refers to whom, once every service's name and role is known: an
/// app's `env` tokens and `depends_on`; a resource's environment, which
/// configured that server and is listed as not carried.
fn link(project: &Project, out: &mut [Planned], lookup: &dyn Fn(&str) -> Option<String>) {
    for (i, s) in project.services.iter().enumerate() {
        if matches!(out[i].role, Role::Resource { .. }) {
            out[i].env_dropped = s.environment.iter().map(|(k, _)| k.clone()).collect();
            continue;
        }
        let (env, dropped, refs) = super::refs::environment(s, &project.services, out, lookup);
        let mut deps: Vec<String> = Vec::new();
        for (d, _) in &s.depends_on {
            if let Some(j) = project.services.iter().position(|x| x.name == *d) {
                deps.push(out[j].name.clone());
            }
        }
        for r in refs {
            if !deps.contains(&out[r].name) && r != i {
                deps.push(out[r].name.clone());
            }
        }
        let p = &mut out[i];
        p.env = env;
        p.env_dropped = dropped;
        p.depends_on = deps;
    }
}

/// A compose name as a Binky service name: lowercase, `[a-z0-9_-]`,
/// starting with a letter, not a token head (`self`, `env`, …).
fn binky_name(compose: &str) -> String {
    let mut n: String = compose
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !n.starts_with(|c: char| c.is_ascii_lowercase()) {
        n.insert_str(0, "svc-");
    }
    if crate::config::validate::RESERVED_NAMES.contains(&n.as_str()) {
        n.push_str("-svc");
    }
    n.truncate(60);
    n
}

/// `name`, or `name-2`, `name-3`… when taken; records the one returned.
fn unique(name: String, taken: &mut BTreeSet<String>) -> String {
    let mut n = name.clone();
    let mut i = 2;
    while taken.contains(&n) {
        n = format!("{name}-{i}");
        i += 1;
    }
    taken.insert(n.clone());
    n
}

/// Ports that are not the one an app serves plain HTTP on, which the
/// proxy forwards to: debuggers' (Node's inspector, debugpy, the JVM's
/// JDWP, Delve) and TLS's.
const NOT_PRIMARY: &[u16] = &[9229, 9230, 5678, 5005, 2345, 443, 8443];

const NOT_HTTP: &str = "compose's healthcheck is not an HTTP check";
const NOT_OWN_PORT: &str = "compose's healthcheck asks another port than the one it serves on";

/// The port and path of compose's healthcheck when it is a plain HTTP
/// request to the container itself (`localhost`, a loopback address, or
/// one of its own names; `curl localhost:3000/up` with no scheme too),
/// written with nothing substituted; else why it cannot become a `health`
/// probe.
fn http_check(
    words: &[Text],
    own: &[String],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(u16, String), &'static str> {
    let substituted = words
        .iter()
        .any(|w| w.value(lookup).map_or(true, |v| v.substituted));
    if substituted {
        return Err("compose's healthcheck uses variables, which are not copied");
    }
    let text: Vec<&str> = words.iter().map(|w| w.raw.as_str()).collect();
    let body = match text.first() {
        Some(&"CMD") | Some(&"CMD-SHELL") => text[1..].join(" "),
        _ => text.join(" "),
    };
    let local = |h: &str| {
        matches!(h, "localhost" | "127.0.0.1" | "0.0.0.0" | "[::1]")
            || own.iter().any(|a| a.eq_ignore_ascii_case(h))
    };
    let u = body
        .split(|c: char| c.is_whitespace() || c == '\'' || c == '"')
        .filter_map(|w| {
            if w.starts_with("http://") || w.starts_with("https://") {
                return url::Url::parse(w).ok();
            }
            // `localhost:3000/up`: curl and wget take it as http.
            let host = w.split([':', '/']).next()?;
            (w.contains(':') && local(host))
                .then(|| url::Url::parse(&format!("http://{w}")).ok())
                .flatten()
        })
        .next()
        .ok_or(NOT_HTTP)?;
    if u.scheme() != "http" {
        return Err("compose's healthcheck asks HTTPS, and a health probe speaks plain HTTP");
    }
    let path = u.path();
    if !u.host_str().is_some_and(local) || path.contains(['$', '"', '\\']) {
        return Err(NOT_HTTP);
    }
    Ok((u.port_or_known_default().ok_or(NOT_HTTP)?, path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_binky_names() {
        assert_eq!(binky_name("web"), "web");
        assert_eq!(binky_name("My.Service"), "my-service");
        assert_eq!(binky_name("1st"), "svc-1st");
        assert_eq!(binky_name("env"), "env-svc");
        let mut t = BTreeSet::new();
        assert_eq!(unique("a".into(), &mut t), "a");
        assert_eq!(unique("a".into(), &mut t), "a-2");
    }

    fn words(ws: &[&str]) -> Vec<Text> {
        ws.iter()
            .map(|w| Text {
                raw: (*w).to_owned(),
                line: 1,
            })
            .collect()
    }

    #[test]
    fn http_healthchecks_carry_their_port_and_path() {
        let none = |_: &str| None;
        let own = vec!["web".to_owned()];
        let h = |ws: &[&str]| http_check(&words(ws), &own, &none);
        assert_eq!(
            h(&["CMD", "curl", "-f", "http://localhost:8000/health"]),
            Ok((8000, "/health".to_owned()))
        );
        assert_eq!(
            h(&["CMD-SHELL", "wget -qO- http://127.0.0.1/up || exit 1"]),
            Ok((80, "/up".to_owned()))
        );
        assert_eq!(
            h(&["curl -f 'http://localhost:3000/'"]),
            Ok((3000, "/".to_owned()))
        );
        assert_eq!(h(&["CMD", "curl", "http://other:8000/x"]), Err(NOT_HTTP));
        assert_eq!(h(&["CMD", "pg_isready"]), Err(NOT_HTTP));
        assert!(h(&["CMD", "curl", "http://localhost:${P}/x"]).is_err());
        assert_eq!(
            h(&["CMD-SHELL", "curl localhost:3000/health | grep -q OK"]),
            Ok((3000, "/health".to_owned()))
        );
        assert_eq!(
            h(&["wget --spider http://web:5000/status"]),
            Ok((5000, "/status".to_owned()))
        );
        assert!(
            h(&["curl -f https://localhost:3000/health"]).is_err(),
            "https"
        );
    }
}
