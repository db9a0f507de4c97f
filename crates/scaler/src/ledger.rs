//! The two ledgers: instances (with their slots) and keys (reservations, pending acquires,
//! acquisitions).
//!
//! Everything here is plain data and pure bookkeeping: no I/O, no clocks (every operation
//! takes `now`), no async. The driver feeds it provider listings and the job-source API feeds
//! it reservations and acquisitions; [`crate::desired`] reads it to decide.
//!
//! Invariants (checked by [`Ledger::check_invariants`]):
//! - a slot is held by at most one key, and a key holds at most one slot;
//! - a slot is acquired only on an instance that was running and ready when it was handed out;
//! - every pending key is in the FIFO queue exactly once.

use crate::error::ScalerError;
use flotilla_fleet::{InstanceId, InstanceStatus, State};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;
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

/// How an instance came to be in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Created by this scaler's `increase`.
    Requested,
    /// Found in the group without a record of it (fleeting's `CausePreexisted`).
    Preexisted,
    /// Known from the durable store (restored after a restart).
    Restored,
}

/// What to do with instances found in the group that this scaler never created (and has no
/// record of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preexisting {
    /// Use them like our own after their ready-up (the `local` provider's one instance).
    #[default]
    Adopt,
    /// Report them and leave them alone: never used, never deleted.
    Ignore,
    /// Delete them.
    Remove,
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

/// Why an instance is being removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemovalReason {
    /// Unused for longer than `idle_time` and not needed for the idle target.
    IdleTime,
    /// Ran `max_use_count` jobs.
    MaxUseCount,
    /// `failure_threshold` consecutive health failures.
    Unhealthy,
    /// The ready-up hook failed.
    ReadyUpFailed,
    /// The provider reported it as timed out.
    Timeout,
    /// It was deleted outside flotilla.
    RemovedFromOutside,
    /// The scaler shut down with `delete_instances_on_shutdown`.
    Shutdown,
    /// Restart reconciliation decided to remove it (e.g. unknown and unreachable).
    Reconcile,
}

impl RemovalReason {
    /// A short name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::IdleTime => "idle_time",
            RemovalReason::MaxUseCount => "max_use_count",
            RemovalReason::Unhealthy => "unhealthy",
            RemovalReason::ReadyUpFailed => "ready_up_failed",
            RemovalReason::Timeout => "timeout",
            RemovalReason::RemovedFromOutside => "removed_from_outside",
            RemovalReason::Shutdown => "shutdown",
            RemovalReason::Reconcile => "reconcile",
        }
    }
}

impl fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an acquisition lost its instance while a job held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LostCause {
    /// The instance vanished from the provider's listing.
    InstanceRemoved,
    /// The provider reports the instance as deleting, deleted or timed out.
    InstanceDeleting,
    /// The instance failed `failure_threshold` health checks.
    InstanceUnhealthy,
    /// The scaler shut down and deleted instances.
    Shutdown,
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostCause::InstanceRemoved => "instance unexpectedly removed",
            LostCause::InstanceDeleting => "instance is being deleted",
            LostCause::InstanceUnhealthy => "instance is unhealthy",
            LostCause::Shutdown => "scaler shut down",
        })
    }
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

/// One instance in the ledger.
#[derive(Debug, Clone)]
pub struct Instance {
    /// The provider's id.
    pub id: InstanceId,
    /// The state in the last listing.
    pub state: State,
    /// How it came to be known.
    pub cause: Cause,
    /// Ready-up progress.
    pub readiness: Readiness,
    slots: Vec<Slot>,
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
    /// The listing epoch it was last seen in.
    seen: u64,
}

impl Instance {
    fn new(id: InstanceId, state: State, cause: Cause, capacity: usize, now: Instant) -> Self {
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
            seen: 0,
        }
    }

    /// The slots, indexed `0..capacity_per_instance`.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Slots running a job.
    pub fn acquired(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Acquired(_)))
            .count()
    }

    /// Slots not running a job (free or reserved).
    pub fn not_acquired(&self) -> usize {
        self.slots.len() - self.acquired()
    }

    fn first_free(&self) -> Option<usize> {
        self.slots.iter().position(|s| *s == Slot::Free)
    }
}

/// The state of a key.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// A reservation; bound to a slot when one was idle and ready.
    Reserved {
        /// The slot it holds, if any.
        slot: Option<SlotRef>,
        /// When the lease runs out.
        expires: Instant,
    },
    /// An `acquire` waiting for a slot.
    Pending {
        /// Since when.
        since: Instant,
    },
    /// A job holds this slot.
    Acquired {
        /// The slot.
        slot: SlotRef,
    },
    /// The job's instance died; the key waits for its `release`.
    Lost {
        /// The slot it held.
        slot: SlotRef,
        /// Why it was lost.
        cause: LostCause,
    },
}

