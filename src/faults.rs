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
