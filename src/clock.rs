//! One monotonic clock for the whole process, in milliseconds: cheap to
//! read, never going back, for what only compares times (admission's
//! readings, the proxy's last request per world).

/// Milliseconds since the process first asked; never goes back.
pub(crate) fn mono_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}
