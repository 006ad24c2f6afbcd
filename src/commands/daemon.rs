//! `binky daemon start|stop|status|run`.

use super::{connect_only, fail, paths_or_exit, print_json};
use crate::cli::DaemonAction;
use crate::client::{self, Client};
use crate::output::{OK, paint};
use crate::paths::Paths;
use crate::protocol::{Request, Response};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long `daemon stop` waits for the daemon to let go of its socket.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `binky daemon <action>`.
pub(crate) fn run(action: &DaemonAction) -> ExitCode {
    let paths = match paths_or_exit() {
        Ok(p) => p,
        Err(code) => return code,
    };
    match action {
        DaemonAction::Run => match crate::daemon::run_blocking(paths) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e:#}");
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        DaemonAction::Start => start(&paths),
        DaemonAction::Stop => stop(&paths),
        DaemonAction::Status(args) => status(&paths, args.json),
    }
}

/// `binky daemon start`: starts one unless one answers.
fn start(paths: &Paths) -> ExitCode {
    match connect_only(paths) {
        Err(code) => code,
        Ok(Some(c)) => {
            println!(
                "binky daemon is already running (pid {}, version {})",
                c.welcome.pid, c.welcome.version
            );
            ExitCode::SUCCESS
        }
        Ok(None) => match client::start_daemon(paths) {
            Ok(w) => {
                anstream::println!(
                    "{} binky daemon started (pid {}, socket {})",
                    paint(OK, "✓"),
                    w.pid,
                    paths.socket().display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    }
}

/// `binky daemon stop`: asks it to stop, then waits until its socket and
/// its lock are let go, so a `start` right after never meets it.
fn stop(paths: &Paths) -> ExitCode {
    match connect_only(paths) {
        Err(code) => code,
        Ok(None) => {
            println!("binky daemon is not running");
            ExitCode::SUCCESS
        }
        Ok(Some(mut c)) => {
            let pid = c.welcome.pid;
            if let Err(e) = c.request(&Request::Shutdown) {
                return fail(&e);
            }
            drop(c);
            let deadline = Instant::now() + STOP_TIMEOUT;
            loop {
                match Client::connect(paths) {
                    Ok(None) | Err(_) => break,
                    Ok(Some(_)) if Instant::now() >= deadline => {
                        eprintln!(
                            "error: the daemon (pid {pid}) is still answering after {} s",
                            STOP_TIMEOUT.as_secs()
                        );
                        return ExitCode::from(1);
                    }
                    Ok(Some(_)) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            // The socket goes first; wait for the lock too, so a `start`
            // right after this never meets a daemon still shutting down.
            while Instant::now() < deadline {
                match crate::platform::lock_file(&paths.daemon_lock(), false) {
                    Ok(Some(_free)) => break,
                    _ => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            anstream::println!(
                "{} binky daemon stopped (pid {pid}); service processes keep running",
                paint(OK, "✓")
            );
            ExitCode::SUCCESS
        }
    }
}

/// `binky daemon status [--json]`: exit 1 when none runs.
fn status(paths: &Paths, json: bool) -> ExitCode {
    match connect_only(paths) {
        Err(code) => code,
        Ok(None) => {
            if json {
                print_json(&serde_json::json!({"running": false}));
            } else {
                println!("binky daemon is not running");
            }
            ExitCode::from(1)
        }
        Ok(Some(mut c)) => match c.request(&Request::DaemonStatus) {
            Ok(Response::DaemonStatus(info)) => {
                if json {
                    let mut v = serde_json::to_value(&info).expect("json");
                    v["running"] = true.into();
                    print_json(&v);
                } else {
                    println!("running");
                    let uptime = human_duration(info.uptime_secs);
                    for (label, value) in [
                        ("pid", info.pid.to_string()),
                        ("version", info.version),
                        ("uptime", uptime),
                        ("socket", info.socket),
                        ("home", info.home),
                        ("followers", info.followers.to_string()),
                    ] {
                        println!("  {label:<10}{value}");
                    }
                }
                ExitCode::SUCCESS
            }
            Ok(other) => super::unexpected(&other),
            Err(e) => fail(&e),
        },
    }
}

/// `3h 04m 05s`-style uptime.
fn human_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}
