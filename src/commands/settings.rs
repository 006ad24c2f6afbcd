//! `binky config`, `binky reserve`, `binky port`, `binky metrics`.

use super::{call, print_json};
use crate::cli::{JsonArgs, PortArgs, ReserveArgs};
use crate::output::{OK, paint};
use crate::protocol::{Request, Response, Settings};
use std::process::ExitCode;

fn show(s: &Settings) {
    println!("ram reserve    {} %", s.ram_reserve_pct);
    println!("disk reserve   {} GB", s.disk_reserve_gb);
    if s.max_parallel == 0 {
        println!("max parallel   unlimited");
    } else {
        println!("max parallel   {}", s.max_parallel);
    }
    println!("proxy port     {}", s.proxy_port);
    println!("https port     {}", s.https_port);
    println!("queue max      {}", s.queue_max);
    println!("queue/group    {}", s.queue_per_group);
}

fn settings_of(resp: Result<Response, ExitCode>) -> Result<Settings, ExitCode> {
    match resp? {
        Response::Settings(s) => Ok(s),
        other => Err(super::unexpected(&other)),
    }
}

/// `binky config`.
pub(crate) fn config(args: &JsonArgs) -> ExitCode {
    match settings_of(call(&Request::Config)) {
        Ok(s) => {
            if args.json {
                print_json(&s);
            } else {
                show(&s);
            }
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// The request `binky reserve` sends: `Config` with no flag, else the
/// settings to change.
///
/// # Errors
/// A flag's value cannot be sent (not finite, not a count): said, exit 2.
fn reserve_request(args: &ReserveArgs) -> Result<Request, ExitCode> {
    // JSON has no NaN or infinity: refuse them here rather than send null.
    for (flag, v) in [("--ram", args.ram), ("--disk", args.disk)] {
        if let Some(v) = v
            && !v.is_finite()
        {
            crate::output::error(
                format!("{flag} {v} is not a number"),
                Some("give a finite number"),
            );
            return Err(ExitCode::from(2));
        }
    }
    let count = |flag: &str, v: Option<i64>, what: &str| match v.map(u32::try_from) {
        None => Ok(None),
        Some(Ok(n)) => Ok(Some(n)),
        Some(Err(_)) => {
            crate::output::error(
                format!("{flag} {} is not a count of worlds", v.unwrap_or_default()),
                Some(what),
            );
            Err(ExitCode::from(2))
        }
    };
    let max_parallel = count(
        "--max-parallel",
        args.max_parallel,
        "give a whole number from 0 (no limit) up",
    )?;
    let queue_max = count(
        "--queue-max",
        args.queue_max,
        "give a whole number from 2 up",
    )?;
    let queue_per_group = count(
        "--queue-per-group",
        args.queue_per_group,
        "give a whole number from 1 up",
    )?;
    Ok(
        if args.ram.is_none()
            && args.disk.is_none()
            && max_parallel.is_none()
            && queue_max.is_none()
            && queue_per_group.is_none()
        {
            Request::Config
        } else {
            Request::SetReserve {
                ram_pct: args.ram,
                disk_gb: args.disk,
                max_parallel,
                queue_max,
                queue_per_group,
            }
        },
    )
}

/// `binky reserve`: with no flag, the reserves in force; else sets them.
pub(crate) fn reserve(args: &ReserveArgs) -> ExitCode {
    let request = match reserve_request(args) {
        Ok(r) => r,
        Err(c) => return c,
    };
    let set = !matches!(request, Request::Config);
    match settings_of(call(&request)) {
        Ok(s) if args.json => {
            print_json(&s);
            ExitCode::SUCCESS
        }
        Ok(s) => {
            let max = if s.max_parallel == 0 {
                "unlimited".to_owned()
            } else {
                s.max_parallel.to_string()
            };
            let lead = if set {
                paint(OK, "✓ ")
            } else {
                String::new()
            };
            anstream::println!(
                "{lead}reserves: {} % RAM, {} GB disk; max parallel {max}; queue at most {}, {} per group",
                s.ram_reserve_pct,
                s.disk_reserve_gb,
                s.queue_max,
                s.queue_per_group,
            );
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky port`: with no flag, the ports in use; else sets them.
pub(crate) fn port(args: &PortArgs) -> ExitCode {
    let request = if args.proxy.is_none() && args.https.is_none() {
        Request::Config
    } else {
        Request::SetPorts {
            proxy: args.proxy,
            https: args.https,
        }
    };
    let set = !matches!(request, Request::Config);
    match settings_of(call(&request)) {
        Ok(s) if args.json => {
            print_json(&s);
            ExitCode::SUCCESS
        }
        Ok(s) => {
            let lead = if set {
                paint(OK, "✓ ")
            } else {
                String::new()
            };
            anstream::println!(
                "{lead}ports: proxy {}, https {}",
                s.proxy_port,
                s.https_port
            );
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky metrics`: always JSON.
pub(crate) fn metrics() -> ExitCode {
    match call(&Request::Metrics) {
        Ok(Response::Metrics(m)) => {
            print_json(&m);
            ExitCode::SUCCESS
        }
        Ok(other) => super::unexpected(&other),
        Err(c) => c,
    }
}
