//! The standing chaos test: `tests/chaos/driver.py` runs seeded operations
//! over two projects (postgres with a golden template, mysql, redis with
//! `acl`, rabbitmq, sqlite, services that fork and `setsid()`), kills the
//! daemon and services at random moments, and checks Binky's invariants
//! while it runs and after everything is removed (see the driver's own
//! docs). CI runs a fixed set of seeds bounded in time; a longer run is
//! `python3 tests/chaos/driver.py --seed N --ops N --time-limit S`
//! (CONTRIBUTING.md).

use crate::harness::*;
use crate::project::free_range;
use std::path::PathBuf;
use std::process::Command;

/// The seeds CI runs, one after the other.
const SEEDS: &[u64] = &[1, 2, 3];
/// Operations per seed, across the driver's three workers: more than fit
/// in the time limit, which bounds the run.
const OPS: u32 = 10_000;
/// Seconds after which a seed starts no new operation; what runs then
/// finishes (a waiting verb is cancelled at most 5 s past the limit) and
/// the end state is checked, about 20 s more.
const TIME_LIMIT_SECS: u32 = 30;

fn driver() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/chaos/driver.py")
}

/// Every invariant holds under each seed. A failure prints the seed, every
/// violation, the operation log and the command that replays it.
#[test]
fn chaos_seeds_keep_every_invariant() {
    let check = Command::new("python3")
        .arg(driver())
        .args(["--binky", binky_exe(), "--check-servers"])
        .output();
    let check = match check {
        Ok(out) => out,
        Err(e) => {
            skip(&format!("python3 cannot be started: {e}"));
            return;
        }
    };
    let said = String::from_utf8_lossy(&check.stdout).into_owned();
    if check.status.code() == Some(3) {
        skip(&format!("the chaos run needs every server:\n{said}"));
        return;
    }
    assert!(
        check.status.success(),
        "driver --check-servers: {said}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mut failed = Vec::new();
    for seed in SEEDS {
        let (alo, ahi) = free_range(8);
        let (blo, bhi) = free_range(8);
        let out = Command::new("python3")
            .arg(driver())
            .args(["--binky", binky_exe()])
            .args(["--seed", &seed.to_string()])
            .args(["--ops", &OPS.to_string()])
            .args(["--time-limit", &TIME_LIMIT_SECS.to_string()])
            .args(["--port-range-a", &format!("{alo}:{ahi}")])
            .args(["--port-range-b", &format!("{blo}:{bhi}")])
            .output()
            .expect("run the chaos driver");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            eprintln!("{}", stdout.trim());
        } else {
            failed.push(format!(
                "chaos seed {seed} failed (exit {:?}):\n{stdout}\n--- driver stderr\n{stderr}",
                out.status.code()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
