//! The `binky.toml` text of a planned compose project: a header that
//! says where it came from, what was mapped and what needs the user,
//! then `[project]` and one block per service — live for a resource,
//! commented for anything that needs a command on the host. Every value
//! written is a literal of this module, a name, or text from the compose
//! file with nothing substituted; comments are kept to one line each.

use super::compose::Project;
use super::plan::{Planned, Role};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Comment lines are wrapped to this width.
const WIDTH: usize = 100;

/// The whole file.
pub(super) fn write(project: &Project, planned: &[Planned], out_dir: &Path) -> String {
    let mut w = String::new();
    header(&mut w, project, planned, out_dir);
    let _ = writeln!(
        w,
        "[project]\nname = {}",
        quote(&project_name(project, out_dir))
    );
    for p in planned {
        w.push('\n');
        let shared = p.shares.map(|j| planned[j].name.as_str());
        block(&mut w, p, shared, project, out_dir);
    }
    w
}

fn header(w: &mut String, project: &Project, planned: &[Planned], out_dir: &Path) {
    let files: Vec<String> = project.files.iter().map(|f| shown(f, out_dir)).collect();
    comment(
        w,
        &format!(
            "binky.toml, written by `binky init` from {}. Check it with `binky check`, then start a world with `binky up <branch>`.",
            files.join(" and ")
        ),
    );
    let resources: Vec<&Planned> = planned
        .iter()
        .filter(|p| matches!(p.role, Role::Resource { .. }) && !p.commented())
        .collect();
    if !resources.is_empty() {
        w.push_str("#\n");
        comment(
            w,
            "Mapped onto adapters (each world gets a slice of a server you already run):",
        );
        for p in &resources {
            if let Role::Resource {
                adapter, server, ..
            } = p.role
            {
                let _ = writeln!(w, "#   {} -> {adapter} ({server}{})", p.name, image_note(p));
            }
        }
    }
    left_out(w, planned);
    if !resources.is_empty() {
        exports(w, &resources);
    }
    if !project.dotenv.is_empty() {
        let keys: Vec<&str> = project.dotenv.iter().map(|(k, _)| k.as_str()).collect();
        w.push_str("#\n");
        comment(
            w,
            &format!(
                ".env beside the compose file sets {}: compose filled the file in from it. No value of it is copied here; a service that needs one reads it from its env_file or as \"${{env.NAME}}\" from your shell.",
                keys.join(", ")
            ),
        );
    }
    w.push('\n');
}

/// The header's notes on what is not written live: apps that need a
/// command, services sharing a slice, tools, and profiled services.
fn left_out(w: &mut String, planned: &[Planned]) {
    let apps: Vec<&str> = planned
        .iter()
        .filter(|p| p.role == Role::App && p.profiles.is_empty())
        .map(|p| p.name.as_str())
        .collect();
    if !apps.is_empty() {
        comment(
            w,
            &format!(
                "Needs you: {} (commented out, each with a TODO(build) for the command that runs it on this machine; uncomment a block once it has one).",
                apps.join(", ")
            ),
        );
    }
    let shared: Vec<String> = planned
        .iter()
        .filter_map(|p| {
            Some(format!(
                "{} (shares {}'s slice)",
                p.name, planned[p.shares?].name
            ))
        })
        .collect();
    if !shared.is_empty() {
        comment(
            w,
            &format!("Commented, one slice per adapter: {}.", shared.join(", ")),
        );
    }
    let tools: Vec<String> = planned
        .iter()
        .filter_map(|p| match p.role {
            Role::Tool { what } if p.profiles.is_empty() => Some(format!("{} ({what})", p.name)),
            _ => None,
        })
        .collect();
    if !tools.is_empty() {
        comment(w, &format!("Left out, commented: {}.", tools.join(", ")));
    }
    let profiled: Vec<String> = planned
        .iter()
        .filter(|p| !p.profiles.is_empty())
        .map(|p| format!("{} (profile {})", p.name, p.profiles.join(", ")))
        .collect();
    if !profiled.is_empty() {
        comment(
            w,
            &format!(
                "Behind a compose profile, so commented: {}.",
                profiled.join(", ")
            ),
        );
    }
}

