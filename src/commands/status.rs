//! `binky status [.]`: every world on the machine, grouped by project;
//! with `--watch`, drawn again after each burst of the daemon's events.

use super::{call, fail, paths_or_exit, print_json};
use crate::cli::StatusArgs;
use crate::client::{Client, Feed, follow};
use crate::output::{DIM, ERROR, OK, WARN, paint};
use crate::protocol::{
    ApiError, ErrorKind, Request, Response, ServiceKind, ServiceState, StatusReport, Subscription,
    WorldState, WorldStatus,
};
use std::process::ExitCode;
use std::time::Duration;

/// Runs `binky status`.
pub(crate) fn run(args: &StatusArgs, project_flag: Option<&str>) -> ExitCode {
    let project = match (args.scope.as_deref(), project_flag) {
        (_, Some(p)) => Some(super::project_name(p, args.json)),
        (Some("."), None) => Some(super::project_name(".", args.json)),
        _ => None,
    };
    let project = match project.transpose() {
        Ok(p) => p,
        Err(code) => return code,
    };
    let by_name =
        project_flag.is_some_and(|p| !std::path::Path::new(p).exists() && !p.contains('/'));
    let wanted = project.clone();
    match call(&Request::Status {
        project,
        usage: false,
    }) {
        Ok(Response::Status(report)) => {
            if by_name && report.projects.is_empty() {
                let name = wanted.unwrap_or_default();
                // JSON escapes what it carries; text is shown as untrusted.
                let shown = if args.json {
                    name
                } else {
                    crate::output::untrusted(&name).into_owned()
                };
                let e = ApiError::new(format!(
                    "no project named `{shown}` is known to this daemon"
                ))
                .hint("`binky status` lists every project")
                .with_kind(ErrorKind::NotFound);
                return super::refuse(args.json, &e, 1);
            }
            if args.watch {
                return watch_status(wanted, args.json);
            }
            if args.json {
                print_json(&report);
            } else {
                print_human(&report);
            }
            ExitCode::SUCCESS
        }
        Ok(other) => super::unexpected(&other),
        Err(c) => c,
    }
}

fn world_style(state: WorldState) -> anstyle::Style {
    match state {
        WorldState::Running => OK,
        WorldState::Failed => ERROR,
        WorldState::Stopped => DIM,
        _ => WARN,
    }
}

fn service_style(state: ServiceState) -> anstyle::Style {
    match state {
        ServiceState::Running => OK,
        ServiceState::Failed => ERROR,
        ServiceState::Stopped => DIM,
        _ => WARN,
    }
}

/// World names longer than this are cut with an ellipsis in the table
/// (`--json` has them whole), so one 150-character branch does not push
/// every row off the screen.
const NAME_WIDTH: usize = 40;

/// `name` cut to `width` characters, the last one an ellipsis when cut.
fn fit(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        return name.to_owned();
    }
    let mut out: String = name.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The human layout shown in the README.
pub(crate) fn print_human(report: &StatusReport) {
    // First: while the proxy is down, every URL below is dead.
    if let Some(down) = report.proxy.as_ref().and_then(|p| p.why_down()) {
        anstream::println!("{}", paint(ERROR, format!("! {down}")));
        anstream::println!(
            "  {}",
            paint(
                DIM,
                "the daemon tries again until the port is free; `binky doctor` says who holds it, `binky port --proxy <port>` moves it"
            )
        );
    }
    if report.projects.iter().all(|p| p.worlds.is_empty()) {
        println!("no worlds yet; `binky up <branch>` in a project folder creates one");
        return;
    }
    for p in report.projects.iter().filter(|p| !p.worlds.is_empty()) {
        anstream::println!("{}", paint(crate::output::BOLD, &p.name));
        let width = p
            .worlds
            .iter()
            .map(|w| w.name.chars().count())
            .max()
            .unwrap_or(0)
            .min(NAME_WIDTH);
        for w in &p.worlds {
            print_world(w, width);
        }
        if p.queued_unlisted > 0 {
            anstream::println!(
                "  {}",
                paint(
                    DIM,
                    format!(
                        "… and {} more queued, never made, behind these in admission order",
                        p.queued_unlisted
                    )
                )
            );
        }
        if let Some(s) = &p.spares {
            let making = if s.making > 0 {
                format!(", {} being made", s.making)
            } else {
                String::new()
            };
            anstream::println!(
                "  {}",
                paint(
                    DIM,
                    format!(
                        "spares: {} ready ({} of disk){making}",
                        s.ready,
                        crate::adapters::kit::cow::size(s.bytes)
                    )
                )
            );
        }
    }
}

