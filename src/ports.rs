//! The machine-global port allocator.
//!
//! A world's ports are reserved in the registry before any process starts.
//! A port is handed out only when the registry has no reservation for it (in
//! any project) and nothing holds it on 127.0.0.1, ::1 or the wildcard
//! addresses. A world keeps its ports across `down`/`up` and `reload`; a kept
//! port that an outside program took meanwhile is replaced.

use crate::config::PortRange;
use indexmap::IndexMap;
use rusqlite::{Connection, params};
use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};

/// One port a world needs: `(service, name)`, name `""` for the primary port.
pub type PortKey = (String, String);

/// Why allocation failed.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// No free port left in the project's range.
    #[error("port range {lo}–{hi} exhausted for project {project}")]
    Exhausted {
        /// The project.
        project: String,
        /// Range start.
        lo: u16,
        /// Range end.
        hi: u16,
    },
    /// Registry failure.
    #[error("registry: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// Whether nothing holds `port` on loopback or the wildcard addresses, IPv4
/// and IPv6 (where the machine has IPv6).
pub fn is_free(port: u16) -> bool {
    let v4 = [Ipv4Addr::LOCALHOST, Ipv4Addr::UNSPECIFIED]
        .into_iter()
        .all(|a| TcpListener::bind(SocketAddr::from((a, port))).is_ok());
    if !v4 {
        return false;
    }
    [Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED]
        .into_iter()
        .all(|a| match TcpListener::bind(SocketAddr::from((a, port))) {
            Ok(_) => true,
            // No IPv6 here: nothing can hold the port there.
            Err(e) => e.kind() == std::io::ErrorKind::AddrNotAvailable,
        })
}

/// What happened to a port during allocation, for the event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortNote {
    /// A candidate was busy outside Binky and skipped.
    Skipped(u16),
    /// A kept port was taken by an outside program; the service moved.
    Moved {
        /// The service.
        service: String,
        /// The old port.
        from: u16,
        /// The new port.
        to: u16,
    },
}

