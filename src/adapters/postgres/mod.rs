//! `postgres`: one database per world on a PostgreSQL server the user runs.
//!
//! Slice names are `<project>_<world-slug>`, cut to PostgreSQL's 63-byte
//! identifier limit with a hash suffix (so truncation never makes two worlds
//! share a database), and always quoted. A clone is a server-side
//! `CREATE DATABASE … TEMPLATE`. PostgreSQL copies a template only while no
//! other session is connected to it; Binky never ends a session it did not
//! open, so a clone waits briefly for the template to be free and otherwise
//! fails (environmental, so the world is built by provision + migrate +
//! seed) naming who holds it.

mod clone;
pub mod role;
mod sessions;

pub use clone::FILE_COPY_FROM_BYTES;

pub use sessions::SLICE_LOCK_WAIT;
pub(crate) use sessions::drop_database;
use sessions::{lock_slice, sessions_on};

use super::kit::address::AdminUrl;
use super::{
    Adapter, AdapterError, Cloned, OTHER_SESSIONS_WAIT, OtherSessions, Slice, TemplateLock,
};
use async_trait::async_trait;

/// PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes.
pub const MAX_IDENT: usize = super::kit::names::POSTGRES_DATABASE.max_len;

/// The postgres adapter.
pub struct Postgres;

/// `"name"` with embedded quotes doubled.
fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

fn admin(slice: &Slice) -> Result<&AdminUrl, AdapterError> {
    slice.admin_url.as_ref().ok_or_else(|| {
        AdapterError::new(
            "the postgres adapter needs admin_url, e.g. admin_url = \"${env.PG_ADMIN_URL}\" with PG_ADMIN_URL=postgresql://user@localhost:5432/postgres",
        )
    })
}

impl AdminUrl {
    /// The connection settings this URL names, as the postgres driver reads
    /// them (a URL, or libpq's `host=… user=…` form); `binky check` refuses
    /// a literal `admin_url` by this same reader.
    ///
    /// # Errors
    /// What is wrong with the URL, never quoting it.
    pub(crate) fn postgres_config(&self) -> Result<tokio_postgres::Config, String> {
        self.as_str().parse::<tokio_postgres::Config>().map_err(|e| {
            crate::secrets::redact_url(
                &format!("admin_url is not a postgresql:// URL the driver takes ({e}); e.g. postgresql://user@localhost:5432/postgres"),
                Some(self.as_str()),
            )
        })
    }
}

/// Connects with the admin URL. The error never quotes the URL (it may hold
/// a password).
async fn connect(slice: &Slice) -> Result<tokio_postgres::Client, AdapterError> {
    let config = admin(slice)?
        .postgres_config()
        .map_err(|e| AdapterError::new(format!("postgres: {e}")).redacted(slice))?;
    open(slice, config).await
}

/// Connects as the admin to database `db` (not the admin URL's own).
async fn connect_to(slice: &Slice, db: &str) -> Result<tokio_postgres::Client, AdapterError> {
    let mut config = admin(slice)?
        .postgres_config()
        .map_err(|e| AdapterError::new(format!("postgres: {e}")).redacted(slice))?;
    config.dbname(db);
    open(slice, config).await
}

async fn open(
    slice: &Slice,
    config: tokio_postgres::Config,
) -> Result<tokio_postgres::Client, AdapterError> {
    let url = admin(slice)?;
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| {
            AdapterError::environmental(format!(
                "postgres: cannot connect to {} (admin_url): {}; check that the server runs and that the account may create databases",
                target(url),
                describe(&e)
            ))
            .redacted(slice)
        })?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// `host:port as user` of an admin URL, for errors: where, and as whom, but
/// never the password.
fn target(url: &AdminUrl) -> String {
    let Ok(c) = url.postgres_config() else {
        return "the server".into();
    };
    let host = match c.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let at = super::kit::address::host_port(&host, port);
    match c.get_user() {
        Some(u) => format!("{at} as {u}"),
        None => at,
    }
}

