//! The daemon's process: the lock, the registry, the socket, the proxy,
//! and the frame loop each connection runs (handshake, request, progress,
//! reply, cancel).

use super::events::Event;
use super::state::{Daemon, ProgressTx, wait_proxy_bound};
use super::{handlers, settings, world};
use crate::daemon::events::EventKind;
use crate::paths::Paths;
use crate::platform;
use crate::protocol::codec::is_malformed;
use crate::protocol::codec::{read_frame_async, write_frame_async};
use crate::protocol::{ApiError, Hello, PROTOCOL, Reply, Request, Response, VERSION, Welcome};
use crate::registry::Registry;
use anyhow::{Context, Result, bail};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::BufReader;
use tokio::sync::{broadcast, watch};

/// A client must say hello within this long.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Options for [`run`].
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    /// Install SIGTERM/SIGINT handlers (off for in-process tests).
    pub handle_signals: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            handle_signals: true,
        }
    }
}

/// Where the daemon's `tracing` output goes. A daemon the CLI started has
/// its stderr on `daemon.log` under `BINKY_HOME`: it then writes that file
/// itself, rolled at [`crate::supervisor::LOG_ROLL_BYTES`] keeping
/// [`crate::supervisor::LOG_GENERATIONS`] and reopened by name after a
/// rename, with stdout and stderr kept on the current file so a panic lands
/// there too. A daemon run in a terminal (`binky daemon run`) logs to its
/// stderr.
pub(crate) fn log_writer() -> tracing_subscriber::fmt::writer::BoxMakeWriter {
    use crate::supervisor::logs::LogFile;
    use crate::supervisor::{LOG_GENERATIONS, LOG_ROLL_BYTES};
    let opened = Paths::from_env().ok().and_then(|p| {
        let log = p.daemon_log();
        if !platform::stderr_is(&log) {
            return None;
        }
        LogFile::open(&log, LOG_ROLL_BYTES, LOG_GENERATIONS).ok()
    });
    // Scrubbed either way: a log line may quote an error's text.
    match opened {
        Some(log) => tracing_subscriber::fmt::writer::BoxMakeWriter::new(Mutex::new(
            crate::secrets::Scrubbing(log.on_open(platform::redirect_stdio_to)),
        )),
        None => tracing_subscriber::fmt::writer::BoxMakeWriter::new(|| {
            crate::secrets::Scrubbing(std::io::stderr())
        }),
    }
}

/// Builds a runtime and runs the daemon to completion (`binky daemon run`).
pub(crate) fn run_blocking(paths: Paths) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        // Two workers: the daemon mostly waits; more threads only cost memory.
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run(paths, RunOptions::default()))
}

/// Runs the daemon until it is asked to stop.
///
/// # Errors
/// Another daemon holds the lock; the registry is corrupt, locked or too new;
/// the socket cannot be bound.
pub(crate) async fn run(paths: Paths, opts: RunOptions) -> Result<()> {
    paths.ensure()?;
    // Room for many proxied connections; the proxy caps them below this.
    let open_files = platform::raise_open_files_limit();
    tracing::debug!(open_files, "open-file limit");
    let lock = super::blocking(|| take_lock(&paths))?;
    let registry = Registry::open(&paths.registry())?;
    crate::faults::point("daemon:start");
    let socket = paths.socket();
    // We hold the lock, so any socket file here belongs to a dead daemon.
    match std::fs::remove_file(&socket) {
        Ok(()) => tracing::info!(path = %socket.display(), "removed a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).context(format!("cannot remove stale socket {}", socket.display()));
        }
    }
    let listener = platform::bind_listener(&socket)
        .with_context(|| format!("cannot bind {}", socket.display()))?;
    let daemon = Arc::new(Daemon::new(paths.clone(), registry));
    let shutdown_rx = daemon.shutdown.subscribe();
    let proxy_port_rx = daemon.proxy_port.subscribe();
    settings::init_defaults(&daemon)?;
    restore_routes(&daemon)?;
    // Every process this daemon starts shares its session: recorded before
    // the first one, so a later daemon can find them all, listed or not.
    daemon.registry(|r| r.record_session(platform::session_id(), platform::pid()))?;
    // Reconcile before serving: re-adopt what is still running.
    world::reconcile(&daemon).await;
    // Carry on with the queue a previous daemon left, in its order.
    super::admission::resume_queue(&daemon);
    super::idle::ensure_idle_check(&daemon);
    start_proxy(&daemon, proxy_port_rx).await?;
    daemon.event(
        Event::named(EventKind::DaemonStarted)
            .detail(format!("pid {} version {VERSION}", platform::pid())),
    );
    tracing::info!(pid = platform::pid(), version = VERSION, socket = %socket.display(), "daemon ready");
    if opts.handle_signals {
        spawn_signal_handler(&daemon);
    }
    accept_loop(&daemon, listener, shutdown_rx).await;
    let _ = std::fs::remove_file(&socket);
    daemon.event(Event::named(EventKind::DaemonStopped));
    tracing::info!("daemon stopped");
    drop(lock);
    Ok(())
}

