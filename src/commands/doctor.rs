//! `binky doctor`: diagnose the install, the daemon, the proxy and name
//! resolution. Prints each check with what to do; exits 1 when something is
//! wrong (warnings alone exit 0).

use super::{paths_or_exit, print_json};
use crate::cli::JsonArgs;
use crate::client::Client;
use crate::output::{DIM, ERROR, OK, WARN, paint};
use crate::protocol::{Request, Response};
use serde::Serialize;
use std::net::ToSocketAddrs;
use std::process::ExitCode;

/// How a check came out.
#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    /// Something works less well than it could; exit status stays 0.
    Warn,
    /// Something is broken; `doctor` exits 1.
    Fail,
}

#[derive(Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    fix: Option<String>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix,
    }
}

/// Whether the system resolver (getaddrinfo, what most runtimes use) resolves
/// `host`.
fn resolves(host: &str) -> bool {
    (host, 80)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.next().is_some())
}

/// Runs `binky doctor`.
pub(crate) fn run(args: &JsonArgs) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    let mut checks = vec![state_folder(&paths)];
    let hosts = daemon(&paths, &mut checks);
    checks.push(resolver(&hosts));
    checks.push(caddy());
    checks.push(logs(&paths));
    checks.extend(clones(&paths));
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if args.json {
        print_json(&serde_json::json!({ "ok": !failed, "checks": checks }));
    } else {
        print(&checks);
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The state folder is private to its user.
fn state_folder(paths: &crate::paths::Paths) -> Check {
    let home = paths.home().display();
    match std::fs::metadata(paths.home()) {
        Ok(m) if crate::platform::is_private(&m) => check(
            "state folder",
            Status::Ok,
            format!("{home} is private (0700)"),
            None,
        ),
        Ok(m) => check(
            "state folder",
            Status::Fail,
            format!(
                "{home} has mode {:o}; others can reach the daemon's files",
                crate::platform::mode_bits(&m) & 0o777
            ),
            Some(format!("chmod 700 {home}")),
        ),
        Err(_) => check(
            "state folder",
            Status::Ok,
            format!("{home} does not exist yet; the first command creates it"),
            None,
        ),
    }
}

/// The daemon (its version and binary) and its proxy; returns the hosts of
/// running worlds, for the resolver's fix.
fn daemon(paths: &crate::paths::Paths, checks: &mut Vec<Check>) -> Vec<String> {
    let mut c = match Client::connect(paths) {
        Ok(None) => {
            checks.push(check(
                "daemon",
                Status::Ok,
                "not running; any command starts it",
                None,
            ));
            return Vec::new();
        }
        Err(e) => {
            checks.push(check(
                "daemon",
                Status::Fail,
                e.message.clone(),
                e.hint.clone(),
            ));
            return Vec::new();
        }
        Ok(Some(c)) => c,
    };
    if !c.same_version() {
        checks.push(check(
            "daemon",
            Status::Fail,
            format!(
                "running version {}, this binky is {}",
                c.welcome.version,
                crate::protocol::VERSION
            ),
            Some("binky daemon stop".into()),
        ));
        return Vec::new();
    }
    checks.push(check(
        "daemon",
        Status::Ok,
        format!("pid {}, version {}", c.welcome.pid, c.welcome.version),
        None,
    ));
    if crate::platform::runs_replaced_binary(c.welcome.pid) {
        // Same version string, but the file it runs is gone: a rebuild or
        // reinstall since it started.
        checks.push(check(
            "daemon binary",
            Status::Warn,
            format!(
                "pid {} runs a binky binary that was replaced or deleted since it started",
                c.welcome.pid
            ),
            Some("binky daemon stop (services keep running; the next command starts the new binary, which adopts them)".into()),
        ));
    }
    let report = match c.request(&Request::Status {
        project: None,
        usage: false,
    }) {
        Ok(Response::Status(report)) => Some(report),
        _ => None,
    };
    // The daemon's own word on its listener: a port that answers may be
    // another program's, the very reason the proxy could not bind it.
    // (Always there: a daemon of another version was refused above.)
    if let Some(p) = report.as_ref().and_then(|r| r.proxy.as_ref()) {
        checks.push(proxy(p));
    }
    checks.extend(report.iter().flat_map(|r| &r.projects).filter_map(spares));
    let mut hosts = Vec::new();
    if let Some(report) = report {
        for w in report.projects.iter().flat_map(|p| &p.worlds) {
            if w.state == crate::protocol::WorldState::Running {
                hosts.extend(w.services.iter().filter_map(|s| s.host.clone()));
            }
        }
    }
    hosts
}

/// A project's spare clones (issue 51): how many, and their disk.
fn spares(p: &crate::protocol::ProjectStatus) -> Option<Check> {
    let s = p.spares.as_ref()?;
    let making = if s.making > 0 {
        format!(", {} being made", s.making)
    } else {
        String::new()
    };
    Some(check(
        "spares",
        Status::Ok,
        format!(
            "{}: {} ready, {} of disk{making}",
            p.name,
            s.ready,
            crate::adapters::kit::cow::size(s.bytes)
        ),
        None,
    ))
}

/// The proxy as the daemon reports it: listening, or down with why, who
/// holds its port (when this user may see), and what to do.
fn proxy(p: &crate::protocol::ProxyStatus) -> Check {
    let Some(down) = p.why_down() else {
        return check(
            "proxy",
            Status::Ok,
            format!("listening on 127.0.0.1:{}", p.port),
            None,
        );
    };
    let holders: Vec<String> = crate::platform::listeners_of(p.port)
        .into_iter()
        .map(|pid| match crate::platform::command_line(pid) {
            Some(cmd) => format!("pid {pid} ({})", crate::output::untrusted(&cmd)),
            None => format!("pid {pid}"),
        })
        .collect();
    let held = if holders.is_empty() {
        format!("free port {} (another program or user holds it)", p.port)
    } else {
        format!("{} holds port {}: stop it", holders.join(", "), p.port)
    };
    check(
        "proxy",
        Status::Fail,
        down,
        Some(format!(
            "{held}, or move the proxy with `binky port --proxy <port>`; the daemon binds the port as soon as it is free (see daemon.log)"
        )),
    )
}

/// Name resolution: curl and browsers resolve *.localhost themselves, but
/// getaddrinfo often does not. The fix lists `hosts` for /etc/hosts.
fn resolver(hosts: &[String]) -> Check {
    if resolves("binky-doctor-probe.localhost") {
        return check(
            "*.localhost",
            Status::Ok,
            "the system resolver maps *.localhost to loopback",
            None,
        );
    }
    let mut fix = format!(
        "server-side code should use ${{SVC.local_url}}; to make the names resolve everywhere {}install nss-myhostname (Debian: apt-get install libnss-myhostname) and add `myhostname` to the hosts: line of /etc/nsswitch.conf",
        if hosts.is_empty() { "" } else { "either " }
    );
    if !hosts.is_empty() {
        fix.push_str(", or add these lines to /etc/hosts:\n");
        for h in hosts {
            fix.push_str(&format!("127.0.0.1 {h}\n"));
        }
        fix = fix.trim_end().to_owned();
    }
    check(
        "*.localhost",
        Status::Warn,
        "the system resolver does not resolve *.localhost (curl and browsers do; Python, Node and most servers do not)",
        Some(fix),
    )
}

/// Caddy, for https projects.
fn caddy() -> Check {
    if crate::proxy::caddy::find().is_some() {
        check(
            "caddy",
            Status::Ok,
            "on PATH (HTTPS for projects with https = true)",
            None,
        )
    } else {
        check(
            "caddy",
            Status::Warn,
            "not on PATH: projects with https = true are served over http",
            Some("install Caddy (Debian: apt-get install caddy)".into()),
        )
    }
}

/// The log folder's size: over 512 MiB is worth a look.
fn logs(paths: &crate::paths::Paths) -> Check {
    let logs = paths.home().join("logs");
    let size = dir_size(&logs);
    if size > 512 * 1024 * 1024 {
        check(
            "logs",
            Status::Warn,
            format!("{} holds {} MiB", logs.display(), size / (1024 * 1024)),
            Some("remove worlds you no longer need (`binky remove`), or delete old rolled logs (*.log.1-3)".into()),
        )
    } else {
        check(
            "logs",
            Status::Ok,
            format!("{} MiB", size / (1024 * 1024)),
            None,
        )
    }
}

/// What each golden template's last clone cost, as `up` measured it
/// (`golden/<adapter>/<template>.clone`): a warning where clones are full
/// copies, with what would make them share blocks (issue 51). None before
/// any world was cloned.
fn clones(paths: &crate::paths::Paths) -> Vec<Check> {
    use crate::adapters::golden::{CloneReport, report_path};
    use crate::adapters::kit::cow::size;
    let Ok(adapters) = std::fs::read_dir(paths.home().join("golden")) else {
        return Vec::new();
    };
    let mut reports: Vec<CloneReport> = adapters
        .flatten()
        .filter_map(|a| std::fs::read_dir(a.path()).ok())
        .flat_map(|markers| markers.flatten())
        .filter(|m| report_path(&m.path()).is_file())
        .filter_map(|m| std::fs::read(report_path(&m.path())).ok())
        .filter_map(|text| serde_json::from_slice(&text).ok())
        .collect();
    reports.sort_by(|a, b| (&a.project, &a.service).cmp(&(&b.project, &b.service)));
    reports
        .into_iter()
        .map(|r| {
            let took = r
                .added
                .map(|a| format!(", +{} of disk", size(a)))
                .unwrap_or_default();
            let of = r
                .size
                .map(|s| format!(" of {}", size(s)))
                .unwrap_or_default();
            let at = format!(
                "{}/{}: a clone{of} took {} ms{took}",
                r.project, r.service, r.ms
            );
            match r.shares_blocks {
                Some(true) => check(
                    "clones",
                    Status::Ok,
                    format!("{at}, sharing the template's blocks ({})", r.how),
                    None,
                ),
                Some(false) => check(
                    "clones",
                    Status::Warn,
                    format!("{at}: a full copy ({})", r.how),
                    r.advice,
                ),
                None => check(
                    "clones",
                    Status::Ok,
                    format!(
                        "{at} ({}); whether it shares blocks Binky cannot tell",
                        r.how
                    ),
                    r.advice,
                ),
            }
        })
        .collect()
}

/// Each check on a line, its fix indented below.
fn print(checks: &[Check]) {
    for c in checks {
        let mark = match c.status {
            Status::Ok => paint(OK, "✓"),
            Status::Warn => paint(WARN, "!"),
            Status::Fail => paint(ERROR, "✗"),
        };
        // Details quote names from binky.toml and paths: shown, never
        // obeyed, by the terminal.
        let detail = crate::output::untrusted(&c.detail);
        anstream::println!("{mark} {:<12} {detail}", c.name);
        if let Some(f) = &c.fix {
            for (i, line) in f.lines().enumerate() {
                let label = if i == 0 { "fix:" } else { "    " };
                let line = crate::output::untrusted(line);
                anstream::println!("  {} {line}", paint(DIM, label));
            }
        }
    }
}

fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}