/// One world's lines of the table: its name (cut to `width`), state, place
/// in the queue, errors, notes and services.
fn print_world(w: &WorldStatus, width: usize) {
    let name = fit(&w.name, width);
    let pad = width - name.chars().count();
    anstream::println!(
        "  {}{}  [{}]",
        name,
        " ".repeat(pad),
        paint(world_style(w.state), w.state.as_str())
    );
    if let Some(q) = &w.queue {
        anstream::println!(
            "      {}",
            paint(
                DIM,
                format!(
                    "{} of {} in admission order now (it moves as groups start and stop worlds) — {}",
                    q.position, q.of, q.reason
                )
            )
        );
    }
    if let Some(since) = &w.suspended_since {
        anstream::println!("      {}", paint(DIM, format!("suspended since {since}")));
    }
    if let Some(since) = &w.sleeping_since {
        anstream::println!(
            "      {}",
            paint(
                DIM,
                format!(
                    "sleeping since {since}: the first request to one of its URLs, or `binky up`, wakes it"
                )
            )
        );
    }
    if let Some(e) = &w.error {
        // First line only: the full reason is in `status --json` and the logs.
        let first = e.lines().next().unwrap_or("");
        anstream::println!("      {}", paint(ERROR, first));
    }
    if let Some(v) = &w.verify {
        anstream::println!("      {}", paint(DIM, format!("verify {v}")));
    }
    for n in &w.notes {
        anstream::println!("      {}", paint(WARN, n));
    }
    let sw = w.services.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for s in &w.services {
        let mut line = format!("      {:<sw$}", s.name);
        if let Some(port) = s.port {
            line.push_str(&format!("  :{port}"));
        }
        for (n, port) in &s.ports {
            line.push_str(&format!("  {n}:{port}"));
        }
        if s.kind == ServiceKind::Resource || s.state != ServiceState::Running {
            line.push_str(&format!(
                "  {}",
                paint(service_style(s.state), s.state.as_str())
            ));
        }
        if let Some(url) = &s.url {
            line.push_str(&format!("  {url}"));
        }
        anstream::println!("{}", line.trim_end());
    }
}

/// `binky status --watch`: the table (or with `json`, one JSON document a
/// line), drawn now and again after each burst of events. A burst is
/// coalesced: the redraw waits until events stop arriving for a moment
/// (at most half a second), so an `up` of ten services draws a few times,
/// not fifty.
fn watch_status(project: Option<String>, json: bool) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(c) => return c,
    };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let sub_paths = paths.clone();
    std::thread::spawn(move || {
        let _ = follow(&sub_paths, Subscription::default(), true, &mut |feed| {
            if let Feed::Gone = feed {
                eprintln!("{}", super::events::DAEMON_GONE);
            }
            tx.send(()).is_ok()
        });
    });
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    loop {
        // The first frame (the subscription is live) draws at once.
        if rx.recv().is_err() {
            return ExitCode::SUCCESS;
        }
        let burst_end = std::time::Instant::now() + Duration::from_millis(500);
        while let Some(left) = burst_end.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(()) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return ExitCode::SUCCESS,
            }
        }
        // Never started here: a daemon that stopped was stopped on purpose
        // (the follower waits for it to come back).
        let report = match Client::connect(&paths).and_then(|c| {
            c.map(|mut c| {
                c.request(&Request::Status {
                    usage: false,
                    project: project.clone(),
                })
            })
            .transpose()
        }) {
            Ok(Some(crate::protocol::Response::Status(r))) => r,
            Ok(None) => continue,
            Ok(Some(other)) => return super::unexpected(&other),
            Err(e) => return fail(&e),
        };
        if json {
            println!(
                "{}",
                serde_json::to_string(&report).expect("a report serialises")
            );
        } else {
            if terminal {
                // Home and clear: redrawn in place.
                print!("\x1b[H\x1b[2J");
            } else {
                println!(
                    "--- {}",
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                );
            }
            print_human(&report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn long_names_are_cut_with_an_ellipsis() {
        assert_eq!(fit("short", 40), "short");
        let long = "feature/".repeat(20);
        let cut = fit(&long, 40);
        assert_eq!(cut.chars().count(), 40);
        assert!(cut.ends_with('…'));
        assert_eq!(fit("日本語のブランチ", 4), "日本語…");
    }
}
