use binky::cli::{Cli, Command, DaemonAction};
use clap::Parser;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    binky::output::init(cli.color);
    let is_daemon = matches!(
        &cli.command,
        Command::Daemon(d) if matches!(d.action, DaemonAction::Run)
    );
    if is_daemon {
        // Before anything is opened: whatever the starter had open (a pipe
        // a shell or `make` passed down) must not be held for the daemon's
        // whole life, nor handed on to services.
        binky::platform::close_inherited_fds();
        // A daemon started from inside a world (an agent's shell) must not
        // pass that world's identity on to what it starts for others.
        for var in [
            "BINKY_WORLD",
            "BINKY_SERVICE",
            "BINKY_PROJECT",
            "BINKY_WORKTREE",
            "BINKY_CADDY",
        ] {
            // SAFETY: no other thread exists yet.
            unsafe { std::env::remove_var(var) };
        }
    }
    // A closed stdout (`binky env x | head -1`) ends a command quietly, the
    // way Unix tools end: by SIGPIPE, here in one place for every command.
    // Long-lived servers (the daemon, `binky mcp`, the log writer) keep
    // Rust's default of ignoring it and handle EPIPE as an error; `curl`
    // exits 23 on a closed stdout, as curl does.
    if cli.command.prints_to_stdout() {
        binky::platform::default_sigpipe();
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
    let ansi = !is_daemon && binky::output::stderr_colour_on();
    if is_daemon {
        // The daemon writes its own daemon.log, rolled by size (see
        // daemon::log_writer); stderr still reaches it for panics.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(binky::daemon::log_writer())
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
    binky::commands::run(cli)
}
