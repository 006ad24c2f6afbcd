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
}

fn settings_of(resp: Result<Response, ExitCode>) -> Result<Settings, ExitCode> {
    match resp? {
        Response::Settings(s) => Ok(s),
        other => Err(super::unexpected(&other)),
    }
}

/// `binky config`.
pub fn config(args: &JsonArgs) -> ExitCode {
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

/// `binky reserve`.
pub fn reserve(args: &ReserveArgs) -> ExitCode {
    if args.ram.is_none() && args.disk.is_none() && args.max_parallel.is_none() {
        eprintln!(
            "error: give --ram PERCENT, --disk GB and/or --max-parallel N (see `binky config` for the current values)"
        );
        return ExitCode::from(2);
    }
    // JSON has no NaN or infinity: refuse them here rather than send null.
    for (flag, v) in [("--ram", args.ram), ("--disk", args.disk)] {
        if let Some(v) = v
            && !v.is_finite()
        {
            crate::output::error(
                format!("{flag} {v} is not a number"),
                Some("give a finite number"),
            );
            return ExitCode::from(2);
        }
    }
    match settings_of(call(&Request::SetReserve {
        ram_pct: args.ram,
        disk_gb: args.disk,
        max_parallel: args.max_parallel,
    })) {
        Ok(s) => {
            anstream::println!(
                "{} reserves: {} % RAM, {} GB disk; max parallel {}",
                paint(OK, "✓"),
                s.ram_reserve_pct,
                s.disk_reserve_gb,
                if s.max_parallel == 0 {
                    "unlimited".to_owned()
                } else {
                    s.max_parallel.to_string()
                }
            );
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky port`.
pub fn port(args: &PortArgs) -> ExitCode {
    if args.proxy.is_none() && args.https.is_none() {
        eprintln!(
            "error: give --proxy PORT and/or --https PORT (see `binky config` for the current values)"
        );
        return ExitCode::from(2);
    }
    match settings_of(call(&Request::SetPorts {
        proxy: args.proxy,
        https: args.https,
    })) {
        Ok(s) => {
            anstream::println!(
                "{} ports: proxy {}, https {}",
                paint(OK, "✓"),
                s.proxy_port,
                s.https_port
            );
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}

/// `binky metrics`: always JSON.
pub fn metrics() -> ExitCode {
    match call(&Request::Metrics) {
        Ok(Response::Metrics(m)) => {
            print_json(&m);
            ExitCode::SUCCESS
        }
        Ok(other) => super::unexpected(&other),
        Err(c) => c,
    }
}
