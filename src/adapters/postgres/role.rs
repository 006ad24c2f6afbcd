//! A world's own login role: isolation by permission, not only by name.
//!
//! With `options.acl` (on unless set to `false`) each world's database gets
//! a role of the same name: `LOGIN`; no superuser or `CREATEROLE`; no
//! `CREATEDB` unless `options.createdb`; owner of the database and of what
//! is in it; its password
//! the one Binky keeps for the slice ([`Slice::secret`]), sent as a
//! SCRAM-SHA-256 verifier so no server log holds it. `CONNECT` and
//! `TEMPORARY` on the database are revoked from `PUBLIC`, so another world's
//! role cannot even connect. `${db.url}` carries the world's role; the
//! admin's credentials never leave the daemon.
//!
//! A role is Binky's when its comment says so ([`MARK`]): Binky creates,
//! resets and drops only such roles, and refuses a world whose name an
//! unmarked role already has.
//!
//! A clone's objects come from the template's role, all at once
//! ([`adopt`]: the role made, `REASSIGN OWNED`, the template database given
//! back, one transaction); what the admin owns in a world's database (an
//! upgraded world's, made before it had a role or while `acl` was off) is
//! handed over object by object ([`hand_over`]): `REASSIGN OWNED BY` the
//! admin would also move every other database the admin owns.
//!
//! A spare gets its role when it is made, one that may not log in
//! ([`Login::Spare`]), with a password of its own that a new world is
//! given; a world takes it with its database in one transaction of
//! renames ([`take_spare`]), so the handover costs the world's `up`
//! nothing.

use super::{describe, quote};
use crate::adapters::{AdapterError, Slice};

/// The start of the comment that marks a role as Binky's; the database's
/// name follows.
pub const MARK: &str = "binky: the login role of a world's database";

/// Whether the world gets its own role: `options.acl`, on by default.
pub fn wanted(slice: &Slice) -> bool {
    crate::adapters::kit::users::wanted(slice, true)
}

/// `CREATEDB` when `options.createdb` is true (a test runner that makes
/// its own database: Django's, Rails' `db:test:prepare`, Prisma's shadow
/// database), else `NOCREATEDB`. A database the role makes is its own; it
/// still cannot reach another world's.
fn createdb(slice: &Slice) -> &'static str {
    match slice.options.get("createdb").and_then(|v| v.as_bool()) {
        Some(true) => "CREATEDB",
        _ => "NOCREATEDB",
    }
}

/// What the server has under a slice's role name: the kit's reading of a
/// world's user (no such role, Binky's for this database, or another's).
pub use crate::adapters::kit::users::Found;

/// `'text'` with embedded quotes doubled (`standard_conforming_strings`
/// is on since PostgreSQL 9.1, so backslashes are plain).
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn comment(db: &str) -> String {
    format!("{MARK} {db}")
}

/// The refusal for a role of the world's name that Binky did not make.
pub fn foreign(slice: &Slice) -> AdapterError {
    let server = super::admin(slice)
        .map(ToString::to_string)
        .unwrap_or_else(|_| "the server".to_owned());
    crate::adapters::kit::users::foreign(
        "postgres",
        &server,
        &format!("a role {}", quote(&slice.name)),
        "it has no Binky mark",
    )
}

/// Looks for role `name` and whether it is Binky's for database `name`.
///
/// # Errors
/// The catalog cannot be read.
pub async fn find(c: &tokio_postgres::Client, name: &str) -> Result<Found, AdapterError> {
    let rows = c
        .query(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1",
            &[&name],
        )
        .await
        .map_err(|e| sql_err("reading pg_roles", e))?;
    Ok(match rows.first() {
        None => Found::Missing,
        Some(r) => {
            let said: Option<String> = r.get(0);
            if said.as_deref() == Some(comment(name).as_str()) {
                Found::Binkys
            } else {
                Found::Foreign
            }
        }
    })
}