/// The server's own words for an error: its message, detail and hint
/// (tokio-postgres's `Display` says only "db error"), else the client's
/// error with its cause.
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(d) = db.detail() {
            out.push_str(&format!("; detail: {d}"));
        }
        if let Some(h) = db.hint() {
            out.push_str(&format!("; hint: {h}"));
        }
        return out;
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

fn sql_err(what: &str, e: tokio_postgres::Error) -> AdapterError {
    AdapterError::new(format!("postgres: {what}: {}", describe(&e)))
}

/// How long a clone waits for the template to have no other session.
pub const TEMPLATE_FREE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The advisory-lock key of `what` (`golden`: building a template;
/// `slice`: making or dropping a database) for database `name`: the first
/// 8 bytes of a SHA-256 of a namespaced name, so unrelated users of
/// advisory locks on the same server are unlikely to collide with us.
fn advisory_key(what: &str, name: &str) -> i64 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(format!("binky {what} {name}").as_bytes());
    i64::from_be_bytes(h[..8].try_into().expect("8 bytes"))
}

#[async_trait]
impl Adapter for Postgres {
    fn name(&self) -> &str {
        "postgres"
    }

    async fn orphan_users(&self, server: &Slice) -> Result<Vec<String>, AdapterError> {
        role::orphans(&connect(server).await?).await
    }

    async fn provision(&self, slice: &Slice) -> Result<(), AdapterError> {
        let c = connect(slice).await?;
        lock_slice(&c, &slice.name).await?;
        c.batch_execute(&format!("CREATE DATABASE {}", quote(&slice.name)))
            .await
            .map_err(|e| sql_err(&format!("CREATE DATABASE {}", quote(&slice.name)), e))?;
        create_extensions(slice).await?;
        if role::wanted(slice) {
            role::ensure(&c, slice, role::Login::World).await?;
        }
        Ok(())
    }

    async fn resolve(&self, slice: &Slice) -> Result<String, AdapterError> {
        let url = admin(slice)?;
        if !role::wanted(slice) {
            return super::kit::address::with_database(url.as_str(), &slice.name)
                .map_err(|e| AdapterError::new(format!("{}: admin_url {e}", self.name())));
        }
        // Looked up, never made: a world made before it had a role (or
        // with `acl = false`) keeps the admin's address until `up` or
        // `reload` gives it one (`complete`).
        let c = connect(slice).await?;
        match role::find(&c, &slice.name).await? {
            role::Found::Binkys => world_url(url, &slice.name, role::secret(slice)?),
            role::Found::Missing => super::kit::address::with_database(url.as_str(), &slice.name)
                .map_err(|e| AdapterError::new(format!("{}: admin_url {e}", self.name()))),
            role::Found::Foreign => Err(role::foreign(slice)),
        }
    }

    /// Made before it had a role (or with `acl = false`): the world gets
    /// its role now, on the database it has, data kept, and what the admin
    /// made in it since. A role it has is brought in line with the
    /// options. One connection, to the world's database: roles and
    /// databases are the server's, its objects the database's.
    async fn complete(&self, slice: &Slice) -> Result<(), AdapterError> {
        if !role::wanted(slice) {
            return Ok(());
        }
        let c = connect_to(slice, &slice.name).await?;
        role::ensure(&c, slice, role::Login::World).await?;
        role::hand_over(&c, slice).await
    }

    async fn teardown(&self, slice: &Slice) -> Result<(), AdapterError> {
        self.teardown_with(slice, OtherSessions::Wait(OTHER_SESSIONS_WAIT))
            .await
            .map(|_| ())
    }

