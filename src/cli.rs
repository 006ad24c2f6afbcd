//! The command-line surface (clap derive types only; no behaviour here).

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// One isolated local world per git worktree: ports, slices, supervised
/// services and stable URLs, so many branches (or agents) run side by side.
#[derive(Debug, Parser)]
#[command(
    name = "binky",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = "State lives in $BINKY_HOME (default ~/.binky). Colour follows the terminal; NO_COLOR turns it off.\nDocs: README.md · the book in docs/ · TROUBLESHOOTING.md · `binky doctor` when something is off."
)]
pub(crate) struct Cli {
    /// When to use colour.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    /// The project: a path to its folder or binky.toml, or the name of a
    /// project the daemon knows. Default: the nearest binky.toml upward.
    #[arg(long, short = 'p', global = true, value_name = "PATH|NAME")]
    pub project: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    /// Colour when writing to a terminal and NO_COLOR is unset.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Every verb.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Write a starting binky.toml from the project's compose file (never a value from .env).
    Init(InitArgs),
    /// Validate a binky.toml and flag footguns (exit 0 valid, 1 errors, 2 unreadable).
    Check(CheckArgs),
    /// Bring a world up: worktree, ports, slices, services in depends_on order.
    Up(UpArgs),
    /// Restart a world in place: stop, then up again on the same ports and data.
    Reload(UpArgs),
    /// Rebuild a world's slices from their golden template (or migrate + seed); keep worktree and ports.
    Reset(ResetArgs),
    /// Stop a world's processes; keep its files, ports and slices.
    Down(NameArgs),
    /// Destroy a world: stop it, tear down its slices, delete its worktree and logs.
    Remove(RemoveArgs),
    /// List every world on the machine, grouped by project (`--watch`: live).
    Status(StatusArgs),
    /// What the daemon did (from events.log), and with -f what it does as it happens.
    Events(EventsArgs),
    /// Print a world's coordinates (URLs and addresses) as JSON or dotenv lines.
    Env(EnvArgs),
    /// Call a service through the proxy with the Host header filled in.
    Curl(CurlArgs),
    /// Run the project's `[agents]` verify commands in the world; non-zero on failure.
    Verify(VerifyArgs),
    /// Print a world's captured service logs, interleaved by time.
    Logs(LogsArgs),
    /// Sweep what a crash left half-made (slices, worktrees) and golden templates no world uses.
    Gc(GcArgs),
    /// Show the machine-global settings (reserves, max_parallel, proxy ports).
    Config(JsonArgs),
    /// Show or set how much RAM and disk Binky keeps free, the most worlds at once, and the queue's caps.
    Reserve(ReserveArgs),
    /// Show or set the proxy's HTTP and HTTPS ports.
    Port(PortArgs),
    /// Live terminal view of every world: state, services, costs, logs; act on one with a key.
    Dashboard,
    /// Diagnose the install, the daemon and name resolution; non-zero if something is wrong.
    Doctor(JsonArgs),
    /// Point-in-time daemon metrics as one JSON object (`--json` is accepted; it is always JSON).
    Metrics(JsonArgs),
    /// Run the MCP server on stdio so agents can call up/down/reset/remove/status/env/verify/logs.
    ///
    /// Bound to one world: the one whose worktree it starts in, or `--world NAME`; it answers
    /// for that world only. Started outside any world it is bound to none and refuses every
    /// call. `--machine` reaches every world (for an orchestrator you trust).
    Mcp(McpArgs),
    /// Wire an agent host to Binky: its worktree hooks make and remove worlds.
    Hook(HookArgs),
    /// Manage the machine-global background daemon.
    Daemon(DaemonArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Copy stdin to a log file, timestamping each line (run by the supervisor).
    #[command(hide = true)]
    LogWriter {
        /// The log file to append to.
        file: PathBuf,
    },
}

impl Command {
    /// Whether a closed stdout should end this command by SIGPIPE, as it
    /// ends `cat` or `ls`. Not for the long-lived servers (the daemon, `mcp`,
    /// the log writer), which treat EPIPE as an error, nor for `curl`, which
    /// exits 23 as curl does.
    pub(crate) fn prints_to_stdout(&self) -> bool {
        !matches!(
            self,
            Command::Mcp(_) | Command::LogWriter { .. } | Command::Curl(_)
        ) && !matches!(self, Command::Daemon(d) if matches!(d.action, DaemonAction::Run))
    }

