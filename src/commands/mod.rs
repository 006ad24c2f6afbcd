//! The CLI side of each verb: parse → (talk to the daemon) → print.
//!
//! Exit codes: 0 success, 1 the operation failed or found errors, 2 usage
//! errors, unreadable input, or a verb that is not implemented yet.

pub mod check;

use crate::cli::{Cli, Command};
use std::process::ExitCode;

/// Runs one parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Completions(args) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.shell, &mut cmd, "binky", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        other => not_implemented(other.name()),
    }
}

/// A verb that exists in the CLI but is not built yet. It never pretends to
/// succeed.
fn not_implemented(verb: &str) -> ExitCode {
    eprintln!("binky {verb}: not implemented yet");
    ExitCode::from(2)
}
