//! `verify`: the project's `[agents] verify` checks, run in the world.

use super::env::{WorldFacts, exposed_of, world_facts, world_vars};
use crate::daemon::events::EventKind;
use crate::daemon::world::stages::locate::{Located, find_world, locate, user_git};
use crate::daemon::world::stages::plan::{EnvBase, facts_for, lookup_env, render_strict};
use crate::daemon::world::world_event;
use crate::daemon::{Daemon, ProgressTx};
use crate::faults::point as fault_point;
use crate::protocol::{ApiError, ClientEnv, VerifyOutcome, WorldRef};
use crate::registry::WorldRow;
use crate::slug::env_key;
use crate::{supervisor, worktree};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `binky verify`: runs `[agents] verify` in the world's checkout, in order,
/// through the shell, with the exposed coordinates in the environment
/// (`WEB_URL`…, as `binky env --dotenv` names them). Output streams to the
/// caller; the result is recorded against the world and its commit.
///
/// The checks are those of the project's `binky.toml` as committed on the
/// main checkout's branch ([`crate::daemon::world::stages::trusted`]): the world's own file is
/// the agent's to edit, and a gate it could rewrite would grade nothing.
/// The report says which file the checks came from and whether the
/// world's own list differs. With `from_branch`, the world's own checks
/// run instead, and the record says so.
///
/// # Errors
/// No checks to run; the main checkout's committed file is missing or
/// invalid (its hint offers `--from-branch`); a command does not render.
pub(crate) async fn verify(
    d: &Arc<Daemon>,
    wref: WorldRef,
    keep_going: bool,
    from_branch: bool,
    client_env: ClientEnv,
    progress: &ProgressTx,
) -> Result<crate::protocol::VerifyReport, ApiError> {
    let loc = locate(d, &wref)?;
    let mut w = find_world(d, &loc, &wref.name)?;
    if w.intent == Some(crate::protocol::Intent::Sleep) {
        // Going to sleep: let that finish (it holds the world), then wake it.
        let lock = d
            .worlds
            .lock_for(&crate::daemon::WorldKey::new(&loc.name, &w.name));
        drop(lock.lock().await);
        w = find_world(d, &loc, &wref.name)?;
    }
    let wf = world_facts(d, &loc, &w, &client_env).await?;
    let world_root = &wf.world_root;
    let (list, checks_from, branch_checks_differ) =
        checks_to_run(&loc, &wf, &w.name, from_branch, progress)?;
    // Every command rendered (no `self` here) before the first runs: an
    // unset variable fails the verify, not one of its checks.
    let commands = verify_commands(&wf, &list, &w.name)?;
    if w.state == crate::protocol::WorldState::Sleeping {
        // Its checks talk to its services: they must run.
        super::sleep::wake_for(d, &loc.name, &w, "verify", progress).await?;
        w = find_world(d, &loc, &wref.name)?;
    }
    let env = verify_env(d, &loc, &w, &wf)?;
    let client_env = wf.env.clone();
    let commit = worktree::head_commit(Path::new(&w.path));
    // A result is for a commit only when nothing else was in the worktree.
    let uncommitted = uncommitted(&client_env, &w.path).await?;
    let started = std::time::Instant::now();
    let mut checks = Vec::new();
    let mut all_ok = true;
    let mut cancelled = false;
    for (cmd, rendered) in &commands {
        if (!all_ok && !keep_going) || cancelled {
            break;
        }
        progress.say(
            crate::protocol::ProgressStep::Verify,
            None,
            format!("$ {cmd}"),
        );
        let t0 = std::time::Instant::now();
        let (code, ok, stopped) = run_check(d, w.id, rendered, world_root, &env, progress).await?;
        cancelled |= stopped;
        d.registry(|r| r.set_verify_running(w.id, None))?;
        all_ok &= ok;
        checks.push(crate::protocol::VerifyCheck {
            command: cmd.clone(),
            exit_code: code,
            passed: ok,
            duration_ms: t0.elapsed().as_millis() as u64,
        });
    }
    let report = crate::protocol::VerifyReport {
        passed: all_ok,
        checks,
        commit,
        uncommitted,
        duration_ms: started.elapsed().as_millis() as u64,
        from_branch,
        checks_from,
        branch_checks_differ,
    };
    record(d, &loc.name, &w, &report)?;
    Ok(report)
}