/// Counts of slots by state (taskscaler's `fleeting_taskscaler_tasks{state}`), plus
/// instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotCounts {
    /// Free and ready.
    pub idle: usize,
    /// Held by a reservation.
    pub reserved: usize,
    /// `acquire` calls waiting for a slot.
    pub pending: usize,
    /// Running jobs.
    pub acquired: usize,
    /// On instances that take no new jobs (used up or being removed).
    pub unavailable: usize,
    /// On instances past the health-failure threshold.
    pub unhealthy: usize,
    /// On instances not yet through ready-up.
    pub unready: usize,
    /// Instances in the ledger (any state, removing ones included).
    pub instances: usize,
}

impl fmt::Display for SlotCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "idle:{},reserved:{},pending:{},acquired:{},unavailable:{},unhealthy:{},unready:{},instances:{}",
            self.idle,
            self.reserved,
            self.pending,
            self.acquired,
            self.unavailable,
            self.unhealthy,
            self.unready,
            self.instances
        )
    }
}

/// What a listing changed.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Observed {
    /// Keys whose instance died under them.
    pub lost: Vec<(Key, LostCause)>,
    /// Instances that reached `Running` and need their ready-up hook.
    pub became_running: Vec<InstanceId>,
    /// Instances that appeared (with their cause).
    pub appeared: Vec<(InstanceId, Cause)>,
    /// Instances that left the listing (with the removal reason, if flotilla removed them).
    pub gone: Vec<(InstanceId, Option<RemovalReason>)>,
    /// Instances whose state changed (appeared ones included).
    pub changed: Vec<InstanceId>,
}

/// Requests for instances that have not appeared in a listing yet.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Requested {
    at: Instant,
    count: usize,
}

/// The result of trying to acquire a slot now.
#[derive(Debug, Clone, PartialEq)]
pub enum TryAcquire {
    /// The key holds this slot now.
    Assigned(SlotRef),
    /// No slot is ready; the key waits in the queue.
    Queued,
}

/// The scaler's ledgers. See the module documentation.
#[derive(Debug, Clone)]
pub struct Ledger {
    capacity: usize,
    max_use_count: u32,
    failure_threshold: u32,
    instances: BTreeMap<InstanceId, Instance>,
    keys: HashMap<Key, KeyState>,
    queue: VecDeque<Key>,
    requested: Vec<Requested>,
    shutting_down: bool,
    preexisting: Preexisting,
    epoch: u64,
}

impl Ledger {
    /// An empty ledger for instances of `capacity` slots.
    pub fn new(capacity: usize, max_use_count: u32, failure_threshold: u32) -> Self {
        Ledger {
            capacity: capacity.max(1),
            max_use_count,
            failure_threshold: failure_threshold.max(1),
            instances: BTreeMap::new(),
            keys: HashMap::new(),
            queue: VecDeque::new(),
            requested: Vec::new(),
            shutting_down: false,
            preexisting: Preexisting::Adopt,
            epoch: 0,
        }
    }

    /// Sets what happens to instances this scaler never created.
    pub fn with_preexisting(mut self, policy: Preexisting) -> Self {
        self.preexisting = policy;
        self
    }

    /// Whether an instance is someone else's and must be left alone.
    pub fn foreign(&self, i: &Instance) -> bool {
        i.cause == Cause::Preexisted && self.preexisting != Preexisting::Adopt
    }

    /// What happens to instances this scaler never created.
    pub fn preexisting(&self) -> Preexisting {
        self.preexisting
    }

    /// Slots per instance.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Every instance, by id.
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.instances.values()
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

    /// Instances requested from the provider that have not appeared yet.
    pub fn requested_in_flight(&self) -> usize {
        self.requested.iter().map(|r| r.count).sum()
    }

    /// Whether the scaler is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Whether an instance is used up by `max_use_count`.
    pub fn used_up(&self, i: &Instance) -> bool {
        self.max_use_count > 0 && i.use_count >= self.max_use_count
    }

    /// Whether an instance is past the health-failure threshold.
    pub fn unhealthy(&self, i: &Instance) -> bool {
        i.health_failures >= self.failure_threshold
    }

    /// Whether an instance counts as capacity now or soon: live, not being removed, healthy,
    /// not used up, ready-up not failed.
    pub fn usable(&self, i: &Instance) -> bool {
        !self.foreign(i)
            && i.state.is_live()
            && i.removal.is_none()
            && !self.unhealthy(i)
            && !self.used_up(i)
            && !matches!(i.readiness, Readiness::Failed(_))
    }

    /// Whether slots of this instance may be handed out now.
    pub fn allocatable(&self, i: &Instance) -> bool {
        self.usable(i) && i.state == State::Running && i.readiness == Readiness::Ready
    }

    /// Picks a free slot on an allocatable instance: the busiest instance first (so idle ones
    /// can be scaled down), then the most recently used, then the lowest id.
    fn pick_free(&self) -> Option<SlotRef> {
        let mut best: Option<(&Instance, usize)> = None;
        for i in self.instances.values() {
            if !self.allocatable(i) {
                continue;
            }
            let Some(slot) = i.first_free() else { continue };
            let better = match best {
                None => true,
                Some((b, _)) => (i.acquired(), i.idle_since) > (b.acquired(), b.idle_since),
            };
            if better {
                best = Some((i, slot));
            }
        }
        best.map(|(i, slot)| SlotRef {
            instance: i.id.clone(),
            slot,
        })
    }

