//! The job-source operations on the ledgers: reserve, acquire, release, and the driver's
//! operations on one instance (ready-up, health, removal, requests).

use super::instance::{Key, Readiness, Removal, Slot, SlotRef};
use super::keys::{KeyState, TryAcquire};
use super::ledgers::Ledger;
use crate::cause::{LostCause, RemovalReason};
use crate::error::ScalerError;
use std::time::Duration;
use tokio::time::Instant;

/// How a reservation may be made (see [`Ledger::reserve_with`]).
#[derive(Debug, Clone, Copy)]
pub struct ReserveOptions {
    /// Preemptive mode: only an idle, ready slot will do.
    pub preemptive: bool,
    /// The most slots the fleet may have (`None`: unbounded): non-preemptive reservations
    /// are promised up to it.
    pub max_slots: Option<usize>,
    /// How long the reservation lives without being acquired or released.
    pub lease: Duration,
    /// Reservation throttling (taskscaler !60): in preemptive mode, at most this many slots
    /// may be reserved at once, so that long polls cannot pin every idle instance.
    pub max_bound: Option<usize>,
    /// Do not bind to an instance idle since before this (it is due for idle removal): the
    /// reservation stays a promise instead of keeping an unneeded instance alive.
    pub stale_before: Option<Instant>,
}

