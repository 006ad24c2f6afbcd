//! The CLI side of each verb: parse → (talk to the daemon) → print.
//!
//! Exit codes: 0 success, 1 the operation failed or found errors, 2 usage
//! errors, unreadable input, or a verb this build leaves out.

pub(crate) mod check;
pub(crate) mod curl;
pub(crate) mod daemon;
pub(crate) mod doctor;
pub(crate) mod down;
pub(crate) mod env;
pub(crate) mod events;
pub(crate) mod gc;
pub(crate) mod hook;
pub(crate) mod init;
pub(crate) mod logs;
pub(crate) mod remove;
pub(crate) mod reset;
pub(crate) mod settings;
pub(crate) mod status;
pub(crate) mod up;
pub(crate) mod verify;
pub(crate) mod world;

use crate::cli::{Cli, Command};
use crate::client::Client;
// The CLI's ways to end on an error, shared with the dashboard.
pub(crate) use crate::client::{fail, paths_or_exit};
use crate::config;
use crate::output;
use crate::paths::Paths;
use crate::protocol::{ApiError, ErrorKind, Request, Response, WorldRef};
use std::path::Path;
use std::process::ExitCode;

/// Runs one parsed command line and returns the process exit code.
pub(crate) fn run(cli: Cli) -> ExitCode {
    let project = cli.project.as_deref();
    if project.is_some() && !cli.command.takes_project() {
        return refuse_project(&cli.command);
    }
    match &cli.command {
        Command::Check(args) => check::run(args, project),
        Command::Init(args) => init::run(args),
        Command::Completions(args) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            // Into memory, then printed: clap_complete panics on a failed
            // write, where print! ends in the one-line message (entry.rs).
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut cmd, "binky", &mut script);
            print!("{}", String::from_utf8_lossy(&script));
            ExitCode::SUCCESS
        }
        Command::Daemon(args) => daemon::run(&args.action),
        Command::LogWriter { file } => log_writer(file),
        Command::Status(args) => status::run(args, project),
        Command::Events(args) => events::run(args, project),
        #[cfg(feature = "dashboard")]
        Command::Dashboard => crate::dashboard::run(),
        Command::Config(args) => settings::config(args),
        Command::Reserve(args) => settings::reserve(args),
        Command::Port(args) => settings::port(args),
        Command::Metrics(_) => settings::metrics(),
        Command::Up(args) => up::run(args, project, false),
        Command::Reload(args) => up::run(args, project, true),
        Command::Reset(args) => reset::run(args, project),
        Command::Down(args) => down::run(args, project),
        Command::Remove(args) => remove::run(args, project),
        Command::Env(args) => env::env(args, project),
        Command::Logs(args) => logs::logs(args, project),
        Command::Curl(args) => curl::run(args, project),
        Command::Verify(args) => verify::run(args, project),
        Command::Doctor(args) => doctor::run(args),
        Command::Gc(args) => gc::run(args),
        Command::Hook(args) => hook::run(args, project),
        Command::Mcp(args) => match paths_or_exit() {
            Ok(paths) => match crate::mcp::run(paths, project, args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("binky mcp: {e:#}");
                    ExitCode::from(1)
                }
            },
            Err(c) => c,
        },
        #[cfg(not(feature = "dashboard"))]
        Command::Dashboard => no_dashboard(),
    }
}

/// Writes `text` to `path` through a file beside it, renamed over it, so
/// an interrupted write never leaves half a file (a binky.toml, a host's
/// settings). The old file's permissions are kept.
///
/// # Errors
/// The folder cannot be written; the temporary file is removed.
pub(crate) fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".binky-tmp");
    let tmp = path.with_file_name(name);
    let written = std::fs::write(&tmp, text).and_then(|()| {
        if let Ok(meta) = std::fs::metadata(path) {
            std::fs::set_permissions(&tmp, meta.permissions())?;
        }
        std::fs::rename(&tmp, path)
    });
    written.inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `binky log-writer FILE` (hidden): stamps a service's output into its
/// log file, rolling it; ends with the input.
fn log_writer(file: &Path) -> ExitCode {
    // Survive the terminal and the daemon: only the end of input
    // (the service is gone) ends this process.
    crate::platform::ignore_terminal_signals();
    let opened = crate::supervisor::logs::LogFile::open(
        file,
        crate::supervisor::LOG_ROLL_BYTES,
        crate::supervisor::LOG_GENERATIONS,
    );
    let mut f = match opened {
        Ok(f) => f,
        Err(e) => {
            eprintln!("binky log-writer: {}: {e}", file.display());
            return ExitCode::from(1);
        }
    };
    match crate::supervisor::logs::stamp(std::io::stdin().lock(), &mut f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(1),
    }
}

