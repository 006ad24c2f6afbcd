//! `redis` (also `valkey`): a key prefix per world on a Redis-protocol server
//! the user runs.
//!
//! A world's slice is the prefix `<project>:<world-slug>:`. The trailing
//! separator makes it exact: `shop:feat-a:` never matches the keys of
//! `shop:feat-a-2:`. The address is the server URL with the prefix as its
//! fragment (`redis://127.0.0.1:6379/0#shop:feat-a:`): clients ignore a
//! fragment, where a query option would be refused by those that check
//! them. Most clients take the prefix as an option, so it is also
//! `${SVC.prefix}`.
//!
//! A slice exists while its marker key `_binky:slice:<prefix>` does (Binky's
//! own key, outside every world's prefix: no project name starts with `_`), so a world whose app wrote no
//! key yet is still known as made. Teardown deletes the world's keys with
//! `SCAN MATCH <prefix>*` and `UNLINK` in batches of [`BATCH`]: never
//! `KEYS`, `FLUSHDB` or `FLUSHALL`, so other clients of the server wait at
//! most one batch.
//!
//! With `options.acl = true` each world also gets an ACL user allowed only
//! `~<prefix>*` (and channels `&<prefix>*`), with every `@dangerous` command
//! denied but `INFO` (`FLUSHALL`, `FLUSHDB`, `KEYS`, `SWAPDB`, `CONFIG`,
//! `DEBUG`, `MONITOR`…), and the keyless commands that act on the whole
//! server or leave the world's database (`SELECT`, `SCRIPT FLUSH`/`KILL`,
//! `FUNCTION`): isolation by permission, not only by name. Its
//! password is random and kept in the marker, which that user cannot read.
//!
//! A key-value server has no server-side copy of a prefix, so
//! `capabilities().clone` is false: `clone_from` builds each world by
//! provision + migrate + seed.

use super::kit::address::{Address, AdminUrl};
use super::kit::batch;
use super::kit::owner::{self, Found};
use super::{Adapter, AdapterError, Slice};
use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use std::borrow::Cow;
use std::time::Duration;

/// The server when a resource has no `admin_url`.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";
/// Keys asked for per `SCAN` and deleted per `UNLINK`.
pub const BATCH: usize = 1000;
/// Longest wait for a connection, and for each command's answer, when
/// `options.timeout` is not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Redis adapter.
pub struct Redis;

fn server_url(slice: &Slice) -> Cow<'_, AdminUrl> {
    slice.admin_url_or(DEFAULT_URL)
}

/// Where `url` points, for errors: `host:port` (or a socket's path), never
/// a password.
fn server_of(url: &AdminUrl) -> String {
    url.to_string()
}

/// The slice's marker key (the kit's spelling, outside every world's
/// prefix).
fn marker(slice: &Slice) -> String {
    owner::marker(':', &slice.name)
}

/// The ACL user of a slice: `binky_<project>_<slug>`.
fn acl_user(slice: &Slice) -> String {
    format!(
        "binky_{}",
        slice.name.trim_end_matches(':').replace(':', "_")
    )
}

/// `options.acl`, off by default (Redis before 6.0, and many hosted
/// servers, have no `ACL SETUSER`).
fn wants_acl(slice: &Slice) -> bool {
    super::kit::users::wanted(slice, false)
}

/// Creates (or resets) the world's ACL user with `password`: every command
/// but the dangerous ones, on keys and channels under the world's prefix
/// only. The password is registered as a secret first, so no error or log
/// line can show it.
async fn set_acl_user(
    slice: &Slice,
    con: &mut MultiplexedConnection,
    password: &str,
) -> Result<(), AdapterError> {
    crate::secrets::register(password);
    let prefix = glob_escape(&slice.name);
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg(acl_user(slice))
        .arg("reset")
        .arg("on")
        .arg(format!(">{password}"))
        .arg(format!("~{prefix}*"))
        .arg(format!("&{prefix}*"))
        .arg("+@all")
        .arg("-@dangerous")
        .arg("+info")
        // Keyless but server-wide, or a way out of the world's
        // database (teardown scans only admin_url's).
        .arg("-select")
        .arg("-script|flush")
        .arg("-script|kill")
        .arg("-function");
    run::<()>(slice, con, &setuser, "creating the world's ACL user").await
}

/// `s` with the glob characters `SCAN MATCH` and ACL key patterns read
/// escaped, so a prefix matches only itself.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn err(slice: &Slice, what: &str, e: impl std::fmt::Display) -> AdapterError {
    AdapterError::new(format!(
        "redis at {}: {what}: {e}",
        server_of(&server_url(slice))
    ))
    .redacted(slice)
}

