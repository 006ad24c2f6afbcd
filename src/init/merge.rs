//! How compose merges: an override file over its base, a service over
//! the one it `extends`, and the paths a base in another folder names.
//! Compose's own rules, as its specification gives them: mappings merge
//! by key, some lists add up, `environment` and its kind merge by
//! variable whatever their form, everything else is replaced, and the
//! `!reset`/`!override` tags say otherwise.

use super::yaml::{MergeTag, Node, Value};
use std::path::Path;

/// Rewrites the relative paths a service names (`build` and its
/// `context`, `env_file`) as seen from a folder `prefix` above them.
pub(super) fn rebase_paths(service: &mut Node, prefix: &Path) {
    let Value::Map(entries) = &mut service.value else {
        return;
    };
    let rebase = |n: &mut Node| {
        if let Value::Str(p) = &mut n.value
            && !Path::new(p.as_str()).is_absolute()
            && !p.contains('$')
        {
            *p = lexical_join(prefix, p);
        }
    };
    for (k, v) in entries.iter_mut() {
        match (k.as_str(), &mut v.value) {
            ("build", Value::Str(_)) => rebase(v),
            ("build", Value::Map(m)) => {
                if let Some((_, c)) = m.iter_mut().find(|(k, _)| k == "context") {
                    rebase(c);
                }
            }
            ("env_file", Value::Str(_)) => rebase(v),
            ("env_file", Value::Seq(items)) => {
                for i in items {
                    match &mut i.value {
                        Value::Map(m) => {
                            if let Some((_, p)) = m.iter_mut().find(|(k, _)| k == "path") {
                                rebase(p);
                            }
                        }
                        _ => rebase(i),
                    }
                }
            }
            _ => {}
        }
    }
}

