//! The CLI's side of the socket: connect, handshake, auto-start, call.
//!
//! Blocking on purpose: a CLI call is one short exchange, and skipping an
//! async runtime keeps `binky status` a few milliseconds end to end.

mod exit;
mod follow;

pub(crate) use exit::{fail, paths_or_exit};
pub(crate) use follow::follow;

use crate::paths::Paths;
use crate::platform;
use crate::protocol::codec::{read_frame, write_frame};
use crate::protocol::{
    ApiError, Hello, PROTOCOL, Progress, Reply, Request, Response, Subscription, VERSION, Welcome,
};
use std::io::BufReader;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a CLI waits for a daemon it started to answer.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the daemon, past the handshake.
pub(crate) struct Client {
    reader: BufReader<platform::ClientStream>,
    writer: platform::ClientStream,
    /// What the daemon said about itself.
    pub welcome: Welcome,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> ApiError {
    ApiError::new(format!("{what} {}: {e}", path.display()))
}

impl Client {
    /// Connects to a running daemon; `Ok(None)` when none is running.
    ///
    /// # Errors
    /// The socket exists but cannot be used (permissions), or the handshake
    /// fails.
    pub(crate) fn connect(paths: &Paths) -> Result<Option<Client>, ApiError> {
        let sock = paths.socket();
        let stream = match platform::connect(&sock) {
            Ok(s) => s,
            Err(e) if platform::is_no_daemon(&e) => return Ok(None),
            Err(e) => {
                return Err(io_err("cannot connect to the daemon at", &sock, e)
                    .hint("check the permissions of BINKY_HOME; it must belong to you"));
            }
        };
        let writer = stream
            .try_clone()
            .map_err(|e| io_err("cannot use socket", &sock, e))?;
        let mut client = Client {
            reader: BufReader::new(stream),
            writer,
            welcome: Welcome {
                protocol: 0,
                version: String::new(),
                pid: 0,
            },
        };
        // A daemon that is exiting (or was just killed) may still have
        // accepted the connection from its backlog, then reset it: that is
        // "no daemon", not an error.
        let gone = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        };
        match write_frame(&mut platform::NoSigpipe(&client.writer), &Hello::current()) {
            Ok(()) => {}
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(io_err("cannot talk to the daemon at", &sock, e)),
        }
        match read_frame::<_, Welcome>(&mut client.reader) {
            Ok(Some(w)) => client.welcome = w,
            Ok(None) => {
                // The daemon closed on us: it is shutting down. Treat as absent.
                return Ok(None);
            }
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => {
                return Err(ApiError::new(format!(
                    "the process at {} does not speak binky's protocol ({e})",
                    sock.display()
                ))
                .hint("run `binky daemon stop`, or remove the socket if no daemon runs"));
            }
        }
        Ok(Some(client))
    }

    /// Connects, starting a daemon first when none is running.
    ///
    /// # Errors
    /// The daemon did not come up within [`START_TIMEOUT`]; the error quotes
    /// the end of `daemon.log`.
    pub(crate) fn connect_or_start(paths: &Paths) -> Result<Client, ApiError> {
        if let Some(c) = Self::connect(paths)? {
            return Ok(c);
        }
        start_daemon(paths)?;
        Self::connect(paths)?.ok_or_else(|| {
            ApiError::new("the daemon started but stopped answering")
                .hint(format!("see {}", paths.daemon_log().display()))
        })
    }

    /// The error for a request this client cannot send to a daemon of
    /// another version, with how to get one of this version.
    fn other_version(&self) -> ApiError {
        ApiError::new(format!(
            "the running daemon is version {}, and this binky is {VERSION}",
            self.welcome.version
        ))
        .hint("run `binky daemon stop`, then retry (a new daemon starts on demand)")
    }

    /// Whether the daemon runs this very version.
    pub(crate) fn same_version(&self) -> bool {
        self.welcome.protocol == PROTOCOL && self.welcome.version == VERSION
    }

