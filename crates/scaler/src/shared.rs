//! The state the job-source API and the driver share, behind one mutex that is never held
//! across an `.await` (nor, wherever correctness allows, across a journal commit).

use crate::clock::Clock;
use crate::config::ScalerConfig;
use crate::creation::Creation;
use crate::desired::Explanation;
use crate::history::{FleetEvent, History};
use crate::hooks::Hooks;
use crate::journal::{Journal, JournalEvent};
use crate::ledger::{Key, KeyState, Ledger, LostCause, SlotRef};
use crate::policy::Schedule;
use flotilla_fleet::{InstanceGroup, ProviderInfo};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What the scaler tells an acquisition when its instance dies.
#[derive(Debug, Default)]
pub(crate) struct LostSignal {
    pub(crate) token: CancellationToken,
    pub(crate) cause: OnceLock<LostCause>,
}

impl LostSignal {
    pub(crate) fn fire(&self, cause: LostCause) {
        let _ = self.cause.set(cause);
        self.token.cancel();
    }
}

/// The mutable state.
pub(crate) struct Inner {
    pub(crate) ledger: Ledger,
    pub(crate) schedule: Schedule,
    pub(crate) waiters: HashMap<Key, oneshot::Sender<SlotRef>>,
    pub(crate) signals: HashMap<Key, Arc<LostSignal>>,
    pub(crate) last: Option<Explanation>,
    pub(crate) creation: Creation,
    /// What happened, for operators (never read by a decision).
    pub(crate) history: History,
}

/// Everything one scaler's API, driver and tasks share.
pub(crate) struct Shared {
    pub(crate) inner: Mutex<Inner>,
    pub(crate) group: Arc<dyn InstanceGroup>,
    pub(crate) journal: Arc<dyn Journal>,
    pub(crate) config: ScalerConfig,
    pub(crate) clock: Clock,
    pub(crate) hooks: Arc<dyn Hooks>,
    pub(crate) info: ProviderInfo,
    /// Wakes the driver for an early decision.
    pub(crate) wake: Notify,
    /// Wakes shutdown's drain when a job releases.
    pub(crate) released: Notify,
    /// Stops the driver and every task it started.
    pub(crate) stop: CancellationToken,
    /// Ready-up tasks, so that shutdown waits for them before the provider shuts down.
    pub(crate) tasks: TaskTracker,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands slots to waiters after capacity changed. Call with the lock held.
    pub(crate) fn fulfil(&self, inner: &mut Inner) {
        let now = self.clock.now();
        while inner.ledger.pending() > 0 {
            let mut undone = false;
            for (key, slot) in inner.ledger.fulfil_pending(now) {
                let delivered = match inner.waiters.remove(&key) {
                    Some(tx) => tx.send(slot).is_ok(),
                    None => false,
                };
                if !delivered {
                    // The waiter went away between its timeout and now: nobody uses the
                    // slot, so it does not count as a use either; the next in line may.
                    inner.ledger.undo_assignment(&key);
                    undone = true;
                }
            }
            if !undone {
                break;
            }
        }
    }

    /// Ends `key`: its slot becomes free (or its reservation or wait is dropped).
    pub(crate) fn release(&self, key: &str) {
        let now = self.clock.now();
        let mut inner = self.lock();
        inner.signals.remove(key);
        inner.waiters.remove(key);
        let held = matches!(
            inner.ledger.key(key),
            Some(KeyState::Acquired { .. } | KeyState::Lost { .. })
        );
        let on = match inner.ledger.key(key) {
            Some(KeyState::Acquired { slot }) => Some(slot.instance.clone()),
            _ => None,
        };
        let released = inner.ledger.release(key, now);
        // The last slot of an instance used up by max_use_count: the driver removes it now
        // rather than at its next tick (up to a minute away when nothing else moves). Other
        // releases wait for the tick, so momentary idleness deletes nothing (issue 12).
        let retire = released
            && on.as_deref().is_some_and(|id| {
                inner
                    .ledger
                    .instance(id)
                    .is_some_and(|i| inner.ledger.used_up(i) && i.acquired() == 0)
            });
        if released {
            inner
                .history
                .task_operation(crate::history::TaskOperation::Release);
            self.fulfil(&mut inner);
        }
        drop(inner);
        if released && held {
            // Committed after the lock is released: the slot is already free in memory, and a
            // crash before the commit leaves a stale record that the next start treats as a
            // job at the crash (the safe side).
            if let Err(e) = self.journal.record(&JournalEvent::Released {
                key: key.to_string(),
            }) {
                tracing::error!(key = %key, error = %e, "cannot record a release");
            }
        }
        self.released.notify_waiters();
        if retire {
            self.wake.notify_one();
        }
    }

    /// Tells acquisitions that their instance died.
    pub(crate) fn signal_lost(&self, inner: &mut Inner, lost: Vec<(Key, LostCause)>) {
        for (key, cause) in lost {
            if let Some(sig) = inner.signals.get(&key) {
                sig.fire(cause);
            }
            tracing::warn!(key = %key, cause = %cause, "acquisition lost its instance");
        }
    }

    /// Records `events` in one transaction; logs and returns false when the journal cannot.
    /// Call without the lock held.
    pub(crate) fn record_all(&self, events: &[JournalEvent]) -> bool {
        if events.is_empty() {
            return true;
        }
        match self.journal.record_all(events) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, count = events.len(), "cannot record scaler state; holding the actions back");
                false
            }
        }
    }

    /// Records in the history what a listing changed: instances that appeared, started
    /// running, or left the fleet. Call with the lock held.
    pub(crate) fn note_observed(
        &self,
        inner: &mut Inner,
        observed: &crate::ledger::Observed,
        now: tokio::time::Instant,
    ) {
        let at = self.clock.utc();
        for (id, cause) in &observed.appeared {
            let after_request = inner
                .ledger
                .instance(id)
                .and_then(|i| i.requested_at)
                .map(|r| now.saturating_duration_since(r));
            inner.history.push(
                at,
                FleetEvent::Appeared {
                    instance: id.clone(),
                    cause: *cause,
                    after_request,
                },
            );
        }
        for id in &observed.changed {
            let Some(i) = inner.ledger.instance(id) else {
                continue;
            };
            // First listed as running in this very listing.
            if i.running_at == Some(now) {
                let after_request = i.requested_at.map(|r| now.saturating_duration_since(r));
                inner.history.push(
                    at,
                    FleetEvent::Running {
                        instance: id.clone(),
                        after_request,
                    },
                );
            }
        }
        for d in &observed.departures {
            let since = d.requested_at.unwrap_or(d.first_seen);
            inner.history.push(
                at,
                FleetEvent::Gone {
                    instance: d.id.clone(),
                    reason: d
                        .reason
                        .unwrap_or(crate::cause::RemovalReason::RemovedFromOutside),
                    after_removal: d
                        .removal_decided_at
                        .map(|r| now.saturating_duration_since(r)),
                    life: now.saturating_duration_since(since),
                    use_count: d.use_count,
                },
            );
        }
    }

    /// Whether the policy in force keeps idle capacity (an acquisition then calls for a
    /// decision soon, to replace the slot it took).
    pub(crate) fn policy_needs_idle(&self) -> bool {
        let utc = self.clock.utc();
        let inner = self.lock();
        // With `scale_factor`, the target grows with the slots in use: one more job is
        // what raises it, even where `idle_count` is 0.
        inner.schedule.active(utc).1.idle_target(1) > 0
    }
}
