//! Which worlds a `binky mcp` server reaches ([`Binding`]), and how a
//! server finds its binding as it starts ([`binding`]).

use crate::client::Client;
use crate::paths::Paths;
use crate::protocol::{ApiError, Request, Response, WorldRef};

/// What a server reaches.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Binding {
    /// `--machine`: every world on the machine, as the CLI.
    Machine,
    /// One world: the one whose worktree the server started in, or
    /// `--world NAME`.
    World {
        /// Its project's name.
        project: String,
        /// Its name.
        name: String,
        /// How the daemon finds it.
        world: WorldRef,
    },
    /// No world: the server started outside every world's worktree.
    Unbound {
        /// Where it started, for the refusal.
        cwd: String,
    },
}

impl Binding {
    /// What each tool's description says of the binding.
    pub(super) fn describe(&self) -> String {
        match self {
            Binding::Machine => "This server reaches every world on the machine (`binky mcp --machine`).".to_owned(),
            Binding::World { project, name, .. } => format!(
                "This server is bound to world `{name}` of project `{project}`: `name` defaults to it, and any other world or project is refused."
            ),
            Binding::Unbound { .. } => "This server is bound to no world (it started outside every world's worktree), so it refuses every call: start `binky mcp` in a world's worktree, or with `--world NAME`.".to_owned(),
        }
    }

    /// The refusal of a call that reaches past the binding.
    pub(super) fn refusal(&self, asked: &str) -> ApiError {
        match self {
            Binding::World { project, name, .. } => ApiError::new(format!(
                "this MCP server is bound to world `{name}` of project `{project}`; it does not reach {asked}"
            ))
            .hint("an agent works in its own world only; an orchestrator that manages many worlds runs its own server with `binky mcp --machine`"),
            Binding::Unbound { cwd } => ApiError::new(format!(
                "this MCP server is bound to no world: it started in {cwd}, which is inside no world's worktree"
            ))
            .hint("start `binky mcp` in a world's worktree or with `--world NAME`; an orchestrator uses `binky mcp --machine`"),
            Binding::Machine => ApiError::new(format!("{asked} cannot be reached")),
        }
    }
}

/// The binding a server started in `cwd` has: `--machine`, `--world NAME`
/// (of the project `-p` names, or the one around `cwd`), else the world
/// whose worktree holds `cwd` (the daemon's record, the deepest match), else
/// none.
///
/// # Errors
/// `--world` names a world no branch could be, or its project cannot be
/// read; without `--world` or `--machine`, the daemon cannot be reached.
pub(crate) fn binding(
    paths: &Paths,
    cwd: &std::path::Path,
    project: Option<&str>,
    args: &crate::cli::McpArgs,
) -> anyhow::Result<Binding> {
    if args.machine {
        return Ok(Binding::Machine);
    }
    if let Some(name) = &args.world {
        if name.len() > crate::protocol::limits::MAX_WORLD_NAME {
            anyhow::bail!(
                "--world is {} bytes long; at most {} are accepted",
                name.len(),
                crate::protocol::limits::MAX_WORLD_NAME
            );
        }
        crate::slug::check_world_name(name).map_err(|e| anyhow::anyhow!("--world: {e}"))?;
        let world = WorldRef::from_arg(project, cwd, name).map_err(|e| anyhow::anyhow!(e))?;
        let project = match (&world.project, &world.project_dir) {
            (Some(p), _) => p.clone(),
            (None, Some(dir)) => {
                let file = crate::config::find(std::path::Path::new(dir))?;
                crate::config::load(&file)?.project.name
            }
            (None, None) => anyhow::bail!("--world {name}: no project around {}", cwd.display()),
        };
        return Ok(Binding::World {
            project,
            name: name.clone(),
            world,
        });
    }
    let here = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let mut client = Client::connect_or_start(paths).map_err(|e| anyhow::anyhow!(e.message))?;
    let report = match client.call(
        &Request::Status {
            project: None,
            usage: false,
        },
        &mut |_| {},
    ) {
        Ok(Response::Status(r)) => r,
        Ok(other) => anyhow::bail!("unexpected reply: {other:?}"),
        Err(e) => anyhow::bail!("{}", e.message),
    };
    let found = report
        .projects
        .iter()
        .flat_map(|p| p.worlds.iter().map(move |w| (p, w)))
        .filter(|(_, w)| !w.path.is_empty())
        .filter_map(|(p, w)| {
            let root = std::path::Path::new(&w.path);
            let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
            here.starts_with(&root)
                .then(|| (root.components().count(), p, w))
        })
        .max_by_key(|(depth, _, _)| *depth);
    Ok(match found {
        Some((_, p, w)) => Binding::World {
            project: p.name.clone(),
            name: w.name.clone(),
            world: WorldRef {
                project_dir: None,
                project: Some(p.name.clone()),
                name: w.name.clone(),
            },
        },
        None => Binding::Unbound {
            cwd: here.display().to_string(),
        },
    })
}