/// The checks `verify` runs: the main checkout's committed list, or with
/// `from_branch` the world's own; where they came from, and whether the
/// world's own list differs (both said on `progress`).
///
/// # Errors
/// The list is empty, or the main checkout's file cannot be read.
fn checks_to_run(
    loc: &Located,
    wf: &WorldFacts,
    world: &str,
    from_branch: bool,
    progress: &ProgressTx,
) -> Result<(Vec<String>, String, bool), ApiError> {
    let own = &wf.cfg.agents.verify;
    let (list, checks_from, branch_checks_differ) = if from_branch {
        let from = format!("the world's own {}", wf.cfg.path.display());
        (own.clone(), from, false)
    } else {
        let (list, from) = main_checks(loc, world)?;
        let differ = &list != own;
        (list, from, differ)
    };
    if list.is_empty() {
        return Err(
            ApiError::new(format!("{checks_from} has no [agents] verify commands"))
                .hint("add e.g. verify = [\"make test\"] under [agents]"),
        );
    }
    progress.say(
        crate::protocol::ProgressStep::Verify,
        None,
        format!("checks from {checks_from}"),
    );
    if branch_checks_differ {
        progress.say(
            crate::protocol::ProgressStep::Verify,
            None,
            format!(
                "note: the world's own [agents] verify differs; `binky verify {} --from-branch` runs it, recorded as such",
                world
            ),
        );
    }
    Ok((list, checks_from, branch_checks_differ))
}

/// Records `report` against the world `w` of `project` and its commit, and
/// logs the event.
fn record(
    d: &Daemon,
    project: &str,
    w: &WorldRow,
    report: &crate::protocol::VerifyReport,
) -> Result<(), ApiError> {
    let checks = &report.checks;
    let mut detail = format!(
        "{}/{} passed",
        checks.iter().filter(|c| c.passed).count(),
        checks.len()
    );
    let dirty = !report.uncommitted.is_empty();
    if dirty {
        detail.push_str(", with uncommitted changes");
    }
    if report.from_branch {
        detail.push_str(", the branch's own checks");
    }
    let (outcome, kind) = if report.passed {
        (VerifyOutcome::Passed, EventKind::VerifyPassed)
    } else {
        (VerifyOutcome::Failed, EventKind::VerifyFailed)
    };
    d.registry(|r| {
        r.record_verify(
            w.id,
            &crate::registry::VerifyRun {
                outcome,
                dirty,
                duration_ms: report.duration_ms,
                commit: report.commit.as_deref(),
                detail: &detail,
                from_branch: report.from_branch,
            },
        )
    })?;
    d.event(world_event(kind, project, &w.name).detail(detail));
    Ok(())
}

/// The worktree's uncommitted and untracked changes, 20 at most, by the
/// user's own `git`.
async fn uncommitted(client_env: &ClientEnv, path: &str) -> Result<Vec<String>, ApiError> {
    let (git, p) = (user_git(client_env)?, PathBuf::from(path));
    Ok(
        tokio::task::spawn_blocking(move || worktree::changes(&git, &p))
            .await?
            .unwrap_or_default()
            .into_iter()
            .take(20)
            .collect(),
    )
}

/// The `[agents] verify` of the main checkout's committed `binky.toml`,
/// and how that file is named in what `verify` says.
///
/// # Errors
/// That file is not committed on the main checkout's branch, or does not
/// parse.
fn main_checks(loc: &Located, world: &str) -> Result<(Vec<String>, String), ApiError> {
    let c = crate::daemon::world::stages::trusted::committed(loc)?;
    let shown = loc.subdir.join(crate::config::FILE_NAME);
    let from = format!(
        "the main checkout's {} (as committed on {})",
        shown.display(),
        c.branch
    );
    let own = || {
        format!(
            "`binky verify {world} --from-branch` runs the world's own checks, recorded as such"
        )
    };
    let Some(text) = c.text else {
        return Err(ApiError::new(format!(
            "{} is not committed on {}, the main checkout's branch: `verify` runs the checks committed there, which the world's agent cannot change",
            shown.display(),
            c.branch
        ))
        .hint(format!("commit it on {}, or {}", c.branch, own())));
    };
    let report = crate::config::check_str(&text, &loc.main_root().join(crate::config::FILE_NAME));
    match report.config {
        Some(cfg) => Ok((cfg.agents.verify, from)),
        None => Err(
            ApiError::new(format!("{from} is not valid: run `binky check` there"))
                .hint(format!("fix and commit it, or {}", own())),
        ),
    }
}