/// `prefix/path` with `.` and `name/..` taken out, as text.
fn lexical_join(prefix: &Path, path: &str) -> String {
    use std::path::Component;
    let mut parts: Vec<String> = Vec::new();
    for c in prefix.join(path).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if parts.last().is_some_and(|l| l != "..") => {
                parts.pop();
            }
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// An override file over a base: `services` merge by name, every other
/// top-level key is replaced.
pub(super) fn merge_files(base: &Node, over: &Node) -> Node {
    let mut out = base.clone();
    let (Value::Map(b), Some(o)) = (&mut out.value, over.as_map()) else {
        return over.clone();
    };
    for (k, v) in o {
        match b.iter_mut().find(|(bk, _)| bk == k) {
            Some((_, bv)) if k == "services" => {
                let mut merged = bv.clone();
                if let (Value::Map(ms), Some(os)) = (&mut merged.value, v.as_map()) {
                    for (sn, sv) in os {
                        match ms.iter_mut().find(|(n, _)| n == sn) {
                            Some((_, s)) => *s = merge_service(s, sv),
                            None => ms.push((sn.clone(), sv.clone())),
                        }
                    }
                } else {
                    merged = v.clone();
                }
                *bv = merged;
            }
            Some((_, bv)) => *bv = v.clone(),
            None => b.push((k.clone(), v.clone())),
        }
    }
    out
}

/// Keys whose lists add up across a merge; any other list is replaced
/// (`command`, `entrypoint`, `healthcheck.test`, `profiles`).
const APPENDED: &[&str] = &[
    "ports",
    "expose",
    "env_file",
    "dns",
    "dns_search",
    "secrets",
    "configs",
    "volumes",
    "external_links",
    "cap_add",
    "cap_drop",
    "devices",
    "tmpfs",
];

/// Keys that are mappings but may be written as `KEY=value` lists, merged
/// by key.
const KEYED: &[&str] = &[
    "environment",
    "labels",
    "depends_on",
    "extra_hosts",
    "annotations",
];

/// `over` merged onto `base` as compose merges a service: mappings by
/// key, listed keys appended, `environment` and friends by variable
/// (list or map), scalars and other lists replaced; `!reset` removes and
/// `!override` replaces whole.
pub(super) fn merge_service(base: &Node, over: &Node) -> Node {
    let (Some(b), Some(o)) = (base.as_map(), over.as_map()) else {
        return if over.value == Value::Null {
            base.clone()
        } else {
            over.clone()
        };
    };
    let mut out: Vec<(String, Node)> = b.to_vec();
    for (k, v) in o {
        let at = out.iter().position(|(ok, _)| ok == k);
        match (at, v.tag) {
            (Some(i), Some(MergeTag::Reset)) => {
                out.remove(i);
            }
            (None, Some(MergeTag::Reset)) => {}
            (Some(i), Some(MergeTag::Override)) => out[i].1 = v.clone(),
            (Some(i), None) => {
                let b = &out[i].1;
                out[i].1 = if KEYED.contains(&k.as_str()) {
                    merge_keyed(b, v)
                } else if APPENDED.contains(&k.as_str())
                    && b.as_seq().is_some()
                    && v.as_seq().is_some()
                {
                    append(b, v)
                } else if b.as_map().is_some() && v.as_map().is_some() {
                    merge_service(b, v)
                } else {
                    v.clone()
                };
            }
            (None, _) => out.push((k.clone(), v.clone())),
        }
    }
    Node {
        value: Value::Map(out),
        ..base.clone()
    }
}

/// A `KEY=value` list or a mapping as `(key, value)` pairs.
pub(super) fn keyed_entries(n: &Node) -> Vec<(String, Node)> {
    match &n.value {
        Value::Map(m) => m.clone(),
        Value::Seq(items) => items
            .iter()
            .filter_map(|i| {
                let t = i.scalar_text()?;
                Some(match t.split_once('=') {
                    Some((k, v)) => (k.trim().to_owned(), Node::text(v, i.line)),
                    None => (
                        t.trim().to_owned(),
                        Node {
                            value: Value::Null,
                            line: i.line,
                            tag: None,
                        },
                    ),
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn merge_keyed(base: &Node, over: &Node) -> Node {
    let mut out = keyed_entries(base);
    for (k, v) in keyed_entries(over) {
        match out.iter_mut().find(|(ok, _)| *ok == k) {
            Some((_, ov)) => *ov = v,
            None => out.push((k, v)),
        }
    }
    Node {
        value: Value::Map(out),
        ..over.clone()
    }
}

fn append(base: &Node, over: &Node) -> Node {
    let mut items = base.as_seq().unwrap_or_default().to_vec();
    for i in over.as_seq().unwrap_or_default() {
        if !items.iter().any(|x| x.value == i.value) {
            items.push(i.clone());
        }
    }
    Node {
        value: Value::Seq(items),
        ..over.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::yaml;

    #[test]
    fn environment_merges_by_key_whatever_its_form() {
        let base = yaml::load("environment: [A=1, B=2]\nports: ['1:1']\ncommand: [x]\n").unwrap();
        let over = yaml::load("environment: {B: 3, C: 4}\nports: ['2:2']\ncommand: [y]\n").unwrap();
        let m = merge_service(&base, &over);
        let env: Vec<(String, Option<String>)> = keyed_entries(m.get("environment").unwrap())
            .into_iter()
            .map(|(k, v)| (k, v.scalar_text()))
            .collect();
        assert_eq!(
            env,
            [("A", "1"), ("B", "3"), ("C", "4")].map(|(k, v)| (k.to_owned(), Some(v.to_owned())))
        );
        assert_eq!(m.get("ports").unwrap().as_seq().unwrap().len(), 2);
        assert_eq!(m.get("command").unwrap().as_seq().unwrap().len(), 1);
    }

    #[test]
    fn paths_of_a_base_in_another_folder_are_rebased() {
        assert_eq!(lexical_join(Path::new("common"), ".."), ".");
        assert_eq!(
            lexical_join(Path::new("common"), "./app.env"),
            "common/app.env"
        );
        assert_eq!(lexical_join(Path::new("../x"), "../y"), "../y");
        assert_eq!(lexical_join(Path::new(""), "a"), "a");
    }

    #[test]
    fn reset_and_override_tags() {
        let base = yaml::load("ports: ['1:1']\nenvironment: {A: 1}\n").unwrap();
        let over = yaml::load("ports: !reset []\nenvironment: !override {B: 2}\n").unwrap();
        let m = merge_service(&base, &over);
        assert!(m.get("ports").is_none());
        assert_eq!(keyed_entries(m.get("environment").unwrap()).len(), 1);
    }
}
