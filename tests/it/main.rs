//! Integration tests: the real `binky` binary against a real daemon, each test
//! in its own temporary `BINKY_HOME`.

// A scenario test is one story read top to bottom, against real servers;
// the 80-line limit is for the product's functions.
#![allow(clippy::too_many_lines)]
// The suite's helpers are `pub` for its sibling modules; it has no users.
#![allow(unreachable_pub)]

mod adapters;
mod admission;
mod binding;
mod bootstrap;
mod cancel;
mod chaos;
mod cleanup;
mod clickhouse;
mod contract;
mod cow;
mod daemon;
#[cfg(feature = "dashboard")]
mod dashboard;
mod docs;
mod environment;
mod events;
mod exhaustion;
mod faults;
mod flood;
mod frameworks;
mod framing;
mod golden;
mod harness;
mod hooks;
mod hygiene;
mod injection;
mod isolation;
#[cfg(feature = "kafka")]
mod kafka;
mod logs;
mod mcp;
#[cfg(feature = "mongodb")]
mod mongodb;
mod processes;
mod project;
mod proxy;
mod queued;
mod rabbitmq;
mod rag;
mod recipes;
mod recorded;
mod redis;
mod reset;
mod resources;
mod s3;
mod secrets;
mod sessions;
mod sleep;
mod spares;
mod templates;
mod worktrees;
mod world;
mod world_users;