/// The commands `list` (an `[agents] verify`), each with its rendering
/// against the world (no `self`).
///
/// # Errors
/// A command uses an unset `${env.NAME}` (or a fact with no value).
fn verify_commands(
    wf: &WorldFacts,
    list: &[String],
    world: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let env_fn = lookup_env(&wf.project_env, &wf.env);
    let fx = facts_for(&wf.cfg, world, &wf.world_root, &wf.facts, &env_fn);
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            Ok((
                c.clone(),
                render_strict(c, &format!("agents.verify[{i}]"), None, &fx)?,
            ))
        })
        .collect()
}

/// The environment each check runs with: the world's (the caller's shell,
/// then what its last `up` had), the project's `env_file`, each exposed
/// service's `<SVC>_URL`, Binky's own variables and ports, and `[env]`
/// last, as every process of the world gets it.
fn verify_env(
    d: &Daemon,
    loc: &Located,
    w: &WorldRow,
    wf: &WorldFacts,
) -> Result<IndexMap<String, String>, ApiError> {
    let mut env = EnvBase {
        shell: &wf.env,
        project_env: &wf.project_env,
        home: d.paths.home(),
        project: &loc.name,
        world: &w.name,
        world_root: &wf.world_root,
        facts: &wf.facts,
    }
    .build();
    for (svc, value) in &exposed_of(wf) {
        env.insert(format!("{}_URL", env_key(svc)), value.clone());
    }
    for (k, v) in world_vars(wf, &w.name)? {
        env.insert(k, v);
    }
    Ok(env)
}

/// Runs one check through the shell in its own process group (recorded
/// before it can outlive the daemon: a daemon that dies mid-verify stops
/// the whole group on restart), streaming its output as progress. Returns
/// its exit code, whether it passed, and whether the caller cancelled it
/// (its whole group is then stopped).
async fn run_check(
    d: &Daemon,
    world_id: i64,
    rendered: &str,
    cwd: &Path,
    env: &IndexMap<String, String>,
    progress: &ProgressTx,
) -> Result<(Option<i32>, bool, bool), ApiError> {
    use tokio::io::AsyncBufReadExt;
    let child = crate::platform::command("/bin/sh")
        .arg("-c")
        .arg(format!("exec 2>&1; {rendered}"))
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            progress.say(
                crate::protocol::ProgressStep::Output,
                None,
                format!("cannot run: {e}"),
            );
            return Ok((None, false, false));
        }
    };
    if let Some(pid) = child.id() {
        let start = crate::platform::process_start_time(pid).unwrap_or(0);
        d.registry(|r| r.set_verify_running(world_id, Some((pid, start))))?;
        fault_point("verify:running");
    }
    let stdout = child.stdout.take();
    // Output, then the exit, both inside the race with a cancel: a check
    // that closed its output but runs on is still stopped by one.
    let run = async {
        if let Some(out) = stdout {
            let mut lines = tokio::io::BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                progress.say(crate::protocol::ProgressStep::Output, None, line);
            }
        }
        child.wait().await
    };
    tokio::select! {
        st = run => match st {
            Ok(st) => Ok((st.code(), st.success(), false)),
            Err(_) => Ok((None, false, false)),
        },
        _ = progress.until_cancelled() => {
            supervisor::stop_child_group(&mut child).await;
            progress.say(crate::protocol::ProgressStep::Output, None, "cancelled".into());
            Ok((None, false, true))
        }
    }
}