    fn slot_mut(&mut self, s: &SlotRef) -> Option<&mut Slot> {
        self.instances
            .get_mut(&s.instance)
            .and_then(|i| i.slots.get_mut(s.slot))
    }

    /// Counts slots by state.
    pub fn counts(&self) -> SlotCounts {
        let mut c = SlotCounts {
            pending: self.queue.len(),
            instances: self.instances.len(),
            ..Default::default()
        };
        for i in self.instances.values() {
            let (allocatable, unhealthy, usable) =
                (self.allocatable(i), self.unhealthy(i), self.usable(i));
            for s in &i.slots {
                match s {
                    Slot::Acquired(_) => c.acquired += 1,
                    Slot::Reserved(_) => c.reserved += 1,
                    Slot::Free if allocatable => c.idle += 1,
                    Slot::Free if unhealthy => c.unhealthy += 1,
                    Slot::Free if !usable => c.unavailable += 1,
                    Slot::Free => c.unready += 1,
                }
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

    // ----- job-source operations -------------------------------------------------------

    /// Reserves capacity for `key`. In preemptive mode only an idle, ready slot will do;
    /// otherwise a reservation is promised while the fleet may still grow to `max_slots`,
    /// and bound to an idle slot when one exists.
    pub fn reserve(
        &mut self,
        key: &str,
        preemptive: bool,
        max_slots: Option<usize>,
        lease: Duration,
        now: Instant,
    ) -> Result<(), ScalerError> {
        if self.shutting_down {
            return Err(ScalerError::ShuttingDown);
        }
        if self.keys.contains_key(key) {
            return Err(ScalerError::DuplicateKey(key.to_string()));
        }
        let slot = self.pick_free();
        if slot.is_none() {
            if preemptive {
                return Err(ScalerError::NoCapacity {
                    why: "preemptive mode and no idle, ready slot",
                    counts: self.counts(),
                });
            }
            if let Some(max) = max_slots {
                let promised = self
                    .keys
                    .values()
                    .filter(|k| !matches!(k, KeyState::Lost { .. }))
                    .count();
                if promised >= max {
                    return Err(ScalerError::NoCapacity {
                        why: "every slot the fleet may have is promised",
                        counts: self.counts(),
                    });
                }
            }
        }
        if let Some(s) = &slot
            && let Some(cell) = self.slot_mut(s)
        {
            *cell = Slot::Reserved(key.to_string());
        }
        self.keys.insert(
            key.to_string(),
            KeyState::Reserved {
                slot,
                expires: now + lease,
            },
        );
        Ok(())
    }

    /// Drops a reservation (no job came). A key in any other state is left alone.
    pub fn unreserve(&mut self, key: &str) -> bool {
        match self.keys.get(key) {
            Some(KeyState::Reserved { slot, .. }) => {
                if let Some(s) = slot.clone() {
                    self.free_slot_of(&s, key);
                }
                self.keys.remove(key);
                true
            }
            _ => false,
        }
    }

    fn free_slot_of(&mut self, s: &SlotRef, key: &str) {
        if let Some(cell) = self.slot_mut(s)
            && matches!(cell, Slot::Reserved(k) | Slot::Acquired(k) if k == key)
        {
            *cell = Slot::Free;
        }
    }

    fn assign(&mut self, key: &str, s: SlotRef, now: Instant) {
        let max_use = self.max_use_count;
        if let Some(i) = self.instances.get_mut(&s.instance) {
            i.slots[s.slot] = Slot::Acquired(key.to_string());
            i.use_count = i.use_count.saturating_add(1);
            i.idle_since = now;
            if max_use > 0 && i.use_count >= max_use {
                // Used up: its reservations must find other slots.
                let id = i.id.clone();
                self.rebind_reservations_of(&id);
            }
        }
        self.keys
            .insert(key.to_string(), KeyState::Acquired { slot: s });
    }

    /// Tries to give `key` a slot now: its reserved slot if still good, else any idle ready
    /// slot; otherwise queues it (FIFO).
    pub fn try_acquire(&mut self, key: &str, now: Instant) -> Result<TryAcquire, ScalerError> {
        if self.shutting_down {
            return Err(ScalerError::ShuttingDown);
        }
        match self.keys.get(key).cloned() {
            Some(KeyState::Acquired { .. } | KeyState::Pending { .. } | KeyState::Lost { .. }) => {
                return Err(ScalerError::DuplicateKey(key.to_string()));
            }
            Some(KeyState::Reserved { slot: Some(s), .. }) => {
                let ok = self
                    .instances
                    .get(&s.instance)
                    .is_some_and(|i| self.allocatable(i))
                    && matches!(self.slot_mut(&s), Some(Slot::Reserved(k)) if k == key);
                if ok {
                    self.assign(key, s.clone(), now);
                    return Ok(TryAcquire::Assigned(s));
                }
                self.free_slot_of(&s, key);
            }
            Some(KeyState::Reserved { slot: None, .. }) | None => {}
        }
        // Waiters come first: a slot only goes to a newcomer when nobody queues.
        if self.queue.is_empty()
            && let Some(s) = self.pick_free()
        {
            self.assign(key, s.clone(), now);
            return Ok(TryAcquire::Assigned(s));
        }
        self.keys
            .insert(key.to_string(), KeyState::Pending { since: now });
        self.queue.push_back(key.to_string());
        Ok(TryAcquire::Queued)
    }

    /// Hands free ready slots to queued keys, first come first served. Returns the
    /// assignments made.
    pub fn fulfil_pending(&mut self, now: Instant) -> Vec<(Key, SlotRef)> {
        let mut out = Vec::new();
        while !self.queue.is_empty() {
            let Some(s) = self.pick_free() else { break };
            let Some(key) = self.queue.pop_front() else {
                break;
            };
            self.assign(&key, s.clone(), now);
            out.push((key, s));
        }
        out
    }

    /// Undoes an assignment that was never used (a failed acquire-time heartbeat): the slot is
    /// freed, the use count restored, and the key queued again at the front.
    pub fn unassign(&mut self, key: &str, now: Instant) {
        if let Some(KeyState::Acquired { slot }) = self.keys.get(key).cloned() {
            self.free_slot_of(&slot, key);
            if let Some(i) = self.instances.get_mut(&slot.instance) {
                i.use_count = i.use_count.saturating_sub(1);
            }
            self.keys
                .insert(key.to_string(), KeyState::Pending { since: now });
            self.queue.push_front(key.to_string());
        }
    }

    /// Gives up waiting for `key` (timeout, or the waiter went away). Returns the slot if the
    /// key had been assigned one meanwhile (the caller decides to keep or release it).
    pub fn cancel_pending(&mut self, key: &str) -> Option<SlotRef> {
        match self.keys.get(key) {
            Some(KeyState::Pending { .. }) => {
                self.keys.remove(key);
                self.queue.retain(|k| k != key);
                None
            }
            Some(KeyState::Acquired { slot }) => Some(slot.clone()),
            _ => None,
        }
    }

    /// Ends `key` whatever its state: a finished job frees its slot (and the instance's idle
    /// time starts), a reservation is dropped, a waiter leaves the queue.
    pub fn release(&mut self, key: &str, now: Instant) -> bool {
        let Some(state) = self.keys.remove(key) else {
            return false;
        };
        match state {
            KeyState::Acquired { slot } => {
                self.free_slot_of(&slot, key);
                if let Some(i) = self.instances.get_mut(&slot.instance) {
                    i.idle_since = now;
                }
            }
            KeyState::Reserved { slot: Some(s), .. } => self.free_slot_of(&s, key),
            KeyState::Pending { .. } => self.queue.retain(|k| k != key),
            KeyState::Reserved { slot: None, .. } | KeyState::Lost { .. } => {}
        }
        true
    }

    /// Drops reservations whose lease ran out; returns their keys.
    pub fn expire_reservations(&mut self, now: Instant) -> Vec<Key> {
        let expired: Vec<Key> = self
            .keys
            .iter()
            .filter(|(_, s)| matches!(s, KeyState::Reserved { expires, .. } if *expires <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &expired {
            self.unreserve(k);
        }
        expired
    }

    /// Moves reservations off instance `id` to other idle slots, or unbinds them.
    fn rebind_reservations_of(&mut self, id: &str) {
        let keys: Vec<Key> = match self.instances.get(id) {
            Some(i) => i
                .slots
                .iter()
                .filter_map(|s| match s {
                    Slot::Reserved(k) => Some(k.clone()),
                    _ => None,
                })
                .collect(),
            None => return,
        };
        if let Some(i) = self.instances.get_mut(id) {
            for s in i.slots.iter_mut() {
                if matches!(s, Slot::Reserved(_)) {
                    *s = Slot::Free;
                }
            }
        }
        self.rebind_keys(keys);
    }

    /// Binds reservations that lost their slot to other idle slots, or leaves them unbound.
    fn rebind_keys(&mut self, keys: Vec<Key>) {
        for k in keys {
            let slot = self.pick_free();
            if let Some(s) = &slot
                && let Some(cell) = self.slot_mut(s)
            {
                *cell = Slot::Reserved(k.clone());
            }
            if let Some(KeyState::Reserved { slot: bound, .. }) = self.keys.get_mut(&k) {
                *bound = slot;
            }
        }
    }

    /// Marks the acquisitions on instance `id` lost with `cause`.
    fn lose_acquisitions_of(&mut self, id: &str, cause: LostCause) -> Vec<(Key, LostCause)> {
        let Some(i) = self.instances.get(id) else {
            return Vec::new();
        };
        let held: Vec<(Key, usize)> = i
            .slots
            .iter()
            .enumerate()
            .filter_map(|(idx, s)| match s {
                Slot::Acquired(k) => Some((k.clone(), idx)),
                _ => None,
            })
            .collect();
        let mut out = Vec::with_capacity(held.len());
        for (k, idx) in held {
            self.keys.insert(
                k.clone(),
                KeyState::Lost {
                    slot: SlotRef {
                        instance: id.to_string(),
                        slot: idx,
                    },
                    cause,
                },
            );
            if let Some(i) = self.instances.get_mut(id) {
                i.slots[idx] = Slot::Free;
            }
            out.push((k, cause));
        }
        out
    }

    // ----- driver operations -----------------------------------------------------------

    /// Records that `n` instances were requested (before the provider is asked).
    pub fn add_requested(&mut self, n: usize, now: Instant) {
        if n > 0 {
            self.requested.push(Requested { at: now, count: n });
        }
    }

    /// Takes back `n` requested instances the provider did not grant.
    pub fn cancel_requested(&mut self, mut n: usize) {
        while n > 0 {
            let Some(last) = self.requested.last_mut() else {
                break;
            };
            let take = last.count.min(n);
            last.count -= take;
            n -= take;
            if last.count == 0 {
                self.requested.pop();
            }
        }
    }

    /// Forgets requests older than `timeout` that never appeared.
    pub fn expire_requested(&mut self, timeout: Duration, now: Instant) -> usize {
        let before = self.requested_in_flight();
        self.requested
            .retain(|r| now.saturating_duration_since(r.at) < timeout);
        before - self.requested_in_flight()
    }

    fn consume_requested(&mut self) -> bool {
        if let Some(first) = self.requested.first_mut() {
            first.count -= 1;
            if first.count == 0 {
                self.requested.remove(0);
            }
            true
        } else {
            false
        }
    }

    /// Adds an instance known from elsewhere (the durable store) before the first listing.
    pub fn restore(
        &mut self,
        id: InstanceId,
        state: State,
        cause: Cause,
        use_count: u32,
        removal: Option<RemovalReason>,
        now: Instant,
    ) {
        // Someone else's instance stays someone else's across a restart.
        let cause = match cause {
            Cause::Preexisted => Cause::Preexisted,
            Cause::Requested | Cause::Restored => Cause::Restored,
        };
        let mut i = Instance::new(id.clone(), state, cause, self.capacity, now);
        i.use_count = use_count;
        // A removal decided before the restart is carried on.
        i.removal = removal.map(|reason| Removal {
            reason,
            decided_at: now,
            attempts: 0,
            last_attempt: None,
            accepted: false,
        });
        self.instances.insert(id, i);
    }

    /// Reconciles the ledger with a provider listing (the truth).
    pub fn observe(&mut self, listing: &[InstanceStatus], now: Instant) -> Observed {
        let mut out = Observed::default();
        // Instances not in this listing are gone: mark the ones seen with a fresh epoch.
        self.epoch = self.epoch.wrapping_add(1);
        let epoch = self.epoch;
        for entry in listing {
            match self.instances.get_mut(&entry.id) {
                Some(i) => {
                    i.seen = epoch;
                    if i.state != entry.state {
                        out.changed.push(i.id.clone());
                    }
                    i.state = entry.state;
                    // Running and the ready-up not started yet (new, or restored from the
                    // store): the driver runs the hook now.
                    let foreign =
                        i.cause == Cause::Preexisted && self.preexisting != Preexisting::Adopt;
                    if entry.state == State::Running
                        && i.readiness == Readiness::Waiting
                        && !foreign
                    {
                        out.became_running.push(i.id.clone());
                    }
                }
                None => {
                    if entry.state == State::Deleted {
                        continue;
                    }
                    let cause = if self.consume_requested() {
                        Cause::Requested
                    } else {
                        Cause::Preexisted
                    };
                    let mut i =
                        Instance::new(entry.id.clone(), entry.state, cause, self.capacity, now);
                    i.seen = epoch;
                    let foreign =
                        cause == Cause::Preexisted && self.preexisting != Preexisting::Adopt;
                    if entry.state == State::Running && !foreign {
                        out.became_running.push(entry.id.clone());
                    }
                    out.appeared.push((entry.id.clone(), cause));
                    out.changed.push(entry.id.clone());
                    self.instances.insert(entry.id.clone(), i);
                }
            }
            // Dying instances: their jobs are lost, their reservations move.
            let state = entry.state;
            let foreign = self.instances.get(&entry.id).is_some_and(|i| {
                i.cause == Cause::Preexisted && self.preexisting != Preexisting::Adopt
            });
            if !foreign && matches!(state, State::Deleting | State::Deleted | State::Timeout) {
                let removal_known = self
                    .instances
                    .get(&entry.id)
                    .is_some_and(|i| i.removal.is_some());
                if !removal_known && let Some(i) = self.instances.get_mut(&entry.id) {
                    i.removal = Some(Removal {
                        reason: if state == State::Timeout {
                            RemovalReason::Timeout
                        } else {
                            RemovalReason::RemovedFromOutside
                        },
                        decided_at: now,
                        attempts: 0,
                        last_attempt: None,
                        accepted: state != State::Timeout,
                    });
                }
                let lost = self.lose_acquisitions_of(&entry.id, LostCause::InstanceDeleting);
                out.lost.extend(lost);
                self.rebind_reservations_of(&entry.id);
            }
        }
        // Instances that left the listing, or were reported deleted.
        let gone: Vec<InstanceId> = self
            .instances
            .values()
            .filter(|i| i.seen != epoch || i.state == State::Deleted)
            .map(|i| i.id.clone())
            .collect();
        // Take them all out first, so no reservation is moved onto one that is also gone.
        let mut orphaned = Vec::new();
        for id in gone {
            let lost = self.lose_acquisitions_of(&id, LostCause::InstanceRemoved);
            out.lost.extend(lost);
            if let Some(i) = self.instances.remove(&id) {
                orphaned.extend(i.slots.into_iter().filter_map(|s| match s {
                    Slot::Reserved(k) => Some(k),
                    _ => None,
                }));
                out.gone.push((id, i.removal.map(|r| r.reason)));
            }
        }
        self.rebind_keys(orphaned);
        out
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

    /// Marks the ready-up of `id` as started.
    pub fn ready_up_started(&mut self, id: &str) {
        if let Some(i) = self.instances.get_mut(id) {
            i.readiness = Readiness::InProgress;
        }
    }

    /// Records the ready-up result of `id`.
    pub fn ready_up_done(&mut self, id: &str, result: Result<(), String>, now: Instant) {
        if let Some(i) = self.instances.get_mut(id) {
            match result {
                Ok(()) => {
                    i.readiness = Readiness::Ready;
                    i.idle_since = now;
                }
                Err(e) => i.readiness = Readiness::Failed(e),
            }
        }
    }

    /// Records a failed health check of `id`. Past the threshold the instance takes no new
    /// work and its running jobs are lost (returned).
    pub fn health_failure(&mut self, id: &str) -> Vec<(Key, LostCause)> {
        let threshold = self.failure_threshold;
        let crossed = match self.instances.get_mut(id) {
            Some(i) => {
                i.health_failures = i.health_failures.saturating_add(1);
                i.health_failures == threshold
            }
            None => false,
        };
        if crossed {
            self.rebind_reservations_of(id);
            self.lose_acquisitions_of(id, LostCause::InstanceUnhealthy)
        } else {
            Vec::new()
        }
    }

    /// Records a passed health check of `id`: the failure streak ends.
    pub fn health_ok(&mut self, id: &str) {
        if let Some(i) = self.instances.get_mut(id)
            && i.health_failures < self.failure_threshold
        {
            i.health_failures = 0;
        }
    }

    /// Marks `id` for removal (it takes no new work from now on). Returns false if it was
    /// already being removed or is unknown.
    pub fn mark_removal(&mut self, id: &str, reason: RemovalReason, now: Instant) -> bool {
        let Some(i) = self.instances.get_mut(id) else {
            return false;
        };
        if i.removal.is_some() {
            return false;
        }
        i.removal = Some(Removal {
            reason,
            decided_at: now,
            attempts: 0,
            last_attempt: None,
            accepted: false,
        });
        self.rebind_reservations_of(id);
        true
    }

    /// Records a deletion request for `id` and whether the provider accepted it.
    pub fn removal_attempted(&mut self, id: &str, accepted: bool, now: Instant) {
        if let Some(r) = self.instances.get_mut(id).and_then(|i| i.removal.as_mut()) {
            r.attempts += 1;
            r.last_attempt = Some(now);
            r.accepted |= accepted;
        }
    }

    /// Enters shutdown: nothing more is handed out; queued keys and reservations are
    /// dropped (returned).
    pub fn begin_shutdown(&mut self) -> Vec<Key> {
        self.shutting_down = true;
        let mut dropped: Vec<Key> = self.queue.drain(..).collect();
        for k in &dropped {
            self.keys.remove(k);
        }
        let reserved: Vec<Key> = self
            .keys
            .iter()
            .filter(|(_, s)| matches!(s, KeyState::Reserved { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        for k in reserved {
            self.unreserve(&k);
            dropped.push(k);
        }
        dropped
    }

    /// Acquired and lost keys (jobs that have not released yet).
    pub fn held(&self) -> usize {
        self.keys
            .values()
            .filter(|s| matches!(s, KeyState::Acquired { .. } | KeyState::Lost { .. }))
            .count()
    }

    /// Checks the ledger's structural invariants; returns a description of the first broken
    /// one.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut holders: HashMap<&str, SlotRef> = HashMap::new();
        for i in self.instances.values() {
            if i.slots.len() != self.capacity {
                return Err(format!("instance {} has {} slots", i.id, i.slots.len()));
            }
            for (idx, s) in i.slots.iter().enumerate() {
                let (k, acquired) = match s {
                    Slot::Free => continue,
                    Slot::Reserved(k) => (k, false),
                    Slot::Acquired(k) => (k, true),
                };
                let here = SlotRef {
                    instance: i.id.clone(),
                    slot: idx,
                };
                if let Some(other) = holders.insert(k.as_str(), here.clone()) {
                    return Err(format!("key {k} holds two slots: {other:?} and {here:?}"));
                }
                let expect_ok = match self.keys.get(k) {
                    Some(KeyState::Acquired { slot }) => acquired && *slot == here,
                    Some(KeyState::Reserved {
                        slot: Some(slot), ..
                    }) => !acquired && *slot == here,
                    _ => false,
                };
                if !expect_ok {
                    return Err(format!(
                        "slot {here:?} held by {k} but the key says {:?}",
                        self.keys.get(k)
                    ));
                }
                if acquired && i.readiness != Readiness::Ready && i.cause != Cause::Restored {
                    return Err(format!("slot {here:?} acquired on an unready instance"));
                }
            }
        }
        let mut queued: HashMap<&str, usize> = HashMap::with_capacity(self.queue.len());
        for q in &self.queue {
            *queued.entry(q.as_str()).or_default() += 1;
        }
        for (k, s) in &self.keys {
            match s {
                KeyState::Acquired { slot }
                | KeyState::Reserved {
                    slot: Some(slot), ..
                } if holders.get(k.as_str()) != Some(slot) => {
                    return Err(format!("key {k} claims {slot:?} but the slot disagrees"));
                }
                KeyState::Pending { .. } if queued.get(k.as_str()) != Some(&1) => {
                    return Err(format!("pending key {k} not queued exactly once"));
                }
                _ => {}
            }
        }
        if self.queue.len()
            != self
                .keys
                .values()
                .filter(|s| matches!(s, KeyState::Pending { .. }))
                .count()
        {
            return Err("queue and pending keys disagree".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(ids: &[&str]) -> Vec<InstanceStatus> {
        ids.iter()
            .map(|i| InstanceStatus::new(*i, State::Running))
            .collect()
    }

    fn ready_ledger(cap: usize, ids: &[&str], now: Instant) -> Ledger {
        let mut l = Ledger::new(cap, 0, 3);
        l.observe(&running(ids), now);
        for id in ids {
            l.ready_up_done(id, Ok(()), now);
        }
        l
    }

    const LEASE: Duration = Duration::from_secs(600);

    #[tokio::test(start_paused = true)]
    async fn acquire_release_and_slot_indices() {
        let now = Instant::now();
        let mut l = ready_ledger(2, &["a"], now);
        let a1 = l.try_acquire("j1", now).unwrap();
        let a2 = l.try_acquire("j2", now).unwrap();
        assert_eq!(
            a1,
            TryAcquire::Assigned(SlotRef {
                instance: "a".into(),
                slot: 0
            })
        );
        assert_eq!(
            a2,
            TryAcquire::Assigned(SlotRef {
                instance: "a".into(),
                slot: 1
            })
        );
        assert_eq!(l.try_acquire("j3", now).unwrap(), TryAcquire::Queued);
        assert_eq!(l.pending(), 1);
        l.check_invariants().unwrap();
        assert!(l.release("j1", now));
        let got = l.fulfil_pending(now);
        assert_eq!(
            got,
            vec![(
                "j3".to_string(),
                SlotRef {
                    instance: "a".into(),
                    slot: 0
                }
            )]
        );
        assert_eq!(l.instance("a").unwrap().use_count, 3);
        l.check_invariants().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn preemptive_reserve_needs_ready_slot() {
        let now = Instant::now();
        let mut l = Ledger::new(1, 0, 3);
        l.observe(&running(&["a"]), now);
        // Running but not through ready-up: not offered.
        let e = l.reserve("k", true, None, LEASE, now).unwrap_err();
        assert!(matches!(e, ScalerError::NoCapacity { .. }), "{e}");
        assert!(e.to_string().contains("unready:1"), "{e}");
        l.ready_up_done("a", Ok(()), now);
        l.reserve("k", true, None, LEASE, now).unwrap();
        assert!(matches!(
            l.reserve("k2", true, None, LEASE, now),
            Err(ScalerError::NoCapacity { .. })
        ));
        assert!(matches!(
            l.reserve("k", true, None, LEASE, now),
            Err(ScalerError::DuplicateKey(_))
        ));
        // The reservation turns into an acquisition on the same slot.
        assert!(matches!(
            l.try_acquire("k", now).unwrap(),
            TryAcquire::Assigned(SlotRef { ref instance, slot: 0 }) if instance == "a"
        ));
        l.check_invariants().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn non_preemptive_reserve_up_to_max_slots() {
        let now = Instant::now();
        let mut l = Ledger::new(2, 0, 3);
        l.reserve("a", false, Some(2), LEASE, now).unwrap();
        l.reserve("b", false, Some(2), LEASE, now).unwrap();
        assert!(matches!(
            l.reserve("c", false, Some(2), LEASE, now),
            Err(ScalerError::NoCapacity { .. })
        ));
        assert_eq!(l.unbound_reservations(), 2);
        assert!(l.unreserve("a"));
        l.reserve("c", false, Some(2), LEASE, now).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn reservations_expire() {
        let now = Instant::now();
        let mut l = ready_ledger(1, &["a"], now);
        l.reserve("k", true, None, Duration::from_secs(10), now)
            .unwrap();
        assert!(
            l.expire_reservations(now + Duration::from_secs(9))
                .is_empty()
        );
        assert_eq!(
            l.expire_reservations(now + Duration::from_secs(10)),
            vec!["k".to_string()]
        );
        assert_eq!(l.counts().idle, 1);
        l.check_invariants().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn vanished_instance_loses_its_jobs_and_moves_reservations() {
        let now = Instant::now();
        let mut l = ready_ledger(1, &["a", "b", "c"], now);
        l.try_acquire("job", now).unwrap();
        let job_on = match l.key("job") {
            Some(KeyState::Acquired { slot }) => slot.instance.clone(),
            other => panic!("{other:?}"),
        };
        l.reserve("r", true, None, LEASE, now).unwrap();
        let r_on = match l.key("r") {
            Some(KeyState::Reserved { slot: Some(s), .. }) => s.instance.clone(),
            other => panic!("{other:?}"),
        };
        // Both instances vanish; the third remains.
        let rest: Vec<&str> = ["a", "b", "c"]
            .into_iter()
            .filter(|i| *i != job_on && *i != r_on)
            .collect();
        let obs = l.observe(&running(&rest), now);
        assert_eq!(
            obs.lost,
            vec![("job".to_string(), LostCause::InstanceRemoved)]
        );
        assert_eq!(obs.gone.len(), 2);
        match l.key("r") {
            Some(KeyState::Reserved { slot: Some(s), .. }) => assert_eq!(s.instance, rest[0]),
            other => panic!("reservation should move: {other:?}"),
        }
        assert!(matches!(l.key("job"), Some(KeyState::Lost { .. })));
        l.check_invariants().unwrap();
        assert!(l.release("job", now));
        assert!(l.key("job").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn max_use_count_retires_instance() {
        let now = Instant::now();
        let mut l = Ledger::new(2, 2, 3);
        l.observe(&running(&["a"]), now);
        l.ready_up_done("a", Ok(()), now);
        l.try_acquire("j1", now).unwrap();
        l.release("j1", now);
        l.try_acquire("j2", now).unwrap();
        let a = l.instance("a").unwrap();
        assert!(l.used_up(a));
        assert_eq!(l.try_acquire("j3", now).unwrap(), TryAcquire::Queued);
        let c = l.counts();
        assert_eq!((c.acquired, c.unavailable, c.pending), (1, 1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn health_threshold_excludes_and_loses() {
        let now = Instant::now();
        let mut l = ready_ledger(1, &["a"], now);
        l.try_acquire("j", now).unwrap();
        assert!(l.health_failure("a").is_empty());
        l.health_ok("a");
        assert!(l.health_failure("a").is_empty());
        assert!(l.health_failure("a").is_empty());
        let lost = l.health_failure("a");
        assert_eq!(lost, vec![("j".to_string(), LostCause::InstanceUnhealthy)]);
        assert!(!l.usable(l.instance("a").unwrap()));
        assert_eq!(l.counts().unhealthy, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn requested_instances_are_matched_and_expire() {
        let now = Instant::now();
        let mut l = Ledger::new(1, 0, 3);
        l.add_requested(2, now);
        let obs = l.observe(&[InstanceStatus::new("x", State::Creating)], now);
        assert_eq!(obs.appeared, vec![("x".to_string(), Cause::Requested)]);
        assert_eq!(l.requested_in_flight(), 1);
        assert_eq!(
            l.expire_requested(Duration::from_secs(60), now + Duration::from_secs(61)),
            1
        );
        let obs = l.observe(
            &[
                InstanceStatus::new("x", State::Running),
                InstanceStatus::new("y", State::Running),
            ],
            now,
        );
        assert_eq!(obs.appeared, vec![("y".to_string(), Cause::Preexisted)]);
        assert_eq!(obs.became_running, vec!["x".to_string(), "y".to_string()]);
    }

    #[tokio::test(start_paused = true)]
    async fn pending_cancel_and_unassign() {
        let now = Instant::now();
        let mut l = ready_ledger(1, &["a"], now);
        l.try_acquire("j1", now).unwrap();
        assert_eq!(l.try_acquire("j2", now).unwrap(), TryAcquire::Queued);
        assert_eq!(l.cancel_pending("j2"), None);
        assert_eq!(l.pending(), 0);
        l.unassign("j1", now);
        assert_eq!(l.pending(), 1);
        assert_eq!(l.instance("a").unwrap().use_count, 0);
        assert_eq!(l.fulfil_pending(now).len(), 1);
        l.check_invariants().unwrap();
    }
}
