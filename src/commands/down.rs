//! `binky down`: stop a world's services, keeping its slices, worktree
//! and ports.

use super::print_json;
use super::world::{again, call_world, world_ref};
use crate::cli::NameArgs;
use crate::output::{OK, paint};
use crate::protocol::Request;
use std::process::ExitCode;

/// `binky down`.
pub(crate) fn run(args: &NameArgs, project: Option<&str>) -> ExitCode {
    let world = match world_ref(project, &args.name, args.json) {
        Ok(w) => w,
        Err(c) => return c,
    };
    match call_world(Request::Down(world), args.json) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else if o.left_queue && o.world.path.is_empty() {
                anstream::println!(
                    "{} down: {} was queued and never made: it left the queue; nothing else existed",
                    paint(OK, "✓"),
                    o.world.name
                );
            } else {
                let queue = if o.left_queue {
                    "; its queued `up` left the queue"
                } else {
                    ""
                };
                anstream::println!(
                    "{} down: {} (files, ports and data kept{queue}; `{}` resumes it)",
                    paint(OK, "✓"),
                    o.world.name,
                    again(project, "up", &o.world.name)
                );
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}
