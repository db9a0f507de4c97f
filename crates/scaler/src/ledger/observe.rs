//! Reconciling the ledger with a provider listing (the truth), and restoring it from the
//! durable store.
//!
//! A listing is the truth about states, but not always about presence: providers return
//! partial or empty listings when their API glitches. So an instance missing from a listing
//! keeps what the ledger knows about it (cause, use count, jobs) until its deletion is
//! confirmed (the provider listed it as deleted) or it has been missing from
//! [`MISSING_LISTINGS`] listings in a row over at least [`MISSING_FOR`] (while shutting down,
//! when nothing is created, the listings suffice). Meanwhile it takes no new work. An
//! instance that comes back after that is recognised from a short memory of departed
//! instances, so it is neither taken for someone else's nor handed out as new.

use super::index::FreeIndex;
use super::instance::{Instance, Key, Readiness, Removal, Slot};
use super::ledgers::{
    DEPARTED_FOR, DEPARTED_MAX, Departed, Ledger, MISSING_FOR, MISSING_LISTINGS, refile,
};
use super::rules::Rules;
use crate::cause::{Cause, LostCause, Preexisting, RemovalReason};
use flotilla_fleet::{InstanceId, InstanceStatus, State};
use tokio::time::Instant;

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
    /// Instances this scaler requested that the provider now reports as timed out.
    pub timed_out: Vec<InstanceId>,
    /// Instances this scaler requested that reached `Running`.
    pub created: Vec<InstanceId>,
    /// Keys of jobs that held slots at a crash on instances now gone: their records may go.
    pub released: Vec<Key>,
    /// What the ledger knew of each instance in `gone`, for the operator's figures.
    pub departures: Vec<Departure>,
}

/// An instance that left the ledger, as the ledger knew it.
#[derive(Debug, Clone, PartialEq)]
pub struct Departure {
    /// The instance.
    pub id: InstanceId,
    /// Why flotilla removed it; `None` when it vanished without being removed.
    pub reason: Option<RemovalReason>,
    /// How it came to be known.
    pub cause: Cause,
    /// When the scaler first saw it.
    pub first_seen: Instant,
    /// When the request it answered was made, if it answered one.
    pub requested_at: Option<Instant>,
    /// When its removal was decided, if it was.
    pub removal_decided_at: Option<Instant>,
    /// Jobs it ran.
    pub use_count: u32,
}

