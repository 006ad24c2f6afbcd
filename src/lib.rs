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
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod daemon;
#[cfg(feature = "dashboard")]
pub mod dashboard;
pub mod faults;
pub mod http;
pub mod init;
pub mod mcp;
pub mod output;
pub mod paths;
#[allow(unsafe_code)] // The one place for system calls.
pub mod platform;
pub mod ports;
pub mod protocol;
pub mod proxy;
pub mod registry;
pub mod secrets;
pub mod slug;
pub mod supervisor;
#[cfg(test)]
pub(crate) mod testkit;
pub mod tunables;
pub mod worktree;
