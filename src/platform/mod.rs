//! Everything operating-system specific lives under this module, so a Windows
//! port (named pipes, job objects) replaces one folder (`unix/`).
//!
//! Linux is the tested platform; other Unixes compile against the same code.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(not(unix))]
compile_error!(
    "binky supports Unix-like systems for now; a Windows port adds src/platform/windows.rs beside unix/ (named pipes, job objects)"
);

/// A signal Binky sends to a process or a process group, named for what it
/// asks rather than by number: numbers differ between systems, and a port
/// without signals maps each to what it has (`Kill` to ending a job object).
/// The variants are the stop signals a service may name in `binky.toml`
/// ([`StopSignal::KNOWN`](crate::config::StopSignal::KNOWN), SIGKILL among
/// them): every signal Binky sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// SIGTERM: asks the process to end; the default stop signal.
    Term,
    /// SIGINT: as Ctrl-C in a terminal.
    Int,
    /// SIGQUIT: asks the process to end, often leaving a dump.
    Quit,
    /// SIGHUP: the terminal went away.
    Hup,
    /// SIGKILL: ends the process at once; it cannot be caught or ignored.
    Kill,
    /// SIGUSR1: meaning is the program's own.
    Usr1,
    /// SIGUSR2: meaning is the program's own.
    Usr2,
    /// SIGWINCH: the terminal's size changed (some servers stop on it).
    Winch,
}

impl Signal {
    /// The signal a portable name means: the full upper-case name, as
    /// `binky.toml` stores it once checked (`SIGTERM`). `None` for any
    /// other name.
    pub(crate) fn from_name(name: &str) -> Option<Signal> {
        Some(match name {
            "SIGTERM" => Signal::Term,
            "SIGINT" => Signal::Int,
            "SIGQUIT" => Signal::Quit,
            "SIGHUP" => Signal::Hup,
            "SIGKILL" => Signal::Kill,
            "SIGUSR1" => Signal::Usr1,
            "SIGUSR2" => Signal::Usr2,
            "SIGWINCH" => Signal::Winch,
            _ => return None,
        })
    }
}

/// What this process uses, for the daemon's metrics (`rss_bytes`,
/// `cpu_time_ms`, and the CPU share computed from the latter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SelfUsage {
    /// Resident memory, in bytes.
    pub(crate) rss_bytes: u64,
    /// CPU time used since the process started (user and system), in
    /// milliseconds.
    pub(crate) cpu_time_ms: u64,
}

/// Removes the variables `names` from this process's environment. Only for
/// the very start of `main`, before any thread exists: the environment is
/// not synchronised, and another thread reading it while it changes is
/// undefined behaviour (why `remove_var` is `unsafe`).
pub(crate) fn remove_env_before_threads(names: &[&str]) {
    for name in names {
        // SAFETY: the caller runs before any other thread starts.
        unsafe { std::env::remove_var(name) };
    }
}

#[cfg(test)]
mod tests {
    use super::Signal;

    #[test]
    fn every_stop_signal_a_service_may_name_is_one_binky_can_send() {
        for name in crate::config::StopSignal::KNOWN {
            assert!(Signal::from_name(name).is_some(), "{name}");
        }
        assert_eq!(Signal::from_name("SIGTERM"), Some(Signal::Term));
        assert_eq!(Signal::from_name("TERM"), None);
        assert_eq!(Signal::from_name("SIGSTOP"), None);
    }
}
