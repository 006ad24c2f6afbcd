//! A world's own MySQL/MariaDB user: isolation by permission, not only by
//! name.
//!
//! With `options.acl` (on unless set to `false`) each world's database gets
//! a user `'<name>'@'%'` with every privilege on that database and none
//! elsewhere, its password the one Binky keeps for the slice
//! ([`Slice::secret`]). `<name>` is the database's name cut to 32
//! characters (MySQL's user-name limit) with a hash suffix. `${db.url}`
//! carries this user; the admin's credentials never leave the daemon.
//!
//! In a database-level `GRANT`, `_` and `%` are wildcards: the database's
//! name is escaped there, or `shop_a`'s user could also use `shopXa`.
//!
//! MySQL has no place to mark a user as Binky's (MariaDB takes no
//! `COMMENT` on an account), so, like the databases, users are Binky's by
//! their name (the naming rule's) and the registry's record of the slice.

use super::{AdapterError, Slice, exec, quote};
use mysql_async::Conn;

/// MySQL's limit on a user name, in characters (MariaDB allows more).
pub const MAX_USER: usize = 32;

/// Whether the world gets its own user: `options.acl`, on by default.
pub fn wanted(slice: &Slice) -> bool {
    crate::adapters::kit::users::wanted(slice, true)
}

/// The slice's user name.
pub fn name(slice: &Slice) -> String {
    crate::adapters::fit_identifier(&slice.name, MAX_USER)
}

/// `'text'` with quotes and backslashes escaped, as a MySQL string literal
/// (`NO_BACKSLASH_ESCAPES` off, the default).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `'name'@'%'`.
fn account(slice: &Slice) -> String {
    format!("{}@'%'", literal(&name(slice)))
}

/// The database name as a `GRANT … ON db.*` names it: backquoted, with the
/// wildcards `_` and `%` escaped so it matches only itself.
fn grant_target(db: &str) -> String {
    quote(
        &db.replace('\\', "\\\\")
            .replace('_', "\\_")
            .replace('%', "\\%"),
    )
}

/// The slice's password.
fn secret(slice: &Slice) -> Result<&str, AdapterError> {
    crate::adapters::kit::users::password("mysql", slice)
}

/// Makes the slice's user (or resets its password) with every privilege
/// on the slice's database only.
///
/// # Errors
/// The admin may not create users or grant (`CREATE USER`, `GRANT OPTION`):
/// said, with what to do; or a statement failed.
pub async fn ensure(c: &mut Conn, slice: &Slice) -> Result<(), AdapterError> {
    let (who, pw) = (account(slice), literal(secret(slice)?));
    let r = async {
        exec(
            c,
            &format!("CREATE USER IF NOT EXISTS {who} IDENTIFIED BY {pw}"),
        )
        .await?;
        exec(c, &format!("ALTER USER {who} IDENTIFIED BY {pw}")).await?;
        exec(
            c,
            &format!(
                "GRANT ALL PRIVILEGES ON {}.* TO {who}",
                grant_target(&slice.name)
            ),
        )
        .await
    }
    .await;
    r.map_err(|e| {
        // The text is the statement's head, which holds the password.
        let message = e
            .message
            .replace(secret(slice).unwrap_or("\u{0}"), crate::secrets::MASK);
        if e.environmental {
            AdapterError::environmental(format!(
                "{message}; a world's own user needs an admin that may create users and grant (CREATE USER and ALL ... WITH GRANT OPTION), or set options.acl = false to hand worlds the admin's credentials instead"
            ))
        } else {
            AdapterError::new(message)
        }
    })
}

/// Drops the slice's user, if there is one.
///
/// # Errors
/// The statement failed.
pub async fn drop(c: &mut Conn, slice: &Slice) -> Result<(), AdapterError> {
    exec(c, &format!("DROP USER IF EXISTS {}", account(slice))).await
}

/// The world's address: the admin URL with the world's database, user and
/// password.
///
/// # Errors
/// No password is kept, or the admin URL is not one the kit reads.
pub fn world_url(admin: &str, slice: &Slice) -> Result<String, AdapterError> {
    use crate::adapters::kit::address::{self, Address};
    let bad = |e: address::AddressError| AdapterError::new(format!("mysql: admin_url {e}"));
    let a = Address::parse(admin, &[], "mysql://root@127.0.0.1:3306/").map_err(bad)?;
    address::with_database(
        &a.with_credentials(&name(slice), Some(secret(slice)?)),
        &slice.name,
    )
    .map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_match_only_the_worlds_database() {
        assert_eq!(grant_target("shop_a-1"), "`shop\\_a-1`");
        assert_eq!(grant_target("a%b"), "`a\\%b`");
        assert_eq!(literal("it's \\"), "'it\\'s \\\\'");
    }

    #[test]
    fn user_names_fit_mysqls_limit() {
        let s = |n: &str| Slice {
            secret: Some("pw0".into()),
            ..crate::adapters::test_slice(n)
        };
        assert_eq!(name(&s("shop_a")), "shop_a");
        let long = name(&s(&"x".repeat(64)));
        assert_eq!(long.len(), MAX_USER);
        assert_ne!(long, name(&s(&format!("{}y", "x".repeat(63)))));
        assert_eq!(
            world_url("mysql://root:adm@127.0.0.1:3306/", &s("shop_a")).unwrap(),
            "mysql://shop_a:pw0@127.0.0.1:3306/shop_a"
        );
    }
}