    async fn teardown_with(
        &self,
        slice: &Slice,
        others: OtherSessions,
    ) -> Result<Vec<String>, AdapterError> {
        // A name the rule could not have made (`postgres`, someone's own
        // database) is refused before the server is reached.
        super::kit::owner::check_name(
            "postgres",
            &admin(slice)?.to_string(),
            &super::kit::names::POSTGRES_DATABASE,
            &slice.name,
        )?;
        let c = connect(slice).await?;
        // After any session still making it: else its CREATE would commit
        // a database after this drop found none.
        lock_slice(&c, &slice.name).await?;
        let mut ended = drop_database(&c, &slice.name, others).await?;
        // The role after its database (a role that owns one cannot be
        // dropped); one Binky did not make is left.
        ended.extend(role::drop(&c, slice, others).await?);
        Ok(ended)
    }

    async fn drop_template(&self, template: &Slice) -> Result<(), AdapterError> {
        let c = connect(template).await?;
        lock_slice(&c, &template.name).await?;
        // No FORCE: the template's sessions are not Binky's to end.
        let sql = format!("DROP DATABASE IF EXISTS {}", quote(&template.name));
        match c.batch_execute(&sql).await {
            // Databases its role made: never another's session ended.
            Ok(()) => role::drop(&c, template, OtherSessions::Wait(std::time::Duration::ZERO))
                .await
                .map(|_| ()),
            Err(e)
                if e.as_db_error().is_some_and(|db| {
                    *db.code() == tokio_postgres::error::SqlState::OBJECT_IN_USE
                }) =>
            {
                let who = sessions_on(&c, &template.name).await;
                Err(AdapterError::environmental(format!(
                    "postgres: the template {} is in use by other sessions ({}); it is left, and binky never ends a session it did not open",
                    quote(&template.name),
                    if who.is_empty() {
                        "ones the admin role may not see".to_owned()
                    } else {
                        who.join("; ")
                    }
                )))
            }
            Err(e) => Err(sql_err(
                &format!("DROP DATABASE {}", quote(&template.name)),
                e,
            )),
        }
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
        // A role of Binky's whose database is gone is what is left of the
        // slice (an interrupted teardown): there, so it is torn down.
        Ok(!rows.is_empty() || role::find(&c, &slice.name).await? == role::Found::Binkys)
    }

    async fn lock_template(
        &self,
        template: &Slice,
        wait: bool,
    ) -> Result<Option<TemplateLock>, AdapterError> {
        let c = connect(template).await?;
        // Session-level: released when this connection closes, which is when
        // the guard (the client) drops, or when a crashed daemon's socket does.
        let key = advisory_key("golden", &template.name);
        if wait {
            c.execute("SELECT pg_advisory_lock($1)", &[&key])
                .await
                .map_err(|e| sql_err("pg_advisory_lock", e))?;
        } else {
            let got: bool = c
                .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                .await
                .map_err(|e| sql_err("pg_try_advisory_lock", e))?
                .get(0);
            if !got {
                return Err(AdapterError::new(format!(
                    "postgres: another daemon is using the template {} now; try again later",
                    quote(&template.name)
                )));
            }
        }
        Ok(Some(Box::new(c)))
    }

    async fn data_path(&self, slice: &Slice) -> Option<std::path::PathBuf> {
        clone::data_path(slice).await
    }

    async fn clone_slice(&self, template: &Slice, slice: &Slice) -> Result<Cloned, AdapterError> {
        let cloned = copy_template(template, slice).await?;
        adopt(template, slice, role::Login::World).await?;
        Ok(cloned)
    }

    /// A copy of the template with a role of its own that may not log in
    /// yet: everything a world's handover costs is paid here, ahead of
    /// time, so that taking it is one transaction of renames.
    async fn make_spare(&self, template: &Slice, spare: &Slice) -> Result<Cloned, AdapterError> {
        let cloned = copy_template(template, spare).await?;
        adopt(template, spare, role::Login::Spare).await?;
        Ok(cloned)
    }

