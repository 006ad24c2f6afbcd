//! The tools' arguments, as their JSON schemas show them to a client.
//!
//! Every tool refuses an argument it does not know (`deny_unknown_fields`,
//! shown to clients as `additionalProperties: false`): a misspelt key —
//! `{"world": "feat-b"}` for `name` — is an error naming it, never ignored
//! so that the call acts on the default world instead.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments naming a world.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorldArgs {
    /// The world's name: a git branch. Default: the world this server is bound to.
    #[serde(default)]
    pub name: Option<String>,
    /// The project: its folder (or its binky.toml), or the name of a project the daemon knows.
    /// Default: the folder `binky mcp` runs in.
    #[serde(default)]
    pub project: Option<String>,
}

/// Arguments of `up`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpArgs {
    /// The world's name: a git branch (created from HEAD if it does not exist). Default: the
    /// world this server is bound to.
    #[serde(default)]
    pub name: Option<String>,
    /// The project: its folder (or its binky.toml), or a known project name. Default: the
    /// folder `binky mcp` runs in.
    #[serde(default)]
    pub project: Option<String>,
    /// Admission group this world belongs to (e.g. one per orchestrator).
    #[serde(default)]
    pub group: Option<String>,
    /// Wait while the world is queued for room (default true). `false`
    /// returns at once with state `queued` and its place; poll `status`.
    #[serde(default)]
    pub wait: Option<bool>,
}

/// Arguments of `remove`: no `force` — over MCP a worktree with work in
/// it is never discarded, and an unknown argument is refused, not ignored.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveArgs {
    /// The world's name. Default: the world this server is bound to.
    #[serde(default)]
    pub name: Option<String>,
    /// The project: its folder (or its binky.toml), or a known project name. Default: the
    /// folder `binky mcp` runs in.
    #[serde(default)]
    pub project: Option<String>,
}

/// Arguments of `reset`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetArgs {
    /// The world's name. Default: the world this server is bound to.
    #[serde(default)]
    pub name: Option<String>,
    /// The project: its folder (or its binky.toml), or a known project name. Default: the
    /// folder `binky mcp` runs in.
    #[serde(default)]
    pub project: Option<String>,
    /// The resource service whose slice to rebuild (e.g. `db`). Default:
    /// the world's only resource.
    #[serde(default)]
    pub service: Option<String>,
    /// Rebuild every slice of the world.
    #[serde(default)]
    pub all: bool,
}

/// Arguments of `status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusArgs {
    /// Only this project (a path inside it, or its name). Default: every project.
    #[serde(default)]
    pub project: Option<String>,
}

/// Arguments of `verify`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyArgs {
    /// The world's name. Default: the world this server is bound to.
    #[serde(default)]
    pub name: Option<String>,
    /// The project: its folder (or its binky.toml), or a known project name.
    #[serde(default)]
    pub project: Option<String>,
    /// Run every check even after one fails.
    #[serde(default)]
    pub keep_going: bool,
    /// Run the world's own `[agents] verify` instead of the checks
    /// committed on the main checkout's branch; the record says so.
    #[serde(default)]
    pub from_branch: bool,
}

/// Arguments of `logs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogsArgs {
    /// The world's name. Default: the world this server is bound to.
    #[serde(default)]
    pub name: Option<String>,
    /// The project: its folder (or its binky.toml), or a known project name.
    #[serde(default)]
    pub project: Option<String>,
    /// Only this service's output.
    #[serde(default)]
    pub service: Option<String>,
    /// At most this many lines, the newest (default 100, at most 1000).
    #[serde(default)]
    pub lines: Option<usize>,
    /// The `cursor` of the previous answer: only lines printed since.
    #[serde(default)]
    pub cursor: Option<String>,
}
