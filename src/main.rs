use binky::cli::Cli;
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    binky::output::init(cli.color);
    binky::commands::run(cli)
}
