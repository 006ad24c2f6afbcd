//! `clickhouse`: a database per world on a ClickHouse server the user runs,
//! made over its HTTP interface (port 8123), which every ClickHouse since
//! the first release serves.
//!
//! The database is `<project>_<world-slug>` ([`names::DATABASE`]), always
//! quoted with backquotes, since a slug holds `-`. `admin_url` is the HTTP
//! interface with an account that may create and drop databases (default
//! `http://127.0.0.1:8123`, the `default` user). A world's address is
//! `admin_url` with `?database=<db>`: raw HTTP (`curl "$URL" --data-binary
//! 'SELECT …'`) runs in the world's database, and `${SVC.database}` gives the
//! name alone for clients that take it apart from the URL. (ClickHouse
//! ignores a URL's path, so a `/db` path would silently run in `default`.)
//!
//! `clone_from` copies a template only where the server has `CREATE TABLE
//! … CLONE AS` (24.10 and later), which attaches hard links to the
//! template's parts: cheap at any size. A per-table `INSERT … SELECT` is
//! O(rows), the very cost `clone_from` exists to avoid, so an older server
//! (or a template holding a table that is not a MergeTree) is refused as
//! environmental and the world is built by provision + migrate + seed
//! (`clone_fallback` says which path ran and why).

use super::kit::address::AdminUrl;
use super::kit::api::{self, Auth, Endpoint};
use super::kit::names;
use super::{Adapter, AdapterError, Cloned, Slice};
use async_trait::async_trait;
use std::time::Duration;

/// The server when a resource has no `admin_url`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8123";
/// The first version with `CREATE TABLE … CLONE AS`.
pub const CLONE_SINCE: (u32, u32) = (24, 10);

const SERVER: api::Server = api::Server {
    adapter: "clickhouse",
    default_url: DEFAULT_URL,
    auth: Auth::Basic,
    unreachable: "check that ClickHouse runs and that admin_url names its HTTP port (8123 by default)",
    slow: "it accepts connections but does not answer (stuck, or not ClickHouse's HTTP port)",
    timeout: Duration::from_secs(30),
    max_body: 4 * 1024 * 1024,
    rule: &names::DATABASE,
};

/// The ClickHouse adapter.
pub struct ClickHouse;

/// `name` as a ClickHouse identifier: backquoted, with `\` and `` ` ``
/// escaped (names Binky makes hold neither; a template's table may).
fn ident(name: &str) -> String {
    format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
}

/// `text` as a ClickHouse string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Runs one statement; its output as text.
async fn query(ep: &Endpoint, what: &str, sql: &str) -> Result<String, AdapterError> {
    let f = ep
        .call("POST", "/", sql.to_owned(), "text/plain; charset=utf-8")
        .await?;
    if !f.status.is_success() {
        let hint = if f.text_head().contains("Not enough privileges") {
            "; the account in admin_url needs CREATE DATABASE and DROP DATABASE"
        } else {
            ""
        };
        return Err(ep.refused(what, &f, hint));
    }
    Ok(String::from_utf8_lossy(&f.body).into_owned())
}

/// `major.minor` of a `version()` answer (`18.16.1`, `24.10.1.2812`).
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The statements that clone `tables` (name, engine) of database `from`
/// into `to`; `Err` names the first table `CLONE AS` cannot copy.
pub fn clone_statements(
    from: &str,
    to: &str,
    tables: &[(String, String)],
) -> Result<Vec<String>, String> {
    tables
        .iter()
        .map(|(table, engine)| {
            if engine.ends_with("MergeTree") {
                Ok(format!(
                    "CREATE TABLE {}.{} CLONE AS {}.{}",
                    ident(to),
                    ident(table),
                    ident(from),
                    ident(table)
                ))
            } else {
                Err(format!(
                    "table `{table}` is a {engine}, and CLONE AS copies only MergeTree tables"
                ))
            }
        })
        .collect()
}