impl Ledger {
    /// Picks a free slot on an allocatable instance: the busiest instance first (so idle
    /// ones can be scaled down), then the most recently used, then the lowest id.
    pub(crate) fn pick_free(&self) -> Option<SlotRef> {
        let (_, _, id) = self.free.first()?;
        let slot = self.instances.get(id)?.first_free()?;
        Some(SlotRef {
            instance: id.clone(),
            slot,
        })
    }

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
        self.reserve_with(
            key,
            ReserveOptions {
                preemptive,
                max_slots,
                lease,
                max_bound: None,
                stale_before: None,
            },
            now,
        )
    }

    /// [`Ledger::reserve`] with every option.
    pub fn reserve_with(
        &mut self,
        key: &str,
        o: ReserveOptions,
        now: Instant,
    ) -> Result<(), ScalerError> {
        if self.shutting_down {
            return Err(ScalerError::ShuttingDown);
        }
        if self.keys.contains_key(key) {
            return Err(ScalerError::DuplicateKey(key.to_string()));
        }
        let mut slot = self.pick_free();
        if let (Some(s), Some(cutoff)) = (&slot, o.stale_before)
            && let Some(i) = self.instances.get(&s.instance)
            && i.acquired == 0
            && i.idle_since < cutoff
        {
            // The preferred instance is the most recently used; if even it is due for idle
            // removal, every free one is.
            slot = None;
        }
        if o.preemptive {
            if slot.is_none() {
                return Err(ScalerError::NoCapacity {
                    why: "preemptive mode and no idle, ready slot",
                    counts: self.counts(),
                });
            }
            if o.max_bound.is_some_and(|m| self.reserved_total >= m) {
                return Err(ScalerError::NoCapacity {
                    why: "reservation throttling: the idle capacity is already reserved",
                    counts: self.counts(),
                });
            }
        } else if slot.is_none()
            && let Some(max) = o.max_slots
        {
            let promised = self.keys.len() - self.lost_keys;
            if promised >= max {
                return Err(ScalerError::NoCapacity {
                    why: "every slot the fleet may have is promised",
                    counts: self.counts(),
                });
            }
        }
        if let Some(s) = &slot {
            self.set_slot(s, Slot::Reserved(key.to_string()));
            self.reindex(&s.instance.clone());
        }
        self.set_key(
            key,
            KeyState::Reserved {
                slot,
                expires: now + o.lease,
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
                self.remove_key(key);
                true
            }
            _ => false,
        }
    }

    fn free_slot_of(&mut self, s: &SlotRef, key: &str) {
        let held = self
            .instances
            .get(&s.instance)
            .and_then(|i| i.slots.get(s.slot))
            .is_some_and(|c| matches!(c, Slot::Reserved(k) | Slot::Acquired(k) if k == key));
        if held {
            self.set_slot(s, Slot::Free);
            self.reindex(&s.instance);
        }
    }

    fn assign(&mut self, key: &str, s: SlotRef, now: Instant) {
        self.set_slot(&s, Slot::Acquired(key.to_string()));
        let used_up = match self.instances.get_mut(&s.instance) {
            Some(i) => {
                i.use_count = i.use_count.saturating_add(1);
                i.idle_since = now;
                self.rules.used_up(i)
            }
            None => false,
        };
        self.reindex(&s.instance);
        if used_up {
            // Used up: its reservations must find other slots.
            self.rebind_reservations_of(&s.instance);
        }
        self.set_key(key, KeyState::Acquired { slot: s });
    }

    fn enqueue(&mut self, key: &str, now: Instant, front: bool) {
        let seq = if front {
            self.next_front -= 1;
            self.next_front + 1
        } else {
            self.next_back += 1;
            self.next_back - 1
        };
        self.queue.insert(seq, key.to_string());
        self.set_key(key, KeyState::Pending { since: now, seq });
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
                let ok = self.instances.get(&s.instance).is_some_and(|i| {
                    self.allocatable(i)
                        && matches!(i.slots.get(s.slot), Some(Slot::Reserved(k)) if k == key)
                });
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
        self.enqueue(key, now, false);
        Ok(TryAcquire::Queued)
    }

    /// Hands free ready slots to queued keys, first come first served. Returns the
    /// assignments made.
    pub fn fulfil_pending(&mut self, now: Instant) -> Vec<(Key, SlotRef)> {
        let mut out = Vec::new();
        while let Some((&seq, _)) = self.queue.first_key_value() {
            let Some(s) = self.pick_free() else { break };
            let Some(key) = self.queue.remove(&seq) else {
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
        if self.undo_use(key) {
            self.enqueue(key, now, true);
        }
    }

    /// Undoes an assignment nobody will use (the waiter left, or the journal could not
    /// record it): the slot is freed, the use count restored, and the key forgotten.
    pub fn undo_assignment(&mut self, key: &str) -> bool {
        let undone = self.undo_use(key);
        if undone {
            self.remove_key(key);
        }
        undone
    }

    fn undo_use(&mut self, key: &str) -> bool {
        let Some(KeyState::Acquired { slot }) = self.keys.get(key).cloned() else {
            return false;
        };
        self.free_slot_of(&slot, key);
        if let Some(i) = self.instances.get_mut(&slot.instance) {
            i.use_count = i.use_count.saturating_sub(1);
        }
        self.reindex(&slot.instance);
        true
    }

    /// Gives up waiting for `key` (timeout, or the waiter went away). Returns the slot if the
    /// key had been assigned one meanwhile (the caller decides to keep or release it).
    pub fn cancel_pending(&mut self, key: &str) -> Option<SlotRef> {
        match self.keys.get(key) {
            Some(KeyState::Pending { .. }) => {
                self.remove_key(key);
                None
            }
            Some(KeyState::Acquired { slot }) => Some(slot.clone()),
            _ => None,
        }
    }

    /// Ends `key` whatever its state: a finished job frees its slot (and the instance's idle
    /// time starts), a reservation is dropped, a waiter leaves the queue.
    pub fn release(&mut self, key: &str, now: Instant) -> bool {
        let Some(state) = self.remove_key(key) else {
            return false;
        };
        match state {
            KeyState::Acquired { slot } => {
                if let Some(i) = self.instances.get_mut(&slot.instance) {
                    i.idle_since = now;
                }
                self.free_slot_of(&slot, key);
                self.reindex(&slot.instance);
            }
            KeyState::Reserved { slot: Some(s), .. } => self.free_slot_of(&s, key),
            KeyState::Pending { .. }
            | KeyState::Reserved { slot: None, .. }
            | KeyState::Lost { .. } => {}
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
    pub(crate) fn rebind_reservations_of(&mut self, id: &str) {
        let Some(i) = self.instances.get(id) else {
            return;
        };
        if i.reserved == 0 {
            return;
        }
        let held: Vec<(usize, Key)> = i
            .slots
            .iter()
            .enumerate()
            .filter_map(|(idx, s)| match s {
                Slot::Reserved(k) => Some((idx, k.clone())),
                _ => None,
            })
            .collect();
        for (idx, _) in &held {
            self.set_slot(
                &SlotRef {
                    instance: id.to_string(),
                    slot: *idx,
                },
                Slot::Free,
            );
        }
        self.reindex(id);
        self.rebind_keys(held.into_iter().map(|(_, k)| k).collect());
    }

    /// Binds reservations that lost their slot to other idle slots, or leaves them unbound.
    pub(crate) fn rebind_keys(&mut self, keys: Vec<Key>) {
        for k in keys {
            let slot = self.pick_free();
            if let Some(s) = &slot {
                self.set_slot(s, Slot::Reserved(k.clone()));
                self.reindex(&s.instance.clone());
            }
            if let Some(KeyState::Reserved { slot: bound, .. }) = self.keys.get_mut(&k) {
                *bound = slot;
            }
        }
    }

    /// Marks the acquisitions on instance `id` lost with `cause`.
    pub(crate) fn lose_acquisitions_of(
        &mut self,
        id: &str,
        cause: LostCause,
    ) -> Vec<(Key, LostCause)> {
        let Some(i) = self.instances.get(id) else {
            return Vec::new();
        };
        if i.acquired == 0 {
            return Vec::new();
        }
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
            let slot = SlotRef {
                instance: id.to_string(),
                slot: idx,
            };
            self.set_slot(&slot, Slot::Free);
            self.set_key(&k, KeyState::Lost { slot, cause });
            out.push((k, cause));
        }
        self.reindex(id);
        out
    }

    // ----- driver operations on one instance ---------------------------------------------

    /// Marks the ready-up of `id` as started.
    pub fn ready_up_started(&mut self, id: &str) {
        if let Some(i) = self.instances.get_mut(id) {
            i.readiness = Readiness::InProgress;
        }
        self.reindex(id);
    }

    /// Records the ready-up result of `id`.
    pub fn ready_up_done(&mut self, id: &str, result: Result<(), String>, now: Instant) {
        if let Some(i) = self.instances.get_mut(id) {
            match result {
                Ok(()) => {
                    i.readiness = Readiness::Ready;
                    i.idle_since = now;
                    i.ready_at = Some(now);
                }
                Err(e) => i.readiness = Readiness::Failed(e),
            }
        }
        self.reindex(id);
    }

    /// Records a failed health check of `id`. Past the threshold the instance takes no new
    /// work (taskscaler !109); its running jobs go on, and it is removed once they end.
    /// Returns whether this failure crossed the threshold.
    pub fn health_failure(&mut self, id: &str) -> bool {
        let threshold = self.rules.failure_threshold;
        let crossed = match self.instances.get_mut(id) {
            Some(i) => {
                i.health_failures = i.health_failures.saturating_add(1);
                i.health_failures == threshold
            }
            None => false,
        };
        if crossed {
            self.reindex(id);
            self.rebind_reservations_of(id);
        }
        crossed
    }

    /// Records a passed health check of `id`: the failure streak ends, unless the instance
    /// already crossed the threshold and is being replaced; one that cannot be replaced
    /// (permanent) is back in service.
    pub fn health_ok(&mut self, id: &str) {
        let (threshold, permanent) = (self.rules.failure_threshold, self.rules.permanent);
        if let Some(i) = self.instances.get_mut(id)
            && (i.health_failures < threshold || permanent)
        {
            let was_unhealthy = i.health_failures >= threshold;
            i.health_failures = 0;
            if was_unhealthy {
                self.reindex(id);
            }
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
        i.removal = Some(Removal::decided(reason, now));
        self.reindex(id);
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
        let mut dropped: Vec<Key> = self.queue.values().cloned().collect();
        for k in &dropped {
            self.remove_key(k);
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

    /// Records that `n` instances were requested (before the provider is asked).
    pub fn add_requested(&mut self, n: usize, now: Instant) {
        self.requested.add(n, now);
    }

    /// Takes back `n` requested instances the provider did not grant.
    pub fn cancel_requested(&mut self, n: usize) {
        self.requested.cancel(n);
    }

    /// The `n` newest requests belong to an `increase` that failed: they may still have had
    /// an effect, so instances that appear within `grace` are matched to them; after that
    /// they are forgotten.
    pub fn doubt_requested(&mut self, n: usize, grace: Duration) {
        self.requested.doubt(n, grace);
    }

    /// Forgets requests that listings have had `timeout` to show (and doubted ones past
    /// their grace) and that never appeared; returns how many instances that forgot.
    /// Requests age only with listings (see `requests.rs`): while the provider cannot list,
    /// nothing says the instances did not come, so they keep counting against
    /// `max_instances` and no new ones are made in their place.
    pub fn expire_requested(&mut self, timeout: Duration, now: Instant) -> usize {
        self.requested
            .expire(timeout, now, self.legacy.requests_age_without_listings)
    }

    /// Notes that a job held `key` on `instance` when the previous process stopped.
    pub fn note_restored_acquisition(&mut self, instance: &str, key: &str) {
        if let Some(i) = self.instances.get_mut(instance) {
            i.restored_acquisitions.push(key.to_string());
        }
    }

    /// An instance's place in the free-slot index, for tests of the index.
    #[doc(hidden)]
    pub fn free_index_first(&self) -> Option<String> {
        self.free.first().map(|(_, _, id)| id.clone())
    }
}
