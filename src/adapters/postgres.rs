//! `postgres`: one database per world on a PostgreSQL server the user runs.
//!
//! Slice names are `<project>_<world-slug>`, cut to PostgreSQL's 63-byte
//! identifier limit with a hash suffix (so truncation never makes two worlds
//! share a database), and always quoted. A clone is a server-side
//! `CREATE DATABASE … TEMPLATE`, after ending other sessions on the template.

use super::{Adapter, AdapterError, Capabilities, Slice};
use async_trait::async_trait;

/// PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes.
pub const MAX_IDENT: usize = 63;

/// The postgres adapter.
pub struct Postgres;

/// `"name"` with embedded quotes doubled.
fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Fits `name` into `max` bytes: unchanged when it fits, else a prefix plus
/// `_` and a short hash of the whole name.
pub fn fit_identifier(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_owned();
    }
    let hash = crate::slug::short_hash(name);
    let mut cut = max - hash.len() - 1;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}_{hash}", name[..cut].trim_end_matches(['_', '-']))
}

fn admin(slice: &Slice) -> Result<&str, AdapterError> {
    slice.admin_url.as_deref().ok_or_else(|| {
        AdapterError::new(
            "the postgres adapter needs admin_url, e.g. admin_url = \"${env.PG_ADMIN_URL}\" with PG_ADMIN_URL=postgresql://user@localhost:5432/postgres",
        )
    })
}

/// Connects with the admin URL. The error never quotes the URL (it may hold
/// a password).
async fn connect(slice: &Slice) -> Result<tokio_postgres::Client, AdapterError> {
    let url = admin(slice)?;
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| {
            let mut err = AdapterError::new(format!(
                "postgres: cannot connect with admin_url: {e}; check that the server runs and that the account may create databases"
            ));
            err.environmental = true;
            err
        })?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

fn sql_err(what: &str, e: tokio_postgres::Error) -> AdapterError {
    AdapterError::new(format!("postgres: {what}: {e}"))
}

/// The admin URL with its database replaced by `db` (query kept).
fn with_database(admin_url: &str, db: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (admin_url, None),
    };
    let after_scheme = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[after_scheme..]
        .find('/')
        .map(|i| after_scheme + i)
        .unwrap_or(base.len());
    let encoded: String = db
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut out = format!("{}/{encoded}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[async_trait]
impl Adapter for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { clone: true }
    }

    fn slice_name(&self, project: &str, world_slug: &str) -> String {
        fit_identifier(&format!("{project}_{world_slug}"), MAX_IDENT)
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let c = connect(slice).await?;
        c.batch_execute(&format!("CREATE DATABASE {}", quote(&slice.name)))
            .await
            .map_err(|e| sql_err(&format!("CREATE DATABASE {}", quote(&slice.name)), e))
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        Ok(with_database(admin(slice)?, &slice.name))
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let c = connect(slice).await?;
        // WITH (FORCE) ends the world's own open sessions (PostgreSQL 13+).
        c.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote(&slice.name)
        ))
        .await
        .map_err(|e| sql_err(&format!("DROP DATABASE {}", quote(&slice.name)), e))
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let c = connect(slice).await?;
        let rows = c
            .query(
                "SELECT 1 FROM pg_database WHERE datname = $1",
                &[&slice.name],
            )
            .await
            .map_err(|e| sql_err("pg_database", e))?;
        Ok(!rows.is_empty())
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<(), AdapterError> {
        let c = connect(slice).await?;
        // A template must have no other sessions while it is copied.
        c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&template.name],
        )
        .await
        .map_err(|e| sql_err("ending sessions on the template", e))?;
        c.batch_execute(&format!(
            "CREATE DATABASE {} TEMPLATE {}",
            quote(&slice.name),
            quote(&template.name)
        ))
        .await
        .map_err(|e| {
            let mut err = sql_err(
                &format!("CREATE DATABASE {} TEMPLATE", quote(&slice.name)),
                e,
            );
            err.environmental = true;
            err
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_stay_distinct() {
        let a = Postgres.slice_name(
            "inventory-reconciliation-svc",
            &crate::slug::world_slug("feature/quarterly-inventory-reconciliation-report-a"),
        );
        let b = Postgres.slice_name(
            "inventory-reconciliation-svc",
            &crate::slug::world_slug("feature/quarterly-inventory-reconciliation-report-b"),
        );
        assert!(a.len() <= MAX_IDENT && b.len() <= MAX_IDENT);
        assert_ne!(a, b);
        assert_eq!(Postgres.slice_name("acme", "login-fix"), "acme_login-fix");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn database_is_replaced_in_the_url() {
        assert_eq!(
            with_database(
                "postgresql://root@127.0.0.1:5432/postgres?sslmode=disable",
                "acme_x"
            ),
            "postgresql://root@127.0.0.1:5432/acme_x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u:p@h", "a b"),
            "postgres://u:p@h/a%20b"
        );
    }
}
