//! Durations the daemon reads from its environment when it starts: the
//! knobs tests (and an operator chasing a problem) turn, read one way.
//!
//! A value that does not parse, or lies outside its range, is named in
//! `daemon.log`: the daemon has no terminal to say it on.

use std::ops::RangeInclusive;
use std::time::Duration;

/// The duration in environment variable `name`, kept within `range`.
///
/// Names ending in `_MS` take a whole number of milliseconds (`"250"`);
/// the others a humantime duration (`"10s"`, `"1min"`). Unset gives `None`;
/// so does a value that does not parse, with a warning naming the
/// variable. A value outside `range` is clamped into it, with a warning.
pub(crate) fn duration(name: &str, range: RangeInclusive<Duration>) -> Option<Duration> {
    let raw = std::env::var(name).ok()?;
    let parsed = if name.ends_with("_MS") {
        raw.trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("{e}; write a whole number of milliseconds, e.g. \"250\""))
    } else {
        humantime::parse_duration(raw.trim()).map_err(|e| format!("{e}; write e.g. \"10s\""))
    };
    match parsed {
        Ok(d) if !range.contains(&d) => {
            let kept = d.clamp(*range.start(), *range.end());
            tracing::warn!(
                "{name}={raw:?} is outside {}..={}: using {}",
                humantime::format_duration(*range.start()),
                humantime::format_duration(*range.end()),
                humantime::format_duration(kept)
            );
            Some(kept)
        }
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!("{name}={raw:?} is not a duration ({e}): ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each test its own variable: the environment is shared by the
    /// test threads.
    #[allow(unsafe_code)] // A test's own process: see the SAFETY notes.
    fn with(name: &str, value: &str) -> Option<Duration> {
        // SAFETY: the variable is this test's alone, and nothing else in
        // the process reads or writes it.
        unsafe { std::env::set_var(name, value) };
        duration(name, Duration::from_millis(10)..=Duration::from_secs(60))
    }

    #[test]
    fn humantime_and_milliseconds_by_name_clamped_and_bad_values_ignored() {
        assert_eq!(
            with("BINKY_TUNABLE_A", "1.5s"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            with("BINKY_TUNABLE_B_MS", "250"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(with("BINKY_TUNABLE_C_MS", "250ms"), None);
        assert_eq!(with("BINKY_TUNABLE_D", "soon"), None);
        assert_eq!(with("BINKY_TUNABLE_E", "1h"), Some(Duration::from_secs(60)));
        assert_eq!(
            with("BINKY_TUNABLE_F_MS", "1"),
            Some(Duration::from_millis(10))
        );
        assert_eq!(
            duration("BINKY_TUNABLE_UNSET", Duration::ZERO..=Duration::MAX),
            None
        );
    }
}
