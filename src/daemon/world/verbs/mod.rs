//! One file per verb, each the whole story of one request read top to
//! bottom: what it checks, which [`super::stages`] it runs in what order,
//! and what it answers.

mod detached;
pub(super) mod down;
pub(super) mod env;
pub(super) mod gc;
pub(super) mod logs;
mod prepare;
pub(super) mod reload;
pub(super) mod remove;
pub(super) mod reset;
pub(super) mod sleep;
pub(super) mod up;
pub(super) mod verify;
