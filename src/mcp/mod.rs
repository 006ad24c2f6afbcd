//! `binky mcp`: an MCP server on stdio (rmcp) exposing eight tools — `up`,
//! `down`, `reset`, `remove` (never forced), `status`, `env`, `verify`,
//! `logs` — over the same daemon API as the CLI.
//!
//! A server is bound ([`Binding`]): by default to the world whose worktree
//! it starts in (or `--world NAME`), and then it answers for that world
//! only, refusing any other world name and any other project; what it
//! hands out is that world's own coordinates and credentials, never the
//! admin's. Started outside any world it is bound to none and refuses every
//! call. `--machine` reaches every world, as the CLI does: an orchestrator's
//! explicit choice. Every tool's description says which binding it has.
//!
//! stdout carries the protocol only; logs go to stderr. A failure is a tool
//! result with `isError` and actionable text (message and hint), never a
//! crash. A long `up` reports MCP progress notifications when the client sends
//! a progress token.

use crate::client::Client;
use crate::paths::Paths;
use crate::protocol::{
    ApiError, ClientEnv, ErrorKind, Progress, Request, ResetRequest, Response, UpRequest, WorldRef,
};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{
    CallToolResult, Implementation, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use std::path::PathBuf;

mod args;
mod binding;
mod stdio;
pub(crate) use args::{LogsArgs, RemoveArgs, ResetArgs, StatusArgs, UpArgs, VerifyArgs, WorldArgs};
pub(crate) use binding::{Binding, binding};
use stdio::checked_stdio;

/// The server.
#[derive(Clone)]
pub(crate) struct BinkyMcp {
    /// The tools, each description led by the binding; `#[tool_handler]`
    /// lists and calls through this one, not a fresh `Self::tool_router()`.
    tool_router: ToolRouter<Self>,
    paths: Paths,
    cwd: PathBuf,
    /// `binky -p X mcp`: the project a tool call without `project` means.
    default_project: Option<String>,
    binding: Binding,
}

fn tool_error(e: &ApiError) -> CallToolResult {
    let mut text = e.message.clone();
    if let Some(h) = &e.hint {
        text.push_str("\nhint: ");
        text.push_str(h);
    }
    let mut r = CallToolResult::structured_error(serde_json::json!({
        "error": e.message,
        "hint": e.hint,
        "kind": e.kind,
    }));
    r.content = vec![rmcp::model::ContentBlock::text(text)];
    r
}

impl BinkyMcp {
    /// The world a call names, within the binding: a bound server answers
    /// for its own world only (a `project` naming its own project by name
    /// is accepted); an unbound one for none.
    fn world_ref(
        &self,
        project: Option<&str>,
        name: Option<&str>,
    ) -> Result<WorldRef, CallToolResult> {
        match &self.binding {
            Binding::Machine => {
                let Some(name) = name else {
                    return Err(tool_error(
                        &ApiError::new("`name` is required: this server reaches every world")
                            .hint("pass the world's name (its branch)"),
                    ));
                };
                WorldRef::from_arg(project.or(self.default_project.as_deref()), &self.cwd, name)
                    .map_err(|e| {
                        tool_error(&ApiError::new(e).hint(
                            "`project` is a folder inside the project (holding binky.toml), its binky.toml, or a known project name",
                        ))
                    })
            }
            Binding::World {
                project: bp,
                name: bn,
                world,
            } => {
                if let Some(n) = name.filter(|n| n != bn) {
                    return Err(tool_error(&self.binding.refusal(&format!(
                        "world `{}`",
                        crate::output::untrusted(&shorten(n))
                    ))));
                }
                if let Some(p) = project.filter(|p| p != bp) {
                    return Err(tool_error(&self.binding.refusal(&format!(
                        "project `{}` (the `project` override is refused)",
                        crate::output::untrusted(&shorten(p))
                    ))));
                }
                Ok(world.clone())
            }
            Binding::Unbound { .. } => Err(tool_error(&self.binding.refusal("any world"))),
        }
    }

    /// Runs one daemon call on a blocking thread, forwarding progress as MCP
    /// progress notifications when the client asked for them.
    /// A request cancelled by the client (`notifications/cancelled`) is
    /// cancelled in the daemon too, which stops what it started.
    async fn call(
        &self,
        req: Request,
        ctx: Option<RequestContext<RoleServer>>,
    ) -> Result<Response, ApiError> {
        let paths = self.paths.clone();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
        let (canceller_tx, canceller_rx) = tokio::sync::oneshot::channel();
        let job = tokio::task::spawn_blocking(move || {
            let mut client = Client::connect_or_start(&paths)?;
            let _ = canceller_tx.send(client.canceller().ok());
            client.call(&req, &mut |p| {
                let _ = tx.send(p.clone());
            })
        });
        let canceller = canceller_rx.await.ok().flatten();
        let token = ctx.as_ref().and_then(|c| c.meta.get_progress_token());
        let mut step = 0.0;
        let mut cancel_sent = false;
        loop {
            let cancelled = async {
                match &ctx {
                    Some(c) if !cancel_sent => c.ct.cancelled().await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                p = rx.recv() => {
                    let Some(p) = p else { break };
                    step += 1.0;
                    if let (Some(token), Some(c)) = (&token, &ctx) {
                        let _ = c
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), step)
                                    .with_message(p.message),
                            )
                            .await;
                    }
                }
                _ = cancelled => {
                    cancel_sent = true;
                    if let Some(c) = &canceller {
                        c.cancel();
                    }
                }
            }
        }
        job.await
            .map_err(|e| ApiError::new(format!("internal error: {e}")))?
    }
}

