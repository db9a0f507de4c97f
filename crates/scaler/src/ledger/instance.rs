//! One instance as the ledger knows it: its state, its slots and what holds them, its use
//! count, idle time, health, ready-up progress and removal.

use crate::cause::{Cause, RemovalReason};
use flotilla_fleet::{InstanceId, State};
use tokio::time::Instant;

/// A job source's key for one reservation or acquisition.
pub type Key = String;

/// One slot of one instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotRef {
    /// The instance.
    pub instance: InstanceId,
    /// The slot index, `0..capacity_per_instance`.
    pub slot: usize,
}

/// What holds a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// Nobody.
    Free,
    /// A reservation (a job request in flight).
    Reserved(Key),
    /// A running job.
    Acquired(Key),
}

/// Progress of an instance's ready-up hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Not running yet; the hook has not started.
    Waiting,
    /// The hook is running.
    InProgress,
    /// Slots may be offered.
    Ready,
    /// The hook failed; the instance will be removed.
    Failed(String),
}

/// A removal in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Removal {
    /// Why.
    pub reason: RemovalReason,
    /// When the scaler decided it.
    pub decided_at: Instant,
    /// Deletion requests sent so far.
    pub attempts: u32,
    /// When the last deletion request was sent.
    pub last_attempt: Option<Instant>,
    /// Whether the provider accepted a deletion request.
    pub accepted: bool,
}

impl Removal {
    /// A removal decided at `now`, no request sent yet.
    pub fn decided(reason: RemovalReason, now: Instant) -> Self {
        Removal {
            reason,
            decided_at: now,
            attempts: 0,
            last_attempt: None,
            accepted: false,
        }
    }
}

/// One instance in the ledger.
#[derive(Debug, Clone)]
pub struct Instance {
    /// The provider's id.
    pub id: InstanceId,
    /// The state in the last listing that showed it.
    pub state: State,
    /// How it came to be known.
    pub cause: Cause,
    /// Ready-up progress.
    pub readiness: Readiness,
    pub(crate) slots: Vec<Slot>,
    /// Jobs handed to it so far.
    pub use_count: u32,
    /// When the scaler first saw it.
    pub first_seen: Instant,
    /// When it last finished a job (or was first seen, if it never ran one).
    pub idle_since: Instant,
    /// Consecutive failed health checks.
    pub health_failures: u32,
    /// Set once the scaler decided to remove it.
    pub removal: Option<Removal>,
    /// Consecutive listings it was missing from (0: in the last listing). A missing instance
    /// takes no new work but keeps its jobs and use count until it has been missing for
    /// long enough to be sure it is gone.
    pub missing: u32,
    /// Since when it is missing.
    pub missing_since: Option<Instant>,
    /// Keys of the jobs the durable store says it ran when the previous process stopped.
    pub restored_acquisitions: Vec<Key>,
    /// When the request it answered was made (instances this scaler requested).
    pub requested_at: Option<Instant>,
    /// When a listing first showed it running.
    pub running_at: Option<Instant>,
    /// When its ready-up finished.
    pub ready_at: Option<Instant>,
    pub(crate) acquired: usize,
    pub(crate) reserved: usize,
    /// The listing epoch it was last seen in.
    pub(crate) seen: u64,
    /// Its entry in the free-slot index, while it has one.
    pub(crate) indexed: Option<super::index::Pref>,
}

impl Instance {
    pub(crate) fn new(
        id: InstanceId,
        state: State,
        cause: Cause,
        capacity: usize,
        now: Instant,
    ) -> Self {
        Instance {
            id,
            state,
            cause,
            readiness: Readiness::Waiting,
            slots: vec![Slot::Free; capacity],
            use_count: 0,
            first_seen: now,
            idle_since: now,
            health_failures: 0,
            removal: None,
            missing: 0,
            missing_since: None,
            restored_acquisitions: Vec::new(),
            requested_at: None,
            running_at: None,
            ready_at: None,
            acquired: 0,
            reserved: 0,
            seen: 0,
            indexed: None,
        }
    }

    /// The slots, indexed `0..capacity_per_instance`.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Slots running a job.
    pub fn acquired(&self) -> usize {
        self.acquired
    }

    /// Slots held by a reservation.
    pub fn reserved(&self) -> usize {
        self.reserved
    }

    /// Slots not running a job (free or reserved).
    pub fn not_acquired(&self) -> usize {
        self.slots.len() - self.acquired
    }

    /// Whether some slot is held by nobody.
    pub fn has_free(&self) -> bool {
        self.acquired + self.reserved < self.slots.len()
    }

    pub(crate) fn first_free(&self) -> Option<usize> {
        self.slots.iter().position(|s| *s == Slot::Free)
    }

    /// Puts `to` in slot `idx`, keeping the counts right.
    pub(crate) fn set_slot(&mut self, idx: usize, to: Slot) {
        let Some(cell) = self.slots.get_mut(idx) else {
            return;
        };
        match cell {
            Slot::Acquired(_) => self.acquired -= 1,
            Slot::Reserved(_) => self.reserved -= 1,
            Slot::Free => {}
        }
        match &to {
            Slot::Acquired(_) => self.acquired += 1,
            Slot::Reserved(_) => self.reserved += 1,
            Slot::Free => {}
        }
        *cell = to;
    }

    /// Whether the provider is deleting it, or it is gone or timed out: it will never run a
    /// job again.
    pub fn dying(&self) -> bool {
        matches!(
            self.state,
            State::Deleting | State::Deleted | State::Timeout
        )
    }
}
