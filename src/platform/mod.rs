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
