//! The async driver: polls the provider's listing, decides, and applies decisions.
//!
//! One task per scaler, level-triggered: every update re-derives the ledger from the
//! listing, every tick re-decides from the ledger. Provider calls are made without the lock
//! held; every ledger change that matters is made *before* the provider is asked (an
//! increase is recorded as requested, an instance is marked for removal), so a concurrent
//! acquire never sees a half-applied decision.
//!
//! Journal writes are gathered under the lock and committed in one transaction per phase
//! after the lock is released, but always before the provider call they describe. That is
//! safe because the ledger change they record has already taken effect in memory (an
//! instance marked for removal takes no new work; requested instances count as capacity),
//! and nothing outside the process learns of it until the commit succeeded: a crash in
//! between loses only a decision the store never promised, which the next process makes
//! again from the listing. When the commit fails, the provider is not asked.

use crate::cause::{Cause, RemovalReason};
use crate::creation::Failure;
use crate::desired::{Inputs, desired};
use crate::history::{DecisionKind, DecisionRecord, FleetEvent};
use crate::hooks::ReadyUpInstance;
use crate::journal::JournalEvent;
use crate::ledger::{Observed, Readiness, requests_doubt_grace};
use crate::shared::{Inner, Shared};
use flotilla_fleet::{InstanceStatus, State};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The driver loop; returns when the scaler's stop token is cancelled.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut next_update = shared.clock.now();
    let mut last_update: Option<Instant> = None;
    // Failed listings are tried again later and later (from the fast interval, doubling, up
    // to the slow one): a provider that throttles or lacks the list permission is not asked
    // every two seconds for hours.
    let mut listing_backoff = crate::throttle::Backoff::new(
        shared.config.update_interval_when_expecting,
        shared
            .config
            .update_interval
            .max(shared.config.update_interval_when_expecting),
    );
    loop {
        let now = shared.clock.now();
        let mut listing_delay = None;
        if now >= next_update {
            if update(&shared).await {
                listing_backoff.success();
            } else {
                listing_delay = Some(listing_backoff.failure(now));
            }
            last_update = Some(now);
        }
        let outcome = tick(&shared).await;
        let base = last_update.unwrap_or(now);
        next_update = base
            + match listing_delay {
                Some(delay) => delay,
                None if outcome.expecting => shared.config.update_interval_when_expecting,
                None => shared.config.update_interval,
            };
        let mut wake_at = next_update;
        if let Some(w) = outcome.retry_at {
            // A retry is never due "now": that would spin without time passing.
            wake_at = wake_at.min(w.max(now + Duration::from_millis(1)));
        }
        let woken = tokio::select! {
            biased;
            () = shared.stop.cancelled() => return,
            () = shared.wake.notified() => true,
            () = tokio::time::sleep_until(wake_at) => false,
        };
        if woken {
            // Events come in bursts: let them gather for one decision.
            let earliest = now + shared.config.decision_debounce;
            tokio::select! {
                biased;
                () = shared.stop.cancelled() => return,
                () = tokio::time::sleep_until(earliest) => {}
            }
        }
    }
}

/// The journal events describing what an observation changed.
pub(crate) fn observed_events(
    inner: &Inner,
    observed: &Observed,
    requested_before: usize,
) -> Vec<JournalEvent> {
    let mut events = Vec::with_capacity(observed.changed.len() + observed.gone.len() + 1);
    // Gone first: a pool's machine lent again under its id leaves and arrives in the same
    // listing, and its new record must be the one the store keeps.
    for (id, _) in &observed.gone {
        events.push(JournalEvent::InstanceGone(id.clone()));
    }
    for id in &observed.changed {
        if let Some(record) = inner.ledger.record_of(id) {
            events.push(JournalEvent::Instance(record));
        }
    }
    for key in &observed.released {
        events.push(JournalEvent::Released { key: key.clone() });
    }
    let requested = inner.ledger.requested_in_flight();
    if requested != requested_before {
        events.push(JournalEvent::RequestedInFlight(requested));
    }
    events
}

