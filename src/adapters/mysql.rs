//! `mysql` (also registered as `mariadb` and `percona`): one database per
//! world on a MySQL-protocol server the user runs.
//!
//! Slice names are `<project>_<world-slug>`, cut to MySQL's 64-character
//! identifier limit with a hash suffix, and always quoted with backticks.
//!
//! A clone copies the golden template on the server. Two strategies exist,
//! chosen with the `clone_strategy` option:
//! - `copy` (the default): per table `SHOW CREATE TABLE` + `INSERT … SELECT`
//!   inside the server, then triggers, views, routines and events re-created
//!   from their `SHOW CREATE` text. No client binary; nothing leaves the
//!   server. Measured fastest (benchmarks/worlds.py `--mysql-strategies`).
//! - `dump`: `mysqldump | mysql` (or `mariadb-dump | mariadb`), the
//!   classic route. Needs the client binaries on `PATH`; when they are
//!   missing or cannot authenticate, the error is environmental and the world
//!   is built by provision + migrate + seed instead (`clone_fallback`).

use super::{
    Adapter, AdapterError, Capabilities, Slice, TemplateLock, find_executable, stderr_tail,
};
use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row};

/// MySQL's identifier limit for databases, in characters (slice names are
/// ASCII, so bytes).
pub const MAX_IDENT: usize = super::kit::names::MYSQL_DATABASE.max_len;

/// The mysql adapter.
pub struct Mysql;

/// `` `name` `` with embedded backticks doubled.
fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

fn admin(slice: &Slice) -> Result<&str, AdapterError> {
    slice.admin_url.as_deref().ok_or_else(|| {
        AdapterError::new(
            "the mysql adapter needs admin_url, e.g. admin_url = \"${env.MYSQL_ADMIN_URL}\" with MYSQL_ADMIN_URL=mysql://root@127.0.0.1:3306/",
        )
    })
}

fn environmental(message: String) -> AdapterError {
    AdapterError {
        message,
        environmental: true,
    }
}

/// The connection options `url` names, as the driver reads them; `binky
/// check` refuses a literal `admin_url` by this same reader.
///
/// # Errors
/// What is wrong with the URL, never quoting it.
pub(crate) fn parse_admin_url(url: &str) -> Result<Opts, String> {
    Opts::from_url(url).map_err(|e| {
        crate::secrets::redact_url(
            &format!(
                "admin_url is not a valid mysql:// URL ({e}); e.g. mysql://root@127.0.0.1:3306/"
            ),
            Some(url),
        )
    })
}

/// Connects with the admin URL; the error never quotes the URL (it may hold
/// a password).
async fn connect(slice: &Slice) -> Result<Conn, AdapterError> {
    let opts = parse_admin_url(admin(slice)?)
        .map_err(|e| AdapterError::new(format!("mysql: {e}")).redacted(slice))?;
    // Where, and as whom, but never the password.
    let target = format!(
        "{}:{} as {}",
        opts.ip_or_hostname(),
        opts.tcp_port(),
        opts.user().unwrap_or("(no user)")
    );
    Conn::new(opts).await.map_err(|e| {
        environmental(format!(
            "mysql: cannot connect to {target} (admin_url): {e}; check that the server runs and that the account may create databases"
        ))
        .redacted(slice)
    })
}

/// A failed statement as an adapter error: environmental (a clone may then
/// fall back to migrate + seed) when the server refused for want of a grant
/// or a definer account, or the connection broke; plain otherwise.
fn sql_err(what: &str, e: mysql_async::Error) -> AdapterError {
    let message = format!("mysql: {what}: {e}");
    let environmental = match &e {
        mysql_async::Error::Server(s) => ENVIRONMENTAL_CODES.contains(&s.code),
        mysql_async::Error::Io(_) => true,
        _ => false,
    };
    if environmental {
        AdapterError::environmental(message)
    } else {
        AdapterError::new(message)
    }
}

/// Server error codes that say the account lacks something, not that the
/// statement is wrong: access denied to a database (1044), an account
/// (1045), a table (1142) or column (1143), a privilege such as SUPER or
/// SET USER (1227), a routine (1370); a routine that needs SUPER with
/// binary logging (1419); a definer that does not exist here (1449).
const ENVIRONMENTAL_CODES: &[u16] = &[1044, 1045, 1142, 1143, 1227, 1370, 1419, 1449];

