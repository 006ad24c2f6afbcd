//! Binky: one isolated local world per git worktree.
//!
//! A world is a git worktree plus everything it needs to run next to other
//! worlds on one machine: a block of ports reserved before anything starts, an
//! isolated slice (database, key prefix, bucket…) carved out of a server the
//! user already runs, supervised service processes, and stable proxied URLs.
//!
//! The crate is both the thin CLI and the machine-global daemon. Data flows one
//! way: CLI → socket → daemon → admission → worktree → ports → adapters →
//! supervisor → proxy. See ARCHITECTURE.md for the module map.

pub mod adapter_sdk;
pub mod adapters;
pub mod address;
pub(crate) mod cli;
pub(crate) mod client;
pub(crate) mod clock;
pub(crate) mod commands;
pub mod config;
pub(crate) mod daemon;
#[cfg(feature = "dashboard")]
pub(crate) mod dashboard;
mod entry;
pub(crate) mod faults;
pub(crate) mod http;
pub mod init;
pub(crate) mod mcp;
pub(crate) mod output;
pub(crate) mod paths;
#[allow(unsafe_code)] // The one place for system calls.
pub(crate) mod platform;
pub(crate) mod ports;
pub mod protocol;
pub mod proxy;
pub(crate) mod registry;
pub(crate) mod secrets;
pub(crate) mod slug;
pub(crate) mod supervisor;
#[cfg(test)]
pub(crate) mod testkit;
pub(crate) mod tunables;
pub(crate) mod worktree;

pub use entry::main;