/// Takes the daemon lock of this `BINKY_HOME` (one daemon per home), and
/// writes this pid into the lock file for whoever meets it next.
///
/// # Errors
/// Another daemon holds it (its pid is named).
fn take_lock(paths: &Paths) -> Result<platform::FileLock> {
    let lock_path = paths.daemon_lock();
    // A daemon that is dying (its last threads still closing files) may hold
    // the lock for a moment after it stopped answering: wait briefly.
    let deadline = Instant::now() + Duration::from_secs(2);
    let lock = loop {
        let lock = platform::lock_file(&lock_path, false)
            .with_context(|| format!("cannot open {}", lock_path.display()))?;
        if lock.is_some() || Instant::now() >= deadline {
            break lock;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let Some(lock) = lock else {
        let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
        bail!(
            "another binky daemon (pid {}) is running for {}",
            holder.trim(),
            paths.home().display()
        );
    };
    // The lock file's content is informational (the pid); the flock is what
    // guarantees one daemon. Written through the locked handle: never by
    // name, which a link could redirect.
    let _ = lock.set_note(&format!("{}\n", platform::pid()));
    Ok(lock)
}

/// Rebuilds the proxy's routing table from the registry.
fn restore_routes(daemon: &Daemon) -> Result<()> {
    for (host, project, world, service, port, state) in daemon.registry(|r| r.routes())? {
        daemon.routes.set(
            &host,
            crate::proxy::Route {
                project,
                world,
                service,
                port,
                state,
                // Learned again when the world is re-adopted.
                https: false,
                why: None,
                seen: Default::default(),
            },
        );
    }
    Ok(())
}

/// How the proxy wakes a sleeping world: an `up` through admission.
struct Waker(Arc<Daemon>);

impl crate::proxy::Waker for Waker {
    fn wake(&self, project: &str, world: &str) {
        world::wake(&self.0, project, world, "a request to its URL");
    }
    fn waiting(&self, project: &str, world: &str) -> Option<String> {
        super::admission::queued_why(&self.0, project, world)
    }
    fn hold(&self, project: &str, world: &str) -> Duration {
        self.0.idle.hold(&super::WorldKey::new(project, world))
    }
}

/// The dashboard page's view of the daemon.
struct Board(Arc<Daemon>);

impl crate::proxy::Board for Board {
    fn report(&self) -> Result<crate::protocol::StatusReport, String> {
        let mut r = handlers::status_report(&self.0, None, false).map_err(|e| e.message)?;
        // A failure's words may quote what a service printed.
        for w in r.projects.iter_mut().flat_map(|p| p.worlds.iter_mut()) {
            if let Some(e) = w.error.as_mut() {
                crate::secrets::scrub_in_place(e);
            }
        }
        Ok(r)
    }
    fn changes(&self) -> broadcast::Receiver<Event> {
        self.0.events.subscribe(0).1
    }
}

/// Serves the proxy on the configured port (moved when `binky port`
/// changes it) and returns once it listens or failed to: a CLI that sees
/// the daemon ready may use a printed URL at once.
async fn start_proxy(daemon: &Arc<Daemon>, port_rx: watch::Receiver<u16>) -> Result<()> {
    let port = daemon.registry(|r| r.settings())?.proxy_port;
    let _ = daemon.proxy_port.send(port);
    let proxy = crate::proxy::Proxy::for_daemon(
        daemon.routes.clone(),
        daemon.proxy.clone(),
        Arc::new(Board(daemon.clone())),
        Arc::new(Waker(daemon.clone())),
    );
    let d = daemon.clone();
    tokio::spawn(crate::proxy::serve(
        proxy,
        port_rx,
        daemon.proxy_bound.clone(),
        proxy_retry_most(),
        move |msg| {
            tracing::warn!("{msg}");
            d.event(Event::named(EventKind::ProxyBindFailed).detail(msg));
        },
    ));
    wait_proxy_bound(daemon, port).await;
    Ok(())
}

/// The longest wait between two tries to bind a proxy port that is taken:
/// 10 s, or `BINKY_PROXY_RETRY_MAX` (50 ms to 10 min). A try is one
/// `bind`, so a port held for hours costs nothing worth counting, and it
/// is served within that long of being free.
fn proxy_retry_most() -> Duration {
    crate::tunables::duration(
        "BINKY_PROXY_RETRY_MAX",
        Duration::from_millis(50)..=Duration::from_secs(600),
    )
    .unwrap_or(Duration::from_secs(10))
}

/// SIGTERM or SIGINT asks the daemon to shut down (its services keep
/// running).
fn spawn_signal_handler(daemon: &Arc<Daemon>) {
    let d = daemon.clone();
    tokio::spawn(async move {
        platform::shutdown_signal().await;
        tracing::info!("signal received; shutting down");
        let _ = d.shutdown.send(true);
    });
}

/// Accepts connections on the control socket, one task each, until
/// shutdown.
async fn accept_loop(
    daemon: &Arc<Daemon>,
    listener: platform::Listener,
    mut shutdown_rx: watch::Receiver<bool>,
) {
    let mut warned: Option<Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let d = daemon.clone();
                    tokio::spawn(async move { serve(d, stream).await });
                }
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of
                    // spinning, and say so once a minute, not once a try.
                    if warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                        warned = Some(Instant::now());
                        tracing::warn!(error = %e, "accept failed on the control socket");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown_rx.changed() => break,
        }
    }
}

