//! Sessions on a world's database: who holds one (named in errors), a
//! drop that waits for the sessions Binky did not open or ends them when
//! told to, and the sessions whose client is gone, which are ended.

use super::{quote, sql_err};
use crate::adapters::{AdapterError, OtherSessions};

/// Sessions on database `db` other than ours, each as "pid 123 (user bob,
/// application psql, from 10.0.0.5)"; empty when there are none the admin
/// role may see.
pub(super) async fn sessions_on(c: &tokio_postgres::Client, db: &str) -> Vec<String> {
    let rows = c
        .query(
            "SELECT pid, usename::text, application_name, client_addr::text FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .await
        .unwrap_or_default();
    rows.iter()
        .map(|r| {
            let pid: i32 = r.get(0);
            let user: Option<String> = r.get(1);
            let app: Option<String> = r.get(2);
            let from: Option<String> = r.get(3);
            let mut what = vec![format!("user {}", user.as_deref().unwrap_or("?"))];
            if let Some(a) = app.filter(|a| !a.is_empty()) {
                what.push(format!("application {a}"));
            }
            if let Some(f) = from {
                what.push(format!("from {f}"));
            }
            format!("pid {pid} ({})", what.join(", "))
        })
        .collect()
}

/// Drops database `db` once no session Binky did not open is on it, or,
/// with [`OtherSessions::End`], ending them (`WITH (FORCE)`, PostgreSQL
/// 13+). Returns the sessions it ended. A plain `DROP DATABASE` never
/// ends a session: one still open when the wait is over is named and the
/// database left as it was.
///
/// # Errors
/// Sessions still open after the wait (environmental), or the server
/// refused the drop.
pub(crate) async fn drop_database(
    c: &tokio_postgres::Client,
    db: &str,
    others: OtherSessions,
) -> Result<Vec<String>, AdapterError> {
    let name = quote(db);
    let failed = |e| sql_err(&format!("DROP DATABASE {name}"), e);
    let wait = match others {
        OtherSessions::End => {
            let who = sessions_on(c, db).await;
            c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
                .map_err(failed)?;
            return Ok(who);
        }
        OtherSessions::Wait(wait) => wait,
    };
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        end_clientless(c, db).await;
        // Looked at first: a DROP with sessions on the database would
        // itself wait 5 s inside the server before it fails.
        let who = sessions_on(c, db).await;
        if who.is_empty() {
            match c
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
                .await
            {
                Ok(()) => return Ok(Vec::new()),
                // A session came (or one the admin may not see was there).
                Err(e)
                    if e.as_db_error().is_some_and(|db| {
                        *db.code() == tokio_postgres::error::SqlState::OBJECT_IN_USE
                    }) => {}
                Err(e) => return Err(failed(e)),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            let who = if who.is_empty() {
                "ones the admin role may not see (granting it pg_read_all_stats shows who)"
                    .to_owned()
            } else {
                who.join("; ")
            };
            return Err(AdapterError::environmental(format!(
                "postgres: the database {name} still has sessions binky did not open after {}: {who}; it is left as it was, since ending them would lose their work. Close them, or run again with --force to end them",
                humantime::format_duration(wait)
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Ends the sessions on `db` whose client is gone: a stopped service's
/// query runs on in its backend until it next writes to the socket (for a
/// long query, minutes), though nothing can ever commit it.
async fn end_clientless(c: &tokio_postgres::Client, db: &str) {
    let rows = c
        .query(
            "SELECT pid, client_port, inet_server_port() FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()
               AND host(client_addr) IN ('127.0.0.1', '::1')
               AND host(inet_server_addr()) IN ('127.0.0.1', '::1')",
            &[&db],
        )
        .await;
    end_if_clientless(c, rows).await;
}

/// Ends each session of `rows` (pid, client port, server port) whose
/// client is gone. Only where that is known: the server is reached over
/// loopback TCP (the queries keep only such rows), so a session from
/// 127.0.0.1 or ::1 comes from this machine's network namespace, where the
/// kernel lists every client socket that a process holds.
async fn end_if_clientless(
    c: &tokio_postgres::Client,
    rows: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>,
) {
    let Ok(rows) = rows else { return };
    for r in rows {
        let (pid, client, server): (i32, Option<i32>, Option<i32>) = (r.get(0), r.get(1), r.get(2));
        let (Some(Ok(client)), Some(Ok(server))) =
            (client.map(u16::try_from), server.map(u16::try_from))
        else {
            continue;
        };
        if crate::platform::tcp_client_alive(client, server) == Some(false) {
            let _ = c.execute("SELECT pg_terminate_backend($1)", &[&pid]).await;
        }
    }
}

/// How long making or dropping a slice's database waits for another
/// session making or dropping the same one: a clone takes as long as its
/// template's copy, so this is generous.
pub const SLICE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Takes the slice's session-level advisory lock on `c`, held until `c`
/// closes. Making a slice's database holds it across `CREATE DATABASE`;
/// dropping it takes it first. Why: a daemon killed (or an `up` cancelled)
/// mid-clone leaves its backend copying, and that `CREATE DATABASE`
/// commits minutes later; a teardown that ran meanwhile found nothing to
/// drop, its record went, and the database it then made was nobody's.
/// Now the teardown waits for it, and ends it at once when its client is
/// gone (a loopback server, where that is known): its copy can be
/// committed by nobody Binky would then know of.
///
/// # Errors
/// Another session, still alive, held it for [`SLICE_LOCK_WAIT`]
/// (environmental), or the server refused the lock.
pub(super) async fn lock_slice(c: &tokio_postgres::Client, db: &str) -> Result<(), AdapterError> {
    let key = super::advisory_key("slice", db);
    let bits = key as u64;
    let (high, low) = ((bits >> 32) as i64, (bits & 0xffff_ffff) as i64);
    let deadline = tokio::time::Instant::now() + SLICE_LOCK_WAIT;
    loop {
        let got: bool = c
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .map_err(|e| sql_err("pg_try_advisory_lock", e))?
            .get(0);
        if got {
            return Ok(());
        }
        let holders = c
            .query(
                "SELECT a.pid, a.client_port, inet_server_port() FROM pg_locks l
                 JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                   AND l.classid::bigint = $1 AND l.objid::bigint = $2
                   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND a.pid <> pg_backend_pid()
                   AND host(a.client_addr) IN ('127.0.0.1', '::1')
                   AND host(inet_server_addr()) IN ('127.0.0.1', '::1')",
                &[&high, &low],
            )
            .await;
        end_if_clientless(c, holders).await;
        if tokio::time::Instant::now() >= deadline {
            return Err(AdapterError::environmental(format!(
                "postgres: another session has been making or dropping the database {} for more than {}; try again when it is done",
                quote(db),
                humantime::format_duration(SLICE_LOCK_WAIT)
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
