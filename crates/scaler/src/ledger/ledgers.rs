//! The ledgers themselves: instances by id, keys by name, the queue, the free-slot index
//! and the counters kept with them; their accessors and invariants.

use super::index::FreeIndex;
use super::instance::{Instance, Key, Readiness, Slot, SlotRef};
use super::keys::KeyState;
use super::requests::Requests;
use super::rules::Rules;
use crate::cause::{Cause, Preexisting, RemovalReason};
use crate::counts::SlotCounts;
use flotilla_fleet::InstanceId;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::time::Duration;
use tokio::time::Instant;

/// Listings an instance may be missing from before the ledger takes it for gone (unless
/// its deletion was confirmed, which takes it out at once) ...
pub const MISSING_LISTINGS: u32 = 3;

/// ... and for at least this long: with listings every two seconds while a change is
/// expected, three listings are too short to outlast a flapping provider API.
pub const MISSING_FOR: Duration = Duration::from_secs(60);

/// What the ledger remembers of an instance that left, so that it is recognised if it
/// comes back (a listing that lagged longer than [`MISSING_LISTINGS`]).
#[derive(Debug, Clone)]
pub(crate) struct Departed {
    pub(crate) cause: Cause,
    pub(crate) use_count: u32,
    pub(crate) removal: Option<RemovalReason>,
    /// It held jobs when it was taken for gone: they were told so and may still be tearing
    /// down on it.
    pub(crate) had_jobs: bool,
    pub(crate) at: Instant,
}

/// How long a departed instance is remembered, and how many at most.
pub(crate) const DEPARTED_FOR: Duration = Duration::from_secs(3600);
pub(crate) const DEPARTED_MAX: usize = 10_000;

/// The hasher of the ledger's maps: O(1) lookups by id (a listing looks up every instance),
/// and, unlike the default, the same iteration order in every run, so that a simulation
/// seed replays exactly.
pub(crate) type Stable = BuildHasherDefault<DefaultHasher>;

/// The scaler's ledgers. See the module documentation.
#[derive(Debug, Clone)]
pub struct Ledger {
    pub(crate) capacity: usize,
    pub(crate) rules: Rules,
    pub(crate) instances: HashMap<InstanceId, Instance, Stable>,
    pub(crate) free: FreeIndex,
    pub(crate) keys: HashMap<Key, KeyState, Stable>,
    pub(crate) queue: BTreeMap<i64, Key>,
    pub(crate) next_back: i64,
    pub(crate) next_front: i64,
    pub(crate) requested: Requests,
    pub(crate) departed: HashMap<InstanceId, Departed>,
    pub(crate) shutting_down: bool,
    pub(crate) epoch: u64,
    pub(crate) acquired_total: usize,
    pub(crate) reserved_total: usize,
    pub(crate) lost_keys: usize,
    /// Lost keys by the instance they were lost on: their jobs may still be tearing down
    /// there, so it is not deleted before they release.
    pub(crate) lost_on: HashMap<InstanceId, usize>,
    /// Test-only switches putting fixed bugs back for the simulation's mutation tests.
    pub(crate) legacy: crate::config::Legacy,
    /// When the provider last listed the group (`None`: never in this process): requests
    /// age only with listings that could have shown their instances.
    pub(crate) listed_at: Option<Instant>,
    /// The longest time between two listings that ages requests by its whole length
    /// ([`crate::ledger::requests_listing_interval`]): a longer gap means listings failed
    /// meanwhile.
    pub(crate) listing_interval: Duration,
}

impl Ledger {
    /// An empty ledger for instances of `capacity` slots.
    pub fn new(capacity: usize, max_use_count: u32, failure_threshold: u32) -> Self {
        Ledger {
            capacity: capacity.max(1),
            rules: Rules {
                max_use_count,
                failure_threshold: failure_threshold.max(1),
                preexisting: Preexisting::Adopt,
                permanent: false,
                lends_from_pool: false,
            },
            instances: HashMap::default(),
            free: FreeIndex::default(),
            keys: HashMap::default(),
            queue: BTreeMap::new(),
            next_back: 0,
            next_front: -1,
            requested: Requests::default(),
            departed: HashMap::new(),
            shutting_down: false,
            epoch: 0,
            acquired_total: 0,
            reserved_total: 0,
            lost_keys: 0,
            lost_on: HashMap::new(),
            legacy: crate::config::Legacy::default(),
            listed_at: None,
            listing_interval: Duration::from_secs(60),
        }
    }

