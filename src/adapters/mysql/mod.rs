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

mod copy;
mod user;

use super::kit::address::AdminUrl;
use super::kit::users::Found;
use super::{Adapter, AdapterError, Cloned, Slice, TemplateLock, find_executable, stderr_tail};
use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

/// MySQL's identifier limit for databases, in characters (slice names are
/// ASCII, so bytes).
pub const MAX_IDENT: usize = super::kit::names::MYSQL_DATABASE.max_len;

/// The mysql adapter.
pub struct Mysql;

/// `` `name` `` with embedded backticks doubled.
fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

fn admin(slice: &Slice) -> Result<&AdminUrl, AdapterError> {
    slice.admin_url.as_ref().ok_or_else(|| {
        AdapterError::new(
            "the mysql adapter needs admin_url, e.g. admin_url = \"${env.MYSQL_ADMIN_URL}\" with MYSQL_ADMIN_URL=mysql://root@127.0.0.1:3306/",
        )
    })
}

fn environmental(message: String) -> AdapterError {
    AdapterError::environmental(message)
}

impl AdminUrl {
    /// The connection options this URL names, as the mysql driver reads
    /// them; `binky check` refuses a literal `admin_url` by this same
    /// reader.
    ///
    /// # Errors
    /// What is wrong with the URL, never quoting it.
    pub(crate) fn mysql_opts(&self) -> Result<Opts, String> {
        Opts::from_url(self.as_str()).map_err(|e| {
            crate::secrets::redact_url(
                &format!(
                    "admin_url is not a valid mysql:// URL ({e}); e.g. mysql://root@127.0.0.1:3306/"
                ),
                Some(self.as_str()),
            )
        })
    }
}

/// `slice`'s admin URL as the driver's options.
///
/// # Errors
/// It has none, or none the driver reads; never quoting it.
fn admin_opts(slice: &Slice) -> Result<Opts, AdapterError> {
    admin(slice)?
        .mysql_opts()
        .map_err(|e| AdapterError::new(format!("mysql: {e}")).redacted(slice))
}

