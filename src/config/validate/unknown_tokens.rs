//! A `${…}` whose head is Binky's (`self`, a service, `env`, `worktree`,
//! `project`) but which names nothing Binky knows: an error, with a hint
//! drawn from what that service really has.

use super::*;

/// Fields a process's token may ask for, as written after `SVC.`.
const SERVICE_FIELDS: &[&str] = &["port", "ports.NAME", "url", "local_url", "host"];

/// The fields `${SVC.…}` may name for `svc`: a process's
/// [`SERVICE_FIELDS`]; a resource's address (`url`, `host`) and the fields
/// its adapter fills, from the catalog (every slice field for an external
/// adapter, which may fill any).
fn fields_of(svc: &Service) -> Vec<&'static str> {
    let Some(r) = svc.resource() else {
        return SERVICE_FIELDS.to_vec();
    };
    let mut out = vec!["url", "host"];
    match crate::adapters::catalog::find(&r.adapter) {
        Some(e) => out.extend(e.fields),
        None => out.extend(crate::config::render::SLICE_FIELDS),
    }
    out
}

/// A `${HEAD.REST}` that `classify` rejects but whose head is Binky's (`self`,
/// `env`, `worktree`, `project`, or a service): almost surely a typo, which
/// would otherwise be left in the rendered text unnoticed. An error: every
/// world would get the same literal text where a world's own value was
/// meant (`${cache.prefx}` for a prefix is the very sharing worlds exist to
/// prevent). The hint lists the fields
/// that service really has; a resource's list is short, so it is given in
/// full rather than a guess (`${mq.vhost}` is not `${mq.host}`).
pub(super) fn check_unowned_token(
    cx: &mut Cx<'_>,
    known: Known<'_>,
    owner: Option<(&str, &Service)>,
    path: &[Step],
    at: At<'_>,
    body: &str,
) {
    let raw = at.text();
    let Some((head, rest)) = body.split_once('.') else {
        return;
    };
    // The service the token names, when it names one.
    let named = match head {
        "self" => owner,
        h => known
            .services
            .get_key_value(h)
            .map(|(n, s)| (n.as_str(), s)),
    };
    let fields = named.map(|(_, s)| fields_of(s));
    let (known, hint): (&[&str], Option<String>) = match head {
        "env" => (
            &[],
            Some("an environment variable name uses letters, digits and `_`, not starting with a digit".to_owned()),
        ),
        "worktree" => (&["name", "path"], None),
        "project" => (&["name"], None),
        _ if fields.is_some() => (fields.as_deref().unwrap_or_default(), None),
        "self" => (SERVICE_FIELDS, None),
        h if known.declared.contains(h) => (SERVICE_FIELDS, None),
        _ => return,
    };
    let resource = named.and_then(|(_, s)| s.resource());
    let listed = || {
        known
            .iter()
            .map(|k| format!("{head}.{k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let hint = hint.or_else(|| {
        if let Some(port) = rest.strip_prefix("ports.")
            && resource.is_none()
        {
            return Some(format!(
                "`{port}` cannot be a port name: port names use letters, digits, `-` and `_`"
            ));
        }
        if let Some(r) = resource {
            return Some(format!(
                "`{head}` is a {} resource; its tokens are {}",
                r.adapter,
                listed()
            ));
        }
        let candidates = known.iter().map(|k| k.trim_end_matches(".NAME"));
        Some(match suggest(rest, candidates) {
            Some("ports") => {
                format!("did you mean `${{{head}.ports.NAME}}` (NAME a declared port)?")
            }
            Some(m) => format!("did you mean `${{{head}.{m}}}`?"),
            None => format!("`{head}` has: {}", listed()),
        })
    });
    cx.push_at(
        (Severity::Error, "unknown-token"),
        path,
        Some(at),
        format!(
            "`{raw}` is not a token Binky knows: it would be left as written, the same text in every world"
        ),
        hint,
    );
}