    /// Whether `-p/--project` means something to this command. Machine-wide
    /// commands (settings, the daemon, `doctor`, `gc`, `metrics`) reject it
    /// rather than ignore it.
    pub(crate) fn takes_project(&self) -> bool {
        matches!(
            self,
            Command::Check(_)
                | Command::Up(_)
                | Command::Reload(_)
                | Command::Reset(_)
                | Command::Down(_)
                | Command::Remove(_)
                | Command::Status(_)
                | Command::Events(_)
                | Command::Env(_)
                | Command::Curl(_)
                | Command::Verify(_)
                | Command::Logs(_)
                | Command::Mcp(_)
                | Command::Hook(_)
        )
    }

    /// The verb as typed, for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Command::Init(_) => "init",
            Command::Check(_) => "check",
            Command::Up(_) => "up",
            Command::Reload(_) => "reload",
            Command::Reset(_) => "reset",
            Command::Down(_) => "down",
            Command::Remove(_) => "remove",
            Command::Status(_) => "status",
            Command::Events(_) => "events",
            Command::Env(_) => "env",
            Command::Curl(_) => "curl",
            Command::Verify(_) => "verify",
            Command::Logs(_) => "logs",
            Command::Gc(_) => "gc",
            Command::Config(_) => "config",
            Command::Reserve(_) => "reserve",
            Command::Port(_) => "port",
            Command::Dashboard => "dashboard",
            Command::Doctor(_) => "doctor",
            Command::Metrics(_) => "metrics",
            Command::Mcp(_) => "mcp",
            Command::Hook(_) => "hook",
            Command::Daemon(_) => "daemon",
            Command::Completions(_) => "completions",
            Command::LogWriter { .. } => "log-writer",
        }
    }
}

/// `binky init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Folder holding the compose file (compose.yaml, docker-compose.yml, …
    /// and its override file); binky.toml is written there.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Read exactly this compose file (no override file), as `docker compose -f`.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Overwrite an existing binky.toml.
    #[arg(long)]
    pub force: bool,
    /// Print the binky.toml instead of writing it.
    #[arg(long)]
    pub stdout: bool,
}

/// `binky check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// A binky.toml, or a folder to search upward from. Default: the current folder.
    pub path: Option<PathBuf>,
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky reset`.
#[derive(Debug, Args)]
#[command(
    after_help = "Stops the world, drops the named slices on the servers they were made on, and brings the world up again: \
each slice is cloned afresh from the golden template of the branch's current migrations (or provisioned, migrated and seeded \
where the resource has no clone_from). The worktree, its files and the ports are kept; only this world's slices are touched."
)]
pub(crate) struct ResetArgs {
    /// The world's name.
    pub name: String,
    /// Resource services whose slices to rebuild (default: the world's only resource).
    #[arg(value_name = "SERVICE", conflicts_with = "all")]
    pub services: Vec<String>,
    /// Rebuild every slice of the world.
    #[arg(long)]
    pub all: bool,
    /// End sessions on the slices that binky did not open (a `psql` someone
    /// left open) instead of refusing; the summary names each one ended.
    #[arg(long)]
    pub force: bool,
    /// Admission group, when the world is not running and must wait for room.
    #[arg(long, short = 'g', value_name = "GROUP")]
    pub group: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky up` / `binky reload`.
#[derive(Debug, Args)]
#[command(
    after_help = "With no NAME, inside a worktree git knows (one an agent host or `git worktree add` made): the world of \
that worktree's branch, attached to that worktree as it is."
)]
pub(crate) struct UpArgs {
    /// The world's name: a git branch (created from HEAD if it does not
    /// exist). Default: the branch of the linked worktree you are in.
    pub name: Option<String>,
    /// Admission group asking for this world (one orchestrator run, one
    /// person): admission is FIFO within a group and fair across groups.
    #[arg(long, short = 'g', value_name = "GROUP")]
    pub group: Option<String>,
    /// When the world is queued for room, return at once with its place
    /// (exit 0) instead of waiting; the daemon brings it up when admitted.
    #[arg(long)]
    pub no_wait: bool,
    /// Put the world to sleep after this long without a request to its URLs
    /// or CPU use ("20m", "1h"), instead of `[project] idle_after`; `off`
    /// never, `default` back to the project's. Kept for later `up`s.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub idle_after: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky hook`.
#[derive(Debug, Args)]
pub(crate) struct HookArgs {
    /// The agent host.
    #[command(subcommand)]
    pub host: HookHost,
}

/// The agent hosts `binky hook` serves.
#[derive(Debug, Subcommand)]
pub(crate) enum HookHost {
    /// Claude Code's WorktreeCreate and WorktreeRemove hooks (`claude --worktree`, subagents with `isolation: worktree`).
    Claude {
        /// What to do.
        #[command(subcommand)]
        action: ClaudeHook,
    },
}

/// `binky hook claude …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ClaudeHook {
    /// The WorktreeCreate hook: reads Claude Code's JSON on stdin, makes the world's worktree and prints its path; the services come up in the background.
    WorktreeCreate,
    /// The WorktreeRemove hook: removes the world whose worktree Claude Code names, never forced (uncommitted work keeps it).
    WorktreeRemove,
    /// Write both hooks into Claude Code's settings (merged with what is there; `--dry-run` prints the result).
    #[command(
        after_help = "Default: the project's .claude/settings.json, at the root of the git repository holding the project \
(the current folder's, or -p's). The hooks run `binky`, so binky must be on the PATH Claude Code runs hooks with."
    )]
    Install(HookInstallArgs),
}

