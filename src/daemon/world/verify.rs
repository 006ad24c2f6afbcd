//! `verify`: the project's `[agents] verify` checks, run in the world.

use super::*;

/// `binky verify`: runs `[agents] verify` in the world's checkout, in order,
/// through the shell, with the exposed coordinates in the environment
/// (`WEB_URL`…, as `binky env --dotenv` names them). Output streams to the
/// caller; the result is recorded against the world and its commit.
pub(crate) async fn verify(
    d: &Arc<Daemon>,
    wref: WorldRef,
    keep_going: bool,
    client_env: ClientEnv,
    progress: &ProgressTx,
) -> Result<crate::protocol::VerifyReport, ApiError> {
    use tokio::io::AsyncBufReadExt;
    let loc = locate(d, &wref)?;
    let w = find_world(d, &loc, &wref.name)?;
    let wf = world_facts(d, &loc, &w, &client_env).await?;
    let (cfg, world_root) = (&wf.cfg, &wf.world_root);
    if cfg.agents.verify.is_empty() {
        return Err(ApiError::new(format!(
            "{} has no [agents] verify commands",
            cfg.path.display()
        ))
        .hint("add e.g. verify = [\"make test\"] under [agents]"));
    }
    // Every command rendered (no `self` here) before the first runs: an
    // unset variable fails the verify, not one of its checks.
    let commands: Vec<(String, String)> = {
        let env_fn = lookup_env(&wf.project_env, &wf.env);
        let fx = facts_for(cfg, &w.name, world_root, &wf.facts, &env_fn);
        cfg.agents
            .verify
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Ok((
                    c.clone(),
                    render_strict(c, &format!("agents.verify[{i}]"), None, &fx)?,
                ))
            })
            .collect::<Result<_, ApiError>>()?
    };
    let client_env = wf.env.clone();
    let mut env: IndexMap<String, String> = if client_env.0.is_empty() {
        std::env::vars().collect()
    } else {
        client_env.0.iter().cloned().collect()
    };
    for (k, v) in &wf.project_env {
        env.insert(k.clone(), v.clone());
    }
    for (svc, value) in &exposed_of(&wf) {
        env.insert(format!("{}_URL", env_key(svc)), value.clone());
    }
    env.insert(
        crate::paths::HOME_ENV.into(),
        d.paths.home().display().to_string(),
    );
    env.insert("BINKY_PROJECT".into(), loc.name.clone());
    env.insert("BINKY_WORLD".into(), w.name.clone());
    env.insert("BINKY_WORKTREE".into(), world_root.display().to_string());
    let ports = world_ports(d, w.id)?;
    for ((svc, name), port) in ports {
        env.insert(crate::slug::port_var(&svc, &name), port.to_string());
    }
    // The project's [env] last, as every process of the world gets it.
    for (k, v) in world_vars(&wf, &w.name)? {
        env.insert(k, v);
    }
    let commit = worktree::head_commit(Path::new(&w.path));
    // A result is for a commit only when nothing else was in the worktree.
    let uncommitted: Vec<String> = {
        let (git, p) = (user_git(&client_env)?, PathBuf::from(&w.path));
        tokio::task::spawn_blocking(move || worktree::changes(&git, &p))
            .await
            .map_err(internal)?
            .unwrap_or_default()
            .into_iter()
            .take(20)
            .collect()
    };
    let started = std::time::Instant::now();
    let mut checks = Vec::new();
    let mut all_ok = true;
    let mut cancelled = false;
    for (cmd, rendered) in &commands {
        if (!all_ok && !keep_going) || cancelled {
            break;
        }
        progress.say("verify", None, format!("$ {cmd}"));
        let t0 = std::time::Instant::now();
        let child = crate::platform::command("/bin/sh")
            .arg("-c")
            .arg(format!("exec 2>&1; {rendered}"))
            .current_dir(world_root)
            .env_clear()
            .envs(env.iter())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            // Its own group, recorded before it can outlive us: a daemon
            // that dies mid-verify stops the whole group on restart.
            .process_group(0)
            .kill_on_drop(true)
            .spawn();
        let (code, ok) = match child {
            Ok(mut child) => {
                if let Some(pid) = child.id() {
                    let start = crate::platform::process_start_time(pid).unwrap_or(0);
                    d.registry()
                        .set_verify_running(w.id, Some((pid, start)))
                        .map_err(internal)?;
                    fault_point("verify:running");
                }
                let run = async {
                    if let Some(out) = child.stdout.take() {
                        let mut lines = tokio::io::BufReader::new(out).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            progress.say("output", None, line);
                        }
                    }
                    child.wait().await
                };
                tokio::select! {
                    st = run => match st {
                        Ok(st) => (st.code(), st.success()),
                        Err(_) => (None, false),
                    },
                    // Cancelled by the caller: the command's whole group
                    // stops, and so does the run.
                    _ = progress.until_cancelled() => {
                        if let Some(pid) = child.id() {
                            supervisor::stop_pgid(
                                pid,
                                "SIGTERM",
                                std::time::Duration::from_secs(2),
                                crate::platform::wait_exit(pid),
                            )
                            .await;
                        }
                        let _ = child.wait().await;
                        progress.say("output", None, "cancelled".into());
                        cancelled = true;
                        (None, false)
                    }
                }
            }
            Err(e) => {
                progress.say("output", None, format!("cannot run: {e}"));
                (None, false)
            }
        };
        d.registry()
            .set_verify_running(w.id, None)
            .map_err(internal)?;
        all_ok &= ok;
        checks.push(crate::protocol::VerifyCheck {
            command: cmd.clone(),
            exit_code: code,
            passed: ok,
            duration_ms: t0.elapsed().as_millis() as u64,
        });
    }
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut detail = format!(
        "{}/{} passed",
        checks.iter().filter(|c| c.passed).count(),
        checks.len()
    );
    if !uncommitted.is_empty() {
        detail.push_str(", with uncommitted changes");
    }
    d.registry()
        .record_verify(w.id, all_ok, duration_ms, commit.as_deref(), &detail)
        .map_err(internal)?;
    d.event(
        world_event(
            if all_ok {
                "verify_passed"
            } else {
                "verify_failed"
            },
            &loc.name,
            &w.name,
        )
        .detail(detail),
    );
    Ok(crate::protocol::VerifyReport {
        passed: all_ok,
        checks,
        commit,
        uncommitted,
        duration_ms,
    })
}
