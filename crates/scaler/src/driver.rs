//! The async driver: polls the provider's listing, decides, and applies decisions.
//!
//! One task per scaler, level-triggered: every update re-derives the ledger from the
//! listing, every tick re-decides from the ledger. Provider calls are made without the lock
//! held; every ledger change that matters is made *before* the provider is asked (an
//! increase is recorded as requested, an instance is marked for removal), so a crash or a
//! concurrent acquire never sees a half-applied decision.

use crate::config::ScalerConfig;
use crate::desired::{Inputs, desired};
use crate::journal::JournalEvent;
use crate::ledger::{Cause, LostCause, Readiness, RemovalReason};
use crate::scaler::Shared;
use crate::throttle::{Backoff, TokenBucket};
use flotilla_fleet::State;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The driver's own state: creation throttle and backoff.
pub(crate) struct DriverState {
    throttle: TokenBucket,
    backoff: Backoff,
}

impl DriverState {
    pub(crate) fn new(config: &ScalerConfig, now: Instant) -> Self {
        DriverState {
            throttle: TokenBucket::new(
                config.scale_throttle.limit,
                config.scale_throttle.burst,
                now,
            ),
            backoff: Backoff::new(config.backoff_base, config.backoff_max),
        }
    }
}

/// The driver loop; returns when the scaler's stop token is cancelled.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut next_update = shared.clock.now();
    let mut last_update: Option<Instant> = None;
    loop {
        let now = shared.clock.now();
        if now >= next_update {
            update(&shared).await;
            last_update = Some(now);
        }
        let outcome = tick(&shared).await;
        let base = last_update.unwrap_or(now);
        next_update = base
            + if outcome.expecting {
                shared.config.update_interval_when_expecting
            } else {
                shared.config.update_interval
            };
        let mut wake_at = next_update;
        if let Some(w) = outcome.retry_at {
            // A retry is never due "now": that would spin without time passing.
            wake_at = wake_at.min(w.max(now + Duration::from_millis(1)));
        }
        let woken = tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return,
            _ = shared.wake.notified() => true,
            _ = tokio::time::sleep_until(wake_at) => false,
        };
        if woken {
            // Events come in bursts: let them gather for one decision.
            let earliest = now + shared.config.decision_debounce;
            tokio::select! {
                biased;
                _ = shared.stop.cancelled() => return,
                _ = tokio::time::sleep_until(earliest) => {}
            }
        }
    }
}

/// Records `event`; logs and returns false when the journal cannot.
fn journal(shared: &Shared, event: JournalEvent) -> bool {
    match shared.journal.record(&event) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, ?event, "cannot record scaler state; holding the action back");
            false
        }
    }
}

/// Records the instances an observation touched.
fn journal_observed(
    shared: &Shared,
    inner: &crate::scaler::Inner,
    observed: &crate::ledger::Observed,
    requested_before: usize,
) {
    for id in &observed.changed {
        if let Some(record) = inner.ledger.record_of(id) {
            journal(shared, JournalEvent::Instance(record));
        }
    }
    for (id, _) in &observed.gone {
        journal(shared, JournalEvent::InstanceGone(id.clone()));
    }
    let requested = inner.ledger.requested_in_flight();
    if requested != requested_before {
        journal(shared, JournalEvent::RequestedInFlight(requested));
    }
}

