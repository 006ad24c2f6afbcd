//! Ownership: Binky deletes only what it made.
//!
//! Two checks guard every teardown on a server, in this order (sqlite's files
//! live in Binky's own state folder and need neither):
//! 1. **The name.** A slice name that the adapter's naming rule
//!    ([`super::names::Rule`]) could not have made is not a world's: the
//!    teardown refuses it before reaching the server (a registry row that
//!    names `/`, `production` or a bucket of someone else's).
//! 2. **The marker**, where the server has a place for one: Binky writes it
//!    at provision, beside the slice and outside every world's prefix
//!    (`_binky:slice:<prefix>` on Redis, the topic `_binky-slice-<prefix>`
//!    on Kafka; [`marker`] spells both). A slice whose marker is missing is
//!    refused when anything of it is there, and "already gone" (done) when
//!    nothing is.
//!
//! Servers with no place for a marker (S3 buckets, SQL databases, RabbitMQ
//! vhosts) rely on the name and on the registry's record, which the daemon
//! checks before any teardown (`daemon/world/slices.rs`).

use super::super::AdapterError;
use super::names::Rule;

/// What is on the server where a slice should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The slice with Binky's marker: Binky's to delete.
    Ours,
    /// Neither the slice nor its marker: already gone.
    Gone,
    /// Something of the slice without Binky's marker; says what.
    Unmarked(String),
}

/// The marker of slice `name`: `_binky<sep>slice<sep><name>`. No project
/// name starts with `_`, so no world's prefix covers a marker, and a world's
/// teardown never deletes another's.
pub fn marker(sep: char, name: &str) -> String {
    format!("_binky{sep}slice{sep}{name}")
}

/// The name check: `Err` (naming the slice and the server) when `rule`
/// could not have made `name`.
///
/// # Errors
/// [`AdapterError::not_ours`].
pub fn check_name(
    adapter: &str,
    server: &str,
    rule: &Rule,
    name: &str,
) -> Result<(), AdapterError> {
    match rule.check(name) {
        None => Ok(()),
        Some(why) => Err(AdapterError::not_ours(
            adapter,
            server,
            &format!("{} `{name}`", rule.kind),
            &format!("{why}, so it is not a name Binky gives a world"),
        )),
    }
}

/// The marker check: whether to go on deleting (`Ok(true)`), or nothing is
/// left to delete (`Ok(false)`).
///
/// # Errors
/// [`AdapterError::not_ours`] for [`Found::Unmarked`].
pub fn guard(adapter: &str, server: &str, slice: &str, found: Found) -> Result<bool, AdapterError> {
    match found {
        Found::Ours => Ok(true),
        Found::Gone => Ok(false),
        Found::Unmarked(what) => Err(AdapterError::not_ours(
            adapter,
            server,
            slice,
            &format!("{what} but no Binky marker"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::address::AdminUrl;
    use super::super::names::{BUCKET, KEY_PREFIX};
    use super::*;

    #[test]
    fn markers_lie_outside_every_worlds_prefix() {
        assert_eq!(marker(':', "shop:a:"), "_binky:slice:shop:a:");
        assert_eq!(marker('-', "shop-a-203252-"), "_binky-slice-shop-a-203252-");
        // Project `binky`, world `slice`: its prefix covers no marker.
        assert!(!marker(':', "shop:a:").starts_with(&KEY_PREFIX.name("binky", None, "slice")));
    }

    #[test]
    fn only_names_binky_gives_and_marked_slices_are_deleted() {
        assert!(check_name("s3", "h:9000", &BUCKET, "shop-a-203252").is_ok());
        for theirs in ["Prod_Backups", "a", ""] {
            let e = check_name("s3", "h:9000", &BUCKET, theirs).unwrap_err();
            assert!(e.message.contains("refusing to delete bucket"), "{e}");
            assert!(e.message.contains("h:9000"), "{e}");
        }
        assert_eq!(
            guard("redis", "h:6379", "shop:a:", Found::Ours).ok(),
            Some(true)
        );
        assert_eq!(
            guard("redis", "h:6379", "shop:a:", Found::Gone).ok(),
            Some(false)
        );
        let e = guard(
            "redis",
            "h:6379",
            "shop:a:",
            Found::Unmarked("3 keys".into()),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "redis at h:6379: refusing to delete shop:a:: 3 keys but no Binky marker, so Binky did not make it; delete it by hand if it is yours to delete"
        );
    }

    /// Every server adapter's teardown checks the name before it connects:
    /// the admin URLs name a port nothing listens on, so a teardown that
    /// went on would fail to connect instead.
    #[cfg(all(feature = "postgres", feature = "mysql", feature = "redis"))]
    #[test]
    fn sql_and_key_value_teardowns_refuse_a_name_binky_never_gives() {
        use crate::adapters::{Adapter, Slice};
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cases: [(&dyn Adapter, &str, &str); 3] = [
            (
                &crate::adapters::postgres::Postgres,
                "postgresql",
                "Prod DB",
            ),
            (&crate::adapters::mysql::Mysql, "mysql", "mysql"),
            (&crate::adapters::redis::Redis, "redis", "*"),
        ];
        for (adapter, scheme, theirs) in cases {
            let slice = Slice {
                name: theirs.to_owned(),
                project: "shop".into(),
                admin_url: Some(AdminUrl::new(format!("{scheme}://root@127.0.0.1:{port}/"))),
                options: toml::Table::new(),
                data_dir: std::env::temp_dir(),
                search_path: None,
                secret: None,
            };
            let e = rt.block_on(adapter.teardown(&slice)).unwrap_err();
            assert!(
                e.message.contains("refusing to delete"),
                "{}: {e}",
                adapter.name()
            );
        }
    }
}