/// Reconciles the ledger with `listing`; returns the journal events to commit and the
/// ready-ups to start.
fn reconcile(
    shared: &Shared,
    listing: &[InstanceStatus],
) -> (Vec<JournalEvent>, Vec<ReadyUpInstance>) {
    let now = shared.clock.now();
    let mut inner = shared.lock();
    let inner = &mut *inner;
    let requested_before = inner.ledger.requested_in_flight();
    let observed = inner.ledger.observe(listing, now);
    shared.note_observed(inner, &observed, now);
    let mut events = observed_events(inner, &observed, requested_before);
    for (id, reason) in &observed.gone {
        match reason {
            Some(r) => tracing::info!(instance = %id, reason = %r, "instance removed"),
            None => tracing::warn!(instance = %id, "instance unexpectedly removed"),
        }
    }
    for (id, cause) in &observed.appeared {
        let left_alone = inner
            .ledger
            .instance(id)
            .is_some_and(|i| inner.ledger.foreign(i));
        if left_alone {
            tracing::warn!(instance = %id, "instance in the group was not created by this scaler; leaving it alone");
        } else {
            tracing::info!(instance = %id, cause = ?cause, "instance appeared");
        }
    }
    for id in &observed.timed_out {
        let delay = inner.creation.failure(Failure::Timeout, now);
        tracing::warn!(instance = %id, backoff = ?delay, "instance creation timed out; it will be deleted");
    }
    if !observed.created.is_empty() {
        inner.creation.success(Failure::Timeout);
    }
    shared.signal_lost(inner, observed.lost);
    let mut starts = Vec::new();
    for id in observed.became_running {
        let Some(i) = inner.ledger.instance(&id) else {
            continue;
        };
        let (cause, acquisitions) = (i.cause, i.restored_acquisitions.clone());
        if !acquisitions.is_empty() && !shared.config.keep_instance_with_acquisitions {
            tracing::warn!(instance = %id, jobs = ?acquisitions, "instance had jobs when the previous process stopped; removing it for safety");
            if inner
                .ledger
                .mark_removal(&id, RemovalReason::AcquisitionsAtRestart, now)
            {
                let at = shared.clock.utc();
                inner.history.push(
                    at,
                    FleetEvent::RemovalDecided {
                        instance: id.clone(),
                        reason: RemovalReason::AcquisitionsAtRestart,
                    },
                );
            }
            events.extend(inner.ledger.record_of(&id).map(JournalEvent::Instance));
            continue;
        }
        inner.ledger.ready_up_started(&id);
        starts.push(ReadyUpInstance {
            id,
            cause,
            acquisitions,
        });
    }
    shared.fulfil(inner);
    (events, starts)
}

/// Lists the group and reconciles the ledger with it; returns whether the listing came.
pub(crate) async fn update(shared: &Arc<Shared>) -> bool {
    let listing = match shared.group.update().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "instance group update failed; keeping the last listing");
            return false;
        }
    };
    let (events, starts) = reconcile(shared, &listing);
    // What the provider said is true whether or not it is recorded; a failed write is
    // written again with the next change to the same instance, and a restart relists.
    shared.record_all(&events);
    for instance in starts {
        shared.tasks.spawn(ready_up(shared.clone(), instance));
    }
    true
}

