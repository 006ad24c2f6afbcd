//! `binky reset`: re-make slices of a world (from the golden template,
//! or provision, migrate and seed).

use super::print_json;
use super::world::{call_world, notes, print_services, up_request};
use crate::cli::ResetArgs;
use crate::output::{OK, paint};
use crate::protocol::{Request, ResetRequest};
use std::process::ExitCode;

/// `binky reset`.
pub(crate) fn run(args: &ResetArgs, project: Option<&str>) -> ExitCode {
    let up = match up_request(project, &args.name, args.json, args.group.clone(), true) {
        Ok(r) => r,
        Err(c) => return c,
    };
    let req = Request::Reset(ResetRequest {
        up,
        services: args.services.clone(),
        all: args.all,
        force: args.force,
    });
    match call_world(req, args.json) {
        Ok(o) => {
            if args.json {
                print_json(&o);
            } else {
                notes(&o);
                print_services(&o);
                anstream::println!("{} reset: {}", paint(OK, "✓"), o.world.name);
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}