/// The header's `export` line per resource: where each server is.
fn exports(w: &mut String, resources: &[&Planned]) {
    w.push_str("#\n");
    comment(
        w,
        "Before `binky up`, export where each server is (a password belongs there, never in this file):",
    );
    for p in resources {
        if let Role::Resource { example_url, .. } = p.role {
            let _ = writeln!(w, "#   export {}='{example_url}'", p.admin_var);
        }
    }
}

/// ` , image postgres:16` for a comment, or nothing.
fn image_note(p: &Planned) -> String {
    p.image
        .as_deref()
        .map(|i| format!(", image `{}`", one_line(i)))
        .unwrap_or_default()
}

fn block(w: &mut String, p: &Planned, shared: Option<&str>, project: &Project, out_dir: &Path) {
    let mut notes: Vec<String> = Vec::new();
    let mut body: Vec<String> = vec![format!("[services.{}]", p.name)];
    let origin = match (&p.build, &p.image) {
        (Some(b), _) => format!("compose builds it from `{}`", one_line(b)),
        (None, Some(i)) => format!("image `{}`", one_line(i)),
        (None, None) => "no image or build".to_owned(),
    };
    let renamed = if p.name == p.compose_name {
        String::new()
    } else {
        format!(" (`{}` in compose)", one_line(&p.compose_name))
    };
    match &p.role {
        Role::Resource { server, .. } => {
            notes.push(format!(
                "{}{renamed}: {server} ({origin}), a slice of your server per world.",
                p.name
            ));
            resource_body(&mut body, &mut notes, p, shared);
        }
        Role::Tool { what } => {
            notes.push(format!(
                "{}{renamed}: {what} ({origin}), not a server: no world needs one of its own. Left commented; to run one per world anyway, give it a command.",
                p.name
            ));
            app_body(&mut body, &mut notes, p, project, out_dir);
        }
        Role::App => {
            notes.push(format!("{}{renamed}: {origin}.", p.name));
            notes.push(format!(
                "TODO(build): the command that runs {} on this machine; then uncomment the block.",
                p.name
            ));
            app_body(&mut body, &mut notes, p, project, out_dir);
        }
    }
    if !p.profiles.is_empty() {
        notes.push(format!(
            "Behind compose profile {}: compose starts it only when asked (`--profile`), so it is commented here.",
            p.profiles.join(", ")
        ));
    }
    for n in &notes {
        comment(w, n);
    }
    for line in body {
        if p.commented() {
            w.push_str("# ");
        }
        w.push_str(&line);
        w.push('\n');
    }
}

/// The keys of a resource block, and the notes that go with them.
fn resource_body(
    body: &mut Vec<String>,
    notes: &mut Vec<String>,
    p: &Planned,
    shared: Option<&str>,
) {
    let Role::Resource {
        adapter,
        adds,
        field,
        example_url,
        ..
    } = p.role
    else {
        return;
    };
    body.push(format!("adapter = {}", quote(adapter)));
    let example = if example_url.is_empty() {
        String::new()
    } else {
        format!("  # export {}='{example_url}'", p.admin_var)
    };
    body.push(format!("admin_url = \"${{env.{}}}\"{example}", p.admin_var));
    if let Some(a) = adds {
        notes.push(format!(
            "The image adds {a}: the server you run needs it too; create it in `migrate`."
        ));
    }
    if let (Some(f), None) = (field, shared) {
        notes.push(format!(
            "Apps find the world's {f} in ${{{}.{f}}}: give it to their client.",
            p.name
        ));
    }
    let mut configured = Vec::new();
    if !p.env_dropped.is_empty() {
        configured.push(format!("environment ({})", p.env_dropped.join(", ")));
    }
    if !p.env_files.is_empty() {
        let files: Vec<String> = p.env_files.iter().map(|f| one_line(f)).collect();
        configured.push(format!("env_file {}", files.join(", ")));
    }
    if !configured.is_empty() {
        notes.push(format!(
            "compose's {} configured a server of its own; a slice on yours needs none of it.",
            configured.join(" and ")
        ));
    }
    if p.published {
        notes.push("compose published its port; a slice needs none of its own.".into());
    }
    if let Some(first) = shared {
        notes.push(format!(
            "A world has one slice per adapter, and `{first}` has this one's: it is commented, and what named it is pointed at `{first}` (a second database or prefix inside that slice is the app's to make)."
        ));
    }
}