/// Runs one statement.
async fn exec(c: &mut Conn, sql: &str) -> Result<(), AdapterError> {
    c.query_drop(sql).await.map_err(|e| {
        let head: String = sql.chars().take(80).collect();
        sql_err(&head, e)
    })
}

/// Runs the statement that re-creates one object; an error names the object
/// (`VIEW \`v\``), which the head of a `CREATE … DEFINER=… SQL SECURITY …`
/// statement does not.
async fn exec_creating(
    c: &mut Conn,
    kind: &str,
    name: &str,
    sql: &str,
) -> Result<(), AdapterError> {
    c.query_drop(sql)
        .await
        .map_err(|e| sql_err(&format!("creating {kind} {}", quote(name)), e))
}

/// Column `i` of a `SHOW …` row as text (the server may send bytes).
fn text(row: &Row, i: usize) -> String {
    match row.as_ref(i) {
        Some(mysql_async::Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(mysql_async::Value::NULL) | None => String::new(),
        Some(v) => v.as_sql(true),
    }
}

/// `SHOW CREATE …` for one object, with the `sql_mode` it was created under
/// when the server reports one.
struct Definition {
    sql_mode: Option<String>,
    sql: String,
}

async fn show_create(
    c: &mut Conn,
    kind: &str,
    schema: &str,
    name: &str,
) -> Result<Definition, AdapterError> {
    let q = format!("SHOW CREATE {kind} {}.{}", quote(schema), quote(name));
    let row: Row = c
        .query_first(&q)
        .await
        .map_err(|e| sql_err(&q, e))?
        .ok_or_else(|| AdapterError::new(format!("mysql: {q} returned nothing")))?;
    // Column layouts differ by kind: TABLE and VIEW put the text second;
    // TRIGGER, PROCEDURE, FUNCTION and EVENT put sql_mode second (EVENT
    // also the time zone third) and the text after it.
    Ok(match kind {
        "TABLE" | "VIEW" => Definition {
            sql_mode: None,
            sql: text(&row, 1),
        },
        "EVENT" => Definition {
            sql_mode: Some(text(&row, 1)),
            sql: text(&row, 3),
        },
        _ => Definition {
            sql_mode: Some(text(&row, 1)),
            sql: text(&row, 2),
        },
    })
}

/// Turns `` `schema`. `` qualifiers that name the template into ones that
/// name the clone, so a view, trigger or routine reads the clone's tables
/// (as mysqldump does for one database). Only qualifiers are rewritten:
/// the same text inside a string literal (`'shop_golden_main.'`, data the
/// definition returns) or a comment is left as written.
fn requalify(sql: &str, from: &str, to: &str) -> String {
    let (qualifier, with) = (format!("{}.", quote(from)), format!("{}.", quote(to)));
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    // Delimiters are ASCII, so every index below is a char boundary.
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        let end = match b[i] {
            q @ (b'\'' | b'"') => quoted_end(b, i, q, true),
            b'`' if sql[i..].starts_with(&qualifier) => {
                out.push_str(&sql[copied..i]);
                out.push_str(&with);
                i += qualifier.len();
                copied = i;
                continue;
            }
            b'`' => quoted_end(b, i, b'`', false),
            b'#' => line_end(b, i),
            b'-' if b.get(i + 1) == Some(&b'-')
                && b.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()) =>
            {
                line_end(b, i)
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                sql[i + 2..].find("*/").map_or(b.len(), |at| i + 2 + at + 2)
            }
            _ => i + 1,
        };
        i = end;
    }
    out.push_str(&sql[copied..]);
    out
}

/// Just past the quoted text opened by `q` at `start`: a doubled `q` stands
/// for itself, and in a string (`backslash`) `\\` escapes the next byte.
fn quoted_end(b: &[u8], start: usize, q: u8, backslash: bool) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if backslash => i += 2,
            c if c == q && b.get(i + 1) == Some(&q) => i += 2,
            c if c == q => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// Just past the line a comment starting at `start` ends with.
fn line_end(b: &[u8], start: usize) -> usize {
    b[start..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |at| start + at + 1)
}

