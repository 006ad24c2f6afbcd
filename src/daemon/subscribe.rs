//! Serving a [`Request::Subscribe`](crate::protocol::Request::Subscribe): the daemon's events as they are
//! emitted, or the lines a world's services print as they are written.
//! Either has the connection until the client closes it or cancels.

use super::events::{Event, EventKind};
use super::server::{Frames, Writer, scrubbed};
use super::state::Daemon;
use super::world;
use crate::protocol::codec::write_frame_async;
use crate::protocol::{ApiError, LogFollow, LogsReport, Reply, Response, Subscription, WorldRef};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Sends `reply` scrubbed of secrets; `false` once the client is gone.
async fn send(w: &mut Writer, reply: Reply) -> bool {
    write_frame_async(w, &scrubbed(reply)).await.is_ok()
}

/// Serves an event [`Subscription`]: the past events asked for, then
/// `subscribed`, then each new event until the client closes or cancels.
/// A client that cannot keep up is sent how many it missed (the daemon's
/// side never waits: see [`super::events::BACKLOG`]).
pub(super) async fn follow(
    daemon: &Arc<Daemon>,
    sub: Subscription,
    w: &mut Writer,
    frames: &mut Frames,
) {
    let only = match &sub.world {
        Some(wref) => match world::project_of(daemon, wref) {
            Ok(project) => Some((project, wref.name.clone())),
            Err(e) => {
                send(w, Reply::Err(e)).await;
                return;
            }
        },
        None => None,
    };
    let wanted = |ev: &Event| {
        only.as_ref().is_none_or(|(p, n)| {
            ev.project.as_deref() == Some(p.as_str())
                && (n.is_empty() || ev.worktree.as_deref() == Some(n.as_str()))
        })
    };
    let tail = sub.tail.min(Subscription::MAX_TAIL);
    // A world's own past events are found among the newest of all.
    let read = if only.is_some() && tail > 0 {
        Subscription::MAX_TAIL
    } else {
        tail
    };
    let (past, mut rx) = daemon.events.subscribe(read);
    let past: Vec<Event> = past.into_iter().filter(|e| wanted(e)).collect();
    for ev in &past[past.len().saturating_sub(tail)..] {
        if !send(w, Reply::Event(ev.clone())).await {
            return;
        }
    }
    if !send(w, Reply::Ok(Response::Subscribed)).await {
        return;
    }
    loop {
        let frame = tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) if wanted(&ev) => Reply::Event(ev),
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(n)) => Reply::Lagged(n),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            // The client closed, cancelled, or sent something else: a
            // subscription is all this connection does.
            _ = frames.recv() => return,
        };
        if !send(w, frame).await {
            return;
        }
    }
}

/// Serves a log [`Subscription`]: the newest lines asked for (or those
/// since its cursor), then each batch as the world's log writers append
/// it. The log folder is watched (inotify), so nothing is read while no
/// service prints; a wake that comes while a batch is being sent is
/// folded into the next read. A client that reads slowly holds back only
/// its own reads (the lines wait in the files, and a log that rotated
/// twice meanwhile is marked `truncated`).
pub(super) async fn follow_logs(
    daemon: &Arc<Daemon>,
    sub: Subscription,
    logs: LogFollow,
    w: &mut Writer,
    frames: &mut Frames,
) {
    let (wref, dir) = match followed(daemon, sub.world) {
        Ok(v) => v,
        Err(e) => {
            send(w, Reply::Err(e)).await;
            return;
        }
    };
    let (wake_tx, mut wake) = tokio::sync::mpsc::channel::<()>(1);
    let Some(_watcher) = watch_folder(&dir, wake_tx) else {
        let e = ApiError::new(format!("cannot watch {}", dir.display()))
            .hint("the system's inotify watches may be used up (fs.inotify.max_user_watches)");
        send(w, Reply::Err(e)).await;
        return;
    };
    // The world's removal ends the follow (its folder, and with it the
    // watch, goes first; nothing would wake the follower again).
    let project = world::project_of(daemon, &wref).unwrap_or_default();
    let (_, mut events) = daemon.events.subscribe(0);
    let read = |cursor: Option<String>, lines: usize| {
        super::blocking(|| world::logs(daemon, wref.clone(), logs.service.clone(), lines, cursor))
    };
    let mut cursor = match first_lines(&read, &logs) {
        Ok(r) => {
            let c = r.cursor.clone();
            if !send(w, Reply::Logs(r)).await || !send(w, Reply::Ok(Response::Subscribed)).await {
                return;
            }
            c
        }
        Err(e) => {
            send(w, Reply::Err(e)).await;
            return;
        }
    };
    loop {
        tokio::select! {
            Some(()) = wake.recv() => {}
            ev = events.recv() => match ev {
                Ok(e) if e.event == EventKind::Removed
                    && e.project.as_deref() == Some(project.as_str())
                    && e.worktree.as_deref() == Some(wref.name.as_str()) =>
                {
                    send(w, Reply::Err(removed(&wref))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
                _ => continue,
            },
            _ = frames.recv() => return,
        }
        let frame = match read(Some(cursor.clone()), 0) {
            Ok(r) if r.lines.is_empty() && !r.truncated => {
                cursor = r.cursor;
                continue;
            }
            Ok(r) => {
                cursor = r.cursor.clone();
                Reply::Logs(r)
            }
            // Between a rotation's rename and the writer's new file the
            // service has no log for a moment: the next wake reads on.
            Err(_) if world::log_dir(daemon, &wref).is_ok() => continue,
            Err(_) => Reply::Err(removed(&wref)),
        };
        let end = matches!(frame, Reply::Err(_));
        if !send(w, frame).await || end {
            return;
        }
    }
}

/// The world a log subscription names, and its log folder.
fn followed(daemon: &Daemon, world: Option<WorldRef>) -> Result<(WorldRef, PathBuf), ApiError> {
    match world.filter(|w| !w.name.is_empty()) {
        None => Err(ApiError::new("a log subscription follows one world")
            .hint("name the world (`binky logs -f <world>`)")),
        Some(wref) => world::log_dir(daemon, &wref).map(|dir| (wref, dir)),
    }
}

/// The first frame: the newest `logs.lines` (none: only where they end),
/// or what was written since its cursor.
fn first_lines(
    read: &impl Fn(Option<String>, usize) -> Result<LogsReport, ApiError>,
    logs: &LogFollow,
) -> Result<LogsReport, ApiError> {
    match logs.cursor.clone() {
        Some(c) => read(Some(c), 0),
        None => read(None, logs.lines.max(1)).map(|mut r| {
            if logs.lines == 0 {
                r.lines.clear();
            }
            r
        }),
    }
}

/// What a follower of a removed world is told.
fn removed(wref: &WorldRef) -> ApiError {
    ApiError::new(format!("world `{}` was removed", wref.name))
}

/// Watches `dir` (not its subfolders) and pokes `wake` when a file in it
/// is written, made, renamed or removed; reads (ours included) are
/// ignored, or each read would wake the next. `None` when the watch
/// cannot be set.
fn watch_folder(
    dir: &std::path::Path,
    wake: tokio::sync::mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if ev.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            // Full: a wake is already pending, and it reads this too.
            let _ = wake.try_send(());
        }
    })
    .ok()?;
    watcher
        .watch(dir, notify::RecursiveMode::NonRecursive)
        .ok()?;
    Some(watcher)
}