fn sql_err(what: &str, e: tokio_postgres::Error) -> AdapterError {
    // The admin may not make roles: the one thing a user can fix, said so.
    if e.as_db_error()
        .is_some_and(|db| *db.code() == tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    {
        return AdapterError::environmental(format!(
            "postgres: {what}: {}; a world's own login role needs an admin with CREATEROLE (ALTER ROLE <admin> CREATEROLE), or set options.acl = false to hand worlds the admin's credentials instead",
            describe(&e)
        ));
    }
    AdapterError::new(format!("postgres: {what}: {}", describe(&e)))
}

/// How a role Binky makes may log in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Login {
    /// With the slice's password: a world's role.
    World,
    /// Not at all (`NOLOGIN`) until a world takes it: a spare's role,
    /// which nobody may use while it waits ([`take_spare`]). Its password
    /// is the spare's own (none where the daemon kept none), which the
    /// world that takes it is given: setting a SCRAM password costs the
    /// server a PBKDF2 round of its own (it checks the secret is not the
    /// empty password's), some 6 ms, paid here rather than by the `up`.
    Spare,
}

/// The role's password as the server keeps it: a SCRAM-SHA-256 verifier
/// (PBKDF2 at 4096 rounds: under a millisecond in a release build).
fn verifier(slice: &Slice) -> Result<String, AdapterError> {
    let password = secret(slice)?;
    Ok(postgres_protocol::password::scram_sha_256(
        password.as_bytes(),
    ))
}

/// The slice's password.
///
/// # Errors
/// The daemon handed none (its registry could not be read).
pub fn secret(slice: &Slice) -> Result<&str, AdapterError> {
    crate::adapters::kit::users::password("postgres", slice)
}

/// Makes the slice's role, lets the admin act as it (a `CREATEROLE` admin
/// that is no superuser needs the membership to hand it objects), and makes
/// it the owner of the database, which `PUBLIC` may no longer connect to.
/// For Binky's own role, only what differs from what the slice asks is
/// changed (`CREATEDB`, the database's owner): every verb resolves a slice,
/// and most find it as it was. Its password is the one made with it, which
/// the registry keeps as long as the slice. The objects inside are handed
/// over by [`hand_over`].
///
/// # Errors
/// A role of that name exists that Binky did not make; the admin may not
/// create roles; a statement failed.
pub async fn ensure(
    c: &tokio_postgres::Client,
    slice: &Slice,
    login: Login,
) -> Result<(), AdapterError> {
    let Ensure { create, own } = plan_ensure(c, slice, login).await?;
    let name = quote(&slice.name);
    if let Some(sql) = create {
        c.batch_execute(&sql)
            .await
            .map_err(|e| sql_err(&format!("CREATE ROLE {name}"), e))?;
        crate::adapters::kit::users::made();
    }
    let Some(sql) = own else { return Ok(()) };
    c.batch_execute(&sql).await.map_err(|e| {
        sql_err(
            &format!("making role {name} the owner of database {name}"),
            e,
        )
    })
}

/// What [`ensure`] runs: each part one implicit transaction, or `None`
/// where the server has it already.
struct Ensure {
    /// Makes the role and marks it as Binky's, in one statement batch: the
    /// role is never there without its mark, whatever interrupts what
    /// follows.
    create: Option<String>,
    /// Brings the role in line (`CREATEDB`) and makes it the database's
    /// owner.
    own: Option<String>,
}