impl Ledger {
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
        i.removal = removal.map(|reason| Removal::decided(reason, now));
        self.instances.insert(id, i);
    }

    /// Whether an instance of `cause` is someone else's under this ledger's policy.
    fn foreign_cause(&self, cause: Cause) -> bool {
        cause == Cause::Preexisted && self.rules.preexisting != Preexisting::Adopt
    }

    /// Reconciles the ledger with a provider listing (the truth).
    pub fn observe(&mut self, listing: &[InstanceStatus], now: Instant) -> Observed {
        self.requested
            .age(self.listed_at, now, self.listing_interval);
        self.listed_at = Some(now);
        let mut out = Observed::default();
        self.epoch = self.epoch.wrapping_add(1);
        let epoch = self.epoch;
        let mut lent_again = Vec::new();
        for entry in listing {
            // One lookup per listed instance: this runs over the whole fleet every listing.
            let dying = match self.instances.get_mut(&entry.id) {
                Some(i)
                    if self.rules.lends_from_pool
                        && !self.legacy.reused_id_is_the_old_instance
                        && entry.state.is_live()
                        && i.removal.as_ref().is_some_and(|r| r.accepted)
                        && self.requested.total() > 0 =>
                {
                    // A pool's machine given back and lent again under its id for a request:
                    // the old one is gone (settled below with the absent ones), this one
                    // arrives after. (With nothing requested it can only be a stale listing:
                    // no one else lends from flotilla's pool.)
                    i.state = State::Deleted;
                    lent_again.push(entry);
                    continue;
                }
                Some(i) => note(&self.rules, &mut self.free, i, entry, epoch, now, &mut out),
                None => self.arrive(entry, epoch, now, &mut out),
            };
            if dying {
                // Its jobs are lost, its reservations move.
                let lost = self.lose_acquisitions_of(&entry.id, LostCause::InstanceDeleting);
                out.lost.extend(lost);
                self.rebind_reservations_of(&entry.id);
                self.reindex(&entry.id);
            }
        }
        self.settle_missing(epoch, now, &mut out);
        for entry in lent_again {
            // New, not the one given back: no removal mark, no use count carried over.
            self.departed.remove(&entry.id);
            self.arrive(entry, epoch, now, &mut out);
        }
        self.prune_departed(now);
        out
    }

    /// Takes a listed instance the ledger does not hold into it; returns whether it is dying.
    fn arrive(
        &mut self,
        entry: &InstanceStatus,
        epoch: u64,
        now: Instant,
        out: &mut Observed,
    ) -> bool {
        if entry.state == State::Deleted {
            return false;
        }
        let mut i = self.arrival(entry, now);
        out.appeared.push((entry.id.clone(), i.cause));
        out.changed.push(entry.id.clone());
        let dying = note(&self.rules, &mut self.free, &mut i, entry, epoch, now, out);
        self.instances.insert(entry.id.clone(), i);
        dying
    }

    /// A new entry in the listing: one that departed and came back, one we requested, or
    /// someone else's.
    fn arrival(&mut self, entry: &InstanceStatus, now: Instant) -> Instance {
        // An instance we removed on purpose that comes back live while we are waiting for
        // requested ones is one of those: a provider that reuses ids (a static pool lending
        // the same host again, Proxmox VM ids, StatefulSet pods) made it anew. Taking it for
        // the old one would bring back its removal mark, and it would never serve.
        let requested = self.requested.total() > 0;
        let reused_ids = !self.legacy.reused_id_is_the_old_instance;
        let departed = self.departed.remove(&entry.id).filter(|d| {
            let reused = d.removal.is_some() && entry.state.is_live() && requested;
            !(reused && reused_ids)
        });
        if let Some(d) = departed {
            let mut i = Instance::new(entry.id.clone(), entry.state, d.cause, self.capacity, now);
            i.use_count = d.use_count;
            i.removal = d.removal.map(|reason| {
                // Its deletion was accepted before it went: do not ask again at once.
                let mut r = Removal::decided(reason, now);
                r.accepted = true;
                r.last_attempt = Some(now);
                r
            });
            if i.removal.is_none() && d.had_jobs {
                // Its jobs were told their instance was gone and may still be tearing down
                // there: it must not take new ones.
                i.removal = Some(Removal::decided(RemovalReason::Reconcile, now));
            }
            return i;
        }
        let requested_at = self.requested.consume();
        let cause = if requested_at.is_some() {
            Cause::Requested
        } else {
            Cause::Preexisted
        };
        let mut i = Instance::new(entry.id.clone(), entry.state, cause, self.capacity, now);
        i.requested_at = requested_at;
        i
    }

    /// Instances the listing did not show (or showed as deleted): gone if that is
    /// confirmed or has lasted long enough, else missing.
    fn settle_missing(&mut self, epoch: u64, now: Instant, out: &mut Observed) {
        let absent: Vec<InstanceId> = self
            .instances
            .values()
            .filter(|i| i.seen != epoch || i.state == State::Deleted)
            .map(|i| i.id.clone())
            .collect();
        let mut orphaned = Vec::new();
        let pool_final = self.accepted_removal_is_final();
        for id in absent {
            let Some(i) = self.instances.get_mut(&id) else {
                continue;
            };
            // Only the provider saying "deleted" confirms a deletion: an accepted request
            // may still be in progress, and a partial listing proves nothing. A pool that
            // lends machines lists what it lends: one we were removing that it no longer
            // lists was given back (perhaps before a restart), and must not be asked again
            // once its id is lent anew.
            let given_back = i.removal.is_some() && pool_final;
            let confirmed =
                i.state == State::Deleted || given_back || self.legacy.forget_missing_at_once;
            if !confirmed {
                i.missing += 1;
                let since = *i.missing_since.get_or_insert(now);
                // While shutting down nothing is created, so a glitch that hides an instance
                // can cost no extra one: missing from enough listings in a row is enough (the
                // shutdown's deletion sweep must not end with an instance the provider
                // already deleted still on record).
                let long_enough =
                    self.shutting_down || now.saturating_duration_since(since) >= MISSING_FOR;
                if i.missing < MISSING_LISTINGS || !long_enough {
                    self.reindex(&id);
                    self.rebind_reservations_of(&id);
                    continue;
                }
            }
            let lost = self.lose_acquisitions_of(&id, LostCause::InstanceRemoved);
            let mut had_jobs = !lost.is_empty();
            out.lost.extend(lost);
            if let Some(i) = self.take_instance(&id) {
                had_jobs |= !i.restored_acquisitions.is_empty();
                out.released.extend(i.restored_acquisitions.iter().cloned());
                orphaned.extend(i.slots.iter().filter_map(|s| match s {
                    Slot::Reserved(k) => Some(k.clone()),
                    _ => None,
                }));
                if !self.foreign_cause(i.cause) && !self.legacy.forget_missing_at_once {
                    self.departed.insert(
                        id.clone(),
                        Departed {
                            cause: i.cause,
                            use_count: i.use_count,
                            removal: i.removal.as_ref().map(|r| r.reason),
                            had_jobs,
                            at: now,
                        },
                    );
                }
                out.departures.push(Departure {
                    id: id.clone(),
                    reason: i.removal.as_ref().map(|r| r.reason),
                    cause: i.cause,
                    first_seen: i.first_seen,
                    requested_at: i.requested_at,
                    removal_decided_at: i.removal.as_ref().map(|r| r.decided_at),
                    use_count: i.use_count,
                });
                out.gone.push((id, i.removal.map(|r| r.reason)));
            }
        }
        // Taken out first, so no reservation is moved onto one that is also gone.
        self.rebind_keys(orphaned);
    }

    fn prune_departed(&mut self, now: Instant) {
        if self.departed.is_empty() {
            return;
        }
        self.departed
            .retain(|_, d| now.saturating_duration_since(d.at) < DEPARTED_FOR);
        while self.departed.len() > DEPARTED_MAX {
            let Some(oldest) = self
                .departed
                .iter()
                .min_by_key(|(_, d)| d.at)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            self.departed.remove(&oldest);
        }
    }
}

