//! A world's own login user on a server that has users (PostgreSQL, MySQL,
//! RabbitMQ, Redis): whether the resource asks for one, and its password.
//!
//! The daemon makes the password (random per slice, kept in its registry)
//! and hands it to the adapter as [`Slice::secret`], registered as a secret
//! before any adapter sees it. Each adapter makes, resets and drops the
//! user in its server's own terms, and marks it as Binky's where the server
//! has a place for a mark.

use super::super::{AdapterError, Slice};

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
}