    async fn take_spare(
        &self,
        template: &Slice,
        spare: &Slice,
        slice: &Slice,
    ) -> Result<(), AdapterError> {
        let c = connect(slice).await?;
        // As a clone: no teardown of the world's name runs meanwhile.
        lock_slice(&c, &slice.name).await?;
        // Metadata only, whatever the size: the spare's files become the
        // world's database. Nobody connects to a spare, so nothing holds it.
        let rename = format!(
            "ALTER DATABASE {} RENAME TO {}",
            quote(&spare.name),
            quote(&slice.name)
        );
        match (role::wanted(slice), role::find(&c, &spare.name).await?) {
            (true, role::Found::Binkys) => {
                let sql = format!(
                    "BEGIN; {rename}; {}; COMMIT",
                    role::take_spare(spare, slice)?
                );
                c.batch_execute(&sql).await.map_err(|e| sql_err(&rename, e))
            }
            // Made before spares had roles, or with `acl = false`: the
            // world's role is made and handed everything now, as a
            // clone's is.
            (_, role::Found::Missing) => {
                c.batch_execute(&rename)
                    .await
                    .map_err(|e| sql_err(&rename, e))?;
                adopt(template, slice, role::Login::World).await
            }
            (false, role::Found::Binkys) => Err(AdapterError::new(format!(
                "postgres: the spare {} was made with a role of its own, and options.acl is false now",
                quote(&spare.name)
            ))),
            (_, role::Found::Foreign) => Err(AdapterError::new(format!(
                "postgres: a role {} exists that Binky did not make; the spare is not taken",
                quote(&spare.name)
            ))),
        }
    }
}

/// Copies `template` into a new database named as `target` on the server
/// (`CREATE DATABASE … TEMPLATE`, the strategy [`clone::Plan`] picks), and
/// says how. The name's lock is held until the copy commits.
///
/// # Errors
/// Environmental (so a world falls back to provision + migrate + seed):
/// the template stayed in use by other sessions past
/// [`TEMPLATE_FREE_WAIT`], naming them, or the server refused the copy.
async fn copy_template(template: &Slice, target: &Slice) -> Result<Cloned, AdapterError> {
    let c = connect(target).await?;
    // Held until `c` closes, past the copy's commit (see `lock_slice`).
    lock_slice(&c, &target.name).await?;
    let plan = clone::Plan::read(&c, template).await?;
    if let Some(set) = plan.setting() {
        c.batch_execute(set)
            .await
            .map_err(|e| sql_err("SET file_copy_method", e))?;
    }
    let sql = plan.statement(&template.name, &target.name);
    // The template must have no other session while it is copied. Those
    // sessions are not ours to end (a person in psql, an IDE, a worker):
    // wait briefly — a clone by another daemon, or a session closing,
    // frees it — then give up, saying who holds it.
    let deadline = tokio::time::Instant::now() + TEMPLATE_FREE_WAIT;
    loop {
        let e = match c.batch_execute(&sql).await {
            Ok(()) => return Ok(plan.cloned()),
            Err(e) => e,
        };
        let in_use = e
            .as_db_error()
            .is_some_and(|db| *db.code() == tokio_postgres::error::SqlState::OBJECT_IN_USE);
        if in_use && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        // Either way the clone may fall back to provision + migrate.
        let err = if in_use {
            let who = sessions_on(&c, &template.name).await;
            let holders = if who.is_empty() {
                "sessions the admin role may not see (grant it pg_read_all_stats, or ask a superuser, to see who)".to_owned()
            } else {
                who.join("; ")
            };
            AdapterError::environmental(format!(
                "postgres: the template {} is in use by other sessions for more than {} s: {holders}; close them to let worlds be cloned (binky never ends a session it did not open)",
                quote(&template.name),
                TEMPLATE_FREE_WAIT.as_secs()
            ))
        } else {
            let plain = sql_err(
                &format!("CREATE DATABASE {} TEMPLATE", quote(&target.name)),
                e,
            );
            AdapterError::environmental(plain.message)
        };
        return Err(err);
    }
}