/// A reply with every secret the daemon knows masked (see
/// [`crate::secrets`]): errors, hints, notes and progress lines may quote a
/// command's or an adapter's words. `env` answers are left whole: handing
/// out a world's addresses is what they are for.
pub(super) fn scrubbed(mut reply: Reply) -> Reply {
    use crate::secrets::scrub_in_place;
    match &mut reply {
        Reply::Progress(p) => scrub_in_place(&mut p.message),
        Reply::Err(e) => {
            scrub_in_place(&mut e.message);
            if let Some(h) = e.hint.as_mut() {
                scrub_in_place(h);
            }
        }
        Reply::Ok(Response::World(o)) => {
            o.notes.iter_mut().for_each(scrub_in_place);
            if let Some(e) = o.world.error.as_mut() {
                scrub_in_place(e);
            }
        }
        Reply::Event(e) => {
            if let Some(d) = e.detail.as_mut() {
                scrub_in_place(d);
            }
        }
        Reply::Ok(Response::Logs(r)) | Reply::Logs(r) => {
            r.lines.iter_mut().for_each(|l| scrub_in_place(&mut l.text));
        }
        Reply::Ok(_) | Reply::Lagged(_) => {}
    }
    reply
}

/// One connection: the peer must be this user; then hello/welcome, then
/// requests one at a time, each answered by progress frames and one reply.
async fn serve(daemon: Arc<Daemon>, stream: platform::ServerStream) {
    match platform::peer_is_same_user(&stream) {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!("refused a connection from another user");
            daemon.event(Event::named(EventKind::ConnectionRefused).detail("peer is another user"));
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read peer credentials; refusing");
            return;
        }
    }
    // Who asks, for admission's fairness and caps: the peer's session, read
    // from the kernel, not taken from the client.
    let caller = platform::peer_session(&stream).map(|sid| format!("session {sid}"));
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let Some(hello) = handshake(&mut r, &mut w).await else {
        return;
    };
    let matched = hello.protocol == PROTOCOL && hello.version == VERSION;
    let mut frames = read_frames(r);
    loop {
        let mut req: Request = match frames.recv().await {
            Some(Ok(Some(req))) => req,
            Some(Ok(None)) | None => return,
            Some(Err(e)) => {
                // Malformed request: answer with an error and keep serving.
                let _ = write_frame_async(
                    &mut w,
                    &Reply::Err(ApiError::new(format!("bad request: {e}"))),
                )
                .await;
                if is_malformed(&e) {
                    continue;
                }
                return;
            }
        };
        if matches!(req, Request::Cancel) {
            continue; // nothing in flight to cancel
        }
        // Every field within its bound before anything is looked up or
        // stored (protocol::limits).
        if let Err(e) = req.check_bounds() {
            tracing::info!(verb = req.verb(), "refused: {}", e.message);
            if write_frame_async(&mut w, &Reply::Err(e)).await.is_err() {
                return;
            }
            continue;
        }
        req.set_caller(caller.clone());
        let reply = if !matched && !req.version_independent() {
            Reply::Err(
                ApiError::new(format!(
                    "the running daemon is version {VERSION}, this client is {}",
                    hello.version
                ))
                .hint("run `binky daemon stop`, then retry"),
            )
        } else if let Request::Subscribe(sub) = req {
            // A subscription has the connection until the client goes.
            match sub.logs.clone() {
                Some(logs) => {
                    super::subscribe::follow_logs(&daemon, sub, logs, &mut w, &mut frames).await;
                }
                None => super::subscribe::follow(&daemon, sub, &mut w, &mut frames).await,
            }
            return;
        } else {
            answer(&daemon, req, &mut w, &mut frames).await
        };
        if write_frame_async(&mut w, &reply).await.is_err() {
            return;
        }
    }
}