    /// Sets what happens to instances this scaler never created.
    pub fn with_preexisting(mut self, policy: Preexisting) -> Self {
        self.rules.preexisting = policy;
        self
    }

    /// Sets how much one listing may age requests at most (60 s unless set), so a gap in
    /// listings does not age them.
    pub fn with_listing_interval(mut self, interval: Duration) -> Self {
        self.listing_interval = interval;
        self
    }

    /// Says the provider cannot delete its instances: its one instance is the host flotilla
    /// runs on (`Capabilities::can_delete_instances`).
    pub fn with_permanent_instances(mut self, on: bool) -> Self {
        self.rules.permanent = on;
        self
    }

    /// Says the group lends machines from a fixed pool (`Capabilities::fixed_pool`): a
    /// removal it accepted gave the machine back, and the same id listed live again is a new
    /// instance, even if no listing in between showed it gone.
    pub fn with_pool_lending(mut self, on: bool) -> Self {
        self.rules.lends_from_pool = on;
        self
    }

    /// Whether a removal the provider accepted is done, so it is never asked again: a pool
    /// that lends machines gives one back at once, and its id may be lent anew the next
    /// moment (a second request would give that one back).
    pub fn accepted_removal_is_final(&self) -> bool {
        self.rules.lends_from_pool && !self.legacy.reused_id_is_the_old_instance
    }

    /// Whether the provider cannot delete its instances. No instance is then ever marked for
    /// removal for idleness or failed health checks, since the mark would never end and the
    /// instance would take no job again; one past `failure_threshold` takes no new job until
    /// a check passes. (`max_use_count` is refused for such providers where the config is
    /// read.)
    pub fn permanent_instances(&self) -> bool {
        self.rules.permanent
    }

    #[doc(hidden)]
    /// Test-only: puts the fixed bugs `legacy` names back (see [`crate::Legacy`]).
    pub fn with_legacy(mut self, legacy: crate::config::Legacy) -> Self {
        self.legacy = legacy;
        self
    }

    /// Whether an instance is someone else's and must not be used (`Ignore` or `Remove`).
    pub fn foreign(&self, i: &Instance) -> bool {
        self.rules.foreign(i)
    }

    /// Whether an instance is someone else's and must be left alone entirely: never used,
    /// never deleted, not counted against `max_instances` (`Preexisting::Ignore`).
    pub fn left_alone(&self, i: &Instance) -> bool {
        i.cause == Cause::Preexisted && self.rules.preexisting == Preexisting::Ignore
    }

    /// What happens to instances this scaler never created.
    pub fn preexisting(&self) -> Preexisting {
        self.rules.preexisting
    }

