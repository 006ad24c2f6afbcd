//! The `port_reservations` table: what the port allocator
//! ([`crate::ports::allocate`]) reads and writes, in one transaction.

use super::{PortKey, Registry, RegistryError, classify};
use indexmap::IndexMap;
use rusqlite::{Connection, Transaction, params};
use std::collections::HashSet;
use std::path::Path;

/// One allocation's transaction over the reservations: nothing it does is
/// seen by another connection until [`PortBook::commit`], and dropping it
/// unfinished rolls everything back.
pub(crate) struct PortBook<'a> {
    tx: Transaction<'a>,
    path: &'a Path,
}

/// A world's reservations, `((service, name), port)`, read through `conn`
/// (the registry's connection, or a [`PortBook`]'s transaction).
fn reservations(
    conn: &Connection,
    path: &Path,
    world_id: i64,
) -> Result<Vec<(PortKey, u16)>, RegistryError> {
    let err = |e| classify(path, e);
    let mut stmt = conn
        .prepare_cached("SELECT service, name, port FROM port_reservations WHERE world_id = ?1")
        .map_err(err)?;
    let rows = stmt
        .query_map([world_id], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
        .map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

impl Registry {
    /// A world's reserved ports: `((service, name), port)`, `name` empty for
    /// the primary port.
    ///
    /// # Errors
    /// The registry is locked or unusable.
    pub(crate) fn world_ports(&self, world_id: i64) -> Result<Vec<(PortKey, u16)>, RegistryError> {
        reservations(&self.conn, &self.path, world_id)
    }

    /// Opens a [`PortBook`].
    ///
    /// # Errors
    /// The registry is locked or unusable.
    pub(crate) fn port_book(&mut self) -> Result<PortBook<'_>, RegistryError> {
        let tx = self
            .conn
            .transaction()
            .map_err(|e| classify(&self.path, e))?;
        Ok(PortBook {
            tx,
            path: &self.path,
        })
    }

    /// Releases every port of a world; returns how many.
    ///
    /// # Errors
    /// The registry is locked or unusable.
    pub(crate) fn release_ports(&self, world_id: i64) -> Result<usize, RegistryError> {
        self.conn
            .execute(
                "DELETE FROM port_reservations WHERE world_id = ?1",
                [world_id],
            )
            .map_err(|e| self.err(e))
    }

    /// The primary port reserved for `service` of a world, if any.
    ///
    /// # Errors
    /// The registry is locked or unusable.
    pub(crate) fn service_port(
        &self,
        world_id: i64,
        service: &str,
    ) -> Result<Option<u16>, RegistryError> {
        self.one(
            "SELECT port FROM port_reservations WHERE world_id = ?1 AND service = ?2 AND name = ''",
            params![world_id, service],
        )
    }
}

impl PortBook<'_> {
    fn err(&self, e: rusqlite::Error) -> RegistryError {
        classify(self.path, e)
    }

    /// A world's reservations, `(service, name) → port`.
    ///
    /// # Errors
    /// The registry is unusable.
    pub(crate) fn reservations(
        &self,
        world_id: i64,
    ) -> Result<IndexMap<PortKey, u16>, RegistryError> {
        Ok(reservations(&self.tx, self.path, world_id)?
            .into_iter()
            .collect())
    }

    /// Every reserved port, of every world of every project.
    ///
    /// # Errors
    /// The registry is unusable.
    pub(crate) fn taken(&self) -> Result<HashSet<u16>, RegistryError> {
        let mut stmt = self
            .tx
            .prepare_cached("SELECT port FROM port_reservations")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| r.get::<_, u16>(0))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Drops the reservation of `port`.
    ///
    /// # Errors
    /// The registry is unusable.
    pub(crate) fn release(&self, port: u16) -> Result<(), RegistryError> {
        self.tx
            .execute("DELETE FROM port_reservations WHERE port = ?1", [port])
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Reserves `port` for `key` of a world.
    ///
    /// # Errors
    /// The port is reserved already (a constraint), or the registry is
    /// unusable.
    pub(crate) fn reserve(
        &self,
        port: u16,
        world_id: i64,
        key: &PortKey,
    ) -> Result<(), RegistryError> {
        self.tx
            .execute(
                "INSERT INTO port_reservations(port, world_id, service, name) VALUES (?1, ?2, ?3, ?4)",
                params![port, world_id, key.0, key.1],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Makes every change of this allocation visible at once.
    ///
    /// # Errors
    /// The registry is unusable.
    pub(crate) fn commit(self) -> Result<(), RegistryError> {
        let path = self.path;
        self.tx.commit().map_err(|e| classify(path, e))
    }
}