    /// Sends `req` and returns its result, passing progress frames to
    /// `on_progress` as they arrive.
    ///
    /// # Errors
    /// The daemon reported a failure, runs another version, or the
    /// connection broke.
    pub(crate) fn call(
        &mut self,
        req: &Request,
        on_progress: &mut dyn FnMut(&Progress),
    ) -> Result<Response, ApiError> {
        if !self.same_version() && !req.version_independent() {
            return Err(self.other_version());
        }
        // Refused here as the daemon would refuse it, without sending
        // megabytes it would not read.
        req.check_bounds()?;
        let frame = crate::protocol::codec::encode(req)
            .map_err(|e| ApiError::new(format!("cannot encode the request: {e}")))?;
        if frame.len() > crate::protocol::MAX_FRAME {
            return Err(ApiError::new(format!(
                "the request is {} bytes; the daemon reads at most {} per request",
                frame.len(),
                crate::protocol::MAX_FRAME
            ))
            .hint("nothing was sent; a large environment is the usual cause: run binky from a smaller one"));
        }
        {
            use std::io::Write as _;
            let mut w = platform::NoSigpipe(&self.writer);
            w.write_all(&frame)
                .and_then(|()| w.flush())
                .map_err(|e| sending_failed(req, &e))?;
        }
        let mut queued = false;
        loop {
            match read_frame::<_, Reply>(&mut self.reader) {
                Ok(Some(Reply::Progress(p))) => {
                    queued = p.step == crate::protocol::ProgressStep::Queued;
                    on_progress(&p);
                }
                Ok(Some(Reply::Ok(r))) => return Ok(r),
                Ok(Some(Reply::Err(e))) => return Err(e),
                // Only a subscription is sent these (see `subscribe`).
                Ok(Some(Reply::Event(_) | Reply::Lagged(_) | Reply::Logs(_))) => {}
                Ok(None) if queued => return Err(gone_while_queued(req)),
                Ok(None) => return Err(daemon_gone(req)),
                Err(e) => {
                    return Err(ApiError::new(named(
                        req,
                        &format!("bad reply from the daemon: {e}"),
                    )));
                }
            }
        }
    }

    /// A handle that cancels the request this client has in flight (see
    /// [`Request::Cancel`]), usable from another thread.
    ///
    /// # Errors
    /// The socket cannot be duplicated.
    pub(crate) fn canceller(&self) -> Result<Canceller, ApiError> {
        let stream = self
            .writer
            .try_clone()
            .map_err(|e| ApiError::new(format!("cannot use the daemon socket: {e}")))?;
        Ok(Canceller { stream })
    }