/// The keys of a process block, and the notes that go with them.
fn app_body(
    body: &mut Vec<String>,
    notes: &mut Vec<String>,
    p: &Planned,
    project: &Project,
    out_dir: &Path,
) {
    body.push(format!(
        "cmd = {}",
        quote(&format!(
            "echo 'TODO(build): the command that runs {} on this machine' >&2; exit 1",
            p.name
        ))
    ));
    if let Some(u) = &p.url {
        body.push(format!("url = {}", quote(u)));
        notes.push(
            "It must listen on $PORT (also ${self.port}): Binky gives each world's copy a port of its own in place of the one compose published."
                .into(),
        );
    }
    if !p.extra_ports.is_empty() {
        body.push(format!("ports = {}", list(&p.extra_ports)));
    }
    if !p.depends_on.is_empty() {
        body.push(format!("depends_on = {}", list(&p.depends_on)));
    }
    match (&p.health, p.health_note) {
        (Some(h), _) => body.push(format!("health = {}", quote(h))),
        (None, Some(why)) => notes.push(format!(
            "{why}, so it is not carried over: see `health` in docs/src/reference/binky-toml.md."
        )),
        (None, None) => {}
    }
    let files: Vec<String> = p
        .env_files
        .iter()
        .filter_map(|f| env_file_path(project, out_dir, f))
        .collect();
    if let Some(first) = files.first() {
        body.push(format!("env_file = {}", quote(first)));
        if files.len() > 1 {
            let rest: Vec<&str> = files[1..].iter().map(String::as_str).collect();
            notes.push(format!(
                "compose also read env_file {}: Binky takes one per service; merge them or use the project's env_file.",
                rest.join(", ")
            ));
        }
    }
    if !p.env.is_empty() {
        body.push(format!("[services.{}.env]", p.name));
        for (k, v) in &p.env {
            body.push(format!("{k} = {}", quote(v)));
        }
    }
    if !p.env_dropped.is_empty() {
        notes.push(format!(
            "Not carried over from compose's environment (its values are never copied; set them in env_file, or as \"${{env.NAME}}\" from your shell): {}.",
            p.env_dropped.join(", ")
        ));
    }
    if !p.secrets.is_empty() {
        notes.push(format!(
            "compose mounts secrets {} at /run/secrets: give the app their values through env_file instead.",
            p.secrets.iter().map(|s| one_line(s)).collect::<Vec<_>>().join(", ")
        ));
    }
}

/// `env_file` path `f` (relative to the compose file's folder) as a path
/// relative to the folder binky.toml is written to; `None` for one
/// written with a variable.
fn env_file_path(project: &Project, out_dir: &Path, f: &str) -> Option<String> {
    if f.contains('$') || f.chars().any(char::is_control) {
        return None;
    }
    let full = project.dir.join(f);
    let rel = relative(&full, out_dir);
    Some(rel.to_string_lossy().into_owned())
}

/// `path` relative to `dir` when it is inside it, else as it is.
fn relative(path: &Path, dir: &Path) -> PathBuf {
    let clean = |p: &Path| -> PathBuf {
        p.components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect()
    };
    let (p, d) = (clean(path), clean(dir));
    match p.strip_prefix(&d) {
        Ok(r) if !r.as_os_str().is_empty() => r.to_path_buf(),
        _ => path.to_path_buf(),
    }
}

/// A file as the header names it: relative to the output folder if inside.
fn shown(f: &Path, out_dir: &Path) -> String {
    one_line(&relative(f, out_dir).to_string_lossy())
}

/// The project's name: compose's `name:` when written plainly, else the
/// folder's; either made a DNS label.
fn project_name(project: &Project, out_dir: &Path) -> String {
    if let Some(n) = &project.name
        && !n.raw.contains('$')
    {
        return crate::slug::dns_label_hint(&n.raw);
    }
    let dir = std::fs::canonicalize(out_dir).unwrap_or_else(|_| out_dir.to_path_buf());
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::slug::dns_label_hint(&base)
}

/// `text` as `# ` lines wrapped at [`WIDTH`].
fn comment(w: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in one_line(text).split(' ').filter(|s| !s.is_empty()) {
        if line.len() + 1 + word.len() > WIDTH && line.len() > 1 {
            w.push_str(&line);
            w.push('\n');
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    w.push_str(&line);
    w.push('\n');
}

/// Text from the compose file made one safe line for a comment: a YAML
/// scalar may hold newlines and control characters.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A TOML array of strings.
fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| quote(i)).collect();
    format!("[{}]", quoted.join(", "))
}