/// `binky hook claude install`.
#[derive(Debug, Args)]
pub(crate) struct HookInstallArgs {
    /// Your own settings, for every project: ~/.claude/settings.json.
    #[arg(long, conflicts_with = "local")]
    pub user: bool,
    /// The project's settings that are not committed: .claude/settings.local.json.
    #[arg(long)]
    pub local: bool,
    /// Print the settings as they would be written; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A command that takes only a world name.
#[derive(Debug, Args)]
pub(crate) struct NameArgs {
    /// The world's name (its branch).
    pub name: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky remove`.
#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    /// The world's name (its branch).
    pub name: String,
    /// Remove even when the worktree has uncommitted or untracked changes,
    /// end sessions on its slices that binky did not open (each named), and
    /// leave a slice whose teardown fails to `binky gc`.
    #[arg(long, short = 'f')]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// `.` limits the list to the current project.
    #[arg(value_parser = ["."])]
    pub scope: Option<String>,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
    /// Redraw whenever something changes (the daemon says when; nothing is
    /// polled). With --json, one JSON document a line per change.
    #[arg(long, short = 'w')]
    pub watch: bool,
}

/// `binky events`.
#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// Keep printing events as they happen (Ctrl-C ends it); follows the
    /// daemon across a restart.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// How many past events to print first (at most 1000).
    #[arg(long, short = 'n', default_value_t = 20, value_name = "N")]
    pub lines: usize,
    /// Only this world's events (of the project here, or -p).
    #[arg(long, value_name = "WORLD")]
    pub world: Option<String>,
    /// One JSON object a line (ts, event, project, worktree, service,
    /// adapter, detail), as events.log holds them.
    #[arg(long)]
    pub json: bool,
}

/// `binky env`.
#[derive(Debug, Args)]
pub(crate) struct EnvArgs {
    /// The world's name (its branch).
    pub name: String,
    /// Print `NAME=value` lines quoted for bash, zsh and sh (a .env file;
    /// `eval` sets them without exporting them).
    #[arg(long, conflicts_with_all = ["json", "export"])]
    pub dotenv: bool,
    /// Print `export NAME=value` lines: `eval "$(binky env <name> --export)"`
    /// gives the shell and every program it starts the world's environment.
    #[arg(long, conflicts_with = "json")]
    pub export: bool,
    /// Also print the `[env]` values that come from `${env.NAME}` (withheld
    /// by default: they are usually credentials).
    #[arg(long)]
    pub reveal: bool,
    /// Print a JSON object (the default), the same shape MCP `env` returns:
    /// `project`, `world`, `worktree`, `services` (service → address),
    /// `fields` (resource → `prefix`, `bucket`…) and `env` (the project's
    /// `[env]`; null where a value is withheld).
    #[arg(long)]
    pub json: bool,
}

/// `binky curl`.
#[derive(Debug, Args)]
pub(crate) struct CurlArgs {
    /// The world's name (its branch).
    pub name: String,
    /// The service to call.
    pub service: String,
    /// Request path, with any query (`/api/items?x=1`); a leading `/` is
    /// added, and spaces and other bytes a URL cannot hold are
    /// percent-encoded.
    #[arg(default_value = "/")]
    pub path: String,
    /// HTTP method.
    #[arg(short = 'X', long = "request", value_name = "METHOD")]
    pub method: Option<String>,
    /// Request body (implies POST unless -X is given); `@FILE` sends a
    /// file's bytes as they are (like curl's --data-binary), `@-` standard
    /// input.
    #[arg(short = 'd', long = "data", value_name = "DATA")]
    pub data: Option<String>,
    /// Extra header, `Name: value`; repeatable. Host, Content-Length and
    /// Transfer-Encoding are binky's to set.
    #[arg(short = 'H', long = "header", value_name = "K: V")]
    pub headers: Vec<String>,
    /// Print the status line and response headers before the body.
    #[arg(short = 'i', long = "include")]
    pub include: bool,
    /// On an HTTP status of 400 or above print nothing of the response
    /// and exit 22 (as curl does).
    #[arg(short = 'f', long = "fail")]
    pub fail: bool,
}

/// `binky verify`.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The world's name (its branch).
    pub name: String,
    /// Run every command even after one fails.
    #[arg(long)]
    pub keep_going: bool,
    /// Run the world's own `[agents] verify` (its branch's binky.toml)
    /// instead of the checks committed on the main checkout's branch;
    /// the result is recorded, and shown by `status`, as such.
    #[arg(long)]
    pub from_branch: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky logs`.
#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The world's name (its branch).
    pub name: String,
    /// Only this service.
    pub service: Option<String>,
    /// Keep printing new lines as they are written.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// How many lines to print first (per service).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 100)]
    pub lines: usize,
}

/// `binky gc`.
#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// List what would be swept without sweeping it.
    #[arg(long)]
    pub dry_run: bool,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Commands whose only option is `--json`.
#[derive(Debug, Args)]
pub(crate) struct JsonArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A percentage as people write it: `10`, `10.5` or `10%`. The range is
/// checked by `reserve`, which names it.
fn percent(s: &str) -> Result<f64, String> {
    let n = s.trim().strip_suffix('%').unwrap_or(s.trim()).trim();
    match n.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!(
            "`{s}` is not a percentage; write a number such as 10 or 10%"
        )),
    }
}