    /// Subscribes ([`Request::Subscribe`]) and hands each frame to
    /// `on_feed` until it returns `false` or the daemon goes away.
    ///
    /// # Errors
    /// The daemon refused the subscription (an unknown project), runs
    /// another version, or sent a frame this client cannot read.
    pub(crate) fn subscribe(
        &mut self,
        sub: Subscription,
        on_feed: &mut dyn FnMut(Feed<'_>) -> bool,
    ) -> Result<Ended, ApiError> {
        let req = Request::Subscribe(sub);
        if !self.same_version() {
            return Err(self.other_version());
        }
        write_frame(&mut platform::NoSigpipe(&self.writer), &req)
            .map_err(|e| ApiError::new(format!("lost the daemon connection: {e}")))?;
        loop {
            let go_on = match read_frame::<_, Reply>(&mut self.reader) {
                Ok(Some(Reply::Event(e))) => on_feed(Feed::Event(&e)),
                Ok(Some(Reply::Lagged(n))) => on_feed(Feed::Lagged(n)),
                Ok(Some(Reply::Logs(r))) => on_feed(Feed::Logs(&r)),
                Ok(Some(Reply::Ok(_))) => on_feed(Feed::Live),
                Ok(Some(Reply::Err(e))) => return Err(e),
                Ok(Some(Reply::Progress(_))) => true,
                Ok(None) => return Ok(Ended::DaemonGone),
                Err(e) => return Err(ApiError::new(format!("bad frame from the daemon: {e}"))),
            };
            if !go_on {
                return Ok(Ended::Caller);
            }
        }
    }

    /// [`Client::call`] without progress.
    pub(crate) fn request(&mut self, req: &Request) -> Result<Response, ApiError> {
        self.call(req, &mut |_| {})
    }
}

/// One frame of a subscription, as [`Client::subscribe`] hands it on.
#[derive(Debug)]
pub(crate) enum Feed<'a> {
    /// An event: a past one before [`Feed::Live`], a new one after.
    Event(&'a crate::protocol::Event),
    /// The past events are sent; what follows happens now.
    Live,
    /// This many events were dropped because this client read too slowly.
    Lagged(u64),
    /// Lines a followed world printed (a log subscription): the newest
    /// asked for before [`Feed::Live`], new ones after.
    Logs(&'a crate::protocol::LogsReport),
    /// The daemon went away and the follower waits for it to come back
    /// (only a follower that carries on across restarts hands this on;
    /// [`Client::subscribe`] ends with [`Ended::DaemonGone`] instead).
    Gone,
}

/// Why a subscription ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The caller's `on_feed` said to stop.
    Caller,
    /// The daemon closed the connection (it stopped or restarted).
    DaemonGone,
}

/// What a request whose daemon died before answering did, and whether it
/// is safe to run again: every lifecycle verb records its intent before it
/// acts, so a restarted daemon knows an interrupted one (and carries an
/// admitted `up` on from the queue); a read changed nothing.
fn daemon_gone(req: &Request) -> ApiError {
    let verb = req.verb();
    let world = req.world_name();
    let (what, again) = match (req, world) {
        (Request::Up(_), Some(w)) => (
            format!(
                "the `up` of {w} may have made part of the world; its place in the queue is kept, and the restarted daemon carries the `up` on from what was made"
            ),
            format!(
                "`binky status` shows how it went; `binky up {w}` again is safe (it makes nothing twice)"
            ),
        ),
        (
            Request::Reload(_) | Request::Reset(_) | Request::Down(_) | Request::Remove { .. },
            Some(w),
        ) => (
            format!(
                "`{verb}` of {w} may have been cut short; the restarted daemon marks it interrupted (status says so), and what it finished stays done"
            ),
            format!("`binky {verb} {w}` again is safe: it carries on from where this one stopped"),
        ),
        (Request::Verify { .. }, Some(w)) => (
            format!(
                "the verify of {w} is recorded as interrupted, its command stopped by the restarted daemon"
            ),
            format!("`binky verify {w}` again runs it afresh"),
        ),
        (Request::SetReserve { .. } | Request::SetPorts { .. }, _) => (
            "the setting may or may not have been saved".to_owned(),
            "`binky config` shows what is in force; running the command again is safe".to_owned(),
        ),
        (Request::Gc { .. }, _) => (
            "gc may have swept part of what it found; what it swept stays swept".to_owned(),
            "`binky gc` again is safe: it sweeps what is left".to_owned(),
        ),
        _ => (
            "nothing was changed".to_owned(),
            "running it again is safe".to_owned(),
        ),
    };
    ApiError::new(format!(
        "the daemon stopped before answering `{verb}`: {what}"
    ))
    .hint(format!(
        "{again}; any `binky` command starts the daemon again (daemon.log in BINKY_HOME says why it stopped)"
    ))
}

/// The error for `req` whose sending failed with `e`. A daemon that hung
/// up (killed between the handshake and the request) is said as one that
/// stopped before answering, naming the verb and world and what may have
/// happened: part of the frame may have reached it.
fn sending_failed(req: &Request, e: &std::io::Error) -> ApiError {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => daemon_gone(req),
        _ => ApiError::new(named(req, &format!("lost the daemon connection: {e}"))),
    }
}

/// `msg` prefixed with the verb and world it is about (`` `reset` of w: ``),
/// as the daemon prefixes its own lifecycle errors, so a script or an agent
/// running several verbs at once can tell which one failed.
fn named(req: &Request, msg: &str) -> String {
    match req.world_name() {
        Some(w) => format!("`{}` of {}: {msg}", req.verb(), crate::slug::shown(w)),
        None => msg.to_owned(),
    }
}

/// Error `e`, found before `req` reached a daemon (one that could not be
/// started), prefixed with `req`'s verb and world; its hint kept.
pub(crate) fn about(req: &Request, mut e: ApiError) -> ApiError {
    e.message = named(req, &e.message);
    e
}

/// The error for a daemon that went away while `req` was queued. The queue
/// is in the registry, so the place is kept; a new daemon carries a queued
/// ticket on as an `up`, so a queued `reload` or `reset` is said not to
/// have run (a reset's slices are not made afresh).
fn gone_while_queued(req: &Request) -> ApiError {
    let verb = req.verb();
    let w = req.world_name().unwrap_or("the world");
    let base = format!(
        "the daemon stopped while `{verb}` of {w} was queued; {w} is still queued, and a new daemon brings it up in the queue's order"
    );
    match req {
        Request::Up(_) => ApiError::new(base).hint(
            "any `binky` command starts the daemon again; `binky status` shows the world's place",
        ),
        _ => ApiError::new(format!("{base}, without the `{verb}` itself")).hint(format!(
            "any `binky` command starts the daemon again; `binky status` shows the world's place; `binky {verb} {w}` again does the `{verb}`"
        )),
    }
}

/// Cancels a client's request in flight: the daemon stops what the
/// operation started and answers it with a "cancelled" error.
pub(crate) struct Canceller {
    stream: platform::ClientStream,
}