type Reader = BufReader<platform::ServerReadHalf>;
pub(super) type Writer = platform::ServerWriteHalf;
pub(super) type Frames = tokio::sync::mpsc::Receiver<std::io::Result<Option<Request>>>;

/// Reads the client's hello (within [`HELLO_TIMEOUT`]) and answers with
/// this daemon's welcome; `None` ends the connection.
async fn handshake(r: &mut Reader, w: &mut Writer) -> Option<Hello> {
    let hello: Hello = match tokio::time::timeout(HELLO_TIMEOUT, read_frame_async(r)).await {
        Ok(Ok(Some(h))) => h,
        Ok(Ok(None)) => return None,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "bad hello");
            let _ = write_frame_async(
                w,
                &Reply::Err(ApiError::new(format!("expected a hello frame: {e}"))),
            )
            .await;
            return None;
        }
        Err(_) => {
            tracing::debug!("client sent no hello in time");
            return None;
        }
    };
    let welcome = Welcome {
        protocol: PROTOCOL,
        version: VERSION.to_owned(),
        pid: platform::pid(),
    };
    write_frame_async(w, &welcome).await.ok()?;
    Some(hello)
}

/// A task of its own reads the client's frames, so a `cancel` sent while
/// an operation runs is seen at once and no frame is ever half-read by a
/// future dropped in a select.
fn read_frames(mut r: Reader) -> Frames {
    let (frames_tx, frames) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let f: std::io::Result<Option<Request>> = read_frame_async(&mut r).await;
            // A malformed frame is answered and the connection kept; the
            // end of the stream or a broken one ends it.
            let last = match &f {
                Ok(Some(_)) => false,
                Err(e) => !is_malformed(e),
                Ok(None) => true,
            };
            if frames_tx.send(f).await.is_err() || last {
                return;
            }
        }
    });
    frames
}

/// Runs one request, sending its progress as it comes and passing on a
/// `cancel` the client sends meanwhile; the reply, scrubbed.
async fn answer(daemon: &Arc<Daemon>, req: Request, w: &mut Writer, frames: &mut Frames) -> Reply {
    let (ptx, mut prx) = tokio::sync::mpsc::unbounded_channel();
    let (cancel_tx, cancel) = watch::channel(false);
    let op = handlers::handle(daemon, req, ProgressTx { tx: ptx, cancel });
    tokio::pin!(op);
    let mut listening = true;
    let result = loop {
        tokio::select! {
            r = &mut op => break r,
            Some(p) = prx.recv() => {
                let _ = write_frame_async(w, &scrubbed(Reply::Progress(p))).await;
            }
            f = frames.recv(), if listening => match f {
                Some(Ok(Some(Request::Cancel))) => {
                    tracing::info!("the caller cancelled its request");
                    let _ = cancel_tx.send(true);
                }
                // Anything else mid-operation is ignored; a caller gone
                // away does not cancel (it may only have stopped reading).
                Some(Ok(Some(_))) => {}
                _ => listening = false,
            },
        }
    };
    while let Ok(p) = prx.try_recv() {
        let _ = write_frame_async(w, &scrubbed(Reply::Progress(p))).await;
    }
    scrubbed(match result {
        Ok(resp) => Reply::Ok(resp),
        Err(e) => Reply::Err(e),
    })
}
