//! `binky verify`: run the project's `[agents] verify` checks in a world, and record the result.

use super::world::world_ref;
use super::{fail_json, print_json};
use crate::output::{DIM, OK, paint};
use crate::protocol::{ClientEnv, Request, Response, VerifyReport};
use std::process::ExitCode;

/// `binky verify`.
pub(crate) fn run(args: &crate::cli::VerifyArgs, project: Option<&str>) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let req = Request::Verify {
        world: match world_ref(project, &args.name, args.json) {
            Ok(w) => w,
            Err(c) => return c,
        },
        keep_going: args.keep_going,
        from_branch: args.from_branch,
        env: ClientEnv::current(),
    };
    let json = args.json;
    let res = client.call(&req, &mut |p| {
        if json {
            return;
        }
        // A check's output is untrusted text: shown, never acted on.
        let text = crate::output::untrusted(&p.message);
        if p.step == crate::protocol::ProgressStep::Output {
            anstream::println!("{text}");
        } else {
            anstream::println!("{}", paint(crate::output::BOLD, text));
        }
    });
    match res {
        Ok(Response::Verified(r)) => {
            if json {
                print_json(&r);
            } else {
                print_report(&r, &args.name);
            }
            if r.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Ok(other) => super::unexpected(&other),
        Err(e) => fail_json(json, &e),
    }
}

/// The report for a person: each check, what the result is for, and
/// whether it passed.
fn print_report(r: &VerifyReport, name: &str) {
    for c in &r.checks {
        let mark = if c.passed {
            paint(OK, "✓")
        } else {
            paint(crate::output::ERROR, "✗")
        };
        anstream::println!("{mark} {}  ({} ms)", c.command, c.duration_ms);
    }
    let commit = r
        .commit
        .as_deref()
        .map(|c| &c[..c.len().min(12)])
        .unwrap_or("?");
    if !r.uncommitted.is_empty() {
        anstream::eprintln!(
            "{} the worktree has uncommitted changes, so this result is for {commit} plus them:",
            paint(DIM, "note:")
        );
        for c in &r.uncommitted {
            anstream::eprintln!("  {c}");
        }
    }
    // Whose checks these were, beside the result.
    let whose = if r.from_branch {
        " (the branch's own checks)"
    } else {
        ""
    };
    if r.passed {
        anstream::println!(
            "{} verify passed: {} at {commit}{whose}",
            paint(OK, "✓"),
            name
        );
    } else {
        anstream::println!(
            "{} verify failed: {} at {commit}{whose}",
            paint(crate::output::ERROR, "✗"),
            name
        );
    }
}
