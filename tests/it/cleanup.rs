//! Dropping what a test made on the real servers, however the test ends:
//! a project's databases and each world's own role or user.

use crate::adapters::PG_ADMIN;
use crate::templates::mysql;
use std::process::Command;

/// The server's MySQL databases whose name starts with `prefix`.
pub fn mysql_databases(prefix: &str) -> Vec<String> {
    mysql("", "show databases")
        .lines()
        .filter(|d| d.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// Drops every database of a test's project (PostgreSQL, or MySQL with
/// `mysql`), and the worlds' own roles or users, when the test ends, pass
/// or fail.
pub struct Cleanup {
    pub prefix: String,
    pub mysql: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.mysql {
            for db in mysql_databases(&self.prefix) {
                let _ = Command::new("mysql")
                    .args([
                        "-h127.0.0.1",
                        "-uroot",
                        "-e",
                        &format!("drop database if exists `{db}`"),
                    ])
                    .output();
            }
            // The worlds' own users.
            if let Ok(out) = Command::new("mysql")
                .args([
                    "-h127.0.0.1",
                    "-uroot",
                    "-N",
                    "-B",
                    "-e",
                    "select user from mysql.user where host = '%'",
                ])
                .output()
            {
                for user in String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|u| u.starts_with(&self.prefix))
                {
                    let _ = Command::new("mysql")
                        .args([
                            "-h127.0.0.1",
                            "-uroot",
                            "-e",
                            &format!("drop user if exists '{user}'@'%'"),
                        ])
                        .output();
                }
            }
        } else {
            drop_pg(PG_ADMIN, &self.prefix);
        }
    }
}

/// Drops, on the PostgreSQL server at `admin`, every database whose name
/// starts with `prefix` (ending its sessions) and then every role that
/// does: what a test's worlds and templates made there.
pub fn drop_pg(admin: &str, prefix: &str) {
    // `_` and `%` are wildcards in LIKE: escaped, so another run's
    // databases never match.
    let like = prefix
        .replace('\\', "\\\\")
        .replace('_', "\\_")
        .replace('%', "\\%");
    let names = |sql: String| -> Vec<String> {
        Command::new("psql")
            .args([admin, "-tAc", &sql])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    for db in names(format!(
        "select datname from pg_database where datname like '{like}%' escape '\\'"
    )) {
        let _ = Command::new("psql")
            .args([
                admin,
                "-qc",
                &format!("drop database if exists \"{db}\" with (force)"),
            ])
            .output();
    }
    // The worlds' own roles, once their databases are gone.
    for role in names(format!(
        "select rolname from pg_roles where rolname like '{like}%' escape '\\'"
    )) {
        let _ = Command::new("psql")
            .args([admin, "-qc", &format!("drop role if exists \"{role}\"")])
            .output();
    }
}