impl AdminUrl {
    /// The client this URL names, as the redis crate reads it (a database
    /// number that is not one, a port past 65535, a scheme it does not
    /// speak); `binky check` refuses a literal `admin_url` by this same
    /// reader.
    ///
    /// # Errors
    /// What is wrong with the URL, naming the server but never a password.
    pub(crate) fn redis_client(&self) -> Result<redis::Client, String> {
        // The kit's reading first: it names a bad port or a missing scheme.
        self.read(&[], DEFAULT_URL)
            .map_err(|e| format!("admin_url {e}"))?;
        redis::Client::open(self.as_str()).map_err(|e| {
            crate::secrets::redact_url(
                &format!(
                    "admin_url for {self} is not a redis URL the client takes: {}",
                    plain(&e)
                ),
                Some(self.as_str()),
            )
        })
    }
}

/// A redis client error in words: the crate's text without the debug name
/// of its kind it carries (`… - Server(ResponseError): detail` reads
/// `…: detail`).
fn plain(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    let Some(at) = text.find(" - ") else {
        return text;
    };
    let rest = &text[at + 3..];
    let (kind, detail) = match rest.split_once(": ") {
        Some((k, d)) => (k, Some(d)),
        None => (rest, None),
    };
    if kind.contains(' ') || !kind.starts_with(|c: char| c.is_ascii_uppercase()) {
        return text;
    }
    match detail {
        Some(d) => format!("{}: {d}", &text[..at]),
        None => text[..at].to_owned(),
    }
}

/// Whether the server turned the connection's credentials down: a wrong
/// user or password (`WRONGPASS`, or the client's own failed `AUTH`), or
/// none given to a server that requires one (`NOAUTH`).
/// The database number `url`'s path names (`redis://h:6379/3` → `3`); ""
/// when it names none.
fn database_of(url: &AdminUrl) -> String {
    url.address().map(Address::database).unwrap_or_default()
}

fn refused_credentials(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// The error for [`refused_credentials`]: the server answers, so "is it
/// running" is the wrong question.
fn credentials_refused(slice: &Slice) -> AdapterError {
    let url = server_url(slice);
    let (user, password) = url.credentials();
    let what = match (user.is_empty(), password.is_empty()) {
        (_, true) => "admin_url gives no password and the server requires one",
        (true, false) => "the password in admin_url is not the server's (default user)",
        (false, false) => "the user or password in admin_url is not one the server accepts",
    };
    AdapterError::new(format!(
        "redis at {} refused the credentials: {what}; put the right ones in admin_url (redis://USER:PASSWORD@host:port/db)",
        server_of(&url)
    ))
    .redacted(slice)
}

/// A connection with the admin URL.
async fn connect(slice: &Slice) -> Result<MultiplexedConnection, AdapterError> {
    let url = server_url(slice);
    let timeout = slice.timeout(DEFAULT_TIMEOUT);
    let unreachable = |e: &dyn std::fmt::Display| {
        AdapterError::environmental(format!(
            "redis: cannot connect to {} (admin_url): {e}; check that the server runs and that admin_url names it",
            server_of(&url)
        ))
        .redacted(slice)
    };
    let client = url
        .redis_client()
        .map_err(|e| AdapterError::new(format!("redis: {e}")).redacted(slice))?;
    match tokio::time::timeout(timeout, client.get_multiplexed_async_connection()).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) if refused_credentials(&e) => Err(credentials_refused(slice)),
        // The server answers, but has no such database: past AUTH, the
        // only command of redis-rs's connection setup whose refusal fails
        // the connection (a ResponseError) is SELECT, which it sends for a
        // database other than 0.
        Ok(Err(e))
            if e.kind() == redis::ServerErrorKind::ResponseError.into()
                && !matches!(database_of(&url).as_str(), "" | "0") =>
        {
            let db = database_of(&url);
            Err(AdapterError::new(format!(
                "redis at {} has no database {db} (the /{db} of admin_url): {}; name one below its `databases` setting (16 by default: 0 to 15)",
                server_of(&url),
                plain(&e)
            ))
            .redacted(slice))
        }
        Ok(Err(e)) => Err(unreachable(&plain(&e))),
        Err(_) => Err(unreachable(&format!(
            "no answer within {timeout:?} (options.timeout)"
        ))),
    }
}