    /// Slots per instance.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Every instance, in no particular (but reproducible) order.
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.instances.values()
    }

    /// Instances in the ledger.
    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }

    /// One instance.
    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.get(id)
    }

    /// The state of a key.
    pub fn key(&self, key: &str) -> Option<&KeyState> {
        self.keys.get(key)
    }

    /// All keys and their states.
    pub fn keys(&self) -> impl Iterator<Item = (&Key, &KeyState)> {
        self.keys.iter()
    }

    /// Number of `acquire` calls waiting.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Slots running a job, fleet-wide.
    pub fn acquired_total(&self) -> usize {
        self.acquired_total
    }

    /// Slots held by a reservation, fleet-wide.
    pub fn reserved_total(&self) -> usize {
        self.reserved_total
    }

    /// Instances requested from the provider that have not appeared yet.
    pub fn requested_in_flight(&self) -> usize {
        self.requested.total()
    }

    /// Whether the scaler is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Whether an instance is used up by `max_use_count`.
    pub fn used_up(&self, i: &Instance) -> bool {
        self.rules.used_up(i)
    }

    /// The slots of `i` a job can still have: its slots that run no job, but no more than the
    /// jobs `max_use_count` still lets it take (a free slot beyond those is not capacity).
    pub fn takeable_slots(&self, i: &Instance) -> usize {
        let free = i.not_acquired();
        match self.rules.max_use_count {
            _ if self.legacy.idle_counts_used_up_slots => free,
            0 => free,
            max => free.min(max.saturating_sub(i.use_count) as usize),
        }
    }

    /// Whether an instance is past the health-failure threshold.
    pub fn unhealthy(&self, i: &Instance) -> bool {
        self.rules.unhealthy(i)
    }

    /// Whether an instance counts as capacity now or soon: ours, live, in the last listing,
    /// not being removed, healthy, not used up, ready-up not failed.
    pub fn usable(&self, i: &Instance) -> bool {
        self.rules.usable(i)
    }

    /// Whether slots of this instance may be handed out now.
    pub fn allocatable(&self, i: &Instance) -> bool {
        self.rules.allocatable(i)
    }

    /// Re-files `id` in the free-slot index after a change.
    pub(crate) fn reindex(&mut self, id: &str) {
        if let Some(i) = self.instances.get_mut(id) {
            refile(&self.rules, &mut self.free, i);
        }
    }

    /// Takes `id` out of the ledger (and the index); returns it.
    pub(crate) fn take_instance(&mut self, id: &str) -> Option<Instance> {
        let i = self.instances.remove(id)?;
        if let Some(p) = &i.indexed {
            self.free.remove(p);
        }
        self.acquired_total -= i.acquired;
        self.reserved_total -= i.reserved;
        Some(i)
    }

    /// Sets a slot, keeping the fleet-wide counters right (the caller re-indexes).
    pub(crate) fn set_slot(&mut self, s: &SlotRef, to: Slot) {
        if let Some(i) = self.instances.get_mut(&s.instance) {
            let (a, r) = (i.acquired, i.reserved);
            i.set_slot(s.slot, to);
            self.acquired_total = self.acquired_total + i.acquired - a;
            self.reserved_total = self.reserved_total + i.reserved - r;
        }
    }

    fn count_lost(&mut self, state: &KeyState, up: bool) {
        let KeyState::Lost { slot, .. } = state else {
            return;
        };
        if up {
            self.lost_keys += 1;
            *self.lost_on.entry(slot.instance.clone()).or_default() += 1;
        } else {
            self.lost_keys -= 1;
            if let Some(n) = self.lost_on.get_mut(&slot.instance) {
                *n -= 1;
                if *n == 0 {
                    self.lost_on.remove(&slot.instance);
                }
            }
        }
    }

    /// Jobs told that instance `id` was lost that have not released yet.
    pub fn lost_on(&self, id: &str) -> usize {
        self.lost_on.get(id).copied().unwrap_or(0)
    }

    /// Sets a key's state, keeping the lost-key counters right.
    pub(crate) fn set_key(&mut self, key: &str, state: KeyState) {
        self.count_lost(&state, true);
        if let Some(old) = self.keys.insert(key.to_string(), state) {
            self.count_lost(&old, false);
        }
    }

    /// Removes a key, keeping the lost-key counters and the queue right.
    pub(crate) fn remove_key(&mut self, key: &str) -> Option<KeyState> {
        let old = self.keys.remove(key)?;
        self.count_lost(&old, false);
        if let KeyState::Pending { seq, .. } = &old {
            self.queue.remove(seq);
        }
        Some(old)
    }

    /// Counts slots by state.
    pub fn counts(&self) -> SlotCounts {
        let mut c = SlotCounts {
            pending: self.queue.len(),
            instances: self.instances.len(),
            acquired: self.acquired_total,
            reserved: self.reserved_total,
            ..Default::default()
        };
        for i in self.instances.values() {
            let free = i.slots.len() - i.acquired - i.reserved;
            if free == 0 {
                continue;
            }
            if self.allocatable(i) {
                c.idle += free;
            } else if self.unhealthy(i) {
                c.unhealthy += free;
            } else if !self.usable(i) {
                c.unavailable += free;
            } else {
                c.unready += free;
            }
        }
        c
    }

    /// Reservations not bound to a slot (non-preemptive reservations made while no slot was
    /// idle).
    pub fn unbound_reservations(&self) -> usize {
        self.keys
            .values()
            .filter(|k| matches!(k, KeyState::Reserved { slot: None, .. }))
            .count()
    }

    /// Acquired and lost keys (jobs that have not released yet).
    pub fn held(&self) -> usize {
        self.keys
            .values()
            .filter(|s| matches!(s, KeyState::Acquired { .. } | KeyState::Lost { .. }))
            .count()
    }

    /// The journal's view of one instance.
    pub fn record_of(&self, id: &str) -> Option<crate::journal::InstanceRecord> {
        self.instances
            .get(id)
            .map(|i| crate::journal::InstanceRecord {
                id: i.id.clone(),
                state: i.state,
                cause: i.cause,
                use_count: i.use_count,
                removal: i.removal.as_ref().map(|r| r.reason),
            })
    }

    /// Checks the ledger's structural invariants; returns a description of the first broken
    /// one.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut holders: HashMap<&str, SlotRef> = HashMap::new();
        let (mut acquired, mut reserved) = (0, 0);
        for i in self.instances.values() {
            if i.slots.len() != self.capacity {
                return Err(format!("instance {} has {} slots", i.id, i.slots.len()));
            }
            let (mut a, mut r) = (0, 0);
            for (idx, s) in i.slots.iter().enumerate() {
                let (k, is_acquired) = match s {
                    Slot::Free => continue,
                    Slot::Reserved(k) => (k, false),
                    Slot::Acquired(k) => (k, true),
                };
                if is_acquired {
                    a += 1;
                } else {
                    r += 1;
                }
                let here = SlotRef {
                    instance: i.id.clone(),
                    slot: idx,
                };
                if let Some(other) = holders.insert(k.as_str(), here.clone()) {
                    return Err(format!("key {k} holds two slots: {other:?} and {here:?}"));
                }
                let expect_ok = match self.keys.get(k) {
                    Some(KeyState::Acquired { slot }) => is_acquired && *slot == here,
                    Some(KeyState::Reserved {
                        slot: Some(slot), ..
                    }) => !is_acquired && *slot == here,
                    _ => false,
                };
                if !expect_ok {
                    return Err(format!(
                        "slot {here:?} held by {k} but the key says {:?}",
                        self.keys.get(k)
                    ));
                }
                if is_acquired && i.readiness != Readiness::Ready {
                    return Err(format!(
                        "slot {here:?} acquired on an instance not through ready-up ({:?})",
                        i.readiness
                    ));
                }
                if is_acquired && self.foreign(i) {
                    return Err(format!("slot {here:?} acquired on a foreign instance"));
                }
            }
            if (a, r) != (i.acquired, i.reserved) {
                return Err(format!(
                    "instance {} counts {}/{} acquired/reserved, its slots say {a}/{r}",
                    i.id, i.acquired, i.reserved
                ));
            }
            acquired += a;
            reserved += r;
            let want = self.allocatable(i) && i.has_free();
            let filed = i.indexed.is_some();
            if want != filed {
                return Err(format!(
                    "instance {} is {}in the free-slot index but should {}be",
                    i.id,
                    if filed { "" } else { "not " },
                    if want { "" } else { "not " }
                ));
            }
        }
        if (acquired, reserved) != (self.acquired_total, self.reserved_total) {
            return Err(format!(
                "fleet counts {}/{} acquired/reserved, the slots say {acquired}/{reserved}",
                self.acquired_total, self.reserved_total
            ));
        }
        if self.free.len()
            != self
                .instances
                .values()
                .filter(|i| i.indexed.is_some())
                .count()
        {
            return Err("the free-slot index holds instances the ledger does not".into());
        }
        let mut lost = 0;
        let mut lost_on: HashMap<&str, usize> = HashMap::new();
        let mut pending = 0;
        for (k, s) in &self.keys {
            match s {
                KeyState::Acquired { slot }
                | KeyState::Reserved {
                    slot: Some(slot), ..
                } if holders.get(k.as_str()) != Some(slot) => {
                    return Err(format!("key {k} claims {slot:?} but the slot disagrees"));
                }
                KeyState::Pending { seq, .. } => {
                    pending += 1;
                    if self.queue.get(seq) != Some(k) {
                        return Err(format!("pending key {k} not queued at {seq}"));
                    }
                }
                KeyState::Lost { slot, .. } => {
                    lost += 1;
                    *lost_on.entry(slot.instance.as_str()).or_default() += 1;
                }
                _ => {}
            }
        }
        if lost != self.lost_keys
            || lost_on.len() != self.lost_on.len()
            || lost_on
                .iter()
                .any(|(id, n)| self.lost_on.get(*id) != Some(n))
        {
            return Err(format!(
                "{lost} lost keys ({lost_on:?}), counted {} ({:?})",
                self.lost_keys, self.lost_on
            ));
        }
        if self.queue.len() != pending {
            return Err("queue and pending keys disagree".into());
        }
        Ok(())
    }
}

/// Puts `i` in the free-slot index, moves it, or takes it out, as its state now requires.
/// Allocates only when its place changes.
pub(crate) fn refile(rules: &Rules, free: &mut FreeIndex, i: &mut Instance) {
    let wanted = rules.allocatable(i) && i.has_free();
    match &i.indexed {
        Some((acquired, idle_since, _))
            if wanted && acquired.0 == i.acquired && idle_since.0 == i.idle_since =>
        {
            return;
        }
        None if !wanted => return,
        _ => {}
    }
    if let Some(old) = i.indexed.take() {
        free.remove(&old);
    }
    if wanted {
        let p = FreeIndex::pref(i.acquired, i.idle_since, &i.id);
        free.insert(p.clone());
        i.indexed = Some(p);
    }
}