/// `-p` given to a command that takes no project: said, exit 2.
fn refuse_project(command: &Command) -> ExitCode {
    let (why, hint) = match command {
        Command::Init(_) => (
            "it writes a project's binky.toml, so no project exists yet",
            "name the folder holding the compose file: `binky init path/to/project`",
        ),
        _ => (
            "it acts on the whole machine, not on one project",
            "run it without -p",
        ),
    };
    output::error(
        format!(
            "-p/--project does not apply to `binky {}`: {why}",
            command.name()
        ),
        Some(hint),
    );
    ExitCode::from(2)
}

/// `binky dashboard` in a build without the terminal view: says what
/// shows the same, never pretends to succeed.
#[cfg(not(feature = "dashboard"))]
fn no_dashboard() -> ExitCode {
    output::error(
        "binky dashboard: this binky was built without the `dashboard` feature",
        Some(
            "`binky status --watch` shows every world, redrawn as it changes, and the web view is at http://binky.localhost:<proxy port>/",
        ),
    );
    ExitCode::from(2)
}

/// [`fail`], or with `--json` `{"error": {"message", "hint"}}` on stdout
/// instead (exit 1): scripts and agents read the failure as data, and the
/// text is not said twice.
pub(crate) fn fail_json(json: bool, e: &ApiError) -> ExitCode {
    if json {
        print_json(&serde_json::json!({ "error": e }));
        return ExitCode::from(1);
    }
    fail(e)
}

/// A reply of the wrong kind: a bug, reported rather than ignored.
pub(crate) fn unexpected(r: &Response) -> ExitCode {
    output::error(
        format!("unexpected reply from the daemon: {r:?}"),
        Some("this is a bug; please report it with `binky daemon status`"),
    );
    ExitCode::from(1)
}

/// Connects without starting a daemon.
pub(crate) fn connect_only(paths: &Paths) -> Result<Option<Client>, ExitCode> {
    Client::connect(paths).map_err(|e| fail(&e))
}

/// Connects to the daemon, starting it if needed.
pub(crate) fn client() -> Result<Client, ExitCode> {
    let paths = paths_or_exit()?;
    Client::connect_or_start(&paths).map_err(|e| fail(&e))
}

/// Sends one request to the daemon, starting it if needed.
pub(crate) fn call(req: &Request) -> Result<Response, ExitCode> {
    let paths = paths_or_exit()?;
    let mut client = Client::connect_or_start(&paths).map_err(|e| fail(&e))?;
    client.request(req).map_err(|e| fail(&e))
}

/// Prints pretty JSON to stdout.
pub(crate) fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serialisable"));
}

/// An error the CLI finds itself, before or without the daemon: with
/// `json`, the `{"error": {message, hint}}` object on stdout that every
/// `--json` caller gets; else text on stderr. Returns `code`.
pub(crate) fn refuse(json: bool, e: &ApiError, code: u8) -> ExitCode {
    if json {
        print_json(&serde_json::json!({ "error": e }));
    } else {
        output::error(&e.message, e.hint.as_deref());
    }
    ExitCode::from(code)
}

/// The project name for `--project`/`status .`: a known name as is, else the
/// `[project] name` of the binky.toml found from that path. Errors as
/// [`refuse`] says, JSON with `json`.
pub(crate) fn project_name(arg: &str, json: bool) -> Result<String, ExitCode> {
    let path = Path::new(arg);
    if !path.exists() && !arg.contains('/') {
        return Ok(arg.to_owned());
    }
    // `.` is the project around here (searched upward, as without -p); any
    // other path must be the project's folder or its binky.toml.
    let start = if arg == "." {
        path.to_path_buf()
    } else {
        let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
        let w = WorldRef::from_arg(Some(arg), &cwd, "").map_err(|e| {
            let e = ApiError::new(e)
                .hint("pass the project's folder or its binky.toml, or a project name")
                .with_kind(ErrorKind::InvalidInput);
            refuse(json, &e, 2)
        })?;
        w.project_dir
            .map(std::path::PathBuf::from)
            .unwrap_or_default()
    };
    let file = config::find(&start).map_err(|e| {
        let e = ApiError::new(e.to_string())
            .hint("pass a folder inside a project, or a project name")
            .with_kind(ErrorKind::InvalidInput);
        refuse(json, &e, 2)
    })?;
    match config::load(&file) {
        Ok(c) => Ok(c.project.name),
        Err(e) => Err(refuse(
            json,
            &ApiError::new(e.to_string())
                .hint("run `binky check` to see what is wrong")
                .with_kind(ErrorKind::InvalidInput),
            1,
        )),
    }
}
