//! Test-only fault injection. When `BINKY_TEST_FAULT` names a point, the
//! process aborts right there, as a `kill -9` would (see
//! tests/it/faults.rs). The points sit between the steps of each
//! multi-step operation, so every window a crash can hit is tested.

/// Aborts when `BINKY_TEST_FAULT` is `name`; does nothing otherwise (one
/// comparison after the first call).
pub fn point(name: &str) {
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

/// Waits when `BINKY_TEST_PAUSE` is `name=MILLISECONDS` (at most a
/// minute), so a test can land a request in the window this point marks
/// (between an admission and the world's lock, say); does nothing
/// otherwise.
pub async fn pause(name: &str) {
    static PAUSE: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    let set = PAUSE.get_or_init(|| {
        let v = std::env::var("BINKY_TEST_PAUSE").ok()?;
        let (point, ms) = v.split_once('=')?;
        Some((point.to_owned(), ms.parse::<u64>().ok()?.min(60_000)))
    });
    if let Some((point, ms)) = set
        && point == name
    {
        tracing::warn!(point = name, ms, "BINKY_TEST_PAUSE: waiting");
        tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
    }
}
