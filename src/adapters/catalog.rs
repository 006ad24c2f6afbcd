//! The one list of built-in adapters: each name and alias, how to make it,
//! and the options `binky check` knows for it. `by_name`, `check` and the
//! daemon's "no adapter" hint all read this table, so they cannot disagree
//! about which names exist (they did: `postgresql` was served but not
//! listed). Features select the drivers compiled in.

use super::Adapter;
use std::sync::Arc;

/// One built-in adapter.
pub struct Entry {
    /// Its name, as `adapter = "…"` writes it.
    pub name: &'static str,
    /// Other names for the same implementation (protocol-compatible
    /// servers, or the server's own spelling).
    pub aliases: &'static [&'static str],
    /// Makes one.
    pub make: fn() -> Arc<dyn Adapter>,
    /// The values `options.clone_strategy` may take (empty: the option is
    /// not read).
    pub clone_strategies: &'static [&'static str],
}

impl Entry {
    /// Whether `adapter = name` means this adapter.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

/// Every built-in adapter of this build, in the order help lists them.
pub const ENTRIES: &[Entry] = &[
    Entry {
        name: "sqlite",
        aliases: &[],
        make: || Arc::new(super::sqlite::Sqlite),
        clone_strategies: &[],
    },
    #[cfg(feature = "postgres")]
    Entry {
        name: "postgres",
        aliases: &["postgresql"],
        make: || Arc::new(super::postgres::Postgres),
        clone_strategies: &["auto", "wal_log", "file_copy"],
    },
    #[cfg(feature = "mysql")]
    Entry {
        name: "mysql",
        aliases: &["mariadb", "percona"],
        make: || Arc::new(super::mysql::Mysql),
        clone_strategies: &["copy", "dump"],
    },
];

/// The built-in adapter `adapter = name` means, if any.
pub fn find(name: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.answers_to(name))
}

/// Every name a built-in adapter answers to (names, then their aliases).
pub fn names() -> Vec<&'static str> {
    ENTRIES
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_and_alias_finds_the_adapter_that_answers_to_it() {
        for name in names() {
            let e = find(name).unwrap_or_else(|| panic!("{name} is listed but not found"));
            let made = (e.make)();
            // The made adapter is the entry's implementation; aliases share it.
            assert!(
                e.answers_to(made.name()) || made.name() == e.name,
                "{name}: made {}",
                made.name()
            );
        }
        assert!(names().contains(&"sqlite"));
        assert!(find("nosuch").is_none());
        #[cfg(feature = "postgres")]
        assert_eq!(find("postgresql").unwrap().name, "postgres");
        #[cfg(feature = "mysql")]
        assert_eq!(find("mariadb").unwrap().clone_strategies, &["copy", "dump"]);
    }
}
