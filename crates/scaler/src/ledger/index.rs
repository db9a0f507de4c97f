//! The free-slot index: instances that can take a job now, ordered by preference, so that
//! handing out a slot is O(log n) instead of a scan of the fleet.
//!
//! Preference packs jobs: the busiest instance first (so idle ones can be scaled down),
//! then the most recently used, then the lowest id. The ledger keeps an instance in the
//! index exactly while it is allocatable and has a free slot, re-filing it after every
//! change to its slots, state, readiness, health or removal.

use flotilla_fleet::InstanceId;
use std::cmp::Reverse;
use std::collections::BTreeSet;
use tokio::time::Instant;

/// An instance's place in the index: smaller is preferred.
pub(crate) type Pref = (Reverse<usize>, Reverse<Instant>, InstanceId);

/// Allocatable instances with a free slot, by preference.
#[derive(Debug, Clone, Default)]
pub(crate) struct FreeIndex {
    set: BTreeSet<Pref>,
}

impl FreeIndex {
    /// The place of an instance with `acquired` busy slots, idle since `idle_since`.
    pub(crate) fn pref(acquired: usize, idle_since: Instant, id: &str) -> Pref {
        (Reverse(acquired), Reverse(idle_since), id.to_string())
    }

    pub(crate) fn insert(&mut self, p: Pref) {
        self.set.insert(p);
    }

    pub(crate) fn remove(&mut self, p: &Pref) {
        self.set.remove(p);
    }

    /// The preferred instance.
    pub(crate) fn first(&self) -> Option<&Pref> {
        self.set.first()
    }

    /// Instances in the index.
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}
