//! `watch` globs: which changed files restart a service, and the watcher
//! that waits for a burst of changes to settle before it says so.

use super::{Control, ServiceSpec};
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;

/// A service's `watch` globs: a path relative to the watch root matches
/// when an including glob matches it and no `!`-prefixed one does
/// (gitignore-style exclusion, e.g. `"!**/*_test.go"`; order does not
/// matter). globset has no negation of its own.
pub(crate) struct WatchSet {
    pub(super) include: globset::GlobSet,
    pub(super) exclude: globset::GlobSet,
}

impl WatchSet {
    /// `None` when no glob includes anything (every one is invalid or an
    /// exclusion): nothing to watch. Invalid globs are skipped (`binky
    /// check` reports them).
    pub(crate) fn new(globs: &[String]) -> Option<Self> {
        let (mut inc, mut exc) = (
            globset::GlobSetBuilder::new(),
            globset::GlobSetBuilder::new(),
        );
        let mut any = false;
        for g in globs {
            match g.strip_prefix('!') {
                Some(rest) => {
                    if let Ok(glob) = globset::Glob::new(rest) {
                        exc.add(glob);
                    }
                }
                None => {
                    if let Ok(glob) = globset::Glob::new(g) {
                        inc.add(glob);
                        any = true;
                    }
                }
            }
        }
        any.then_some(())?;
        Some(WatchSet {
            include: inc.build().ok()?,
            exclude: exc.build().ok()?,
        })
    }

    /// Whether a change to `rel` (relative to the watch root) restarts.
    pub(crate) fn is_match(&self, rel: &Path) -> bool {
        self.include.is_match(rel) && !self.exclude.is_match(rel)
    }
}

/// Whether a file event is a change (written, created, removed, renamed,
/// its times or mode set) rather than a look: opening or reading a watched
/// file — the service loading its own source does — must not restart it,
/// or a `watch` on `app.py` would restart `python3 app.py` for ever.
pub(super) fn is_change(kind: &notify::EventKind) -> bool {
    use notify::EventKind as K;
    use notify::event::{AccessKind, AccessMode};
    match kind {
        K::Create(_) | K::Remove(_) | K::Modify(_) => true,
        // inotify's IN_CLOSE_WRITE: a write finished.
        K::Access(AccessKind::Close(AccessMode::Write)) => true,
        K::Access(_) | K::Any | K::Other => false,
    }
}

/// How long a burst of changes (an editor's save, a `git checkout`) is
/// gathered into one restart.
pub(super) const WATCH_SETTLE: Duration = Duration::from_millis(300);

pub(super) fn start_watcher(
    spec: &ServiceSpec,
    ctl: mpsc::UnboundedSender<Control>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    if spec.watch.is_empty() {
        return None;
    }
    let set = WatchSet::new(&spec.watch)?;
    let root = spec.watch_root.clone();
    let root_cb = root.clone();
    // A change is noted at once; the restart follows once changes have
    // stopped for WATCH_SETTLE. The thread ends with the watcher (its
    // sender is in the watcher's callback).
    let (tx, rx) = std::sync::mpsc::channel::<Vec<String>>();
    std::thread::Builder::new()
        .name("binky-watch".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut changed: std::collections::BTreeSet<String> = first.into_iter().collect();
                loop {
                    match rx.recv_timeout(WATCH_SETTLE) {
                        Ok(more) => changed.extend(more),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                if ctl.send(Control::Restart(shown(&changed))).is_err() {
                    return;
                }
            }
        })
        .ok()?;
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        if !is_change(&event.kind) {
            return;
        }
        let hits: Vec<String> = event
            .paths
            .iter()
            .filter_map(|p| p.strip_prefix(&root_cb).ok())
            .filter(|rel| set.is_match(rel))
            .map(|rel| rel.to_string_lossy().into_owned())
            .collect();
        if !hits.is_empty() {
            let _ = tx.send(hits);
        }
    })
    .ok()?;
    watcher
        .watch(&root, notify::RecursiveMode::Recursive)
        .ok()?;
    Some(watcher)
}

/// The first few of `changed` (sorted) and how many more, for the restart's
/// event.
pub(super) fn shown(changed: &std::collections::BTreeSet<String>) -> Vec<String> {
    const MOST: usize = 5;
    let mut out: Vec<String> = changed.iter().take(MOST).cloned().collect();
    if changed.len() > MOST {
        out.push(format!("{} more", changed.len() - MOST));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::WatchSet;
    use std::path::Path;

    #[test]
    fn a_bang_glob_excludes_what_the_others_include() {
        let set = WatchSet::new(&[
            "backend/**/*.go".to_owned(),
            "!backend/**/*_test.go".to_owned(),
        ])
        .unwrap();
        assert!(set.is_match(Path::new("backend/api/server.go")));
        assert!(!set.is_match(Path::new("backend/api/server_test.go")));
        assert!(!set.is_match(Path::new("frontend/app.go")));
        // Only exclusions: nothing to watch.
        assert!(WatchSet::new(&["!**/*.go".to_owned()]).is_none());
    }
}
