//! The `settings` table: machine-global settings as typed [`Setting`]s,
//! their defaults, and a stored value that does not parse named in
//! `daemon.log`.

use super::{Registry, RegistryError, classify};
use crate::protocol::Settings;
use rusqlite::params;

/// Default settings: what `binky config` shows before anything is set.
pub(crate) fn default_settings() -> Settings {
    Settings {
        ram_reserve_pct: 10.0,
        disk_reserve_gb: 5.0,
        max_parallel: 16,
        proxy_port: 0,
        https_port: 0,
        queue_max: crate::protocol::DEFAULT_QUEUE_MAX,
        queue_per_group: crate::protocol::DEFAULT_QUEUE_PER_GROUP,
    }
}

/// One machine-global setting as stored (`settings.key`, `settings.value`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Setting {
    /// Percent of RAM admission keeps free.
    RamReservePct(f64),
    /// Gigabytes of disk admission keeps free.
    DiskReserveGb(f64),
    /// Most worlds running at once (0: no limit).
    MaxParallel(u32),
    /// The HTTP proxy's port.
    ProxyPort(u16),
    /// The HTTPS (Caddy) port.
    HttpsPort(u16),
    /// Most `up`s queued at once.
    QueueMax(u32),
    /// Most `up`s one caller's group may have queued.
    QueuePerGroup(u32),
}

impl Setting {
    /// Its key in the table.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Setting::RamReservePct(_) => "ram_reserve_pct",
            Setting::DiskReserveGb(_) => "disk_reserve_gb",
            Setting::MaxParallel(_) => "max_parallel",
            Setting::ProxyPort(_) => "proxy_port",
            Setting::HttpsPort(_) => "https_port",
            Setting::QueueMax(_) => "queue_max",
            Setting::QueuePerGroup(_) => "queue_per_group",
        }
    }

    /// Its value as stored.
    pub(crate) fn value(self) -> String {
        match self {
            Setting::RamReservePct(v) | Setting::DiskReserveGb(v) => v.to_string(),
            Setting::MaxParallel(v) | Setting::QueueMax(v) | Setting::QueuePerGroup(v) => {
                v.to_string()
            }
            Setting::ProxyPort(v) | Setting::HttpsPort(v) => v.to_string(),
        }
    }

    /// A stored row: `Ok(None)` for a key this Binky does not know.
    ///
    /// # Errors
    /// The value does not parse as the key's type.
    pub(crate) fn parse(key: &str, value: &str) -> Result<Option<Setting>, String> {
        fn num<T: std::str::FromStr>(v: &str) -> Result<T, String>
        where
            T::Err: std::fmt::Display,
        {
            v.trim().parse().map_err(|e: T::Err| e.to_string())
        }
        Ok(Some(match key {
            "ram_reserve_pct" => Setting::RamReservePct(num(value)?),
            "disk_reserve_gb" => Setting::DiskReserveGb(num(value)?),
            "max_parallel" => Setting::MaxParallel(num(value)?),
            "proxy_port" => Setting::ProxyPort(num(value)?),
            "https_port" => Setting::HttpsPort(num(value)?),
            "queue_max" => Setting::QueueMax(num(value)?),
            "queue_per_group" => Setting::QueuePerGroup(num(value)?),
            _ => return Ok(None),
        }))
    }

    /// Sets its field of `s`.
    pub(crate) fn apply(self, s: &mut Settings) {
        match self {
            Setting::RamReservePct(v) => s.ram_reserve_pct = v,
            Setting::DiskReserveGb(v) => s.disk_reserve_gb = v,
            Setting::MaxParallel(v) => s.max_parallel = v,
            Setting::ProxyPort(v) => s.proxy_port = v,
            Setting::HttpsPort(v) => s.https_port = v,
            Setting::QueueMax(v) => s.queue_max = v,
            Setting::QueuePerGroup(v) => s.queue_per_group = v,
        }
    }
}

impl Registry {
    /// Whether setting `key` was ever stored (`binky reserve` set it), as
    /// opposed to its default applying.
    pub(crate) fn setting_is_set(&self, key: &str) -> Result<bool, RegistryError> {
        self.conn
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM settings WHERE key = ?1)",
                [key],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// The settings, defaults filled in for keys never set. A stored value
    /// that does not parse (a registry edited by hand, or by a newer Binky)
    /// is named in `daemon.log` as an error, and the default stands in.
    pub(crate) fn settings(&self) -> Result<Settings, RegistryError> {
        let mut s = default_settings();
        let mut stmt = self
            .conn
            .prepare_cached("SELECT key, value FROM settings")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (k, v) = row.map_err(|e| self.err(e))?;
            match Setting::parse(&k, &v) {
                Ok(Some(setting)) => setting.apply(&mut s),
                Ok(None) => tracing::warn!(
                    key = k,
                    "the registry holds a setting this Binky does not know; it is ignored"
                ),
                Err(e) => tracing::error!(
                    registry = %self.path.display(),
                    key = k,
                    value = v,
                    error = %e,
                    "a stored setting does not parse; its default stands in until it is set again (`binky reserve` or `binky config`)"
                ),
            }
        }
        Ok(s)
    }

    /// Stores several settings in one transaction.
    pub(crate) fn set_settings(&mut self, settings: &[Setting]) -> Result<(), RegistryError> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| classify(&path, e))?;
        for s in settings {
            tx.execute(
                "INSERT INTO settings(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![s.key(), s.value()],
            )
            .map_err(|e| classify(&path, e))?;
        }
        // A test's slow disk: the write held, its lock taken.
        crate::faults::stall("registry:settings");
        tx.commit().map_err(|e| classify(&path, e))
    }
}