#[async_trait]
impl Adapter for ClickHouse {
    fn name(&self) -> &str {
        "clickhouse"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let ep = Endpoint::owned(SERVER, slice)?;
        if self.exists(slice).await? {
            return Err(AdapterError::new(format!(
                "clickhouse at {}: the database {} already exists",
                ep.host_port(),
                slice.name
            )));
        }
        query(
            &ep,
            &format!("creating database {}", slice.name),
            &format!("CREATE DATABASE {}", ident(&slice.name)),
        )
        .await
        .map(drop)
        .map_err(|e| e.redacted(slice))
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let ep = Endpoint::of(SERVER, slice)?;
        let mut url = url::Url::parse(ep.address().as_str())
            .map_err(|e| AdapterError::new(format!("clickhouse: admin_url: {e}")))?;
        // The admin's other settings stay; its `database` is the world's.
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != "database")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair("database", &slice.name);
        Ok(url.into())
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        let ep = Endpoint::owned(SERVER, slice)?;
        query(
            &ep,
            &format!("dropping database {}", slice.name),
            &format!("DROP DATABASE IF EXISTS {}", ident(&slice.name)),
        )
        .await
        .map(drop)
        .map_err(|e| e.redacted(slice))
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let ep = Endpoint::of(SERVER, slice)?;
        let n = query(
            &ep,
            &format!("looking up database {}", slice.name),
            &format!(
                "SELECT count() FROM system.databases WHERE name = {}",
                literal(&slice.name)
            ),
        )
        .await
        .map_err(|e| e.redacted(slice))?;
        Ok(n.trim() != "0")
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let ep = Endpoint::owned(SERVER, slice)?;
        let server = ep.host_port();
        let version = query(&ep, "asking its version", "SELECT version()").await?;
        let version = version.trim();
        if parse_version(version).is_none_or(|v| v < CLONE_SINCE) {
            return Err(AdapterError::environmental(format!(
                "clickhouse at {server} is {version}: CREATE TABLE … CLONE AS (a cheap copy of a table's parts) needs {}.{} or later, and a row-by-row copy would cost what clone_from exists to save",
                CLONE_SINCE.0, CLONE_SINCE.1
            )));
        }
        let listed = query(
            &ep,
            &format!("listing the tables of {}", template.name),
            &format!(
                "SELECT name, engine FROM system.tables WHERE database = {} ORDER BY name FORMAT TabSeparated",
                literal(&template.name)
            ),
        )
        .await?;
        let tables: Vec<(String, String)> = listed
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(n, e)| (n.to_owned(), e.to_owned()))
            .collect();
        let statements = clone_statements(&template.name, &slice.name, &tables)
            .map_err(|why| AdapterError::environmental(format!("clickhouse at {server}: {why}")))?;
        self.provision(slice).await?;
        for sql in statements {
            if let Err(e) = query(&ep, &format!("cloning into {}", slice.name), &sql).await {
                let _ = self.teardown(slice).await;
                return Err(e.redacted(slice));
            }
        }
        Ok(Cloned::said("CREATE TABLE … CLONE AS"))
    }

    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        vec![("database", slice.name.clone())]
    }
}

/// `binky check`'s reading of a literal `admin_url`: ClickHouse also takes
/// credentials as `?user=…&password=…`, which Binky would not send (and a
/// password there is a literal in the file): refused, saying where they go.
pub(crate) fn check_url(url: &AdminUrl) -> Result<(), String> {
    let a = url.http("http://user:password@127.0.0.1:8123")?;
    if let Some(k) = ["user", "password"]
        .into_iter()
        .find(|k| a.query_value(k).is_some())
    {
        return Err(format!(
            "admin_url gives `{k}` in its query: write the account as user info, http://user:password@host:8123, with the password from ${{env.NAME}}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_query_are_refused_saying_where_they_go() {
        let e = check_url(&AdminUrl::new(
            "http://127.0.0.1:8123/?user=u&password=QuerySecret",
        ))
        .unwrap_err();
        assert!(e.contains("user info"), "{e}");
        assert!(!e.contains("QuerySecret"), "{e}");
        assert!(check_url(&AdminUrl::new("http://u:p@127.0.0.1:8123/?max_threads=2")).is_ok());
    }

    #[test]
    fn versions_before_24_10_cannot_clone() {
        assert_eq!(parse_version("18.16.1"), Some((18, 16)));
        assert_eq!(parse_version("24.10.1.2812"), Some((24, 10)));
        assert!(parse_version("18.16.1").unwrap() < CLONE_SINCE);
        assert!(parse_version("24.10.1").unwrap() >= CLONE_SINCE);
        assert!(parse_version("25.1").unwrap() >= CLONE_SINCE);
        assert_eq!(parse_version("garbage"), None);
    }

    #[test]
    fn only_mergetree_tables_are_cloned_and_every_name_is_quoted() {
        let t = |n: &str, e: &str| (n.to_owned(), e.to_owned());
        let ok = clone_statements(
            "shop_golden",
            "shop_feat-a",
            &[
                t("events", "MergeTree"),
                t("odd`name", "ReplacingMergeTree"),
            ],
        )
        .unwrap();
        assert_eq!(
            ok,
            [
                "CREATE TABLE `shop_feat-a`.`events` CLONE AS `shop_golden`.`events`",
                "CREATE TABLE `shop_feat-a`.`odd\\`name` CLONE AS `shop_golden`.`odd\\`name`",
            ]
        );
        let e = clone_statements("a_b", "a_c", &[t("m", "Memory")]).unwrap_err();
        assert_eq!(
            e,
            "table `m` is a Memory, and CLONE AS copies only MergeTree tables"
        );
        assert_eq!(literal("it's"), "'it\\'s'");
    }
}
