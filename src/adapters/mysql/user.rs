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
//! `COMMENT` on an account). A new world's user must be new (`CREATE USER`
//! without `IF NOT EXISTS`), and a user is dropped only while it holds
//! Binky's grant on its world's database: a user of that name someone else
//! made is neither taken over nor dropped.

use super::{AdapterError, Slice, exec, quote};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

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
/// wildcards `_` and `%` escaped so it matches only itself — as many as
/// fit, since the server counts the escapes against its 64-character limit.
/// A Binky name holds no `%` and `_` only where it joins the project, the
/// slug and a hash, so a name of 63 or 64 characters keeps one or two
/// wildcards, matching only a name identical but for those one or two
/// separators (and its hash), which no world's naming rule makes from
/// another world's.
fn grant_target(db: &str) -> String {
    let mut room = super::MAX_IDENT.saturating_sub(db.chars().count());
    let mut out = String::with_capacity(db.len() + 2);
    for c in db.chars() {
        if matches!(c, '_' | '%' | '\\') && room > 0 {
            out.push('\\');
            room -= 1;
        }
        out.push(c);
    }
    quote(&out)
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
pub async fn ensure(c: &mut Conn, slice: &Slice, fresh: bool) -> Result<(), AdapterError> {
    let (who, pw) = (account(slice), literal(secret(slice)?));
    if fresh {
        // A new slice's user must be new too: one of that name already
        // there is someone else's, never taken over (MySQL has no mark).
        match c
            .query_drop(format!("CREATE USER {who} IDENTIFIED BY {pw}"))
            .await
        {
            Ok(()) => {}
            Err(mysql_async::Error::Server(e)) if e.code == 1396 => {
                return Err(AdapterError::new(format!(
                    "mysql: a user {who} already exists and Binky did not make it, so the world cannot have a user of its own; Binky leaves it alone: rename the project, or set options.acl = false"
                )));
            }
            Err(e) => {
                return Err(refused(slice, super::sql_err("CREATE USER", e)));
            }
        }
    }
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
    if r.is_err() && fresh {
        // Made just now and not granted: Binky's own, with no grant to
        // mark it later, so it goes now.
        let _ = exec(c, &format!("DROP USER IF EXISTS {who}")).await;
    }
    r.map_err(|e| refused(slice, e))
}

/// A failed user statement as the user sees it: the password masked (the
/// statement's head holds it), and for a refused grant, what to do.
fn refused(slice: &Slice, e: AdapterError) -> AdapterError {
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
}

/// Drops the slice's user when it is Binky's: one that holds Binky's grant
/// on the slice's database (MySQL has no other place for a mark). A user
/// of that name without it is someone else's and is left alone.
///
/// # Errors
/// The admin may not read the user's grants or drop it, or the statement
/// failed.
pub async fn drop(c: &mut Conn, slice: &Slice) -> Result<(), AdapterError> {
    let who = account(slice);
    let grants: Vec<String> = match c.query(format!("SHOW GRANTS FOR {who}")).await {
        Ok(g) => g,
        // "There is no such grant defined": no such user.
        Err(mysql_async::Error::Server(e)) if e.code == 1141 => return Ok(()),
        Err(e) => return Err(refused(slice, super::sql_err("SHOW GRANTS", e))),
    };
    if !grants.iter().any(|g| holds_binkys_grant(g, &slice.name)) {
        return Ok(());
    }
    exec(c, &format!("DROP USER IF EXISTS {who}")).await
}

/// Whether a `SHOW GRANTS` line is the grant Binky gives a world's user on
/// database `db`.
fn holds_binkys_grant(line: &str, db: &str) -> bool {
    line.starts_with(&format!(
        "GRANT ALL PRIVILEGES ON {}.* TO ",
        grant_target(db)
    ))
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
        // The server counts escapes against 64: a cut name keeps as many
        // as fit.
        let long = format!("{}_{}_abc123", "p".repeat(30), "s".repeat(26));
        assert_eq!(long.len(), 64);
        assert_eq!(grant_target(&long), quote(&long));
        let near = &long[1..];
        assert_eq!(grant_target(near).len(), 63 + 1 + 2);
        assert_eq!(literal("it's \\"), "'it\\'s \\\\'");
    }

    #[test]
    fn only_binkys_own_grant_marks_a_user() {
        assert!(holds_binkys_grant(
            "GRANT ALL PRIVILEGES ON `shop\\_a`.* TO `shop_a`@`%`",
            "shop_a"
        ));
        assert!(!holds_binkys_grant(
            "GRANT USAGE ON *.* TO `shop_a`@`%` IDENTIFIED BY PASSWORD '*AB'",
            "shop_a"
        ));
        assert!(!holds_binkys_grant(
            "GRANT ALL PRIVILEGES ON `shop_a`.* TO `shop_a`@`%`",
            "shop_a"
        ));
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
