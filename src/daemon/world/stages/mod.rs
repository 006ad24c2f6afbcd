//! The steps verbs compose. Each is one step of a world's life and knows
//! no verb: a stage never imports from [`super::verbs`].
//!
//! | module | holds |
//! |---|---|
//! | [`locate`] | the project a request names, a world's row, allowed names and paths |
//! | [`admit`] | admission for a verb that starts processes: ticket, wait, `--no-wait`, the world's lock with its room |
//! | [`plan`] | dependency levels, facts for tokens, every process's environment, process specs |
//! | [`slices`] | what slices render from: names, addresses, the adapter for each |
//! | [`provision`] | one slice made or kept: the intent row, the ownership check, build or clone |
//! | [`data`] | migrate and seed, catching up with the branch |
//! | [`reach`] | a recorded slice on the server it was made on; teardown that says what it found |
//! | [`templates`] | golden templates: build once, clone per world, fall back |
//! | [`spares`] | spare clones of a template made ahead of time, taken by a rename; their refill and `gc`'s look at them |
//! | [`bootstrap`] | a new worktree made ready: `[project] copy`, then `setup`, once |
//! | [`start`] | starting processes by dependency level behind their probes |
//! | [`processes`] | stopping a world's processes, recording the supervisor's reports |
//! | [`routes`] | URLs, the HTTPS front (Caddy) |
//! | [`reconcile`](mod@reconcile) | after a daemon restart: adopt, stop what no world owns |
//! | [`strays`] | a world's processes that left its process groups (daemonized), by the token in their environment |
//! | [`flood`] | a service flooding its log while it passes its probes, for `status` |
//! | [`trusted`] | the project's `binky.toml` as the main checkout committed it, which a branch cannot edit |

pub(super) mod admit;
pub(super) mod bootstrap;
pub(super) mod data;
pub(super) mod flood;
pub(super) mod locate;
pub(super) mod plan;
pub(super) mod processes;
pub(super) mod provision;
pub(super) mod reach;
pub(super) mod reconcile;
pub(super) mod routes;
pub(super) mod slices;
pub(super) mod spares;
pub(super) mod start;
pub(crate) mod strays;
pub(super) mod templates;
pub(super) mod trusted;