impl Canceller {
    /// Sends the cancel. Best effort: a daemon that is gone needs none.
    pub(crate) fn cancel(&self) {
        let _ = write_frame(&mut platform::NoSigpipe(&self.stream), &Request::Cancel);
    }
}

/// Starts a daemon (`binky daemon run`, detached) and waits until its socket
/// answers. Two CLIs racing here serialise on `start.lock`.
///
/// # Errors
/// It did not answer within [`START_TIMEOUT`], or exited early; the error
/// quotes the end of `daemon.log`.
pub(crate) fn start_daemon(paths: &Paths) -> Result<Welcome, ApiError> {
    paths
        .ensure()
        .map_err(|e| ApiError::new(format!("{e:#}")))?;
    let _guard = platform::lock_file(&paths.start_lock(), true)
        .map_err(|e| io_err("cannot lock", &paths.start_lock(), e))?;
    if let Some(c) = Client::connect(paths)? {
        return Ok(c.welcome);
    }
    let exe = std::env::current_exe()
        .map_err(|e| ApiError::new(format!("cannot find the binky executable: {e}")))?;
    let log = paths.daemon_log();
    let log_len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    // Never through a link planted at its name (see `logs::open_append`).
    let out = crate::supervisor::logs::open_append(&log)
        .map_err(|e| io_err("cannot open the daemon's log", &log, e))?;
    let mut child = platform::spawn_detached(&exe, &["daemon", "run"], out)
        .map_err(|e| io_err("cannot start the daemon", &exe, e))?;
    let deadline = Instant::now() + START_TIMEOUT;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(c) = Client::connect(paths)? {
            // A long-lived client (the dashboard, `binky mcp`) outlives a
            // daemon it started: reaped when it ends, never left a zombie.
            // It never takes the CLI's Ctrl-C (see `spawn_helper`).
            platform::spawn_helper(move || {
                let _ = child.wait();
            });
            return Ok(c.welcome);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(start_failure(
                &log,
                log_len,
                format!("the daemon exited during start-up ({status})"),
            ));
        }
        if Instant::now() >= deadline {
            return Err(start_failure(
                &log,
                log_len,
                format!(
                    "the daemon did not answer within {} s",
                    START_TIMEOUT.as_secs()
                ),
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

fn start_failure(log: &Path, from: u64, message: String) -> ApiError {
    let text = std::fs::read(log).unwrap_or_default();
    let new = String::from_utf8_lossy(&text[(from as usize).min(text.len())..]).into_owned();
    let tail: Vec<&str> = new.lines().rev().take(8).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    let mut msg = message;
    if !tail.is_empty() {
        msg.push_str(":\n    ");
        msg.push_str(&tail.join("\n    "));
    }
    ApiError::new(msg).hint(format!("see {}; BINKY_LOG=debug gives more", log.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ClientEnv, UpRequest, WorldRef};

    /// A daemon killed after the handshake, before it read the request:
    /// the CLI's write fails (EPIPE), and the error still names the verb
    /// and world and says what may have happened, as one the daemon
    /// dropped while answering does (found by the chaos test: "lost the
    /// daemon connection: Broken pipe").
    #[cfg(unix)]
    #[test]
    fn a_daemon_that_hangs_up_before_the_request_is_named_with_verb_and_world() {
        let home = tempfile::tempdir().unwrap();
        let paths = Paths::at(home.path());
        let listener = std::os::unix::net::UnixListener::bind(paths.socket()).unwrap();
        let (hung_up, wait_hang_up) = std::sync::mpsc::channel();
        let daemon = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let _: Option<Hello> = read_frame(&mut reader).unwrap();
            let welcome = Welcome {
                protocol: PROTOCOL,
                version: VERSION.to_owned(),
                pid: 1,
            };
            write_frame(&mut &stream, &welcome).unwrap();
            drop((reader, stream));
            hung_up.send(()).unwrap();
        });
        let mut client = Client::connect(&paths).unwrap().expect("a daemon");
        wait_hang_up.recv().unwrap();
        daemon.join().unwrap();
        let req = Request::Up(UpRequest {
            detach: false,
            idle_after: None,
            world: WorldRef {
                project_dir: None,
                project: Some("shop".into()),
                name: "feat-a".into(),
            },
            group: None,
            caller: None,
            env: ClientEnv::default(),
            wait: true,
        });
        let e = client.request(&req).unwrap_err();
        assert!(
            e.message
                .starts_with("the daemon stopped before answering `up`: the `up` of feat-a"),
            "{e}"
        );
        assert!(e.hint.is_some_and(|h| h.contains("again")));
    }
}
