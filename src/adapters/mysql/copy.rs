//! The server-side copy of a template (`clone_strategy = "copy"`): each
//! table's `SHOW CREATE TABLE` and an `INSERT … SELECT` inside the server,
//! then views, triggers, routines and events re-created from their
//! `SHOW CREATE` text with the template's qualifiers pointed at the copy.

use super::{exec, quote, sql_err};
use crate::adapters::AdapterError;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

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
pub(super) async fn copy_on_server(c: &mut Conn, src: &str, dst: &str) -> Result<(), AdapterError> {
    copy_tables(c, src, dst).await?;
    copy_definitions(c, src, dst).await
}

/// `src`'s tables and sequences, with their rows, into `dst` (what a spare
/// holds: data, and nothing that names its schema).
pub(super) async fn copy_tables(c: &mut Conn, src: &str, dst: &str) -> Result<(), AdapterError> {
    exec(c, &format!("USE {}", quote(dst))).await?;
    // Tables in any order (their foreign keys may point forward), rows with
    // triggers not yet in place, exactly as a dump would load them.
    exec(c, "SET SESSION foreign_key_checks = 0, unique_checks = 0").await?;
    for (table, kind) in tables(c, src).await? {
        copy_table(c, src, dst, &table, kind == "SEQUENCE").await?;
    }
    Ok(())
}

/// `src`'s views, triggers, routines and events re-created in `dst`, which
/// holds its tables already.
pub(super) async fn copy_definitions(
    c: &mut Conn,
    src: &str,
    dst: &str,
) -> Result<(), AdapterError> {
    exec(c, &format!("USE {}", quote(dst))).await?;
    let views: Vec<String> = c
        .exec(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_type = 'VIEW' ORDER BY table_name",
            (src,),
        )
        .await
        .map_err(|e| sql_err("listing views", e))?;
    copy_views(c, src, dst, views).await?;
    copy_objects(c, src, dst).await
}

/// The tables and sequences of schema `db` (no views), each with its
/// `table_type`.
pub(super) async fn tables(c: &mut Conn, db: &str) -> Result<Vec<(String, String)>, AdapterError> {
    c.exec(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = ? AND table_type <> 'VIEW' ORDER BY table_name",
        (db,),
    )
    .await
    .map_err(|e| sql_err("listing tables", e))
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

#[cfg(test)]
mod tests {
    use super::*;

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