impl BinkyMcp {
    /// A lifecycle request whose answer is a world: the world as the tool's
    /// result, or the failure as an error result.
    async fn world_call(
        &self,
        req: Request,
        ctx: Option<RequestContext<RoleServer>>,
    ) -> Result<CallToolResult, ErrorData> {
        match self.call(req, ctx).await {
            Ok(Response::World(o)) => done(o),
            Ok(other) => Ok(tool_error(&ApiError::new(format!(
                "unexpected reply: {other:?}"
            )))),
            Err(e) => Ok(tool_error(&e)),
        }
    }
}

/// At most 80 characters of `s`, for a message quoting what a caller sent.
fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

fn done(v: impl serde::Serialize) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::structured(
        serde_json::to_value(v).unwrap_or_default(),
    ))
}

#[tool_router]
impl BinkyMcp {
    /// A server for the daemon under `paths`, resolving relative projects
    /// against `cwd`, reaching what `binding` allows; each tool's
    /// description says so.
    pub(crate) fn new(
        paths: Paths,
        cwd: PathBuf,
        default_project: Option<String>,
        binding: Binding,
    ) -> Self {
        let mut tool_router = Self::tool_router();
        let said = binding.describe();
        for route in tool_router.map.values_mut() {
            let d = route.attr.description.take().unwrap_or_default();
            route.attr.description = Some(format!("{said} {d}").into());
        }
        BinkyMcp {
            tool_router,
            paths,
            cwd,
            default_project,
            binding,
        }
    }

