//! The machine-global port allocator.
//!
//! A world's ports are reserved in the registry before any process starts.
//! A port is handed out only when the registry has no reservation for it (in
//! any project) and nothing holds it on 127.0.0.1, ::1 or the wildcard
//! addresses. A world keeps its ports across `down`/`up` and `reload`; a kept
//! port that an outside program took meanwhile is replaced.

use crate::config::PortRange;
use crate::registry::{Registry, RegistryError};
use indexmap::IndexMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};

pub(crate) use crate::registry::PortKey;

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
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Whether nothing holds `port` on loopback or the wildcard addresses, IPv4
/// and IPv6 (where the machine has IPv6).
pub(crate) fn is_free(port: u16) -> bool {
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
pub(crate) enum PortNote {
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
/// existing reservations where still free, releasing ones no longer needed.
/// The caller has stopped whatever of the world ran, so a kept port that is
/// busy is held by an outside program: the service moves (a
/// [`PortNote::Moved`] in `notes`). One transaction: on error nothing
/// changes.
///
/// # Errors
/// The range is exhausted; a registry error.
pub(crate) fn allocate(
    reg: &mut Registry,
    project: &str,
    world_id: i64,
    range: PortRange,
    needs: &[PortKey],
    notes: &mut Vec<PortNote>,
) -> Result<IndexMap<PortKey, u16>, PortError> {
    let book = reg.port_book()?;
    let existing = book.reservations(world_id)?;
    let mut taken = book.taken()?;
    let mut out = IndexMap::new();
    let mut moved_from: IndexMap<PortKey, u16> = IndexMap::new();
    for key in needs {
        if let Some(&p) = existing.get(key) {
            if is_free(p) {
                out.insert(key.clone(), p);
                continue;
            }
            moved_from.insert(key.clone(), p);
        }
    }
    // Release what is no longer wanted (or moved away from).
    for (key, port) in &existing {
        if !out.contains_key(key) {
            book.release(*port)?;
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
        book.reserve(port, world_id, key)?;
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
    book.commit()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn world(reg: &mut Registry, name: &str) -> i64 {
        let pid = reg.upsert_project("p", "/x").unwrap();
        reg.upsert_world(&crate::registry::NewWorld {
            project_id: pid,
            name: &crate::slug::WorldName::recorded(name, name),
            path: "/x",
            group: None,
        })
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
        let pa = allocate(&mut reg, "p", a, range, &needs, &mut notes).unwrap();
        let pb = allocate(&mut reg, "p", b, range, &needs, &mut notes).unwrap();
        let all: HashSet<u16> = pa.values().chain(pb.values()).copied().collect();
        assert_eq!(all.len(), 4);
        // Kept on a second allocation.
        let again = allocate(&mut reg, "p", a, range, &needs, &mut notes).unwrap();
        assert_eq!(again, pa);
        let c = world(&mut reg, "c");
        let err = allocate(&mut reg, "p", c, range, &needs, &mut notes).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "port range {}–{} exhausted for project p",
                range.lo, range.hi
            )
        );
        // Nothing half-reserved for c.
        assert_eq!(reg.world_ports(c).unwrap(), []);
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
        let got = allocate(&mut reg, "p", a, range, &needs, &mut notes).unwrap();
        assert_ne!(got[&needs[0]], range.lo);
        assert!(notes.contains(&PortNote::Skipped(range.lo)));
        drop(holder);
        // Now an outsider takes the world's port; the next allocation moves it.
        let mine = got[&needs[0]];
        let _thief = TcpListener::bind((Ipv4Addr::LOCALHOST, mine)).unwrap();
        let mut notes = vec![];
        let moved = allocate(&mut reg, "p", a, range, &needs, &mut notes).unwrap();
        assert_ne!(moved[&needs[0]], mine);
        assert!(matches!(notes.last(), Some(PortNote::Moved { from, .. }) if *from == mine));
    }
}