/// The server-side copy (`clone_strategy = "copy"`).
async fn copy_on_server(c: &mut Conn, src: &str, dst: &str) -> Result<(), AdapterError> {
    exec(c, &format!("USE {}", quote(dst))).await?;
    // Tables in any order (their foreign keys may point forward), rows with
    // triggers not yet in place, exactly as a dump would load them.
    exec(c, "SET SESSION foreign_key_checks = 0, unique_checks = 0").await?;
    let tables: Vec<(String, String)> = c
        .exec(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = ? ORDER BY table_name",
            (src,),
        )
        .await
        .map_err(|e| sql_err("listing tables", e))?;
    for (table, kind) in tables.iter().filter(|(_, k)| k != "VIEW") {
        copy_table(c, src, dst, table, kind == "SEQUENCE").await?;
    }
    let views: Vec<String> = tables
        .iter()
        .filter(|(_, k)| k == "VIEW")
        .map(|(t, _)| t.clone())
        .collect();
    copy_views(c, src, dst, views).await?;
    copy_objects(c, src, dst).await
}

/// Creates `table` in `dst` as it is in `src` and copies its rows (a
/// sequence's definition carries its state: no rows).
async fn copy_table(
    c: &mut Conn,
    src: &str,
    dst: &str,
    table: &str,
    sequence: bool,
) -> Result<(), AdapterError> {
    let def = show_create(c, "TABLE", src, table).await?;
    exec_creating(c, "TABLE", table, &def.sql).await?;
    if sequence {
        // The definition gives where the sequence started, not where it
        // is: the clone carries on from the template's next value (as
        // mysqldump's `SETVAL(…, next, 0)` does), so ids the seed used are
        // never handed out again.
        let next: Option<i64> = c
            .exec_first(
                format!(
                    "SELECT next_not_cached_value FROM {}.{}",
                    quote(src),
                    quote(table)
                ),
                (),
            )
            .await
            .map_err(|e| sql_err("reading a sequence", e))?;
        if let Some(next) = next {
            exec(
                c,
                &format!("SELECT SETVAL({}.{}, {next}, 0)", quote(dst), quote(table)),
            )
            .await?;
        }
        return Ok(());
    }
    // Generated columns are computed, never inserted.
    let cols: Vec<String> = c
        .exec(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ? AND extra NOT LIKE '%GENERATED%' ORDER BY ordinal_position",
            (src, table),
        )
        .await
        .map_err(|e| sql_err("listing columns", e))?;
    let cols = cols.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", ");
    exec(
        c,
        &format!(
            "INSERT INTO {}.{} ({cols}) SELECT {cols} FROM {}.{}",
            quote(dst),
            quote(table),
            quote(src),
            quote(table)
        ),
    )
    .await
}

/// Creates `views` in `dst`, each reading `dst`'s tables. Views may read
/// other views: created in passes until none is left, so their order never
/// matters; a pass that makes none fails with the last error.
async fn copy_views(
    c: &mut Conn,
    src: &str,
    dst: &str,
    mut views: Vec<String>,
) -> Result<(), AdapterError> {
    while !views.is_empty() {
        let mut left = Vec::new();
        let mut last_err = None;
        for v in views.iter() {
            let def = show_create(c, "VIEW", src, v).await?;
            if let Err(e) = exec_creating(c, "VIEW", v, &requalify(&def.sql, src, dst)).await {
                last_err = Some(e);
                left.push(v.clone());
            }
        }
        if left.len() == views.len() {
            return Err(last_err.expect("a failed view has an error"));
        }
        views = left;
    }
    Ok(())
}

/// Creates `src`'s triggers, routines and events in `dst`, each under the
/// `sql_mode` it was defined with.
async fn copy_objects(c: &mut Conn, src: &str, dst: &str) -> Result<(), AdapterError> {
    let triggers: Vec<String> = c
        .exec(
            "SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = ? ORDER BY action_order",
            (src,),
        )
        .await
        .map_err(|e| sql_err("listing triggers", e))?;
    let mut objects: Vec<(&str, String)> = triggers.into_iter().map(|t| ("TRIGGER", t)).collect();
    let routines: Vec<(String, String)> = c
        .exec(
            "SELECT routine_type, routine_name FROM information_schema.routines WHERE routine_schema = ?",
            (src,),
        )
        .await
        .map_err(|e| sql_err("listing routines", e))?;
    for (kind, name) in routines {
        objects.push((
            if kind == "FUNCTION" {
                "FUNCTION"
            } else {
                "PROCEDURE"
            },
            name,
        ));
    }
    let events: Vec<String> = c
        .exec(
            "SELECT event_name FROM information_schema.events WHERE event_schema = ?",
            (src,),
        )
        .await
        .map_err(|e| sql_err("listing events", e))?;
    objects.extend(events.into_iter().map(|e| ("EVENT", e)));
    for (kind, name) in objects {
        let def = show_create(c, kind, src, &name).await?;
        if let Some(mode) = &def.sql_mode {
            c.exec_drop("SET SESSION sql_mode = ?", (mode,))
                .await
                .map_err(|e| sql_err("SET sql_mode", e))?;
        }
        exec_creating(c, kind, &name, &requalify(&def.sql, src, dst)).await?;
    }
    Ok(())
}