/// Lists the group and reconciles the ledger with it.
async fn update(shared: &Arc<Shared>) {
    let listing = match shared.group.update().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "instance group update failed; keeping the last listing");
            return;
        }
    };
    let now = shared.clock.now();
    let mut inner = shared.lock();
    let requested_before = inner.ledger.requested_in_flight();
    let observed = inner.ledger.observe(&listing, now);
    journal_observed(shared, &inner, &observed, requested_before);
    for (id, _) in observed.appeared.iter().filter(|(id, c)| {
        *c == Cause::Preexisted
            && inner
                .ledger
                .instance(id)
                .is_some_and(|i| inner.ledger.foreign(i))
    }) {
        tracing::warn!(instance = %id, "instance in the group was not created by this scaler; leaving it alone");
    }
    for (id, cause) in &observed.appeared {
        tracing::info!(instance = %id, cause = ?cause, "instance appeared");
    }
    for (id, reason) in &observed.gone {
        match reason {
            Some(r) => tracing::info!(instance = %id, reason = %r, "instance removed"),
            None => tracing::warn!(instance = %id, "instance unexpectedly removed"),
        }
    }
    shared.signal_lost(&mut inner, observed.lost);
    let mut starts = Vec::new();
    for id in observed.became_running {
        inner.ledger.ready_up_started(&id);
        let cause = inner
            .ledger
            .instance(&id)
            .map(|i| i.cause)
            .unwrap_or(Cause::Preexisted);
        starts.push((id, cause));
    }
    shared.fulfil(&mut inner);
    drop(inner);
    for (id, cause) in starts {
        tokio::spawn(ready_up(shared.clone(), id, cause));
    }
}

/// Runs one instance's ready-up hook and records the result.
async fn ready_up(shared: Arc<Shared>, id: String, cause: Cause) {
    let result = shared.hooks.ready_up(&*shared.group, &id, cause).await;
    let now = shared.clock.now();
    let mut inner = shared.lock();
    match &result {
        Ok(()) => {
            tracing::debug!(instance = %id, "instance ready");
            inner.driver.backoff.success();
        }
        Err(e) => {
            let delay = inner.driver.backoff.failure(now);
            tracing::warn!(instance = %id, error = %e, backoff = ?delay, "ready-up failed; the instance will be removed");
        }
    }
    inner.ledger.ready_up_done(&id, result, now);
    shared.fulfil(&mut inner);
    drop(inner);
    shared.wake.notify_one();
}

/// What a tick leaves for the loop to know.
struct TickOutcome {
    /// A state change is expected: poll fast.
    expecting: bool,
    /// The throttle or backoff held an increase back until then.
    retry_at: Option<Instant>,
}