/// Runs one instance's ready-up hook and records the result.
async fn ready_up(shared: Arc<Shared>, instance: ReadyUpInstance) {
    let result = tokio::select! {
        biased;
        () = shared.stop.cancelled() => return,
        r = tokio::time::timeout(
            shared.config.ready_up_timeout,
            shared.hooks.ready_up_instance(&*shared.group, &instance),
        ) => r.unwrap_or_else(|_| {
            Err(format!(
                "ready-up did not finish within {:?}",
                shared.config.ready_up_timeout
            ))
        }),
    };
    let now = shared.clock.now();
    let mut inner = shared.lock();
    // Only the instances this scaler just created say anything about creating more.
    let ours = instance.cause == Cause::Requested;
    match &result {
        Ok(()) => {
            tracing::debug!(instance = %instance.id, "instance ready");
            if ours {
                inner.creation.success(Failure::ReadyUp);
            }
        }
        Err(e) => {
            if ours {
                let delay = inner.creation.failure(Failure::ReadyUp, now);
                tracing::warn!(instance = %instance.id, error = %e, backoff = ?delay, "ready-up failed; the instance will be removed");
            } else {
                tracing::warn!(instance = %instance.id, error = %e, "ready-up failed; the instance will be removed");
            }
        }
    }
    let event = match &result {
        Ok(()) => inner
            .ledger
            .instance(&instance.id)
            .map(|i| FleetEvent::Ready {
                instance: instance.id.clone(),
                after_creation: now
                    .saturating_duration_since(i.requested_at.unwrap_or(i.first_seen)),
            }),
        Err(e) => Some(FleetEvent::ReadyUpFailed {
            instance: instance.id.clone(),
            error: e.clone(),
        }),
    };
    inner.ledger.ready_up_done(&instance.id, result, now);
    if let Some(event) = event {
        let at = shared.clock.utc();
        inner.history.push(at, event);
    }
    shared.fulfil(&mut inner);
    drop(inner);
    shared.wake.notify_one();
}

/// What a tick leaves for the loop to know.
pub(crate) struct TickOutcome {
    /// A state change is expected: poll fast.
    expecting: bool,
    /// The throttle or backoff held an increase back until then.
    retry_at: Option<Instant>,
}

/// What one decision asks of the provider, with the events to commit first.
struct Plan {
    increase: usize,
    delete: Vec<String>,
    events: Vec<JournalEvent>,
    retry_at: Option<Instant>,
}

/// Decides under the lock and applies the decision to the ledger.
fn plan(shared: &Shared) -> Plan {
    let now = shared.clock.now();
    let utc = shared.clock.utc();
    let mut retry_at = None;
    let mut events = Vec::new();
    let mut inner = shared.lock();
    let inner = &mut *inner;
    if !inner.ledger.expire_reservations(now).is_empty() {
        shared.fulfil(inner);
    }
    let lost_requests = inner
        .ledger
        .expire_requested(shared.config.request_timeout, now);
    if lost_requests > 0 {
        events.push(JournalEvent::RequestedInFlight(
            inner.ledger.requested_in_flight(),
        ));
        tracing::warn!(
            count = lost_requests,
            "requested instances never appeared; no longer counting them"
        );
    }
    let (policy_index, policy) = inner.schedule.active(utc);
    let decision = desired(Inputs {
        ledger: &inner.ledger,
        policy: &policy,
        policy_index,
        config: &shared.config,
        provider_max: shared.info.max_size,
        now,
    });
    let changed = inner.last.as_ref() != Some(&decision.explanation);
    if decision.increase > 0 || !decision.remove.is_empty() {
        tracing::info!(decision = %decision.explanation, "scaling");
    } else if changed {
        tracing::debug!(decision = %decision.explanation, "capacity");
    }
    let mut delete = Vec::new();
    let mut idle_removed = false;
    for (id, reason) in &decision.remove {
        if inner.ledger.mark_removal(id, *reason, now) {
            tracing::info!(instance = %id, reason = %reason, "instance marked for removal");
            delete.push(id.clone());
            idle_removed |= *reason == RemovalReason::IdleTime;
            inner.history.push(
                utc,
                FleetEvent::RemovalDecided {
                    instance: id.clone(),
                    reason: *reason,
                },
            );
        }
    }
    let removed = delete.len();
    delete.extend(decision.retry_remove.iter().cloned());
    // Every deletion request is preceded by a committed record of the removal, retries
    // included (their first record may have failed).
    for id in &delete {
        events.extend(inner.ledger.record_of(id).map(JournalEvent::Instance));
    }
    let mut increase = decision.increase;
    let mut held_back = None;
    if increase > 0 {
        if let Some(until) = inner.creation.blocked_until(now) {
            held_back = Some(DecisionKind::BackingOff);
            tracing::debug!(?until, "creation backing off after failures");
            retry_at = Some(until);
            increase = 0;
        } else {
            let allowed = inner.creation.throttle.available(increase, now);
            if allowed == 0 {
                held_back = Some(DecisionKind::Throttled);
            }
            if allowed < increase {
                retry_at = Some(inner.creation.throttle.next_token_at(now).max(now));
            }
            inner.creation.throttle.take(allowed, now);
            increase = allowed;
        }
    }
    if increase > 0 {
        inner.ledger.add_requested(increase, now);
        events.push(JournalEvent::RequestedInFlight(
            inner.ledger.requested_in_flight(),
        ));
    }
    let kind = if inner.ledger.shutting_down() {
        DecisionKind::ShuttingDown
    } else if increase > 0 {
        DecisionKind::ScaleUp
    } else if let Some(kind) = held_back {
        kind
    } else if decision.explanation.required > 0 {
        DecisionKind::AtMaxInstances
    } else if idle_removed {
        DecisionKind::ScaleDown
    } else if removed > 0 {
        DecisionKind::RemoveUnusable
    } else {
        DecisionKind::Hold
    };
    inner.history.decided(DecisionRecord {
        at: utc,
        kind,
        requested: increase,
        removed,
        explanation: decision.explanation.clone(),
        repeated: 0,
        last_at: utc,
    });
    inner.last = Some(decision.explanation);
    Plan {
        increase,
        delete,
        events,
        retry_at,
    }
}