/// Connects with the admin URL; the error never quotes the URL (it may hold
/// a password).
async fn connect(slice: &Slice) -> Result<Conn, AdapterError> {
    let opts = admin_opts(slice)?;
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

/// The dump route (`clone_strategy = "dump"`): `mysqldump | mysql`, with the
/// password passed in `MYSQL_PWD` so it never shows in a process listing.
async fn copy_with_dump(slice: &Slice, src: &str, dst: &str) -> Result<(), AdapterError> {
    let opts = admin_opts(slice)?;
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

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let mut c = connect(slice).await?;
        exec(&mut c, &format!("CREATE DATABASE {}", quote(&slice.name))).await?;
        if user::wanted(slice) {
            user::ensure(&mut c, slice).await?;
        }
        let _ = c.disconnect().await;
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let url = admin(slice)?;
        let admins = || {
            super::kit::address::with_database(url.as_str(), &slice.name)
                .map_err(|e| AdapterError::new(format!("{}: admin_url {e}", self.name())))
        };
        if !user::wanted(slice) {
            return admins();
        }
        // Looked up, never made: a world made before it had a user (or
        // with `acl = false`) keeps the admin's address until `up` or
        // `reload` gives it one (`complete`).
        let mut c = connect(slice).await?;
        let found = user::find(&mut c, slice).await;
        let _ = c.disconnect().await;
        match found? {
            Found::Binkys => user::world_url(url, slice),
            Found::Missing => admins(),
            Found::Foreign => Err(user::foreign(slice)),
        }
    }

    /// A world made before it had a user (or with `acl = false`) gets one,
    /// data kept; Binky's own has its password reset to the one Binky
    /// keeps, and its grant given.
    async fn complete(&self, slice: &Slice) -> Result<(), AdapterError> {
        if !user::wanted(slice) {
            return Ok(());
        }
        let mut c = connect(slice).await?;
        let r = user::ensure(&mut c, slice).await;
        let _ = c.disconnect().await;
        r
    }

    async fn orphan_users(&self, server: &Slice) -> Result<Vec<String>, AdapterError> {
        let mut c = connect(server).await?;
        let r = user::orphans(&mut c).await;
        let _ = c.disconnect().await;
        r
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        // A name the rule could not have made (`mysql`, someone's own
        // database) is refused before the server is reached.
        super::kit::owner::check_name(
            "mysql",
            &admin(slice)?.to_string(),
            &super::kit::names::MYSQL_DATABASE,
            &slice.name,
        )?;
        let mut c = connect(slice).await?;
        exec(
            &mut c,
            &format!("DROP DATABASE IF EXISTS {}", quote(&slice.name)),
        )
        .await?;
        // The user after its database: an interrupted teardown leaves the
        // slice's record, and `gc` comes back for the user.
        match user::drop(&mut c, slice).await {
            // An admin that may not manage users made none (`acl = false`
            // on a shared server): nothing of the world's is left.
            Err(e) if !user::wanted(slice) && e.is_environmental() => {}
            r => r?,
        }
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

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let strategy = slice
            .options
            .get("clone_strategy")
            .and_then(|v| v.as_str())
            .unwrap_or("copy");
        let mut c = connect(slice).await?;
        create_like(&mut c, template, &slice.name).await?;
        let copied = match strategy {
            "copy" => copy::copy_on_server(&mut c, &template.name, &slice.name).await,
            "dump" => copy_with_dump(slice, &template.name, &slice.name).await,
            other => Err(AdapterError::new(format!(
                "mysql: clone_strategy = \"{other}\" is not one of copy, dump"
            ))),
        };
        let copied = match copied {
            Ok(()) if user::wanted(slice) => user::ensure(&mut c, slice).await,
            other => other,
        };
        let _ = c.disconnect().await;
        copied.map(|()| Cloned {
            how: strategy.to_owned(),
            shares_blocks: Some(false),
            ..Cloned::default()
        })
    }

    async fn make_spare(&self, template: &Slice, spare: &Slice) -> Result<Cloned, AdapterError> {
        let mut c = connect(spare).await?;
        create_like(&mut c, template, &spare.name).await?;
        // Data only: a view or trigger names its schema, and a table with
        // triggers cannot move to another; they are made at the take.
        copy::copy_tables(&mut c, &template.name, &spare.name).await?;
        let _ = c.disconnect().await;
        Ok(Cloned {
            how: "copy (tables)".to_owned(),
            shares_blocks: Some(false),
            ..Cloned::default()
        })
    }

    async fn take_spare(
        &self,
        template: &Slice,
        spare: &Slice,
        slice: &Slice,
    ) -> Result<(), AdapterError> {
        let mut c = connect(slice).await?;
        create_like(&mut c, template, &slice.name).await?;
        // One statement: every table moves, metadata only, or none does.
        let moves: Vec<String> = copy::tables(&mut c, &spare.name)
            .await?
            .iter()
            .map(|(t, _)| {
                format!(
                    "{}.{} TO {}.{}",
                    quote(&spare.name),
                    quote(t),
                    quote(&slice.name),
                    quote(t)
                )
            })
            .collect();
        if !moves.is_empty() {
            exec(&mut c, &format!("RENAME TABLE {}", moves.join(", "))).await?;
        }
        copy::copy_definitions(&mut c, &template.name, &slice.name).await?;
        exec(
            &mut c,
            &format!("DROP DATABASE IF EXISTS {}", quote(&spare.name)),
        )
        .await?;
        if user::wanted(slice) {
            user::ensure(&mut c, slice).await?;
        }
        let _ = c.disconnect().await;
        Ok(())
    }
}

/// Creates database `name` with the character set and collation of
/// `template`.
///
/// # Errors
/// The template is not there, or the server refuses.
async fn create_like(c: &mut Conn, template: &Slice, name: &str) -> Result<(), AdapterError> {
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
        c,
        &format!(
            "CREATE DATABASE {} CHARACTER SET {charset} COLLATE {collation}",
            quote(name)
        ),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_are_quoted() {
        let long = crate::slug::world_slug(&"feature/x".repeat(20));
        let a = Mysql.slice_name("shop", None, &long);
        assert!(a.len() <= MAX_IDENT, "{a}");
        assert_ne!(a, Mysql.slice_name("shop", None, &format!("{long}-b")));
        assert_eq!(quote("a`b"), "`a``b`");
    }
}
