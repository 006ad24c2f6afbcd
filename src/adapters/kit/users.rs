//! A world's own login user on a server that has users (PostgreSQL, MySQL,
//! RabbitMQ, Redis): whether the resource asks for one, its password, and
//! whether a user found under the world's name is Binky's.
//!
//! The daemon makes the password (random per slice, kept in its registry)
//! and hands it to the adapter as [`Slice::secret`], registered as a secret
//! before any adapter sees it. It is kept *before* the user is made (with
//! the slice's `provisioning` record), so whatever cuts the making short —
//! between creating the user and granting it its slice, say — the user is
//! known again as Binky's by a retry, `remove` and `gc`.
//!
//! Each adapter makes, resets and drops the user in its server's own terms,
//! and marks it as Binky's in the same statement that creates it, where the
//! server has a place for a mark: a PostgreSQL role's `COMMENT` (one
//! implicit transaction with `CREATE ROLE`), a RabbitMQ user's tag (one
//! `PUT`). MariaDB has no such place (no `COMMENT` or `ATTRIBUTE` on an
//! account, as of 10.11): there the mark is the password itself, which
//! only Binky's registry knows, or Binky's grant on the world's database.
//! One rule for all ([`Found`]): Binky takes up again (resets) and drops
//! only a user that bears its mark; one of the world's name without it is
//! someone else's, refused ([`foreign`]) and left alone.

use super::super::{AdapterError, Slice};

/// What the server has under the name of a world's user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// No such user.
    Missing,
    /// A user bearing Binky's mark for this slice: Binky's to reset, grant
    /// and drop.
    Binkys,
    /// A user Binky did not make (no mark, or another slice's).
    Foreign,
}

/// The refusal for a world whose user's name a user Binky did not make
/// already has: `adapter` at `server` (no credentials), `who` the user as
/// the server names it with its kind (`a role "shop_a"`), `unmarked` how
/// it lacks Binky's mark.
pub fn foreign(adapter: &str, server: &str, who: &str, unmarked: &str) -> AdapterError {
    AdapterError::new(format!(
        "{adapter} at {server}: {who} exists and Binky did not make it ({unmarked}), so the world cannot have a user of its own; Binky leaves it alone: rename the project, or set options.acl = false"
    ))
}

/// Marks the moment between making a world's user and granting it its
/// slice: the fault point `user:made` (see `crate::faults`), where a crash
/// leaves a user with no grant.
pub fn made() {
    crate::faults::point("user:made");
}

/// Whether the resource asks for a user per world: `options.acl`, else
/// `default` (on for PostgreSQL, MySQL and RabbitMQ; off for Redis, whose
/// servers before 6.0 and many hosted ones have no `ACL SETUSER`).
pub fn wanted(slice: &Slice, default: bool) -> bool {
    slice
        .options
        .get("acl")
        .and_then(|v| v.as_bool())
        .unwrap_or(default)
}

/// The password of the slice's user.
///
/// # Errors
/// The daemon handed none (its registry could not be read): said, naming
/// `adapter` and the user, never a value.
pub fn password<'a>(adapter: &str, slice: &'a Slice) -> Result<&'a str, AdapterError> {
    slice.secret.as_deref().ok_or_else(|| {
        AdapterError::new(format!(
            "{adapter}: no password is kept for the user of {} (Binky's registry could not be read); run `binky doctor`",
            slice.name
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_falls_back_to_the_adapters_default() {
        let mut s = crate::adapters::test_slice("shop_a");
        assert!(wanted(&s, true));
        assert!(!wanted(&s, false));
        s.options.insert("acl".into(), toml::Value::Boolean(false));
        assert!(!wanted(&s, true));
        assert!(password("postgres", &s).is_err());
        s.secret = Some("pw0".into());
        assert_eq!(password("postgres", &s).unwrap(), "pw0");
    }

    #[test]
    fn a_foreign_user_is_refused_naming_the_server_and_what_to_do() {
        let e = foreign(
            "rabbitmq",
            "127.0.0.1:15672",
            "a user named shop_a",
            "no `binky-world` tag",
        );
        assert_eq!(
            e.message,
            "rabbitmq at 127.0.0.1:15672: a user named shop_a exists and Binky did not make it (no `binky-world` tag), so the world cannot have a user of its own; Binky leaves it alone: rename the project, or set options.acl = false"
        );
        assert!(!e.is_environmental());
    }
}
