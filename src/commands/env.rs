//! `binky env`: a world's variables as shell lines (`--export`), a dotenv
//! file, or JSON; every value quoted for the shell that reads it.

use super::world::world_ref;
use super::{fail_json, print_json};
use crate::cli::EnvArgs;
use crate::output::shell_quote;
use crate::protocol::{ClientEnv, Request, Response};
use std::process::ExitCode;

/// `NAME_URL` for a service name: uppercased, other characters to `_`
/// (see [`crate::slug::env_key`]).
pub(crate) fn dotenv_name(service: &str) -> String {
    format!("{}_URL", crate::slug::env_key(service))
}

/// `binky env`.
pub(crate) fn env(args: &EnvArgs, project: Option<&str>) -> ExitCode {
    let mut client = match super::client() {
        Ok(c) => c,
        Err(c) => return c,
    };
    let shell = args.dotenv || args.export;
    let req = Request::Env {
        world: match world_ref(project, &args.name, !shell) {
            Ok(w) => w,
            Err(c) => return c,
        },
        env: ClientEnv::current(),
        reveal: args.reveal,
        agent: false,
    };
    let env = match client.request(&req) {
        Ok(Response::Env(e)) => e,
        Ok(other) => return super::unexpected(&other),
        // JSON is its default output, so errors are JSON too unless a shell
        // format was asked for (see tests: json_callers_get_errors_as_json).
        Err(e) => return fail_json(!shell, &e),
    };
    // On stderr: stdout is what a shell evaluates or a script parses.
    for n in &env.notes {
        anstream::eprintln!(
            "{} {}",
            crate::output::paint(crate::output::DIM, "note:"),
            crate::output::untrusted(n)
        );
    }
    if shell {
        print!("{}", shell_lines(&env, args.export));
    } else {
        print_json(&env);
    }
    ExitCode::SUCCESS
}

/// `binky env --dotenv` (or, with `export`, `--export`) lines: each exposed
/// service's `NAME_URL` (and a resource's `NAME_PREFIX`/`NAME_BUCKET`), the
/// project's `[env]`, then `BINKY_WORKTREE`,
/// `BINKY_WORLD` and `BINKY_PROJECT`. A withheld value becomes a comment
/// saying how to get it, so `eval` never sets a variable to nothing.
pub(crate) fn shell_lines(env: &crate::protocol::WorldEnv, export: bool) -> String {
    use std::fmt::Write;
    let prefix = if export { "export " } else { "" };
    let mut out = String::new();
    let mut line = |k: &str, v: &str| {
        let _ = writeln!(out, "{prefix}{k}={}", shell_quote(v));
    };
    // A name the project's `[env]` sets is printed once, with `[env]`'s
    // value: the project chose it (`REDIS_URL = "${redis.url}"` beside a
    // service named `redis`), and a second line would set it twice.
    for (svc, value) in &env.services {
        let mut own = vec![(dotenv_name(svc), value)];
        for (field, v) in env.fields.get(svc).into_iter().flatten() {
            let key = format!(
                "{}_{}",
                crate::slug::env_key(svc),
                crate::slug::env_key(field)
            );
            own.push((key, v));
        }
        for (k, v) in own {
            if !env.vars.contains_key(&k) {
                line(&k, v);
            }
        }
    }
    let mut withheld = Vec::new();
    for (k, v) in &env.vars {
        match v {
            Some(v) => line(k, v),
            None => withheld.push(k.as_str()),
        }
    }
    line("BINKY_WORKTREE", &env.worktree);
    line("BINKY_WORLD", &env.world);
    line("BINKY_PROJECT", &env.project);
    for k in withheld {
        let _ = writeln!(
            out,
            "# {k} is withheld: binky.toml takes its value from your environment; add --reveal to print it"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::WorldEnv;

    #[test]
    fn a_name_the_projects_env_sets_is_printed_once_with_its_value() {
        let env = WorldEnv {
            project: "shop".into(),
            world: "a".into(),
            worktree: "/w".into(),
            services: [("redis".to_owned(), "redis://h/0#shop:a:".to_owned())].into(),
            fields: [(
                "redis".to_owned(),
                [("prefix".to_owned(), "shop:a:".to_owned())].into(),
            )]
            .into(),
            vars: [
                ("REDIS_URL".to_owned(), Some("from-env".to_owned())),
                ("OTHER".to_owned(), None),
            ]
            .into(),
            notes: Vec::new(),
        };
        let lines = shell_lines(&env, false);
        assert_eq!(lines.matches("REDIS_URL=").count(), 1, "{lines}");
        assert!(lines.contains("REDIS_URL='from-env'"), "{lines}");
        assert!(lines.contains("REDIS_PREFIX='shop:a:'"), "{lines}");
        assert!(lines.contains("# OTHER is withheld"), "{lines}");
    }
}
