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
        } else if let Ok(out) = Command::new("psql")
            .args([
                PG_ADMIN,
                "-tAc",
                // `_` and `%` are wildcards in LIKE: escaped, so another
                // run's databases never match.
                &format!(
                    "select datname from pg_database where datname like '{}%' escape '\\'",
                    self.prefix
                        .replace('\\', "\\\\")
                        .replace('_', "\\_")
                        .replace('%', "\\%")
                ),
            ])
            .output()
        {
            for db in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = Command::new("psql")
                    .args([
                        PG_ADMIN,
                        "-qc",
                        &format!("drop database if exists \"{db}\" with (force)"),
                    ])
                    .output();
            }
            // The worlds' own roles, once their databases are gone.
            let like = self
                .prefix
                .replace('\\', "\\\\")
                .replace('_', "\\_")
                .replace('%', "\\%");
            if let Ok(out) = Command::new("psql")
                .args([
                    PG_ADMIN,
                    "-tAc",
                    &format!(
                        "select rolname from pg_roles where rolname like '{like}%' escape '\\'"
                    ),
                ])
                .output()
            {
                for role in String::from_utf8_lossy(&out.stdout).lines() {
                    let _ = Command::new("psql")
                        .args([PG_ADMIN, "-qc", &format!("drop role if exists \"{role}\"")])
                        .output();
                }
            }
        }
    }
}
