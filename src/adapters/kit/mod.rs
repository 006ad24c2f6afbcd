//! The adapter kit: what every adapter needs and none should write again.
//!
//! | module | gives |
//! |---|---|
//! | [`address`] | server URLs read and rebuilt by the `url` crate: credentials, percent-coding, IPv6, default ports; the one lenient reader for text that is not a URL |
//! | [`names`] | `(project, world slug)` → a slice name under one rule per kind, with one hashing rule so no two worlds share a name |
//! | [`api`] | for adapters that speak HTTP: [`api::Endpoint`] (an `http[s]://` `admin_url` with its credentials as a header; calls, refusals, a teardown's drain), a client on `options.timeout`, one reading of a failed exchange (unreachable → environmental, late → names the wait), one of a DELETE's status |
//! | [`cow`] | copy-on-write: what a clone's folder can do and what would make a clone share blocks where it cannot, in one wording for every adapter that clones files |
//! | [`batch`] | the one bounded loop that lists a page and deletes exactly its names, until the listing ends or a deadline passes |
//! | [`owner`] | the ownership guard every teardown runs: delete only what Binky made, take "already gone" as done |
//! | [`users`] | a world's own login user: whether `options.acl` asks for one, and the password the daemon keeps for it |
//!
//! Errors are [`super::AdapterError`]'s constructors (`new`,
//! `environmental`, `not_ours`), which never take a credential.

// A leaf of the crate (secrets reads URLs too); here for every adapter.
pub use crate::address;
pub mod api;
pub mod batch;
pub mod cow;
pub mod names;
pub mod owner;
pub mod users;
