//! Following what a compose file points at: `include:` of other files,
//! and `extends` of a service in the same file or another, with circles
//! refused and a base's paths rebased onto the file that names it. Each
//! file is read and parsed once per run, however many services name it.

use super::compose::{ComposeError, load_file, services_of};
use super::merge::{merge_service, rebase_paths};
use super::yaml::{Node, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How deep `include:` may nest: a file that includes itself stops here.
const MAX_INCLUDE_DEPTH: usize = 8;

/// One run's walk over `include` and `extends`: the chain being followed
/// (for circles) and the files already read.
#[derive(Default)]
pub(super) struct Follower {
    stack: Vec<(PathBuf, String)>,
    files: HashMap<PathBuf, Node>,
}

impl Follower {
    /// File `f`, read and parsed once.
    fn load(&mut self, f: &Path) -> Result<Node, ComposeError> {
        if let Some(n) = self.files.get(f) {
            return Ok(n.clone());
        }
        let n = load_file(f)?;
        self.files.insert(f.to_path_buf(), n.clone());
        Ok(n)
    }

    /// The services of the files `doc` (file `f`) names in `include:`, each
    /// with its own `extends` followed and its paths rebased onto `f`'s folder.
    pub(super) fn included(
        &mut self,
        f: &Path,
        doc: &Node,
        depth: usize,
    ) -> Result<Vec<(String, Node)>, ComposeError> {
        let Some(inc) = doc.get("include") else {
            return Ok(Vec::new());
        };
        let err =
            |line, message: String, hint: &str| ComposeError::at(f, Some(line), message, hint);
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(err(
                inc.line,
                format!("`include:` nests more than {MAX_INCLUDE_DEPTH} files deep"),
                "does a file include itself?",
            ));
        }
        let items: Vec<&Node> = match &inc.value {
            Value::Seq(items) => items.iter().collect(),
            _ => vec![inc],
        };
        let mut out: Vec<(String, Node)> = Vec::new();
        for item in items {
            let path = match &item.value {
                Value::Map(_) => item.get("path").and_then(|p| match p.as_seq() {
                    Some(list) => list.first().and_then(Node::scalar_text),
                    None => p.scalar_text(),
                }),
                _ => item.scalar_text(),
            };
            let Some(path) = path.filter(|p| !p.contains('$')) else {
                return Err(err(
                    item.line,
                    "an `include:` entry must be a file's path, written without variables".into(),
                    "write the path (relative to this file's folder), or run init with `-f` on each file",
                ));
            };
            let full = resolve_path(f, &path);
            if !full.is_file() {
                return Err(err(
                    item.line,
                    format!("`include:` names file {path}, which does not exist"),
                    "fix the path (it is relative to this file's folder)",
                ));
            }
            let d = self.load(&full)?;
            let services = services_of(&full, &d)?.clone();
            let resolved = self.resolve(&full, &services)?;
            let mut theirs = self.included(&full, &d, depth + 1)?;
            theirs.extend(resolved.as_map().unwrap_or_default().iter().cloned());
            let prefix = Path::new(&path).parent().unwrap_or(Path::new(""));
            for (n, mut node) in theirs {
                rebase_paths(&mut node, prefix);
                out.retain(|(m, _)| *m != n);
                out.push((n, node));
            }
        }
        Ok(out)
    }

    /// Each service with its `extends` chain merged in (the base first, then
    /// the service's own keys), in file `f`.
    pub(super) fn resolve(&mut self, f: &Path, services: &Node) -> Result<Node, ComposeError> {
        let Some(entries) = services.as_map() else {
            return Ok(services.clone());
        };
        let mut out = Vec::new();
        for (name, node) in entries {
            out.push((name.clone(), self.extended(f, services, name, node)?));
        }
        Ok(Node {
            value: Value::Map(out),
            ..services.clone()
        })
    }

    /// Service `name` (`node`, in `services` of file `f`) with what it
    /// extends merged under it.
    fn extended(
        &mut self,
        f: &Path,
        services: &Node,
        name: &str,
        node: &Node,
    ) -> Result<Node, ComposeError> {
        let err =
            |line, message: String, hint: &str| ComposeError::at(f, Some(line), message, hint);
        if node.as_map().is_none() && node.value != Value::Null {
            return Err(err(
                node.line,
                format!(
                    "service `{name}` must be a mapping, and it is {}",
                    node.kind()
                ),
                "write the service's keys indented below its name",
            ));
        }
        let Some(ext) = node.get("extends") else {
            return Ok(node.clone());
        };
        let (base_name, base_file) = target(f, name, ext)?;
        let key = (
            base_file
                .as_deref()
                .map_or_else(|| f.to_path_buf(), |b| resolve_path(f, b)),
            base_name.clone(),
        );
        if self.stack.contains(&key) || (key.0 == f && key.1 == name) {
            return Err(err(
                ext.line,
                format!("`extends` of `{name}` goes round in a circle through `{base_name}`"),
                "break the circle: a service cannot extend itself, directly or through others",
            ));
        }
        let base_services;
        let (bf, bs): (&Path, &Node) = match &base_file {
            None => (f, services),
            Some(b) => {
                if !key.0.is_file() {
                    return Err(err(
                        ext.line,
                        format!("`extends` of `{name}` names file {b}, which does not exist"),
                        "fix the `file:` path (it is relative to this file's folder)",
                    ));
                }
                let base_doc = self.load(&key.0)?;
                base_services = services_of(&key.0, &base_doc)?.clone();
                (&key.0, &base_services)
            }
        };
        let Some(base) = bs.get(&base_name) else {
            return Err(err(
                ext.line,
                format!(
                    "`extends` of `{name}` names service `{base_name}`, which {} does not define",
                    bf.display()
                ),
                "name a service defined there",
            ));
        };
        let bf = bf.to_path_buf();
        self.stack.push(key);
        let mut base = self.extended(&bf, bs, &base_name, base)?;
        self.stack.pop();
        if let Some(b) = &base_file {
            // The base's paths are relative to its own file's folder.
            rebase_paths(&mut base, Path::new(b).parent().unwrap_or(Path::new("")));
        }
        let mut own = node.clone();
        if let Value::Map(m) = &mut own.value {
            m.retain(|(k, _)| k != "extends");
        }
        Ok(merge_service(&base, &own))
    }
}

/// What `extends` (of service `name`, in file `f`) names: the service,
/// and the file when it is another (`extends: base` or
/// `extends: { service: base, file: other.yml }`).
fn target(f: &Path, name: &str, ext: &Node) -> Result<(String, Option<String>), ComposeError> {
    match (&ext.value, ext.get("service"), ext.get("file")) {
        (Value::Str(s), _, _) => Ok((s.clone(), None)),
        (Value::Map(_), Some(s), file) => Ok((
            s.scalar_text().unwrap_or_default(),
            file.and_then(Node::scalar_text),
        )),
        _ => Err(ComposeError::at(
            f,
            Some(ext.line),
            format!("`extends` of `{name}` must name a service (`extends: {{ service: base }}`)"),
            "give `extends` a `service:` (and a `file:` for another file)",
        )),
    }
}

/// `path` as written in file `f`: relative to `f`'s folder.
fn resolve_path(f: &Path, path: &str) -> PathBuf {
    f.parent().unwrap_or(Path::new(".")).join(path)
}
