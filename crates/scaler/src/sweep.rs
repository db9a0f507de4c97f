//! Deleting the fleet at shutdown (`delete_instances_on_shutdown`), confirmed by listings.

use crate::cause::{LostCause, RemovalReason};
use crate::driver::observed_events;
use crate::journal::JournalEvent;
use crate::shared::Shared;
use flotilla_fleet::State;
use std::collections::HashSet;
use std::sync::Arc;

/// Deletes every instance of this scaler at shutdown and confirms it, polling every
/// `shutdown_deletion_interval` up to `shutdown_deletion_retries` times. Instances left
/// alone (`Preexisting::Ignore`) are not touched. Returns how many of ours remain.
pub(crate) async fn delete_all(shared: &Arc<Shared>) -> usize {
    if shared.lock().ledger.permanent_instances() {
        // This host is the group's one instance and cannot be deleted: marking it would
        // only stall the shutdown through every retry (found by the simulation's
        // single-host profile), and report it as left behind.
        return 0;
    }
    let retries = shared.config.shutdown_deletion_retries;
    for attempt in 0..=retries {
        let listed = shared.group.update().await;
        let listed_ok = listed.is_ok();
        match listed {
            Ok(listing) => {
                let now = shared.clock.now();
                let events = {
                    let mut inner = shared.lock();
                    let requested_before = inner.ledger.requested_in_flight();
                    let mut observed = inner.ledger.observe(&listing, now);
                    shared.note_observed(&mut inner, &observed, now);
                    let events = observed_events(&inner, &observed, requested_before);
                    for (_, cause) in &mut observed.lost {
                        *cause = LostCause::Shutdown;
                    }
                    shared.signal_lost(&mut inner, observed.lost);
                    events
                };
                shared.record_all(&events);
            }
            Err(e) => tracing::warn!(error = %e, "update during shutdown failed"),
        }
        let (ids, events, done) = {
            let now = shared.clock.now();
            let mut inner = shared.lock();
            // The driver has stopped: requests that will not come are given up on here.
            inner
                .ledger
                .expire_requested(shared.config.request_timeout, now);
            let ours: Vec<String> = inner
                .ledger
                .instances()
                .filter(|i| !inner.ledger.left_alone(i))
                .filter(|i| i.state.is_live() || i.state == State::Timeout)
                .map(|i| i.id.clone())
                .collect();
            let mut events = Vec::with_capacity(ours.len());
            for id in &ours {
                if inner.ledger.mark_removal(id, RemovalReason::Shutdown, now) {
                    let at = shared.clock.utc();
                    inner.history.push(
                        at,
                        crate::history::FleetEvent::RemovalDecided {
                            instance: id.clone(),
                            reason: RemovalReason::Shutdown,
                        },
                    );
                }
                events.extend(inner.ledger.record_of(id).map(JournalEvent::Instance));
            }
            // Done only when a fresh listing shows none of ours (a failed listing proves
            // nothing, and instances requested just before shutdown may not be listed yet).
            let remaining = inner
                .ledger
                .instances()
                .filter(|i| !inner.ledger.left_alone(i))
                .count();
            let done = listed_ok && remaining == 0 && inner.ledger.requested_in_flight() == 0;
            (ours, events, done)
        };
        if done {
            return 0;
        }
        // Recorded before the provider hears of it; if it cannot be, nothing is deleted.
        if !ids.is_empty() && shared.record_all(&events) {
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
    let left_alone: HashSet<String> = {
        let inner = shared.lock();
        inner
            .ledger
            .instances()
            .filter(|i| inner.ledger.left_alone(i))
            .map(|i| i.id.clone())
            .collect()
    };
    match shared.group.update().await {
        Ok(listing) => listing
            .iter()
            .filter(|s| s.state != State::Deleted && !left_alone.contains(&s.id))
            .count(),
        Err(_) => {
            let inner = shared.lock();
            inner.ledger.instance_count() - left_alone.len() + inner.ledger.requested_in_flight()
        }
    }
}