/// Decides once and applies the decision.
pub(crate) async fn tick(shared: &Arc<Shared>) -> TickOutcome {
    let Plan {
        mut increase,
        mut delete,
        events,
        mut retry_at,
    } = plan(shared);
    // One transaction for the whole decision, outside the lock, before the provider hears.
    if !shared.record_all(&events) {
        if increase > 0 {
            shared.lock().ledger.cancel_requested(increase);
        }
        increase = 0;
        delete.clear();
    }

    if increase > 0 {
        let result = shared.group.increase(increase).await;
        let now = shared.clock.now();
        let mut inner = shared.lock();
        let before = inner.ledger.requested_in_flight();
        match result {
            Ok(got) => {
                inner.creation.success(Failure::Increase);
                if got > 0 {
                    let at = shared.clock.utc();
                    inner.history.push(at, FleetEvent::Requested { count: got });
                }
                if got < increase {
                    tracing::warn!(asked = increase, got, "provider requested fewer instances");
                    inner.ledger.cancel_requested(increase - got);
                }
            }
            Err(e) => {
                // It may have had an effect: instances that appear soon are ours.
                let grace = requests_doubt_grace(shared.config.update_interval_when_expecting);
                inner.ledger.doubt_requested(increase, grace);
                let delay = inner.creation.increase_failed(e.to_string(), now);
                tracing::warn!(error = %e, backoff = ?delay, "increase failed");
                retry_at = Some(now + delay);
            }
        }
        let after = inner.ledger.requested_in_flight();
        drop(inner);
        if after != before {
            shared.record_all(&[JournalEvent::RequestedInFlight(after)]);
        }
    }
    if !delete.is_empty() {
        let result = shared.group.decrease(&delete).await;
        let now = shared.clock.now();
        let mut inner = shared.lock();
        match result {
            Ok(ok) => {
                for id in &delete {
                    let accepted = ok.contains(id);
                    if !accepted {
                        tracing::warn!(instance = %id, "deletion request failed; will retry");
                    }
                    inner.ledger.removal_attempted(id, accepted, now);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "decrease failed; will retry");
                for id in &delete {
                    inner.ledger.removal_attempted(id, false, now);
                }
            }
        }
    }

    let inner = shared.lock();
    let l = &inner.ledger;
    let expecting = l.requested_in_flight() > 0
        || l.pending() > 0
        || l.instances().any(|i| {
            matches!(i.state, State::Creating | State::Deleting)
                || i.removal.is_some()
                || i.missing > 0
                || i.readiness == Readiness::InProgress
        });
    TickOutcome {
        expecting,
        retry_at,
    }
}