/// Reads what the server has under the slice's role name and says what
/// [`ensure`] is to run.
///
/// # Errors
/// A role of that name exists that Binky did not make; the catalog cannot
/// be read; no password is kept for a world's role.
async fn plan_ensure(
    c: &tokio_postgres::Client,
    slice: &Slice,
    login: Login,
) -> Result<Ensure, AdapterError> {
    let (name, db) = (quote(&slice.name), &slice.name);
    let own = format!(
        "GRANT {name} TO CURRENT_USER; ALTER DATABASE {name} OWNER TO {name}; REVOKE ALL ON DATABASE {name} FROM PUBLIC"
    );
    match find(c, db).await? {
        Found::Foreign => Err(foreign(slice)),
        Found::Binkys => {
            let row = c
                .query_one(
                    "SELECT r.rolcreatedb, d.datdba = r.oid FROM pg_roles r, pg_database d WHERE r.rolname = $1 AND d.datname = $1",
                    &[&db],
                )
                .await
                .map_err(|e| sql_err("reading pg_roles", e))?;
            let (may_createdb, owns): (bool, bool) = (row.get(0), row.get(1));
            let mut sql = Vec::new();
            if may_createdb != (createdb(slice) == "CREATEDB") {
                sql.push(format!("ALTER ROLE {name} WITH {}", createdb(slice)));
            }
            if !owns {
                sql.push(own);
            }
            Ok(Ensure {
                create: None,
                own: (!sql.is_empty()).then(|| sql.join("; ")),
            })
        }
        Found::Missing => {
            let may = match login {
                Login::World => format!("LOGIN PASSWORD {}", literal(&verifier(slice)?)),
                Login::Spare => match slice.secret {
                    Some(_) => format!("NOLOGIN PASSWORD {}", literal(&verifier(slice)?)),
                    None => "NOLOGIN PASSWORD NULL".to_owned(),
                },
            };
            Ok(Ensure {
                create: Some(format!(
                    "CREATE ROLE {name} WITH {may} NOSUPERUSER {} NOCREATEROLE NOREPLICATION; COMMENT ON ROLE {name} IS {}",
                    createdb(slice),
                    literal(&comment(db))
                )),
                own: Some(own),
            })
        }
    }
}

/// Hands every object in the slice's database owned by the admin to the
/// slice's role: the kinds `owned_by_admin` lists. Extension members stay
/// the extension's, system schemas the system's. Only what is found is
/// altered: with nothing to hand over, it takes no lock.
///
/// `c` is connected to the slice's database as the admin.
///
/// # Errors
/// An `ALTER … OWNER` failed.
pub async fn hand_over(c: &tokio_postgres::Client, slice: &Slice) -> Result<(), AdapterError> {
    c.batch_execute(&hand_over_sql(slice)).await.map_err(|e| {
        sql_err(
            &format!(
                "handing the objects in database {} to its role",
                quote(&slice.name)
            ),
            e,
        )
    })
}

/// The statement [`hand_over`] runs.
fn hand_over_sql(slice: &Slice) -> String {
    format!(
        "DO $binky$
DECLARE
    q text;
    to_role text := {};
BEGIN
    FOR q IN {}
    LOOP
        EXECUTE q;
    END LOOP;
END
$binky$",
        literal(&slice.name),
        owned_by_admin()
    )
}

/// Kinds of object named `schema.name` in a catalog of their own, each
/// handed over the same way: the `ALTER` keyword, the catalog, and its
/// name, namespace and owner columns.
const NAMED_KINDS: &[[&str; 5]] = &[
    [
        "COLLATION",
        "pg_collation",
        "collname",
        "collnamespace",
        "collowner",
    ],
    [
        "TEXT SEARCH CONFIGURATION",
        "pg_ts_config",
        "cfgname",
        "cfgnamespace",
        "cfgowner",
    ],
    [
        "TEXT SEARCH DICTIONARY",
        "pg_ts_dict",
        "dictname",
        "dictnamespace",
        "dictowner",
    ],
    [
        "STATISTICS",
        "pg_statistic_ext",
        "stxname",
        "stxnamespace",
        "stxowner",
    ],
];

