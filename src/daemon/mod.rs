//! The machine-global daemon: one per `BINKY_HOME`.
//!
//! [`run`](server::run) takes the daemon lock, opens the registry, binds the socket and
//! serves requests until `shutdown` or SIGTERM/SIGINT. It sleeps until a
//! socket, child, timer or signal wakes it: there is no polling loop. Stopping
//! the daemon never stops the service processes it supervises.
//!
//! A request's path: `server` reads its frame → `handlers` matches it to
//! a verb → the verb's own file under `world` (or `settings`) composes
//! the stages it needs, reporting through the caller's `ProgressTx`.
//!
//! | module | holds |
//! |---|---|
//! | `server` | the lock, the socket, the handshake and frame loop, start-up and shutdown |
//! | `state` | [`Daemon`] (what every verb holds), how it finds adapters, and `ProgressTx` |
//! | `tests` | the verbs at the handler, over a temporary registry and an in-memory adapter |
//! | `handlers` | one match: request → verb |
//! | `errors` | each domain's error (adapter, registry, ports, config, worktree) as an API error that says what to do |
//! | `events` | the append-only `events.log` |
//! | `settings` | `reserve`, `port`, `config` |
//! | `admission` | the queue of `up`s, room (max_parallel, RAM, disk), fairness across groups |
//! | `idle` | the idle check that puts worlds to sleep |
//! | `world` | every verb on a world, and the stages of `up` |

mod admission;
mod errors;
pub(crate) mod events;
mod handlers;
mod idle;
mod server;
mod settings;
mod state;
mod subscribe;
mod world;

pub(crate) use server::{log_writer, run_blocking};
pub(crate) use state::Daemon;
pub(crate) use state::{ProgressTx, WorldKey, blocking, wait_proxy_bound};
#[cfg(test)]
mod tests;
