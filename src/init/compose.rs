//! Reading a compose project as `docker compose` would: which files, how
//! an override file and `extends` merge into a service, and each
//! service's fields in the shapes the Compose Specification allows (short
//! and long syntax alike). Values stay uninterpolated here with their
//! line; [`Text`] interpolates on demand, so a field `init` never uses
//! (a `command` with `${…}` compose would refuse) cannot fail it.

use super::extends::Follower;
use super::fields::service;
use super::interpolate::{InterpError, Interpolated, interpolate};
use super::merge::merge_files;
use super::yaml::{self, Node, Value};
use std::path::{Path, PathBuf};

/// The names compose looks for, in its order.
pub const FILE_NAMES: &[&str] = &[
    "compose.yaml",
    "compose.yml",
    "docker-compose.yaml",
    "docker-compose.yml",
];

/// Why a compose project cannot be read: the file, the line when known,
/// and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComposeError {
    /// The file at fault.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// What to do.
    pub hint: String,
}

impl ComposeError {
    /// An error in `file` (at `line`, when known).
    pub fn at(
        file: &Path,
        line: Option<usize>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> ComposeError {
        ComposeError {
            file: file.to_path_buf(),
            line,
            message: message.into(),
            hint: hint.into(),
        }
    }
}

impl std::fmt::Display for ComposeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// A scalar as written, with its line; interpolated when asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    /// As written in the file.
    pub raw: String,
    /// Its line.
    pub line: usize,
}

/// A compose project: its files, `name:`, `.env` and services.
#[derive(Debug, Clone)]
pub struct Project {
    /// The files read, base first.
    pub files: Vec<PathBuf>,
    /// The project folder (the first file's), where `.env` is read.
    pub dir: PathBuf,
    /// `name:`, as written.
    pub name: Option<Text>,
    /// `.env`'s variables (values are for interpolation only).
    pub dotenv: Vec<(String, String)>,
    /// Services in the file's order.
    pub services: Vec<Service>,
    /// What the user should know about how the files were read.
    pub notes: Vec<String>,
}

/// One service, its fields normalised from every syntax compose allows.
#[derive(Debug, Clone, Default)]
pub struct Service {
    /// Its compose name.
    pub name: String,
    /// Where it is defined.
    pub line: usize,
    /// `image:`.
    pub image: Option<Text>,
    /// `build:` context (`.` for a build mapping without one).
    pub build: Option<Text>,
    /// `environment:` keys with their values (`None`: a bare `- KEY`).
    pub environment: Vec<(String, Option<Text>)>,
    /// `env_file:` paths, short or long form.
    pub env_files: Vec<Text>,
    /// `ports:`.
    pub ports: Vec<Port>,
    /// The line of a `ports:` written as something other than a list.
    pub ports_not_a_list: Option<usize>,
    /// `depends_on:` names with their condition.
    pub depends_on: Vec<(String, Option<String>)>,
    /// `healthcheck.test` as words (`CMD-SHELL` text is one word), unless
    /// disabled.
    pub healthcheck: Option<Vec<Text>>,
    /// `profiles:`.
    pub profiles: Vec<String>,
    /// `secrets:` names.
    pub secrets: Vec<String>,
    /// Names other containers reach it by: its own, `hostname`,
    /// `container_name` and network `aliases`.
    pub aliases: Vec<String>,
}

/// One `ports:` entry as written: the short syntax's text, or the long
/// syntax's `target` with its `protocol`. `ports::parse_port` reads it once
/// interpolated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// The short syntax (`"127.0.0.1:8080:80/tcp"`), or the long one's
    /// `target`.
    pub raw: String,
    /// The long syntax's `protocol` (`None`: short syntax).
    pub long_protocol: Option<String>,
    /// Its line.
    pub line: usize,
}