/// The kinds each with a rule of its own: schemas; tables, views,
/// materialized views, foreign tables and sequences of their own (a
/// sequence a column owns follows its table); routines and aggregates;
/// enums, domains, ranges and stand-alone composite types (a table's row
/// type and arrays follow their owner); operators.
const OWN_RULE_KINDS: &str = r#"
        SELECT format('ALTER SCHEMA %I OWNER TO %I', n.nspname, to_role)
            FROM user_ns n
            WHERE n.nspowner IN (SELECT oid FROM owners)
              AND (('pg_namespace'::regclass, n.oid) NOT IN (SELECT * FROM members))
        UNION ALL
        SELECT format('ALTER %s %I.%I OWNER TO %I',
                CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                    WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE'
                    ELSE 'TABLE' END,
                n.nspname, c.relname, to_role)
            FROM pg_class c JOIN user_ns n ON n.oid = c.relnamespace
            WHERE c.relowner IN (SELECT oid FROM owners)
              AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
              AND (('pg_class'::regclass, c.oid) NOT IN (SELECT * FROM members))
              AND NOT (c.relkind = 'S' AND EXISTS (
                  SELECT 1 FROM pg_depend d
                  WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                    AND d.deptype IN ('a', 'i')))
        UNION ALL
        SELECT format('ALTER %s %s OWNER TO %I',
                CASE p.prokind WHEN 'a' THEN 'AGGREGATE' ELSE 'ROUTINE' END,
                p.oid::regprocedure, to_role)
            FROM pg_proc p JOIN user_ns n ON n.oid = p.pronamespace
            WHERE p.proowner IN (SELECT oid FROM owners)
              AND (('pg_proc'::regclass, p.oid) NOT IN (SELECT * FROM members))
        UNION ALL
        SELECT format('ALTER %s %s OWNER TO %I',
                CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END,
                t.oid::regtype, to_role)
            FROM pg_type t JOIN user_ns n ON n.oid = t.typnamespace
            WHERE t.typowner IN (SELECT oid FROM owners)
              AND (t.typtype IN ('e', 'd', 'r')
                   OR (t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))
              AND (('pg_type'::regclass, t.oid) NOT IN (SELECT * FROM members))
        UNION ALL
        SELECT format('ALTER OPERATOR %s OWNER TO %I', o.oid::regoperator, to_role)
            FROM pg_operator o JOIN user_ns n ON n.oid = o.oprnamespace
            WHERE o.oprowner IN (SELECT oid FROM owners)
              AND (('pg_operator'::regclass, o.oid) NOT IN (SELECT * FROM members))"#;

/// A query listing one `ALTER … OWNER TO to_role` statement per object of
/// the current database the admin (`current_user`) owns, of every kind
/// [`OWN_RULE_KINDS`] and [`NAMED_KINDS`] cover, outside system schemas
/// and extensions.
fn owned_by_admin() -> String {
    let named = NAMED_KINDS.iter().map(|[kind, catalog, name, ns, owner]| {
        format!(
            "
        SELECT format('ALTER {kind} %I.%I OWNER TO %I', n.nspname, o.{name}, to_role)
            FROM {catalog} o JOIN user_ns n ON n.oid = o.{ns}
            WHERE o.{owner} IN (SELECT oid FROM owners)
              AND (('{catalog}'::regclass, o.oid) NOT IN (SELECT * FROM members))"
        )
    });
    let kinds: Vec<String> = std::iter::once(OWN_RULE_KINDS.to_owned())
        .chain(named)
        .collect();
    format!(
        "
        WITH owners AS (SELECT oid FROM pg_roles WHERE rolname = current_user),
        user_ns AS (
            SELECT oid, nspname, nspowner FROM pg_namespace
            WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
        ),
        members AS (SELECT classid, objid FROM pg_depend WHERE deptype = 'e'){}",
        kinds.join("\n        UNION ALL")
    )
}

/// Gives a fresh copy of `template` (a clone, or a spare) to the slice's
/// role, in one transaction, so one commit: the role made or brought in
/// line ([`ensure`]'s statements); everything in the database that the
/// template's role owns taken from it (`REASSIGN OWNED`, which also moves
/// the shared objects it owns — the template database itself — so that is
/// given back in the same transaction: no session ever sees it moved); and
/// what the admin owns handed over ([`hand_over`]).
///
/// `c` is connected to the slice's database as the admin.
///
/// # Errors
/// A role of the slice's name exists that Binky did not make, or a
/// statement failed (the transaction is rolled back, nothing made or
/// moved).
pub async fn adopt(
    c: &tokio_postgres::Client,
    slice: &Slice,
    template: &Slice,
    login: Login,
) -> Result<(), AdapterError> {
    let Ensure { create, own } = plan_ensure(c, slice, login).await?;
    let mut sql: Vec<String> = create.into_iter().chain(own).collect();
    if find(c, &template.name).await? == Found::Binkys {
        let from = quote(&template.name);
        sql.push(format!(
            "REASSIGN OWNED BY {from} TO {}; ALTER DATABASE {from} OWNER TO {from}",
            quote(&slice.name)
        ));
    }
    sql.push(hand_over_sql(slice));
    c.batch_execute(&format!("BEGIN; {}; COMMIT", sql.join("; ")))
        .await
        .map_err(|e| {
            sql_err(
                &format!(
                    "handing the copy {} of {} to its role",
                    quote(&slice.name),
                    quote(&template.name)
                ),
                e,
            )
        })
}

