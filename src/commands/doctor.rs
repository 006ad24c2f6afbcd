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
use std::os::unix::fs::PermissionsExt;
use std::process::ExitCode;

#[derive(Serialize)]
struct Check {
    name: &'static str,
    /// `ok`, `warn` or `fail`.
    status: &'static str,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(
    name: &'static str,
    status: &'static str,
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
pub fn run(args: &JsonArgs) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    let mut checks = Vec::new();
    match std::fs::metadata(paths.home()) {
        Ok(m) if m.permissions().mode() & 0o077 == 0 => checks.push(check(
            "state folder",
            "ok",
            format!("{} is private (0700)", paths.home().display()),
            None,
        )),
        Ok(m) => checks.push(check(
            "state folder",
            "fail",
            format!(
                "{} has mode {:o}; others can reach the daemon's files",
                paths.home().display(),
                m.permissions().mode() & 0o777
            ),
            Some(format!("chmod 700 {}", paths.home().display())),
        )),
        Err(_) => checks.push(check(
            "state folder",
            "ok",
            format!(
                "{} does not exist yet; the first command creates it",
                paths.home().display()
            ),
            None,
        )),
    }
    let mut hosts: Vec<String> = Vec::new();
    match Client::connect(&paths) {
        Ok(None) => checks.push(check(
            "daemon",
            "ok",
            "not running; any command starts it",
            None,
        )),
        Err(e) => checks.push(check("daemon", "fail", e.message.clone(), e.hint.clone())),
        Ok(Some(mut c)) => {
            if !c.same_version() {
                checks.push(check(
                    "daemon",
                    "fail",
                    format!(
                        "running version {}, this binky is {}",
                        c.welcome.version,
                        crate::protocol::VERSION
                    ),
                    Some("binky daemon stop".into()),
                ));
            } else {
                checks.push(check(
                    "daemon",
                    "ok",
                    format!("pid {}, version {}", c.welcome.pid, c.welcome.version),
                    None,
                ));
                if crate::platform::runs_replaced_binary(c.welcome.pid) {
                    // Same version string, but the file it runs is gone: a
                    // rebuild or reinstall since it started.
                    checks.push(check(
                        "daemon binary",
                        "warn",
                        format!(
                            "pid {} runs a binky binary that was replaced or deleted since it started",
                            c.welcome.pid
                        ),
                        Some("binky daemon stop (services keep running; the next command starts the new binary, which adopts them)".into()),
                    ));
                }
                if let Ok(Response::Settings(s)) = c.request(&Request::Config) {
                    let answering =
                        std::net::TcpStream::connect(("127.0.0.1", s.proxy_port)).is_ok();
                    checks.push(if answering {
                        check("proxy", "ok", format!("listening on 127.0.0.1:{}", s.proxy_port), None)
                    } else {
                        check(
                            "proxy",
                            "fail",
                            format!("nothing answers on 127.0.0.1:{}", s.proxy_port),
                            Some("the port may be taken: pick another with `binky port --proxy <port>`, and see daemon.log".into()),
                        )
                    });
                }
                if let Ok(Response::Status(report)) = c.request(&Request::Status { project: None })
                {
                    for p in &report.projects {
                        for w in &p.worlds {
                            if w.state == crate::protocol::WorldState::Running {
                                hosts.extend(w.services.iter().filter_map(|s| s.host.clone()));
                            }
                        }
                    }
                }
            }
        }
    }
    // Name resolution: curl and browsers resolve *.localhost themselves, but
    // getaddrinfo often does not.
    let probe = "binky-doctor-probe.localhost";
    if resolves(probe) {
        checks.push(check(
            "*.localhost",
            "ok",
            "the system resolver maps *.localhost to loopback",
            None,
        ));
    } else {
        let mut fix = format!(
            "server-side code should use ${{SVC.local_url}}; to make the names resolve everywhere {}install nss-myhostname (Debian: apt-get install libnss-myhostname) and add `myhostname` to the hosts: line of /etc/nsswitch.conf",
            if hosts.is_empty() { "" } else { "either " }
        );
        if !hosts.is_empty() {
            fix.push_str(", or add these lines to /etc/hosts:\n");
            for h in &hosts {
                fix.push_str(&format!("127.0.0.1 {h}\n"));
            }
            fix = fix.trim_end().to_owned();
        }
        checks.push(check(
            "*.localhost",
            "warn",
            "the system resolver does not resolve *.localhost (curl and browsers do; Python, Node and most servers do not)",
            Some(fix),
        ));
    }
    // Caddy for https projects.
    checks.push(if crate::proxy::caddy::find().is_some() {
        check(
            "caddy",
            "ok",
            "on PATH (HTTPS for projects with https = true)",
            None,
        )
    } else {
        check(
            "caddy",
            "warn",
            "not on PATH: projects with https = true are served over http",
            Some("install Caddy (Debian: apt-get install caddy)".into()),
        )
    });
    // Log folder size.
    let logs = paths.home().join("logs");
    let size = dir_size(&logs);
    checks.push(if size > 512 * 1024 * 1024 {
        check(
            "logs",
            "warn",
            format!("{} holds {} MiB", logs.display(), size / (1024 * 1024)),
            Some("remove worlds you no longer need (`binky remove`), or delete old rolled logs (*.log.1-3)".into()),
        )
    } else {
        check("logs", "ok", format!("{} MiB", size / (1024 * 1024)), None)
    });
    let failed = checks.iter().any(|c| c.status == "fail");
    if args.json {
        print_json(&serde_json::json!({ "ok": !failed, "checks": checks }));
    } else {
        for c in &checks {
            let mark = match c.status {
                "ok" => paint(OK, "✓"),
                "warn" => paint(WARN, "!"),
                _ => paint(ERROR, "✗"),
            };
            anstream::println!("{mark} {:<12} {}", c.name, c.detail);
            if let Some(f) = &c.fix {
                for (i, line) in f.lines().enumerate() {
                    let label = if i == 0 { "fix:" } else { "    " };
                    anstream::println!("  {} {line}", paint(DIM, label));
                }
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
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
