//! Warnings for valid files: literal ports, health targets that miss the
//! service's own port, credentials written into the committed file.

use super::*;

/// Literal numbers in `cmd` that fall inside the project's port range: a port
/// hard-coded where the allocator's should be.
pub(super) fn check_literal_ports(
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
                    (Severity::Warning, "literal-port"),
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
pub(super) fn check_health_target(cx: &mut Cx<'_>, name: &str, svc: &Service, h: &Health) {
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
            (Severity::Warning, "health-port-mismatch"),
            &path,
            Some(at),
            format!("health probe of `{name}` targets `{other}`, another service's port, so it can pass while `{name}` is down"),
            Some("probe ${self.port}".to_owned()),
        );
        return;
    }
    if let Some((port, at)) = literal_port_in(target) {
        cx.push_at(
            (Severity::Warning, "health-port-mismatch"),
            &path,
            Some(at),
            format!("health probe of `{name}` targets the literal port {port}, not the port Binky assigns `{name}`"),
            Some("use ${self.port}: each world gets its own port".to_owned()),
        );
    }
}

/// The port in `host:port` or `scheme://host:port/…`, if written literally,
/// and where it is in `target`.
pub(super) fn literal_port_in(target: &str) -> Option<(u32, At<'_>)> {
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

pub(super) const SECRET_KEY_WORDS: &[&str] = &["PASSWORD", "PASSWD", "SECRET", "TOKEN", "KEY"];

/// A literal credential in `admin_url` or `env`. Messages name the key, never
/// the value.
pub(super) fn check_credentials(cx: &mut Cx<'_>, raw: &RawConfig) {
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
pub(super) fn url_has_literal_password(s: &str) -> bool {
    // The lenient reader: a value holding `${…}` is no URL yet.
    match crate::address::userinfo(s) {
        Some((_, Some(pw))) => !pw.is_empty() && !pw.contains("${"),
        _ => false,
    }
}
