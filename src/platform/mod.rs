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