/// The dump route (`clone_strategy = "dump"`): `mysqldump | mysql`, with the
/// password passed in `MYSQL_PWD` so it never shows in a process listing.
async fn copy_with_dump(slice: &Slice, src: &str, dst: &str) -> Result<(), AdapterError> {
    let opts = parse_admin_url(admin(slice)?)
        .map_err(|e| AdapterError::new(format!("mysql: {e}")).redacted(slice))?;
    let path = slice.search_path.as_deref();
    let dump = find_executable(&["mysqldump", "mariadb-dump"], path).ok_or_else(|| {
        environmental(
            "mysql: clone needs mysqldump (or mariadb-dump) on PATH, and none was found".into(),
        )
    })?;
    let load = find_executable(&["mysql", "mariadb"], path).ok_or_else(|| {
        environmental(
            "mysql: clone needs the mysql (or mariadb) client on PATH, and none was found".into(),
        )
    })?;
    let mut common: Vec<String> = vec![
        "--protocol=TCP".into(),
        format!("--host={}", opts.ip_or_hostname()),
        format!("--port={}", opts.tcp_port()),
    ];
    if let Some(u) = opts.user() {
        common.push(format!("--user={u}"));
    }
    let pwd = opts.pass().unwrap_or("").to_owned();
    let (src, dst) = (src.to_owned(), dst.to_owned());
    let (dump_name, load_name) = (dump.display().to_string(), load.display().to_string());
    let result = tokio::task::spawn_blocking(move || -> Result<(), String> {
        use std::process::Stdio;
        let mut d = crate::platform::std_command(&dump)
            .args(&common)
            .args([
                "--single-transaction",
                "--routines",
                "--triggers",
                "--events",
                "--hex-blob",
                "--skip-comments",
            ])
            .arg(&src)
            .env("MYSQL_PWD", &pwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {dump_name}: {e}"))?;
        let out = d.stdout.take().expect("piped");
        let l = crate::platform::std_command(&load)
            .args(&common)
            .arg(&dst)
            .env("MYSQL_PWD", &pwd)
            .stdin(out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {load_name}: {e}"))?;
        let lo = l.wait_with_output().map_err(|e| e.to_string())?;
        let dout = d.wait_with_output().map_err(|e| e.to_string())?;
        if !dout.status.success() {
            return Err(format!(
                "{dump_name} failed ({}): {}",
                dout.status,
                stderr_tail(&dout.stderr, 5)
            ));
        }
        if !lo.status.success() {
            return Err(format!(
                "{load_name} failed ({}): {}",
                lo.status,
                stderr_tail(&lo.stderr, 5)
            ));
        }
        Ok(())
    })
    .await
    .map_err(|e| AdapterError::new(format!("mysql: dump task: {e}")))?;
    result.map_err(|m| environmental(format!("mysql: clone by dump: {m}")))
}

#[async_trait]
impl Adapter for Mysql {
    fn name(&self) -> &str {
        "mysql"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { clone: true }
    }

    /// The path is the database the admin connects to; the slices are the
    /// server's.
    fn path_names_server(&self) -> bool {
        false
    }

    fn slice_name(&self, project: &str, world_slug: &str) -> String {
        super::kit::names::MYSQL_DATABASE.name(project, world_slug)
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let mut c = connect(slice).await?;
        exec(&mut c, &format!("CREATE DATABASE {}", quote(&slice.name))).await?;
        let _ = c.disconnect().await;
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        super::kit::address::with_database(admin(slice)?, &slice.name)
            .map_err(|e| AdapterError::new(format!("{}: admin_url {e}", self.name())))
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let mut c = connect(slice).await?;
        exec(
            &mut c,
            &format!("DROP DATABASE IF EXISTS {}", quote(&slice.name)),
        )
        .await?;
        let _ = c.disconnect().await;
        Ok(())
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let mut c = connect(slice).await?;
        let found: Option<u8> = c
            .exec_first(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = ?",
                (&slice.name,),
            )
            .await
            .map_err(|e| sql_err("information_schema.schemata", e))?;
        let _ = c.disconnect().await;
        Ok(found.is_some())
    }

    async fn lock_template(
        &self,
        template: &Slice,
        wait: bool,
    ) -> Result<Option<TemplateLock>, AdapterError> {
        let mut c = connect(template).await?;
        // Lock names are limited to 64 characters: hash the template's name.
        let name = format!("binky_golden_{}", crate::slug::short_hash(&template.name));
        let timeout: u32 = if wait { 600 } else { 0 };
        let got: Option<Option<i64>> = c
            .exec_first("SELECT GET_LOCK(?, ?)", (&name, timeout))
            .await
            .map_err(|e| sql_err("GET_LOCK", e))?;
        if got.flatten() != Some(1) {
            let how_long = if wait { " for 10 minutes" } else { "" };
            return Err(AdapterError::new(format!(
                "mysql: another daemon has been using the template {}{how_long}; try again later",
                template.name
            )));
        }
        // Released when the session ends, i.e. when the guard drops.
        Ok(Some(Box::new(tokio::sync::Mutex::new(c))))
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<String, AdapterError> {
        let strategy = slice
            .options
            .get("clone_strategy")
            .and_then(|v| v.as_str())
            .unwrap_or("copy");
        let mut c = connect(slice).await?;
        let charset: Option<(String, String)> = c
            .exec_first(
                "SELECT default_character_set_name, default_collation_name FROM information_schema.schemata WHERE schema_name = ?",
                (&template.name,),
            )
            .await
            .map_err(|e| sql_err("information_schema.schemata", e))?;
        let Some((charset, collation)) = charset else {
            return Err(AdapterError::new(format!(
                "mysql: the template {} does not exist",
                quote(&template.name)
            )));
        };
        exec(
            &mut c,
            &format!(
                "CREATE DATABASE {} CHARACTER SET {charset} COLLATE {collation}",
                quote(&slice.name)
            ),
        )
        .await?;
        let copied = match strategy {
            "copy" => copy_on_server(&mut c, &template.name, &slice.name).await,
            "dump" => copy_with_dump(slice, &template.name, &slice.name).await,
            other => Err(AdapterError::new(format!(
                "mysql: clone_strategy = \"{other}\" is not one of copy, dump"
            ))),
        };
        let _ = c.disconnect().await;
        copied.map(|()| strategy.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_are_quoted() {
        let long = crate::slug::world_slug(&"feature/x".repeat(20));
        let a = Mysql.slice_name("shop", &long);
        assert!(a.len() <= MAX_IDENT, "{a}");
        assert_ne!(a, Mysql.slice_name("shop", &format!("{long}-b")));
        assert_eq!(quote("a`b"), "`a``b`");
    }

    #[test]
    fn view_qualifiers_follow_the_clone() {
        assert_eq!(
            requalify(
                "select `shop_golden_main`.`t`.`a` AS `a` from `shop_golden_main`.`t`",
                "shop_golden_main",
                "shop_x"
            ),
            "select `shop_x`.`t`.`a` AS `a` from `shop_x`.`t`"
        );
        // A literal or a comment holding the same text is data, not a
        // qualifier.
        for kept in [
            "select 'x`shop_golden_main`.y' AS `s`",
            "select \"`shop_golden_main`.\" AS `s`",
            "select 'it''s `shop_golden_main`.' AS `s`",
            "select 'a\\'`shop_golden_main`.' AS `s`",
            "# `shop_golden_main`.t\nselect 1",
            "-- `shop_golden_main`.t\nselect 1",
            "/* `shop_golden_main`.t */ select 1",
        ] {
            assert_eq!(requalify(kept, "shop_golden_main", "shop_x"), kept);
        }
        assert_eq!(
            requalify(
                "select 'n''s' AS `s`, `shop_golden_main`.`t`.`é` from `shop_golden_main`.`t` -- x\n",
                "shop_golden_main",
                "shop_x"
            ),
            "select 'n''s' AS `s`, `shop_x`.`t`.`é` from `shop_x`.`t` -- x\n"
        );
        // A quoted identifier that merely ends like the template is not it.
        assert_eq!(
            requalify("select `a``shop_golden_main`.t", "shop_golden_main", "x"),
            "select `a``shop_golden_main`.t"
        );
    }
}