/// Runs one command within `options.timeout`.
async fn run<T: redis::FromRedisValue>(
    slice: &Slice,
    con: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
    what: &str,
) -> Result<T, AdapterError> {
    let timeout = slice.timeout(DEFAULT_TIMEOUT);
    match tokio::time::timeout(timeout, cmd.query_async::<T>(con)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if refused_credentials(&e) => Err(credentials_refused(slice)),
        Ok(Err(e)) => Err(err(slice, what, e)),
        Err(_) => Err(err(
            slice,
            what,
            format!("no answer within {timeout:?} (raise options.timeout if it is only slow)"),
        )),
    }
}

/// Deletes every key under the slice's prefix, a batch at a time; returns
/// how many were deleted.
async fn delete_keys(slice: &Slice, con: &mut MultiplexedConnection) -> Result<u64, AdapterError> {
    let what = format!(
        "redis at {}: deleting the keys under {}",
        server_of(&server_url(slice)),
        slice.name
    );
    let within = batch::within(slice.timeout(DEFAULT_TIMEOUT));
    let mut keys = Keys {
        slice,
        con,
        pattern: format!("{}*", glob_escape(&slice.name)),
        cursor: 0,
    };
    batch::drain(&what, within, &mut keys).await
}

/// A world's keys, listed by `SCAN` and deleted by `UNLINK`.
struct Keys<'a> {
    slice: &'a Slice,
    con: &'a mut MultiplexedConnection,
    pattern: String,
    cursor: u64,
}

impl batch::Listing for Keys<'_> {
    type Name = Vec<u8>;

    async fn page(&mut self) -> Result<batch::Page<Vec<u8>>, AdapterError> {
        let mut scan = redis::cmd("SCAN");
        scan.arg(self.cursor)
            .arg("MATCH")
            .arg(&self.pattern)
            .arg("COUNT")
            .arg(BATCH);
        let (next, keys): (u64, Vec<Vec<u8>>) =
            run(self.slice, self.con, &scan, "listing the world's keys").await?;
        self.cursor = next;
        Ok(batch::Page {
            names: keys,
            more: next != 0,
        })
    }

    async fn delete(&mut self, keys: Vec<Vec<u8>>) -> Result<u64, AdapterError> {
        let mut unlink = redis::cmd("UNLINK");
        unlink.arg(&keys);
        run(self.slice, self.con, &unlink, "deleting the world's keys").await
    }
}

/// Whether any key lies under the slice's prefix (a scan that stops at
/// the first one).
async fn any_key(slice: &Slice, con: &mut MultiplexedConnection) -> Result<bool, AdapterError> {
    let pattern = format!("{}*", glob_escape(&slice.name));
    let mut cursor: u64 = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(BATCH);
        let (next, keys): (u64, Vec<Vec<u8>>) =
            run(slice, con, &scan, "looking for the world's keys").await?;
        if !keys.is_empty() {
            return Ok(true);
        }
        if next == 0 {
            return Ok(false);
        }
        cursor = next;
    }
}

/// A slice whose marker is gone from the server.
/// The slice's marker: the world's ACL password, empty for a slice made
/// without `acl`; `None` when there is no marker.
///
/// # Errors
/// The server refused the read.
async fn read_marker(
    slice: &Slice,
    con: &mut MultiplexedConnection,
) -> Result<Option<String>, AdapterError> {
    let mut get = redis::cmd("GET");
    get.arg(marker(slice));
    run(slice, con, &get, "reading the slice's marker").await
}

fn no_marker(slice: &Slice) -> AdapterError {
    AdapterError::new(format!(
        "redis: the slice {} has no marker on the server (deleted by hand?); run `binky remove --force` and `binky up` to make it again",
        slice.name
    ))
}

/// The world's URL: the server URL with the prefix as fragment, and the
/// ACL user's credentials in place of the admin's when it has one (else the
/// admin URL's own, which a password-protected server needs).
///
/// # Errors
/// `server` is not a URL (the adapter has connected with it, so only a URL
/// the redis client reads and the `url` crate does not).
fn world_url(
    server: &AdminUrl,
    user: Option<(&str, &str)>,
    prefix: &str,
) -> Result<String, AdapterError> {
    let a = server
        .read(&[], DEFAULT_URL)
        .map_err(|e| AdapterError::new(format!("redis: admin_url {e}")))?
        .clone();
    let a = match user {
        Some((u, p)) => Address::parse(&a.with_credentials(u, Some(p)), &[], DEFAULT_URL)
            .map_err(|e| AdapterError::new(format!("redis: admin_url {e}")))?,
        None => a,
    };
    Ok(a.with_fragment(prefix))
}

