//! `binky remove`: tear a world down for good: its services, slices, routes, ports and worktree.

use super::print_json;
use super::world::{call_world, notes, world_ref};
use crate::cli::RemoveArgs;
use crate::output::{OK, paint};
use crate::protocol::{ClientEnv, Request};
use std::process::ExitCode;

/// `binky remove`.
pub(crate) fn run(args: &RemoveArgs, project: Option<&str>) -> ExitCode {
    match call_world(
        Request::Remove {
            world: match world_ref(project, &args.name, args.json) {
                Ok(w) => w,
                Err(c) => return c,
            },
            force: args.force,
            env: ClientEnv::current(),
        },
        args.json,
    ) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else if o.left_queue && o.world.path.is_empty() {
                anstream::println!(
                    "{} removed: {} was queued and never made: it left the queue; there was no worktree, slice or port to release",
                    paint(OK, "✓"),
                    o.world.name
                );
            } else {
                notes(&o);
                // Only what this remove did: a world that never made a
                // slice (or whose slices were gone already) released none.
                // Each with its adapter and server: two databases of one
                // project are told apart, and where each went is shown.
                let described: Vec<String> = if o.torn_down_on.is_empty() {
                    o.torn_down.clone()
                } else {
                    o.torn_down_on.iter().map(|t| t.describe()).collect()
                };
                let slices = match described.len() {
                    0 => String::new(),
                    1 => format!("slice {}, ", described[0]),
                    _ => format!("slices {}, ", described.join(", ")),
                };
                anstream::println!(
                    "{} removed: {} (worktree, {slices}logs and ports released; the branch is kept){}",
                    paint(OK, "✓"),
                    o.world.name,
                    if o.left_queue {
                        "; its queued `up` left the queue"
                    } else {
                        ""
                    }
                );
                if !o.left_for_gc.is_empty() {
                    anstream::println!("  left for `binky gc`: {}", o.left_for_gc.join(", "));
                }
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}