impl Text {
    /// Interpolated with `lookup`.
    ///
    /// # Errors
    /// As [`interpolate`].
    pub fn value(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Interpolated, InterpError> {
        interpolate(&self.raw, lookup)
    }
}

/// The files a compose project is read from, and its `.env`.
#[derive(Debug, Clone)]
pub struct Located {
    /// Compose files, base first.
    pub files: Vec<PathBuf>,
    /// `.env`'s variables: of `dir`, or beside the `-f` file.
    pub dotenv: Vec<(String, String)>,
    /// What the user should know about the choice (both `compose.yaml`
    /// and `docker-compose.yml` there).
    pub notes: Vec<String>,
}

/// The compose files of `dir`: those `COMPOSE_FILE` names (the shell's,
/// else `.env`'s, separated by `COMPOSE_PATH_SEPARATOR`), else the first
/// of [`FILE_NAMES`] there and its override file (`compose.override.yaml`
/// for `compose.yaml`, …); or exactly `file` when given (as
/// `docker compose -f`). `.env` is read here, once.
///
/// # Errors
/// No compose file in `dir`, `file` or a `COMPOSE_FILE` entry does not
/// exist, or `.env` cannot be read.
pub fn locate(
    dir: &Path,
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Located, ComposeError> {
    if let Some(f) = file {
        return named_file(f, env);
    }
    let dotenv = read_dotenv(&dir.join(".env"), env)?;
    let files = compose_file_list(dir, env, &dotenv)?;
    if !files.is_empty() {
        return Ok(Located {
            files,
            dotenv,
            notes: Vec::new(),
        });
    }
    let found: Vec<&str> = FILE_NAMES
        .iter()
        .copied()
        .filter(|n| dir.join(n).is_file())
        .collect();
    let Some(base) = found.first().map(|n| dir.join(n)) else {
        return Err(ComposeError::at(
            dir,
            None,
            format!(
                "no compose file here (looked for {})",
                FILE_NAMES.join(", ")
            ),
            "run `binky init` in the folder holding it, or name it with `-f FILE`",
        ));
    };
    let mut notes = Vec::new();
    if found.len() > 1 {
        notes.push(format!(
            "found {}: read {}, as compose does (`-f` picks another)",
            found.join(" and "),
            found[0]
        ));
    }
    let stem = found[0].split('.').next().unwrap_or("compose");
    let mut files = vec![base];
    if let Some(o) = ["yaml", "yml"]
        .iter()
        .map(|e| dir.join(format!("{stem}.override.{e}")))
        .find(|p| p.is_file())
    {
        files.push(o);
    }
    Ok(Located {
        files,
        dotenv,
        notes,
    })
}

/// Exactly the file `-f` names, with the `.env` beside it.
fn named_file(f: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Located, ComposeError> {
    if !f.is_file() {
        let message = if f.exists() {
            "not a file"
        } else {
            "no such file"
        };
        return Err(ComposeError::at(
            f,
            None,
            message,
            "pass the path of a compose file to `-f`",
        ));
    }
    let beside = f.parent().unwrap_or(Path::new("."));
    Ok(Located {
        files: vec![f.to_path_buf()],
        dotenv: read_dotenv(&beside.join(".env"), env)?,
        notes: Vec::new(),
    })
}

/// The files `COMPOSE_FILE` names (the shell's, else `.env`'s), split on
/// `COMPOSE_PATH_SEPARATOR`; empty when it is unset or blank.
fn compose_file_list(
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    dotenv: &[(String, String)],
) -> Result<Vec<PathBuf>, ComposeError> {
    let var = |name: &str| variable(env, dotenv, name);
    let Some(list) = var("COMPOSE_FILE").filter(|l| !l.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let sep = var("COMPOSE_PATH_SEPARATOR").unwrap_or_else(|| ":".into());
    let mut files = Vec::new();
    for name in list.split(sep.as_str()).filter(|n| !n.is_empty()) {
        let f = dir.join(name);
        if !f.is_file() {
            return Err(ComposeError::at(
                &f,
                None,
                "COMPOSE_FILE names this file, which does not exist",
                "fix COMPOSE_FILE (in your shell or .env), or name the file with `-f`",
            ));
        }
        files.push(f);
    }
    Ok(files)
}

/// A variable as compose interpolates it: the shell's value wins over
/// `.env`'s.
pub fn variable(
    env: &dyn Fn(&str) -> Option<String>,
    dotenv: &[(String, String)],
    name: &str,
) -> Option<String> {
    env(name).or_else(|| {
        dotenv
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    })
}

/// Reads and merges the located files (base first) into one project.
///
/// # Errors
/// A file that cannot be read or is not YAML, the legacy format with no
/// `services:`, a service that is not a mapping, or an `extends` that
/// names a missing file or service or goes round in a circle.
pub fn read(located: Located) -> Result<Project, ComposeError> {
    let mut docs = Vec::new();
    for f in &located.files {
        docs.push((f.clone(), load_file(f)?));
    }
    let mut project = merge(docs)?;
    project.dotenv = located.dotenv;
    project.notes = located.notes;
    Ok(project)
}

/// The `.env` compose reads for interpolation: none when there is no such
/// file.
///
/// # Errors
/// A `.env` that cannot be read or parsed (compose refuses it too), named
/// with its line and never quoting a value.
fn read_dotenv(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, ComposeError> {
    let err = |line, message: String| ComposeError {
        file: path.to_path_buf(),
        line,
        message,
        hint: "fix .env (KEY=value lines), or move it away if it is not compose's".into(),
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(err(None, format!("cannot read it: {e}"))),
    };
    let pairs = crate::config::dotenv::parse(&text).map_err(|e| err(Some(e.line), e.reason))?;
    // Compose expands `${VAR}` in `.env` from the variables above it (and
    // the shell's); a value that cannot expand stays as written.
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in pairs {
        let lookup = |name: &str| {
            env(name).or_else(|| {
                out.iter()
                    .rev()
                    .find(|(o, _)| o == name)
                    .map(|(_, v)| v.clone())
            })
        };
        let v = interpolate(&v, &lookup).map_or(v, |i| i.text);
        out.push((k, v));
    }
    Ok(out)
}

/// [`read`] over one file's text, with no `.env` (what the fuzzer drives;
/// an `extends` of another file is still read from beside `path`).
///
/// # Errors
/// As [`read`].
pub fn read_text(path: &Path, text: &str) -> Result<Project, ComposeError> {
    merge(vec![(path.to_path_buf(), parse(path, text)?)])
}

/// Loaded files (base first) merged into one project, `extends` followed.
fn merge(docs: Vec<(PathBuf, Node)>) -> Result<Project, ComposeError> {
    let files: Vec<PathBuf> = docs.iter().map(|(f, _)| f.clone()).collect();
    let dir = files[0]
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut merged: Option<Node> = None;
    let mut follow = Follower::default();
    for (f, mut doc) in docs {
        let services = services_of(&f, &doc)?.clone();
        // Each file's `extends` resolve in that file, before the merge.
        let mut resolved = follow.resolve(&f, &services)?;
        // Included files' services come first; the file's own win a clash.
        let mut all = follow.included(&f, &doc, 0)?;
        if let Value::Map(own) = std::mem::replace(&mut resolved.value, Value::Null) {
            for (n, v) in own {
                all.retain(|(m, _)| *m != n);
                all.push((n, v));
            }
        }
        resolved.value = Value::Map(all);
        match &mut doc.value {
            Value::Map(entries) => match entries.iter_mut().find(|(k, _)| k == "services") {
                Some((_, s)) => *s = resolved,
                None => entries.push(("services".into(), resolved)),
            },
            _ => doc = resolved,
        }
        merged = Some(match merged {
            None => doc,
            Some(base) => merge_files(&base, &doc),
        });
    }
    let doc = merged.expect("at least one file");
    let name = doc
        .get("name")
        .and_then(|n| n.scalar_text().map(|raw| Text { raw, line: n.line }));
    let mut services = Vec::new();
    if let Some(entries) = doc.get("services").and_then(Node::as_map) {
        for (name, node) in entries {
            services.push(service(name, node));
        }
    }
    Ok(Project {
        files,
        dir,
        name,
        dotenv: Vec::new(),
        services,
        notes: Vec::new(),
    })
}

pub(super) fn load_file(f: &Path) -> Result<Node, ComposeError> {
    let text = std::fs::read_to_string(f).map_err(|e| ComposeError {
        file: f.to_path_buf(),
        line: None,
        message: format!("cannot read it: {e}"),
        hint: "check the path and that it is a UTF-8 text file".into(),
    })?;
    parse(f, &text)
}

/// Loads file `f`'s text; a file of several documents (`---` between
/// them) is read as compose reads it, each document merged over the ones
/// before as an override file would be.
fn parse(f: &Path, text: &str) -> Result<Node, ComposeError> {
    let docs = yaml::load_all(text).map_err(|e| ComposeError {
        file: f.to_path_buf(),
        line: e.line,
        message: if e.kind == yaml::YamlErrorKind::TooLarge {
            format!("too large once its aliases are expanded ({})", e.message)
        } else {
            format!("not valid YAML: {}", e.message)
        },
        hint: "fix the YAML there (`docker compose config` shows what compose makes of it)".into(),
    })?;
    // An empty document (a file that starts with `---`) adds nothing.
    let mut docs = docs.into_iter().filter(|d| d.value != Value::Null);
    let first = docs.next().unwrap_or(Node {
        value: Value::Null,
        line: 1,
        tag: None,
    });
    Ok(docs.fold(first, |base, over| super::merge::merge_files(&base, &over)))
}

/// The `services:` mapping of a loaded file.
pub(super) fn services_of<'a>(f: &Path, doc: &'a Node) -> Result<&'a Node, ComposeError> {
    let err = |line, message: String, hint: &str| ComposeError::at(f, line, message, hint);
    let Some(map) = doc.as_map() else {
        return Err(err(
            Some(doc.line),
            format!(
                "a compose file is a mapping with `services:`; this one is {}",
                doc.kind()
            ),
            "is this the compose file? `-f FILE` names another",
        ));
    };
    match doc.get("services") {
        Some(s) if s.as_map().is_some() => Ok(s),
        Some(s) if s.value == Value::Null => Ok(s),
        // A file of `include:` alone.
        None if doc.get("include").is_some() => Ok(&EMPTY),
        Some(s) => Err(err(
            Some(s.line),
            format!(
                "`services:` must be a mapping of service names, and it is {}",
                s.kind()
            ),
            "write each service as `name:` with its keys indented below",
        )),
        None => {
            let legacy = map
                .iter()
                .any(|(_, v)| v.get("image").is_some() || v.get("build").is_some());
            Err(if legacy {
                err(
                    Some(map[0].1.line),
                    "this is the legacy version 1 format (services at the top level, no `services:`), which compose no longer reads".into(),
                    "move the services under a top-level `services:` key (and drop `links:`), then run `binky init` again",
                )
            } else {
                err(
                    Some(doc.line),
                    "no `services:` key: there is nothing to map".into(),
                    "add the services under a top-level `services:` key",
                )
            })
        }
    }
}

static EMPTY: Node = Node {
    value: Value::Null,
    line: 1,
    tag: None,
};