/// Reserves every port in `needs` for `world_id`, keeping the world's
/// existing reservations where still free (or `in_use_by_us`), releasing ones
/// no longer needed. One transaction: on error nothing changes.
///
/// # Errors
/// The range is exhausted; a registry error.
pub fn allocate(
    conn: &mut Connection,
    project: &str,
    world_id: i64,
    range: PortRange,
    needs: &[PortKey],
    in_use_by_us: &dyn Fn(u16) -> bool,
    notes: &mut Vec<PortNote>,
) -> Result<IndexMap<PortKey, u16>, PortError> {
    let tx = conn.transaction()?;
    let mut existing: IndexMap<PortKey, u16> = IndexMap::new();
    {
        let mut stmt =
            tx.prepare("SELECT service, name, port FROM port_reservations WHERE world_id = ?1")?;
        let rows = stmt.query_map([world_id], |r| {
            Ok((
                (r.get::<_, String>(0)?, r.get::<_, String>(1)?),
                r.get::<_, u16>(2)?,
            ))
        })?;
        for row in rows {
            let (k, p) = row?;
            existing.insert(k, p);
        }
    }
    let mut taken: HashSet<u16> = {
        let mut stmt = tx.prepare("SELECT port FROM port_reservations")?;
        let rows = stmt.query_map([], |r| r.get::<_, u16>(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut out = IndexMap::new();
    let mut moved_from: IndexMap<PortKey, u16> = IndexMap::new();
    for key in needs {
        if let Some(&p) = existing.get(key) {
            if in_use_by_us(p) || is_free(p) {
                out.insert(key.clone(), p);
                continue;
            }
            moved_from.insert(key.clone(), p);
        }
    }
    // Release what is no longer wanted (or moved away from).
    for (key, port) in &existing {
        if !out.contains_key(key) {
            tx.execute("DELETE FROM port_reservations WHERE port = ?1", [port])?;
            taken.remove(port);
        }
    }
    let mut candidate = range.lo as u32;
    for key in needs {
        if out.contains_key(key) {
            continue;
        }
        let port = loop {
            if candidate > range.hi as u32 {
                return Err(PortError::Exhausted {
                    project: project.to_owned(),
                    lo: range.lo,
                    hi: range.hi,
                });
            }
            let p = candidate as u16;
            candidate += 1;
            if taken.contains(&p) || moved_from.values().any(|m| *m == p) {
                continue;
            }
            if !is_free(p) {
                notes.push(PortNote::Skipped(p));
                continue;
            }
            break p;
        };
        tx.execute(
            "INSERT INTO port_reservations(port, world_id, service, name) VALUES (?1, ?2, ?3, ?4)",
            params![port, world_id, key.0, key.1],
        )?;
        taken.insert(port);
        if let Some(from) = moved_from.get(key) {
            notes.push(PortNote::Moved {
                service: key.0.clone(),
                from: *from,
                to: port,
            });
        }
        out.insert(key.clone(), port);
    }
    tx.commit()?;
    Ok(out)
}

/// Releases every port of a world.
pub fn release(conn: &Connection, world_id: i64) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM port_reservations WHERE world_id = ?1",
        [world_id],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn world(reg: &mut Registry, name: &str) -> i64 {
        let pid = reg.upsert_project("p", "/x").unwrap();
        reg.conn()
            .query_row(
                "INSERT INTO worlds(project_id, name, slug, path, state, created_at, updated_at)
                 VALUES (?1, ?2, ?2, '/x', 'starting', 0, 0) RETURNING id",
                params![pid, name],
                |r| r.get(0),
            )
            .unwrap()
    }

    fn free_range(len: u16) -> PortRange {
        // A run of free ports below the kernel's ephemeral range (which
        // outgoing connections of other tests draw from), away from the
        // default project range, at a random start.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let mut lo = 12000 + (nanos % 4000) as u16;
        loop {
            match (lo..lo + len).find(|p| !is_free(*p)) {
                Some(busy) => lo = busy + 1,
                None => {
                    return PortRange {
                        lo,
                        hi: lo + len - 1,
                    };
                }
            }
        }
    }

    #[test]
    fn allocates_distinct_keeps_and_exhausts() {
        let dir = tempfile::tempdir().unwrap();
        let mut reg = Registry::open(&dir.path().join("r.db")).unwrap();
        let a = world(&mut reg, "a");
        let b = world(&mut reg, "b");
        let range = free_range(4);
        let needs = vec![("web".into(), "".into()), ("api".into(), "".into())];
        let mut notes = vec![];
        let pa = allocate(reg.conn(), "p", a, range, &needs, &|_| false, &mut notes).unwrap();
        let pb = allocate(reg.conn(), "p", b, range, &needs, &|_| false, &mut notes).unwrap();
        let all: HashSet<u16> = pa.values().chain(pb.values()).copied().collect();
        assert_eq!(all.len(), 4);
        // Kept on a second allocation.
        let again = allocate(reg.conn(), "p", a, range, &needs, &|_| false, &mut notes).unwrap();
        assert_eq!(again, pa);
        let c = world(&mut reg, "c");
        let err = allocate(reg.conn(), "p", c, range, &needs, &|_| false, &mut notes).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "port range {}–{} exhausted for project p",
                range.lo, range.hi
            )
        );
        // Nothing half-reserved for c.
        let n: i64 = reg
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM port_reservations WHERE world_id = ?1",
                [c],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn skips_ports_held_on_ipv6_loopback_only_and_moves_taken_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut reg = Registry::open(&dir.path().join("r.db")).unwrap();
        let a = world(&mut reg, "a");
        let range = free_range(6);
        let holder = match TcpListener::bind((Ipv6Addr::LOCALHOST, range.lo)) {
            Ok(l) => l,
            Err(_) => {
                eprintln!("SKIP: no IPv6 loopback here");
                return;
            }
        };
        let needs = vec![("web".into(), "".into())];
        let mut notes = vec![];
        let got = allocate(reg.conn(), "p", a, range, &needs, &|_| false, &mut notes).unwrap();
        assert_ne!(got[&needs[0]], range.lo);
        assert!(notes.contains(&PortNote::Skipped(range.lo)));
        drop(holder);
        // Now an outsider takes the world's port; the next allocation moves it.
        let mine = got[&needs[0]];
        let _thief = TcpListener::bind((Ipv4Addr::LOCALHOST, mine)).unwrap();
        let mut notes = vec![];
        let moved = allocate(reg.conn(), "p", a, range, &needs, &|_| false, &mut notes).unwrap();
        assert_ne!(moved[&needs[0]], mine);
        assert!(matches!(notes.last(), Some(PortNote::Moved { from, .. }) if *from == mine));
    }
}