/// The statements that make a spare's role (made with [`Login::Spare`],
/// owner of the spare's database and all in it) the world's: renamed to
/// the slice's name, let log in, `CREATEDB` as the slice asks, and marked
/// as the world's. Its password is kept where the world was given the
/// spare's (the daemon does so for a new slice), and set to the world's
/// otherwise. To run in the transaction that renames the spare's
/// database: a world's role is never there without its database, nor a
/// spare's database without its role. A SCRAM verifier does not depend on
/// the role's name, so it survives the rename (an MD5 one would be
/// cleared).
///
/// # Errors
/// The daemon handed no password for the slice.
pub fn take_spare(spare: &Slice, slice: &Slice) -> Result<String, AdapterError> {
    let (from, to) = (quote(&spare.name), quote(&slice.name));
    let password = if spare.secret.is_some() && spare.secret == slice.secret {
        String::new()
    } else {
        format!(" PASSWORD {}", literal(&verifier(slice)?))
    };
    Ok(format!(
        "ALTER ROLE {from} RENAME TO {to}; ALTER ROLE {to} WITH LOGIN {}{password}; COMMENT ON ROLE {to} IS {}",
        createdb(slice),
        literal(&comment(&slice.name))
    ))
}

/// Drops the slice's role when it is Binky's (an unmarked one is left
/// alone); its database must be gone first.
///
/// # Errors
/// The role still owns or may use something elsewhere, or the statement
/// failed.
pub async fn drop(
    c: &tokio_postgres::Client,
    slice: &Slice,
    others: crate::adapters::OtherSessions,
) -> Result<Vec<String>, AdapterError> {
    if find(c, &slice.name).await? != Found::Binkys {
        return Ok(Vec::new());
    }
    let name = quote(&slice.name);
    // Databases the world's role made itself (with `options.createdb`: a
    // test runner's `test_<db>`, Prisma's shadow database) are the world's,
    // and a role that owns one cannot be dropped.
    let owned = c
        .query(
            "SELECT datname::text FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles WHERE rolname = $1)",
            &[&slice.name],
        )
        .await
        .map_err(|e| sql_err("reading pg_database", e))?;
    // Their sessions are treated as the world's database's are.
    let mut ended = Vec::new();
    for row in owned {
        let db: String = row.get(0);
        ended.extend(super::drop_database(c, &db, others).await?);
    }
    c.batch_execute(&format!("DROP ROLE IF EXISTS {name}"))
        .await
        .map_err(|e| sql_err(&format!("DROP ROLE {name}"), e))?;
    Ok(ended)
}

/// Roles Binky made whose database is gone (a teardown interrupted between
/// the two drops), on the admin's server: what `gc` sweeps.
///
/// # Errors
/// The catalog cannot be read.
pub async fn orphans(c: &tokio_postgres::Client) -> Result<Vec<String>, AdapterError> {
    let rows = c
        .query(
            "SELECT r.rolname::text FROM pg_roles r
             WHERE shobj_description(r.oid, 'pg_authid') = $1 || ' ' || r.rolname
               AND NOT EXISTS (SELECT 1 FROM pg_database d WHERE d.datname = r.rolname)",
            &[&MARK],
        )
        .await
        .map_err(|e| sql_err("reading pg_roles", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_double_their_quotes() {
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal(r"a\b"), r"'a\b'");
    }

    #[test]
    fn acl_is_on_unless_turned_off() {
        let mut s = crate::adapters::test_slice("shop_a");
        assert!(wanted(&s));
        s.options.insert("acl".into(), toml::Value::Boolean(false));
        assert!(!wanted(&s));
    }
}
