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
    // BINKY_LOG filters like RUST_LOG. The daemon logs at info to daemon.log;
    // the CLI stays quiet unless asked.
    let default = if is_daemon { "info" } else { "warn" };
    let filter = EnvFilter::try_from_env("BINKY_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(!is_daemon && std::env::var_os("NO_COLOR").is_none())
        .with_target(false)
        .init();
    binky::commands::run(cli)
}
