//! How a verb that starts a world's processes came by its room: a slot
//! the world holds already ([`Held`]), an admission it claimed, or one it
//! shares with another verb on the same ticket; and whether that ticket
//! was withdrawn or the held slot lapsed before the verb had its world's
//! lock.

use super::tickets::Admitted;
use crate::daemon::{Daemon, WorldKey};
use crate::protocol::ApiError;
use crate::registry::ActiveRow;
use std::sync::Arc;

/// How a verb that starts a world's processes (`up`, `reload`, `reset`)
/// came by its room.
pub(crate) enum Entry {
    /// The world holds a slot already (running, starting, a service
    /// restarting, or another verb of it under way): the verb takes no new
    /// room and never queues behind its own world.
    Held {
        /// Kept until the verb settles.
        _slot: Held,
    },
    /// Admitted from the queue, and this verb claimed the admission.
    Admitted(Admitted),
    /// Another verb waiting on the same ticket claimed its admission; this
    /// one runs after it, under the world's lock.
    Shared(i64),
}

impl Entry {
    /// Whether the ticket this verb came in on was taken out of the queue
    /// (`down`, `remove`, a cancel) after it was admitted: the verb then
    /// makes nothing. Checked under the world's lock, so a withdrawal is
    /// seen either by the verb (which stops) or by `down`/`remove` (which
    /// wait for the verb and then undo what it made), never by neither.
    pub(crate) fn withdrawn(&self, d: &Daemon) -> Option<i64> {
        let ticket = match self {
            Entry::Held { .. } => return None,
            Entry::Admitted(a) => a.ticket,
            Entry::Shared(t) => *t,
        };
        super::tickets::withdrawn(d, ticket).then_some(ticket)
    }

    /// Under the world's lock: whether the verb may go on with the room it
    /// came in on, and with what. `None`: it must go through admission
    /// again, like any other verb.
    ///
    /// - Admitted: its admission counts until it is dropped.
    /// - A slot it counted itself (the world was running when the verb
    ///   began): kept while the world's record still holds one; gone when
    ///   the world was stopped or removed while the verb waited.
    /// - Room it only relied on — a slot another verb of the world counted,
    ///   or an admission another waiter on the same ticket claimed — is
    ///   looked at afresh: that verb may have failed, been cancelled or
    ///   taken down the world, and a verb that went on regardless started
    ///   a world above `max_parallel` (chaos seed 2). The world's slot, if
    ///   it holds one now, is this verb's; else it is admitted anew.
    ///
    /// # Errors
    /// The registry cannot be read.
    pub(crate) fn confirm(
        self,
        d: &Arc<Daemon>,
        project: &str,
        world: &str,
    ) -> Result<Option<Entry>, ApiError> {
        match &self {
            Entry::Admitted(_) => Ok(Some(self)),
            Entry::Held { _slot: held } if held.counted => {
                let kept = matches!(holding(d, &held.key), Ok(Some(_)));
                Ok(kept.then_some(self))
            }
            Entry::Held { .. } | Entry::Shared(_) => {
                drop(self);
                Ok(keep_slot(d, project, world)?.map(|slot| Entry::Held { _slot: slot }))
            }
        }
    }
}

/// World `key`'s row if its record says it holds a slot: running or
/// starting (not suspended, whose slot is given up).
fn holding(d: &Daemon, key: &WorldKey) -> Result<Option<ActiveRow>, ApiError> {
    Ok(d.registry(|r| r.active_worlds())?.into_iter().find(|w| {
        w.project == key.project
            && w.world == key.name
            && w.state != crate::protocol::WorldState::Suspended
    }))
}

/// A world's slot kept through a verb that stops and starts it (`reload`,
/// `reset`): the world counts against the room while it runs, even in the
/// moments it is recorded stopped, so no queued world takes its place
/// half-way. Dropped when the verb settles.
pub(crate) struct Held {
    d: Arc<Daemon>,
    key: WorldKey,
    /// This hold put the world in the room's count (no other verb of it
    /// was under way): only then does dropping it take the world out.
    counted: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.counted {
            self.d.admission.lock().pending.remove(&self.key);
            self.d.admission.wake();
        }
    }
}

/// The world's slot, if it holds one now: its record says running or
/// starting (a service may be restarting), or another verb of it is under
/// way. Such a world never queues: with `max_parallel` reached, it would
/// wait for the slot it holds itself.
///
/// # Errors
/// The registry cannot be read.
pub(crate) fn keep_slot(
    d: &Arc<Daemon>,
    project: &str,
    world: &str,
) -> Result<Option<Held>, ApiError> {
    let key = WorldKey::new(project, world);
    let active = holding(d, &key)?;
    let mut st = d.admission.lock();
    if st.pending.contains_key(&key) {
        return Ok(Some(Held {
            d: Arc::clone(d),
            key,
            counted: false,
        }));
    }
    let Some(w) = active else {
        return Ok(None);
    };
    // Counted as admitted with no footprint of its own: what it holds is
    // already in MemAvailable.
    st.pending.insert(key.clone(), ((w.caller, w.group), 0));
    Ok(Some(Held {
        d: Arc::clone(d),
        key,
        counted: true,
    }))
}