#[async_trait]
impl Adapter for Redis {
    fn name(&self) -> &str {
        "redis"
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let mut con = connect(slice).await?;
        // Keys already under the prefix are someone else's: a world that
        // took them over would delete them at its teardown.
        if any_key(slice, &mut con).await? {
            return Err(AdapterError::new(format!(
                "redis at {}: keys already lie under the prefix {} and Binky did not make them; delete them, or name the world differently",
                server_of(&server_url(slice)),
                slice.name
            )));
        }
        let acl = wants_acl(slice);
        let password = if acl {
            crate::platform::random_hex(24)
                .map_err(|e| AdapterError::new(format!("redis: no random password: {e}")))?
        } else {
            String::new()
        };
        let mut set = redis::cmd("SET");
        set.arg(marker(slice)).arg(&password).arg("NX");
        let made: Option<String> = run(slice, &mut con, &set, "recording the slice").await?;
        if made.is_none() {
            return Err(AdapterError::new(format!(
                "redis: the slice {} already exists (its marker {} is set)",
                slice.name,
                marker(slice)
            )));
        }
        if acl && let Err(e) = set_acl_user(slice, &mut con, &password).await {
            let mut del = redis::cmd("DEL");
            del.arg(marker(slice));
            let _ = run::<()>(slice, &mut con, &del, "forgetting the slice").await;
            return Err(e);
        }
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let server = server_url(slice);
        if !wants_acl(slice) {
            return world_url(&server, None, &slice.name);
        }
        let mut con = connect(slice).await?;
        let password = read_marker(slice, &mut con).await?;
        match password {
            Some(p) if !p.is_empty() => {
                crate::secrets::register(&p);
                world_url(&server, Some((&acl_user(slice), &p)), &slice.name)
            }
            // Made without `acl` (the option turned on since): the admin's
            // address until `up` or `reload` gives it its user
            // (`complete`). Never made here.
            Some(_) => world_url(&server, None, &slice.name),
            None => Err(no_marker(slice)),
        }
    }

    /// Made without `acl` (the option turned on since): the world gets its
    /// user now, on the prefix it has, data kept. The marker holds the
    /// password from then on, as if made with it.
    async fn complete(&self, slice: &Slice) -> Result<(), AdapterError> {
        if !wants_acl(slice) {
            return Ok(());
        }
        let mut con = connect(slice).await?;
        let password = read_marker(slice, &mut con).await?;
        match password {
            Some(p) if !p.is_empty() => Ok(()),
            Some(_) => {
                let p = crate::platform::random_hex(24)
                    .map_err(|e| AdapterError::new(format!("redis: no random password: {e}")))?;
                set_acl_user(slice, &mut con, &p).await?;
                let mut set = redis::cmd("SET");
                set.arg(marker(slice)).arg(&p).arg("XX");
                run::<Option<String>>(slice, &mut con, &set, "recording the world's ACL user")
                    .await
                    .map(|_| ())
            }
            None => Err(no_marker(slice)),
        }
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        // The name first (`*`, an empty prefix, another tool's), then the
        // marker: the kit's two checks.
        owner::check_name(
            "redis",
            &server_of(&server_url(slice)),
            &super::kit::names::KEY_PREFIX,
            &slice.name,
        )?;
        let mut con = connect(slice).await?;
        // Only a marked prefix is Binky's: keys under an unmarked one are
        // someone else's (or a world's whose marker was deleted by hand).
        let found = if self.exists(slice).await? {
            Found::Ours
        } else if any_key(slice, &mut con).await? {
            Found::Unmarked(format!("keys lie under {}", slice.name))
        } else {
            Found::Gone
        };
        let server = server_of(&server_url(slice));
        if !owner::guard("redis", &server, &slice.name, found)? {
            return Ok(());
        }
        // The user first: deleting it ends its connections, so nothing
        // writes a key behind the scan.
        let mut deluser = redis::cmd("ACL");
        deluser.arg("DELUSER").arg(acl_user(slice));
        let dropped = run::<u64>(slice, &mut con, &deluser, "deleting the world's ACL user").await;
        if wants_acl(slice) {
            dropped?;
        }
        delete_keys(slice, &mut con).await?;
        let mut del = redis::cmd("DEL");
        del.arg(marker(slice));
        run::<u64>(slice, &mut con, &del, "deleting the slice's marker").await?;
        Ok(())
    }

    async fn exists(&self, slice: &Slice) -> Result<bool, AdapterError> {
        let mut con = connect(slice).await?;
        let mut exists = redis::cmd("EXISTS");
        exists.arg(marker(slice));
        let n: u64 = run(slice, &mut con, &exists, "looking for the slice").await?;
        Ok(n == 1)
    }

    fn fields(&self, slice: &Slice) -> Vec<(&'static str, String)> {
        vec![("prefix", slice.name.clone())]
    }
}

#[cfg(test)]
mod tests;
