//! Tokens Binky owns in fields taken as written (`watch`, `clone_inputs`,
//! `worktree_root`, `url`…): found by walking the document, each an error.

use super::*;

/// Whether the string at `path` (keys and indexes, as in the file) is one
/// tokens render in: a service's `cmd`, `cwd`, `env` values, `health`
/// probe, a resource's `admin_url`, `migrate`, `seed` and every string of
/// its `options`, the project's `[env]`, `[agents] verify` and `[project]
/// setup`. Every other
/// string is literal.
pub(super) fn renders_tokens(path: &[Step]) -> bool {
    let key = |i: usize| match path.get(i) {
        Some(Step::Key(k)) => Some(k.as_str()),
        _ => None,
    };
    match (key(0), path.len()) {
        (Some("env"), 2) => true,
        (Some("agents"), 3) => key(1) == Some("verify"),
        (Some("project"), 3) => key(1) == Some("setup"),
        (Some("services"), n) if n >= 3 => match key(2) {
            Some("cmd" | "cwd" | "admin_url" | "migrate" | "seed") => n == 3,
            Some("env") => n == 4,
            Some("health") => n == 3 || (n == 4 && matches!(key(3), Some("http" | "tcp" | "cmd"))),
            Some("options") => true,
            _ => false,
        },
        _ => false,
    }
}

/// A token Binky owns in a literal field (`watch`, `clone_inputs`,
/// `worktree_root`, `url`…) would reach `up` as written: an error, naming
/// where tokens do render.
pub(super) fn check_literal_fields(cx: &mut Cx<'_>) {
    let Some(doc) = cx.loc.document() else {
        return;
    };
    let mut found: Vec<Literal> = Vec::new();
    walk(doc.as_item(), &mut Vec::new(), &mut found);
    for (path, text, start, end) in found {
        let at = At {
            value: &text,
            start,
            end,
        };
        cx.push_at(
            (Severity::Error, "token-in-literal-field"),
            &path,
            Some(at),
            format!(
                "`{}` is in {}, which is taken as written: tokens render only in cmd, cwd, env, health, admin_url, migrate, seed, options, [env], [agents] verify and [project] setup",
                at.text(),
                key_string(&path)
            ),
            Some("write the value itself here, or move it to a field that renders".to_owned()),
        );
    }
}

/// A token Binky owns found in a literal field: its key path, the
/// string, and the token's byte range in it.
type Literal = (Vec<Step>, String, usize, usize);

/// Every string under `item` outside the fields that render, with the
/// first token Binky owns in it.
fn walk(item: &toml_edit::Item, path: &mut Vec<Step>, found: &mut Vec<Literal>) {
    match item {
        toml_edit::Item::Value(v) => value(v, path, found),
        toml_edit::Item::Table(t) => {
            for (k, i) in t.iter() {
                path.push(Step::from(k));
                walk(i, path, found);
                path.pop();
            }
        }
        toml_edit::Item::ArrayOfTables(a) => {
            for (n, t) in a.iter().enumerate() {
                path.push(Step::Index(n));
                for (k, i) in t.iter() {
                    path.push(Step::from(k));
                    walk(i, path, found);
                    path.pop();
                }
                path.pop();
            }
        }
        toml_edit::Item::None => {}
    }
}
/// `walk` for one value (arrays and inline tables included).
fn value(v: &toml_edit::Value, path: &mut Vec<Step>, found: &mut Vec<Literal>) {
    match v {
        toml_edit::Value::String(s) => {
            let text = s.value();
            if renders_tokens(path) {
                return;
            }
            if let Some(o) = occurrences(text).find(|o| classify(o.body).is_some()) {
                found.push((path.clone(), text.to_owned(), o.start, o.end));
            }
        }
        toml_edit::Value::Array(a) => {
            for (n, x) in a.iter().enumerate() {
                path.push(Step::Index(n));
                value(x, path, found);
                path.pop();
            }
        }
        toml_edit::Value::InlineTable(t) => {
            for (k, x) in t.iter() {
                path.push(Step::from(k));
                value(x, path, found);
                path.pop();
            }
        }
        _ => {}
    }
}
