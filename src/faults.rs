//! Test-only fault injection. When `BINKY_TEST_FAULT` names a point, the
//! process aborts right there, as a `kill -9` would (see
//! tests/it/faults.rs). The points sit between the steps of each
//! multi-step operation, so every window a crash can hit is tested.

/// Aborts when `BINKY_TEST_FAULT` is `name`; does nothing otherwise (one
/// comparison after the first call).
pub(crate) fn point(name: &str) {
    static FAULT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if FAULT
        .get_or_init(|| std::env::var("BINKY_TEST_FAULT").ok())
        .as_deref()
        == Some(name)
    {
        tracing::error!(point = name, "BINKY_TEST_FAULT: aborting");
        std::process::abort();
    }
}

/// How long `BINKY_TEST_PAUSE=name=MILLISECONDS` (at most a minute) asks
/// point `name` to wait; `None` for any other point, or when unset.
fn paused(name: &str) -> Option<std::time::Duration> {
    static PAUSE: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    let (point, ms) = PAUSE
        .get_or_init(|| {
            let v = std::env::var("BINKY_TEST_PAUSE").ok()?;
            let (point, ms) = v.split_once('=')?;
            Some((point.to_owned(), ms.parse::<u64>().ok()?.min(60_000)))
        })
        .as_ref()?;
    (point == name).then(|| {
        tracing::warn!(point = name, ms, "BINKY_TEST_PAUSE: waiting");
        std::time::Duration::from_millis(*ms)
    })
}

/// Waits when `BINKY_TEST_PAUSE` is `name=MILLISECONDS`, so a test can
/// land a request in the window this point marks (between an admission
/// and the world's lock, say); does nothing otherwise.
pub(crate) async fn pause(name: &str) {
    if let Some(d) = paused(name) {
        tokio::time::sleep(d).await;
    }
}

/// [`pause`] for code that holds its thread (a registry write inside its
/// transaction): blocks the thread, as a slow disk would.
pub(crate) fn stall(name: &str) {
    if let Some(d) = paused(name) {
        std::thread::sleep(d);
    }
}
