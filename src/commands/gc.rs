//! `binky gc`: sweep what a crash left half-made, or say what would be swept.

use super::{fail_json, print_json};
use crate::protocol::{ClientEnv, Request, Response};
use std::process::ExitCode;

/// `binky gc`.
pub(crate) fn run(args: &crate::cli::GcArgs) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let req = Request::Gc {
        dry_run: args.dry_run,
        env: ClientEnv::current(),
    };
    match client.request(&req) {
        Ok(Response::Swept(items)) => {
            if args.json {
                print_json(&items);
            } else if items.is_empty() {
                println!("nothing to sweep");
            } else {
                for i in &items {
                    println!(
                        "{:<13} {}
              {} — {}",
                        i.kind, i.what, i.why, i.outcome
                    );
                }
                if args.dry_run {
                    println!("(dry run: nothing was changed; run `binky gc` to sweep)");
                }
            }
            if items
                .iter()
                .any(|i| i.result == crate::protocol::SweepResult::NotSwept)
            {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Ok(other) => super::unexpected(&other),
        Err(e) => fail_json(args.json, &e),
    }
}
