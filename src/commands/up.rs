//! `binky up` and `binky reload`: bring a world up (making what it
//! lacks), or re-render and restart it.

use super::print_json;
use super::world::{call_world, name_here, notes, print_services, up_request};
use crate::cli::UpArgs;
use crate::output::{DIM, OK, paint};
use crate::protocol::Request;
use std::process::ExitCode;

/// `binky up` / `binky reload`.
pub(crate) fn run(args: &UpArgs, project: Option<&str>, reload: bool) -> ExitCode {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => match name_here(args.json) {
            Ok(n) => n,
            Err(c) => return c,
        },
    };
    let mut req = match up_request(project, &name, args.json, args.group.clone(), !args.no_wait) {
        Ok(r) => r,
        Err(c) => return c,
    };
    req.idle_after = args.idle_after.clone();
    let req = if reload {
        Request::Reload(req)
    } else {
        Request::Up(req)
    };
    match call_world(req, args.json) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else if let Some(q) = &o.world.queue {
                anstream::println!(
                    "{} queued: {} is {} of {} — {}; `binky status` shows its place",
                    paint(DIM, "…"),
                    o.world.name,
                    q.position,
                    q.of,
                    q.reason
                );
            } else {
                notes(&o);
                print_services(&o);
                anstream::println!(
                    "{} {}: {} ({} service(s))",
                    paint(OK, "✓"),
                    if reload { "reloaded" } else { "up" },
                    o.world.name,
                    o.world.services.len()
                );
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}