/// Hands a fresh copy of `template` (a clone, a spare, or a spare made
/// before spares had roles, renamed) to the slice's role, where it has one
/// (`login`: a world's, or a spare's that may not log in yet): its objects are the template role's
/// (or the admin's), and the world's role owns them now.
///
/// # Errors
/// The role cannot be made or given the objects.
async fn adopt(template: &Slice, slice: &Slice, login: role::Login) -> Result<(), AdapterError> {
    if !role::wanted(slice) {
        return Ok(());
    }
    let copy = connect_to(slice, &slice.name).await?;
    role::adopt(&copy, slice, template, login).await
}

/// Creates `options.extensions` in the slice's database as the admin: the
/// one step of a schema a world's own role may not do itself (an
/// extension that is not trusted, such as `postgres_fdw` or `vector`, needs
/// a superuser), done before migrate runs as the world's role.
///
/// # Errors
/// The server refused one (not installed, or the admin may not either).
async fn create_extensions(slice: &Slice) -> Result<(), AdapterError> {
    let names: Vec<&str> = slice
        .options
        .get("extensions")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    if names.is_empty() {
        return Ok(());
    }
    let c = connect_to(slice, &slice.name).await?;
    for e in names {
        c.batch_execute(&format!("CREATE EXTENSION IF NOT EXISTS {}", quote(e)))
            .await
            .map_err(|err| {
                sql_err(
                    &format!("CREATE EXTENSION {} (options.extensions)", quote(e)),
                    err,
                )
            })?;
    }
    Ok(())
}

/// The world's address: the admin URL with the world's database, and the
/// world's role and password in place of the admin's credentials.
///
/// # Errors
/// The admin URL is not a URL the address kit reads.
fn world_url(admin: &AdminUrl, db: &str, password: &str) -> Result<String, AdapterError> {
    let bad = |e: super::kit::address::AddressError| {
        AdapterError::new(format!("postgres: admin_url {e}"))
    };
    let a = admin
        .read(&[], "postgresql://user@localhost:5432/postgres")
        .map_err(bad)?;
    super::kit::address::with_database(&a.with_credentials(db, Some(password)), db).map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_urls_carry_the_worlds_role() {
        assert_eq!(
            world_url(
                &AdminUrl::new("postgresql://root:adm@127.0.0.1:5432/postgres?sslmode=disable"),
                "shop_a",
                "pw"
            )
            .unwrap(),
            "postgresql://shop_a:pw@127.0.0.1:5432/shop_a?sslmode=disable"
        );
    }

    #[test]
    fn names_fit_and_stay_distinct() {
        let a = Postgres.slice_name(
            "inventory-reconciliation-svc",
            None,
            &crate::slug::world_slug("feature/quarterly-inventory-reconciliation-report-a"),
        );
        let b = Postgres.slice_name(
            "inventory-reconciliation-svc",
            None,
            &crate::slug::world_slug("feature/quarterly-inventory-reconciliation-report-b"),
        );
        assert!(a.len() <= MAX_IDENT && b.len() <= MAX_IDENT);
        assert_ne!(a, b);
        assert_eq!(
            Postgres.slice_name("acme", None, "login-fix"),
            "acme_login-fix"
        );
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn errors_name_ipv6_hosts_in_brackets() {
        assert_eq!(
            target(&AdminUrl::new("postgresql://u@[::1]:5433/x")),
            "[::1]:5433 as u"
        );
        assert_eq!(target(&AdminUrl::new("postgresql://h/x")), "h:5432");
    }

    #[test]
    fn database_is_replaced_in_the_url() {
        assert_eq!(
            crate::adapters::kit::address::with_database(
                "postgresql://root@127.0.0.1:5432/postgres?sslmode=disable",
                "acme_x"
            )
            .unwrap(),
            "postgresql://root@127.0.0.1:5432/acme_x?sslmode=disable"
        );
        assert_eq!(
            crate::adapters::kit::address::with_database("postgres://u:p@h", "a b").unwrap(),
            "postgres://u:p@h/a%20b"
        );
    }
}
