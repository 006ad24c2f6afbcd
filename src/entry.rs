//! The program's entry: what `binky` does before a command runs. Kept in
//! the library so the binary is one call and every other module stays
//! private to the crate.

use crate::cli::{Cli, Command, DaemonAction};
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

/// Parses the arguments. Two things clap cannot know before it has parsed
/// them are read off the raw arguments first: `--color never` (or
/// `NO_COLOR`) also keeps `--help` and usage errors plain, and with `--json`
/// a usage error is printed as `{"error": {"message", "hint"}}` on stdout
/// (exit 2), as every other error of a `--json` caller is.
fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json = args.iter().any(|a| a == "--json");
    let never = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
        || args.iter().any(|a| a == "--color=never")
        || args
            .windows(2)
            .any(|w| w[0] == "--color" && w[1] == "never");
    let mut cmd = Cli::command();
    if never {
        cmd = cmd.color(clap::ColorChoice::Never);
    }
    let shown = |e: clap::Error| -> ! {
        use clap::error::ErrorKind;
        let informative = matches!(
            e.kind(),
            ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
        if json && !informative {
            let text = e.render().to_string();
            // The error's own words, before clap's usage and tip lines.
            let message = text
                .split("\n\n")
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let body = serde_json::json!({
                "error": { "message": message, "hint": "see `binky --help` or `binky <command> --help`" }
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&body).unwrap_or_default()
            );
            std::process::exit(2);
        }
        e.exit()
    };
    let matches = cmd.try_get_matches_from(&args).unwrap_or_else(|e| shown(e));
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| shown(e))
}

/// The `binky` program: parses the arguments, prepares the process (the
/// daemon's descriptors and environment, SIGPIPE, logging) and runs the
/// command. `src/main.rs` is this call alone.
pub fn main() -> ExitCode {
    let cli = parse();
    crate::output::init(cli.color);
    let is_daemon = matches!(
        &cli.command,
        Command::Daemon(d) if matches!(d.action, DaemonAction::Run)
    );
    if is_daemon {
        // Before anything is opened: whatever the starter had open (a pipe
        // a shell or `make` passed down) must not be held for the daemon's
        // whole life, nor handed on to services.
        crate::platform::close_inherited_fds();
        // A daemon started from inside a world (an agent's shell) must not
        // pass that world's identity on to what it starts for others.
        // No other thread exists yet.
        crate::platform::remove_env_before_threads(&[
            "BINKY_WORLD",
            "BINKY_SERVICE",
            "BINKY_PROJECT",
            "BINKY_WORKTREE",
            "BINKY_CADDY",
        ]);
    }
    // A closed stdout (`binky env x | head -1`) ends a command quietly, the
    // way Unix tools end: by SIGPIPE, here in one place for every command.
    // Long-lived servers (the daemon, `binky mcp`, the log writer) keep
    // Rust's default of ignoring it and handle EPIPE as an error; `curl`
    // exits 23 on a closed stdout, as curl does.
    if cli.command.prints_to_stdout() {
        crate::platform::default_sigpipe();
        // Any other write error on stdout (a full disk, `> /dev/full`)
        // makes `println!` panic: say it in one line and exit 1, never
        // with a backtrace.
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if let Some(cause) = msg.strip_prefix("failed printing to stdout: ") {
                eprintln!("binky: cannot write to standard output: {cause}");
                std::process::exit(1);
            }
            default_hook(info);
        }));
    }
    // BINKY_LOG filters like RUST_LOG. The daemon logs at info to daemon.log;
    // the CLI stays quiet unless asked. Escape codes only on a terminal
    // that wants colour: never in daemon.log, a pipe or under NO_COLOR.
    let default = if is_daemon { "info" } else { "warn" };
    let filter = EnvFilter::try_from_env("BINKY_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = !is_daemon && crate::output::stderr_colour_on();
    if is_daemon {
        // The daemon writes its own daemon.log, rolled by size (see
        // daemon::log_writer); stderr still reaches it for panics.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(crate::daemon::log_writer())
            .with_ansi(false)
            .with_target(false)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_target(false)
            .init();
    }
    crate::commands::run(cli)
}