/// Decides once and applies the decision.
async fn tick(shared: &Arc<Shared>) -> TickOutcome {
    let now = shared.clock.now();
    let utc = shared.clock.utc();
    let mut retry_at = None;
    let (increase, delete) = {
        let mut inner = shared.lock();
        let inner = &mut *inner;
        if !inner.ledger.expire_reservations(now).is_empty() {
            shared.fulfil(inner);
        }
        let lost_requests = inner
            .ledger
            .expire_requested(shared.config.request_timeout, now);
        if lost_requests > 0 {
            journal(
                shared,
                JournalEvent::RequestedInFlight(inner.ledger.requested_in_flight()),
            );
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
        for (id, reason) in &decision.remove {
            if inner.ledger.mark_removal(id, *reason, now) {
                tracing::info!(instance = %id, reason = %reason, "instance marked for removal");
                // Recorded before the provider hears of it.
                let recorded = inner
                    .ledger
                    .record_of(id)
                    .is_some_and(|r| journal(shared, JournalEvent::Instance(r)));
                if recorded {
                    delete.push(id.clone());
                }
            }
        }
        delete.extend(decision.retry_remove.iter().cloned());
        let mut increase = decision.increase;
        if increase > 0 {
            if let Some(until) = inner.driver.backoff.blocked_until(now) {
                tracing::debug!(?until, "creation backing off after failures");
                retry_at = Some(until);
                increase = 0;
            } else {
                let allowed = inner.driver.throttle.available(increase, now);
                if allowed < increase {
                    retry_at = Some(inner.driver.throttle.next_token_at(now).max(now));
                }
                inner.driver.throttle.take(allowed, now);
                increase = allowed;
            }
        }
        if increase > 0 {
            inner.ledger.add_requested(increase, now);
            // Recorded before the provider is asked, so a crash cannot lose track of them.
            let total = inner.ledger.requested_in_flight();
            if !journal(shared, JournalEvent::RequestedInFlight(total)) {
                inner.ledger.cancel_requested(increase);
                increase = 0;
            }
        }
        inner.last = Some(decision.explanation);
        (increase, delete)
    };

    if increase > 0 {
        let result = shared.group.increase(increase).await;
        let now = shared.clock.now();
        let mut inner = shared.lock();
        match result {
            Ok(got) => {
                if got < increase {
                    tracing::warn!(asked = increase, got, "provider requested fewer instances");
                    inner.ledger.cancel_requested(increase - got);
                    let total = inner.ledger.requested_in_flight();
                    journal(shared, JournalEvent::RequestedInFlight(total));
                }
            }
            Err(e) => {
                inner.ledger.cancel_requested(increase);
                let total = inner.ledger.requested_in_flight();
                journal(shared, JournalEvent::RequestedInFlight(total));
                let delay = inner.driver.backoff.failure(now);
                tracing::warn!(error = %e, backoff = ?delay, "increase failed");
                retry_at = Some(now + delay);
            }
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
                || i.readiness == Readiness::InProgress
        });
    TickOutcome {
        expecting,
        retry_at,
    }
}

/// Deletes every instance at shutdown and confirms it, polling every
/// `shutdown_deletion_interval` up to `shutdown_deletion_retries` times. Returns how many
/// instances remain.
pub(crate) async fn delete_all(shared: &Arc<Shared>) -> usize {
    let retries = shared.config.shutdown_deletion_retries;
    for attempt in 0..=retries {
        let listed = shared.group.update().await;
        let listed_ok = listed.is_ok();
        match listed {
            Ok(listing) => {
                let now = shared.clock.now();
                let mut inner = shared.lock();
                let requested_before = inner.ledger.requested_in_flight();
                let mut observed = inner.ledger.observe(&listing, now);
                journal_observed(shared, &inner, &observed, requested_before);
                for (_, cause) in observed.lost.iter_mut() {
                    *cause = LostCause::Shutdown;
                }
                shared.signal_lost(&mut inner, observed.lost);
            }
            Err(e) => tracing::warn!(error = %e, "update during shutdown failed"),
        }
        let ids: Vec<String> = {
            let now = shared.clock.now();
            let mut inner = shared.lock();
            let live: Vec<String> = inner
                .ledger
                .instances()
                .filter(|i| i.state.is_live() || i.state == State::Timeout)
                .map(|i| i.id.clone())
                .collect();
            let mut recorded = Vec::with_capacity(live.len());
            for id in live {
                inner.ledger.mark_removal(&id, RemovalReason::Shutdown, now);
                if let Some(r) = inner.ledger.record_of(&id)
                    && journal(shared, JournalEvent::Instance(r))
                {
                    recorded.push(id);
                }
            }
            let live = recorded;
            // Done only when a fresh listing shows nothing (a failed listing proves nothing,
            // and instances requested just before shutdown may not be listed yet).
            if listed_ok
                && inner.ledger.instances().count() == 0
                && inner.ledger.requested_in_flight() == 0
            {
                return 0;
            }
            live
        };
        if !ids.is_empty() {
            match shared.group.decrease(&ids).await {
                Ok(ok) => tracing::info!(
                    requested = ids.len(),
                    accepted = ok.len(),
                    attempt,
                    "deleting instances at shutdown"
                ),
                Err(e) => tracing::warn!(error = %e, "deletion at shutdown failed"),
            }
        }
        if attempt < retries {
            tokio::time::sleep(shared.config.shutdown_deletion_interval).await;
        }
    }
    // Last look.
    match shared.group.update().await {
        Ok(listing) => listing.iter().filter(|s| s.state != State::Deleted).count(),
        Err(_) => {
            let inner = shared.lock();
            inner.ledger.instances().count() + inner.ledger.requested_in_flight()
        }
    }
}
