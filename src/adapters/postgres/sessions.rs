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
/// long query, minutes), though nothing can ever commit it. Only where
/// that is known: the server is reached over loopback TCP, so a session
/// from 127.0.0.1 or ::1 comes from this machine's network namespace,
/// where the kernel lists every client socket that a process holds.
async fn end_clientless(c: &tokio_postgres::Client, db: &str) {
    let Ok(rows) = c
        .query(
            "SELECT pid, client_port, inet_server_port() FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()
               AND host(client_addr) IN ('127.0.0.1', '::1')
               AND host(inet_server_addr()) IN ('127.0.0.1', '::1')",
            &[&db],
        )
        .await
    else {
        return;
    };
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