/// `binky reserve`.
#[derive(Debug, Args)]
pub(crate) struct ReserveArgs {
    /// Percent of RAM to keep free (0–90; `10` or `10%`).
    #[arg(long, value_name = "PERCENT", allow_negative_numbers = true, value_parser = percent)]
    pub ram: Option<f64>,
    /// Gigabytes of disk to keep free (0–1,000,000).
    #[arg(long, value_name = "GB", allow_negative_numbers = true)]
    pub disk: Option<f64>,
    /// Most worlds running or starting at once (1–10,000; 0 = unlimited).
    // Read as a signed number so a negative one gets Binky's own message.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_parallel: Option<i64>,
    /// Most `up`s waiting in the admission queue at once (2–10,000); one more is refused.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub queue_max: Option<i64>,
    /// Most `up`s one caller's group may have queued (1 to half of --queue-max).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub queue_per_group: Option<i64>,
    /// Print the settings as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Bind the server to this world (of the project around the current folder, or `-p`)
    /// instead of the one whose worktree it starts in.
    #[arg(long, value_name = "NAME", conflicts_with = "machine")]
    pub world: Option<String>,
    /// Reach every world on the machine, as the CLI does: for an orchestrator that starts and
    /// stops worlds for its agents. Never hand such a server to an agent working in a world.
    #[arg(long)]
    pub machine: bool,
}

/// `binky port`.
#[derive(Debug, Args)]
pub(crate) struct PortArgs {
    /// The HTTP proxy's port (1–65535, must be free).
    #[arg(long, value_name = "PORT")]
    pub proxy: Option<u32>,
    /// The HTTPS (Caddy) port (1–65535, must be free).
    #[arg(long, value_name = "PORT")]
    pub https: Option<u32>,
    /// Print the settings as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `binky daemon`.
#[derive(Debug, Args)]
pub(crate) struct DaemonArgs {
    #[command(subcommand)]
    pub action: DaemonAction,
}

/// `binky daemon <action>`.
#[derive(Debug, Subcommand)]
pub(crate) enum DaemonAction {
    /// Start the daemon in the background (a no-op when one runs).
    Start,
    /// Stop the daemon; service processes keep running and are re-adopted later.
    Stop,
    /// Print pid, version, uptime, socket, home and how many followers are attached.
    Status(JsonArgs),
    /// Run the daemon in the foreground, in this terminal (what `start` launches in the
    /// background); `BINKY_LOG=debug` for detail.
    Run,
}

/// `binky completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    pub shell: clap_complete::Shell,
}