    #[tool(
        description = "Bring a world up for a branch: its git worktree, its own ports, its own database slice, its services started in dependency order behind health probes. Returns the world with each service's pid, port and state. Idempotent: on a running world it returns at once. When the machine is full (max_parallel, RAM or disk reserve) the world is queued first, with progress notifications; `wait: false` returns the queued place at once."
    )]
    async fn up(
        &self,
        Parameters(a): Parameters<UpArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = Request::Up(UpRequest {
            detach: false,
            idle_after: a.idle_after,
            world: match self.world_ref(a.project.as_deref(), a.name.as_deref()) {
                Ok(w) => w,
                Err(e) => return Ok(e),
            },
            group: a.group,
            caller: None,
            env: ClientEnv::current(),
            wait: a.wait.unwrap_or(true),
        });
        self.world_call(req, Some(ctx)).await
    }

    #[tool(
        description = "Stop a world's processes; its worktree, ports and data are kept, so `up` resumes it quickly."
    )]
    async fn down(
        &self,
        Parameters(a): Parameters<WorldArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = match self.world_ref(a.project.as_deref(), a.name.as_deref()) {
            Ok(w) => Request::Down(w),
            Err(e) => return Ok(e),
        };
        self.world_call(req, None).await
    }

    #[tool(
        description = "Rebuild a world's data: its slices (databases, key prefixes, …) are dropped and made afresh — cloned from the golden template of the branch's current migrations, or provisioned, migrated and seeded — then its services start again. The worktree, its files and its ports are kept. For data a test or a migration left in a bad state. Names one resource service, or `all: true` for every slice; with neither, the world's only resource."
    )]
    async fn reset(
        &self,
        Parameters(a): Parameters<ResetArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let up = UpRequest {
            detach: false,
            idle_after: None,
            world: match self.world_ref(a.project.as_deref(), a.name.as_deref()) {
                Ok(w) => w,
                Err(e) => return Ok(e),
            },
            group: None,
            caller: None,
            env: ClientEnv::current(),
            wait: true,
        };
        let req = Request::Reset(ResetRequest {
            up,
            services: a.service.into_iter().collect(),
            all: a.all,
            // An agent never ends a session someone else opened.
            force: false,
        });
        self.world_call(req, Some(ctx)).await
    }

    #[tool(
        description = "Destroy a world when its work is done: stop its processes, drop its slices on their servers, delete its worktree and logs. Refuses a worktree with uncommitted or untracked changes (commit or push them first); never forced from here."
    )]
    async fn remove(
        &self,
        Parameters(a): Parameters<RemoveArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = match self.world_ref(a.project.as_deref(), a.name.as_deref()) {
            Ok(world) => Request::Remove {
                world,
                force: false,
                env: ClientEnv::current(),
            },
            Err(e) => return Ok(e),
        };
        match self.call(req, None).await {
            Ok(Response::World(o)) => done(o),
            Ok(other) => Ok(tool_error(&ApiError::new(format!(
                "unexpected reply: {other:?}"
            )))),
            // The daemon's hint offers the CLI's `--force`, which an agent
            // must not reach for: the work in the worktree is the user's.
            Err(mut e) if e.kind == ErrorKind::NeedsForce => {
                e.hint = Some(
                    "commit (and push) or stash the work first: over MCP remove never discards it; only the user decides to force it".to_owned(),
                );
                Ok(tool_error(&e))
            }
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "Worlds with state, services, pids and ports, grouped by project: every world on the machine, or only its own for a bound server."
    )]
    async fn status(
        &self,
        Parameters(a): Parameters<StatusArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let (project, only) = match &self.binding {
            Binding::Unbound { .. } => {
                return Ok(tool_error(&self.binding.refusal("any world")));
            }
            Binding::World {
                project: bp, name, ..
            } => {
                if let Some(p) = a.project.as_deref().filter(|p| p != bp) {
                    return Ok(tool_error(&self.binding.refusal(&format!(
                        "project `{}` (the `project` override is refused)",
                        crate::output::untrusted(&shorten(p))
                    ))));
                }
                (Some(bp.clone()), Some(name.clone()))
            }
            Binding::Machine => {
                let project = match a.project.as_deref().or(self.default_project.as_deref()) {
                    None => None,
                    Some(p) if std::path::Path::new(p).exists() || p.contains('/') => {
                        match crate::config::find(&self.cwd.join(p))
                            .and_then(|f| crate::config::load(&f))
                        {
                            Ok(c) => Some(c.project.name),
                            Err(e) => return Ok(tool_error(&ApiError::new(e.to_string()))),
                        }
                    }
                    Some(name) => Some(name.to_owned()),
                };
                (project, None)
            }
        };
        match self
            .call(
                Request::Status {
                    project,
                    usage: false,
                },
                None,
            )
            .await
        {
            Ok(Response::Status(mut r)) => {
                // A bound server shows its own world only.
                if let Some(name) = &only {
                    for p in &mut r.projects {
                        p.worlds.retain(|w| &w.name == name);
                    }
                }
                done(r)
            }
            Ok(other) => Ok(tool_error(&ApiError::new(format!(
                "unexpected reply: {other:?}"
            )))),
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "A world's coordinates, the same JSON as `binky env --json`: `worktree` (the folder to work in), `services` (each exposed service's address: proxied URL, loopback URL or slice address such as a database URL), `fields` (a resource's prefix, bucket or database name), `env` (the project's [env] variables; null where a value comes from the user's environment and is withheld)."
    )]
    async fn env(&self, Parameters(a): Parameters<WorldArgs>) -> Result<CallToolResult, ErrorData> {
        let req = Request::Env {
            world: match self.world_ref(a.project.as_deref(), a.name.as_deref()) {
                Ok(w) => w,
                Err(e) => return Ok(e),
            },
            env: ClientEnv::current(),
            // An agent's transcript is not the place for the user's secrets.
            reveal: false,
            // Nor, from a bound server, for the admin's credentials.
            agent: matches!(self.binding, Binding::World { .. }),
        };
        match self.call(req, None).await {
            Ok(Response::Env(e)) => done(e),
            Ok(other) => Ok(tool_error(&ApiError::new(format!(
                "unexpected reply: {other:?}"
            )))),
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "Run the project's [agents] verify checks in the world (with its coordinates in the environment) and report pass/fail per check. Call it before accepting an agent's work."
    )]
    async fn verify(
        &self,
        Parameters(a): Parameters<VerifyArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = Request::Verify {
            world: match self.world_ref(a.project.as_deref(), a.name.as_deref()) {
                Ok(w) => w,
                Err(e) => return Ok(e),
            },
            keep_going: a.keep_going,
            from_branch: a.from_branch,
            env: ClientEnv::current(),
        };
        match self.call(req, Some(ctx)).await {
            Ok(Response::Verified(r)) => {
                let passed = r.passed;
                let mut res =
                    CallToolResult::structured(serde_json::to_value(&r).unwrap_or_default());
                if !passed {
                    res.is_error = Some(true);
                }
                Ok(res)
            }
            Ok(other) => Ok(tool_error(&ApiError::new(format!(
                "unexpected reply: {other:?}"
            )))),
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "What a world's services printed (their stdout and stderr, interleaved by time, secrets masked): the newest `lines` lines (default 100, at most 1000), or with `cursor` from the previous answer only what was printed since. Read it when `up` or a check fails, or to watch a service work."
    )]
    async fn logs(&self, Parameters(a): Parameters<LogsArgs>) -> Result<CallToolResult, ErrorData> {
        let req = Request::Logs {
            world: match self.world_ref(a.project.as_deref(), a.name.as_deref()) {
                Ok(w) => w,
                Err(e) => return Ok(e),
            },
            service: a.service,
            lines: a.lines.unwrap_or(100),
            cursor: a.cursor,
        };
        match self.call(req, None).await {
            Ok(Response::Logs(r)) => done(r),
            Ok(other) => Ok(tool_error(&ApiError::new(format!(
                "unexpected reply: {other:?}"
            )))),
            Err(e) => Ok(tool_error(&e)),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BinkyMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("binky", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Binky gives each branch an isolated local world. Call `up` for a branch, hand the agent what `env` returns (URLs, database address, worktree path), let it work in that worktree, and call `verify` before accepting the result. `down` pauses a world. {}",
                self.binding.describe()
            ))
    }
}
/// Runs the server on stdin/stdout until the client disconnects.
/// `default_project` (`binky -p X mcp`) is the project a tool call without
/// `project` means; else the folder the server runs in.
pub(crate) fn run(
    paths: Paths,
    default_project: Option<&str>,
    args: &crate::cli::McpArgs,
) -> anyhow::Result<()> {
    let cwd = std::env::current_dir()?;
    let binding = binding(&paths, &cwd, default_project, args)?;
    tracing::info!("binky mcp: {}", binding.describe());
    let default_project = default_project.map(str::to_owned);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let server = BinkyMcp::new(paths, cwd, default_project, binding);
        let (transport, written) = checked_stdio();
        let service = server
            .serve(transport)
            .await
            .map_err(|e| anyhow::anyhow!("MCP handshake failed: {e}"))?;
        service.waiting().await?;
        // The last replies are still on their way to stdout.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), written).await;
        Ok(())
    })
}
