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
//! MariaDB has no place to mark a user as Binky's (no `COMMENT` or
//! `ATTRIBUTE` on an account, as of 10.11; MySQL's came in 8.0.21). A user
//! is Binky's ([`find`]) when it holds Binky's grant on its world's
//! database, or logs in with the password Binky keeps for the slice: that
//! password is in Binky's registry before `CREATE USER` sends it, so a
//! user made by an `up` cut short before its `GRANT` is still known as
//! Binky's. Only such a user is taken up again (its password reset, its
//! grant given) or dropped; a user of that name someone else made is
//! refused and left alone.

use super::{AdapterError, Slice, exec, quote};
use crate::adapters::kit::address::AdminUrl;
use crate::adapters::kit::users::Found;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

/// MySQL's limit on a user name, in characters (MariaDB allows more).
pub(super) const MAX_USER: usize = 32;

/// Whether the world gets its own user: `options.acl`, on by default.
pub(super) fn wanted(slice: &Slice) -> bool {
    crate::adapters::kit::users::wanted(slice, true)
}

/// The slice's user name.
pub(super) fn name(slice: &Slice) -> String {
    user_name(&slice.name)
}

/// The user name of database `db`'s world.
fn user_name(db: &str) -> String {
    crate::adapters::fit_identifier(db, MAX_USER)
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

/// Whether the slice's user is there, and whether it is Binky's: it holds
/// Binky's grant on the slice's database, or it logs in with the password
/// Binky keeps for the slice.
///
/// # Errors
/// The admin may not read the user's grants (`SHOW GRANTS`), or the
/// server cannot be reached to try the password.
pub(super) async fn find(c: &mut Conn, slice: &Slice) -> Result<Found, AdapterError> {
    let who = account(slice);
    let grants: Vec<String> = match c.query(format!("SHOW GRANTS FOR {who}")).await {
        Ok(g) => g,
        // "There is no such grant defined": no such user.
        Err(mysql_async::Error::Server(e)) if e.code == 1141 => return Ok(Found::Missing),
        Err(e) => return Err(refused(slice, super::sql_err("SHOW GRANTS", e))),
    };
    if grants.iter().any(|g| holds_binkys_grant(g, &slice.name)) {
        return Ok(Found::Binkys);
    }
    Ok(if logs_in(slice).await? {
        Found::Binkys
    } else {
        Found::Foreign
    })
}

/// Whether the slice's user logs in with the password Binky keeps for
/// the slice (false when none is kept). A login, not a comparison of
/// hashes: it holds for every authentication plugin, salted ones
/// (`caching_sha2_password`) included.
///
/// # Errors
/// The server cannot be reached.
async fn logs_in(slice: &Slice) -> Result<bool, AdapterError> {
    let Some(password) = slice.secret.as_deref() else {
        return Ok(false);
    };
    let opts = super::admin_opts(slice)?;
    let opts = mysql_async::OptsBuilder::from_opts(opts)
        .user(Some(name(slice)))
        .pass(Some(password))
        .db_name(None::<String>);
    match Conn::new(opts).await {
        Ok(c) => {
            let _ = c.disconnect().await;
            Ok(true)
        }
        // Refused (access denied, host not allowed, account locked): the
        // password is not Binky's, or the user cannot use it.
        Err(mysql_async::Error::Server(_)) => Ok(false),
        Err(e) => Err(refused(
            slice,
            AdapterError::environmental(format!(
                "mysql: trying the password Binky keeps for the user {}: {e}",
                account(slice)
            )),
        )),
    }
}

/// The refusal for a user of the world's name that is not Binky's.
pub(super) fn foreign(slice: &Slice) -> AdapterError {
    let server = super::admin(slice)
        .map(ToString::to_string)
        .unwrap_or_else(|_| "the server".to_owned());
    crate::adapters::kit::users::foreign(
        "mysql",
        &server,
        &format!("a user {}", account(slice)),
        "it holds no grant of Binky's on the world's database and does not log in with the password Binky keeps for it",
    )
}

/// Makes the slice's user with every privilege on the slice's database
/// only; a user of that name that is Binky's (one an `up` cut short made,
/// or a world's made before) is taken up again: its password reset to the
/// one Binky keeps, its grant given.
///
/// # Errors
/// A user of that name is there that Binky did not make (it is left
/// alone); the admin may not create users or grant (`CREATE USER`,
/// `GRANT OPTION`): said, with what to do; or a statement failed.
pub(super) async fn ensure(c: &mut Conn, slice: &Slice) -> Result<(), AdapterError> {
    let (who, pw) = (account(slice), literal(secret(slice)?));
    let made = match c
        .query_drop(format!("CREATE USER {who} IDENTIFIED BY {pw}"))
        .await
    {
        Ok(()) => true,
        // "Operation CREATE USER failed": one of that name is there.
        Err(mysql_async::Error::Server(e)) if e.code == 1396 => match find(c, slice).await? {
            Found::Binkys => false,
            Found::Foreign => return Err(foreign(slice)),
            Found::Missing => {
                return Err(AdapterError::new(format!(
                    "mysql: the user {who} was dropped by someone else while Binky was making it; run this again"
                )));
            }
        },
        Err(e) => return Err(refused(slice, super::sql_err("CREATE USER", e))),
    };
    if made {
        crate::adapters::kit::users::made();
    }
    let r = async {
        if !made {
            // In step with the password Binky keeps.
            exec(c, &format!("ALTER USER {who} IDENTIFIED BY {pw}")).await?;
        }
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
    if r.is_err() && made {
        // Made just now and not granted: Binky's own, so it goes now.
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
    if e.is_environmental() {
        AdapterError::environmental(format!(
            "{message}; a world's own user needs an admin that may create users and grant (CREATE USER and ALL ... WITH GRANT OPTION), or set options.acl = false to hand worlds the admin's credentials instead"
        ))
    } else {
        AdapterError::new(message)
    }
}

/// Drops the slice's user when it is Binky's ([`find`]); a user of that
/// name that is not is someone else's and is left alone.
///
/// # Errors
/// The admin may not read the user's grants or drop it, or the statement
/// failed.
pub(super) async fn drop(c: &mut Conn, slice: &Slice) -> Result<(), AdapterError> {
    if find(c, slice).await? != Found::Binkys {
        return Ok(());
    }
    exec(c, &format!("DROP USER IF EXISTS {}", account(slice))).await
}

/// Databases whose user Binky made outlives them, on the admin's server:
/// users of a world's name holding Binky's grant on a database that is
/// gone (a teardown cut short between the two drops, or a user an older
/// Binky made again for a slice already dropped). What `gc` sweeps.
///
/// # Errors
/// The privileges or the databases cannot be read.
pub(super) async fn orphans(c: &mut Conn) -> Result<Vec<String>, AdapterError> {
    let granted: Vec<(String, String)> = c
        .query("SELECT DISTINCT GRANTEE, TABLE_SCHEMA FROM information_schema.SCHEMA_PRIVILEGES")
        .await
        .map_err(|e| super::sql_err("information_schema.SCHEMA_PRIVILEGES", e))?;
    let schemata: std::collections::HashSet<String> = c
        .query("SELECT schema_name FROM information_schema.schemata")
        .await
        .map_err(|e| super::sql_err("information_schema.schemata", e))?
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for (grantee, pattern) in granted {
        let db = unescape(&pattern);
        let mine = grantee == format!("'{}'@'%'", user_name(&db))
            && quote(&pattern) == grant_target(&db)
            && !schemata.contains(&db);
        if mine && !out.contains(&db) {
            out.push(db);
        }
    }
    Ok(out)
}

/// A database pattern of a grant with its escapes (`\_`, `\%`, `\\`)
/// taken out.
fn unescape(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut escaped = false;
    for c in pattern.chars() {
        if c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        escaped = false;
        out.push(c);
    }
    out
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
pub(super) fn world_url(admin: &AdminUrl, slice: &Slice) -> Result<String, AdapterError> {
    use crate::adapters::kit::address;
    let bad = |e: address::AddressError| AdapterError::new(format!("mysql: admin_url {e}"));
    let a = admin
        .read(&[], "mysql://root@127.0.0.1:3306/")
        .map_err(bad)?;
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
    fn grant_patterns_read_back_as_the_database_they_name() {
        for db in ["shop_a-1", "a%b", "p\\q", "plain"] {
            let pattern = grant_target(db);
            assert_eq!(unescape(&pattern[1..pattern.len() - 1]), db, "{pattern}");
        }
        assert_eq!(user_name("shop_a"), "shop_a");
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
            world_url(
                &AdminUrl::new("mysql://root:adm@127.0.0.1:3306/"),
                &s("shop_a")
            )
            .unwrap(),
            "mysql://shop_a:pw0@127.0.0.1:3306/shop_a"
        );
    }
}