/// Applies one listing entry to a known instance; returns whether it is one of ours that is
/// dying (its jobs must be told).
fn note(
    rules: &Rules,
    free: &mut FreeIndex,
    i: &mut Instance,
    entry: &InstanceStatus,
    epoch: u64,
    now: Instant,
    out: &mut Observed,
) -> bool {
    i.seen = epoch;
    i.missing = 0;
    i.missing_since = None;
    let was = i.state;
    if was != entry.state && out.changed.last().is_none_or(|c| *c != entry.id) {
        out.changed.push(entry.id.clone());
    }
    i.state = entry.state;
    if was == State::Running && entry.state == State::Creating {
        // Back to creating (a VM rebooted or re-provisioned under the same id): what its
        // ready-up made ready may be gone, so it runs again once the instance is running.
        i.readiness = Readiness::Waiting;
    }
    let foreign = rules.foreign(i);
    if entry.state == State::Running
        && i.readiness == Readiness::Waiting
        && !foreign
        && i.removal.is_none()
    {
        // New, restored from the store, or back from a glitch before its ready-up: the
        // driver runs the hook now.
        out.became_running.push(entry.id.clone());
    }
    if entry.state == State::Running && i.running_at.is_none() {
        i.running_at = Some(now);
    }
    if i.cause == Cause::Requested && was != entry.state {
        match entry.state {
            State::Timeout => out.timed_out.push(entry.id.clone()),
            State::Running => out.created.push(entry.id.clone()),
            _ => {}
        }
    }
    let dying = !foreign && i.dying();
    if dying && i.removal.is_none() {
        let timeout = entry.state == State::Timeout;
        let mut r = Removal::decided(
            if timeout {
                RemovalReason::Timeout
            } else {
                RemovalReason::RemovedFromOutside
            },
            now,
        );
        // A timed-out instance still has to be deleted; one the provider is deleting needs
        // nothing more from us.
        r.accepted = !timeout;
        i.removal = Some(r);
    }
    refile(rules, free, i);
    dying && (i.acquired > 0 || i.reserved > 0)
}
