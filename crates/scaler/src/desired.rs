//! The one decision function: how many instances to add, which to remove, and why.
//!
//! [`desired`] is pure: it reads the ledger, the policy in force and the limits, and returns
//! a [`Decision`] with a full [`Explanation`]. The driver applies it.
//!
//! The rules, in terms of job slots (`capacity_per_instance` per instance):
//!
//! - *Usable* instances are live (creating or running), not being removed, healthy, not used
//!   up and not failed at ready-up. Their slots that do not run a job are *free*, as many as
//!   `max_use_count` still lets the instance take (a
//!   reservation does not make a slot busy: reservations are long polls that mostly return
//!   empty, and counting them as demand keeps idle instances alive forever). Instances
//!   requested but not yet listed count as usable with all slots free.
//! - *Demand* is the `acquire` calls waiting plus the policy's idle target
//!   (`idle_count`, raised by `scale_factor × slots in use`, capped by `scale_factor_limit`).
//!   Jobs on instances that are dying are not demand: they will not run again.
//! - Scale up when free usable slots fall short of demand, or when the free slots no
//!   reservation holds fall short of the waiting `acquire` calls, by whole instances, never past
//!   `max_instances` counting every instance still listed (removing ones included) plus those
//!   requested.
//! - The idle target's in-use capacity is every running job, on any instance.
//! - Otherwise scale down: idle instances (no job, no reservation) past `idle_time`, oldest
//!   idle first, as long as the free slots left still cover demand; never an instance the
//!   provider cannot delete (this host: [`Ledger::permanent_instances`]). Instances already being
//!   removed are neither capacity nor candidates, so slow deletions never eat the
//!   scale-down budget.
//! - Independently, remove instances that cannot serve: timed out, failed ready-up, past the
//!   health-failure threshold or used up with no job left; retry deletions that were
//!   rejected (with a backoff) or showed no effect after `deletion_retry_interval`.
//! - Instances left alone (`Preexisting::Ignore`) are not counted against `max_instances`;
//!   instances missing from the last listing are counted but are not capacity.

use crate::cause::{Preexisting, RemovalReason};
use crate::config::ScalerConfig;
use crate::counts::SlotCounts;
use crate::ledger::{Instance, Ledger, Readiness, Removal};
use crate::policy::Policy;
use flotilla_fleet::{InstanceId, State};
use std::fmt;
use tokio::time::Instant;

/// What the scaler should do now.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Instances to request (before the creation throttle).
    pub increase: usize,
    /// Instances to remove, with the reason.
    pub remove: Vec<(InstanceId, RemovalReason)>,
    /// Instances whose deletion must be requested (again).
    pub retry_remove: Vec<InstanceId>,
    /// Why.
    pub explanation: Explanation,
}

/// The inputs and reasoning behind a [`Decision`]: taskscaler's `capacity-info` line, made
/// readable.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Slot counts.
    pub counts: SlotCounts,
    /// Instances that count as capacity.
    pub usable_instances: usize,
    /// Instances requested but not listed yet.
    pub requested: usize,
    /// Instances still listed that are being removed.
    pub removing: usize,
    /// Slots per instance.
    pub capacity_per_instance: usize,
    /// `max_instances` (0: unlimited) and the provider's own maximum.
    pub max_instances: usize,
    /// Index of the policy in force (`None`: default policy).
    pub policy_index: Option<usize>,
    /// Idle slots the policy asks for.
    pub idle_target: usize,
    /// Free slots on usable instances (requested ones included).
    pub free_slots: usize,
    /// Waiting acquires plus the idle target.
    pub demand: usize,
    /// Instances to add (positive) or remove for idleness (negative).
    pub required: i64,
    /// The action in words.
    pub action: String,
    /// What limited the action, if anything.
    pub limited_by: Option<String>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; demand {} (pending {} + idle target {}) vs free {} on {} usable instances \
             ({} requested, {} removing), capacity/instance {}, max {}, policy {}; slots {}",
            self.action,
            self.demand,
            self.counts.pending,
            self.idle_target,
            self.free_slots,
            self.usable_instances,
            self.requested,
            self.removing,
            self.capacity_per_instance,
            if self.max_instances == 0 {
                "unlimited".to_string()
            } else {
                self.max_instances.to_string()
            },
            self.policy_index
                .map(|i| format!("#{i}"))
                .unwrap_or_else(|| "default".into()),
            self.counts,
        )?;
        if let Some(l) = &self.limited_by {
            write!(f, "; limited by {l}")?;
        }
        Ok(())
    }
}

/// Everything [`desired`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The ledgers.
    pub ledger: &'a Ledger,
    /// The policy in force.
    pub policy: &'a Policy,
    /// Its index among the configured policies (`None`: default).
    pub policy_index: Option<usize>,
    /// Limits and timings.
    pub config: &'a ScalerConfig,
    /// The provider's `max_size`.
    pub provider_max: usize,
    /// Now.
    pub now: Instant,
}

/// Whether an instance in `state` still has to be deleted by us: live, or timed out (the
/// provider gave up creating it but it is still there, counting against the limit).
fn needs_deletion(state: State, config: &ScalerConfig) -> bool {
    state.is_live() || (state == State::Timeout && !config.legacy.timeouts_never_deleted)
}

/// Whether a deletion request is due: never sent; rejected, and its backoff is over
/// (`backoff_base` doubling per rejection, up to `deletion_retry_interval`); or accepted
/// without effect for `deletion_retry_interval` (never for a pool's machine: given back is
/// given back, and asking again would give back the same id lent anew).
fn deletion_due(r: &Removal, config: &ScalerConfig, now: Instant) -> bool {
    let Some(at) = r.last_attempt else {
        return true;
    };
    let wait = if r.accepted {
        config.deletion_retry_interval
    } else {
        let exp = r.attempts.saturating_sub(1).min(20);
        config
            .backoff_base
            .max(config.update_interval_when_expecting)
            .saturating_mul(1u32 << exp)
            .min(config.deletion_retry_interval)
    };
    now.saturating_duration_since(at) >= wait
}

/// Whether an instance holds neither a job nor a reservation.
fn unheld(i: &Instance) -> bool {
    i.acquired() == 0 && i.reserved() == 0
}

/// Decides what the fleet needs now. Pure: no I/O, no clock, no randomness.
pub fn desired(input: Inputs<'_>) -> Decision {
    let Inputs {
        ledger,
        policy,
        policy_index,
        config,
        provider_max,
        now,
    } = input;
    let cap = ledger.capacity();
    let counts = ledger.counts();
    let requested = ledger.requested_in_flight();

    let mut usable_instances = 0usize;
    let mut free_slots = requested * cap;
    // Free slots a reservation holds: idle capacity, but not for a job that waits now.
    let mut reserved_free = 0usize;
    let mut removing = 0usize;
    let mut ours = 0usize;
    let mut remove = Vec::new();
    let mut retry_remove = Vec::new();
    let mut candidates = Vec::new();

    for i in ledger.instances() {
        if ledger.left_alone(i) {
            // Someone else's: not ours to use, delete or count.
            continue;
        }
        ours += 1;
        if i.cause == crate::cause::Cause::Preexisted
            && ledger.preexisting() == Preexisting::Remove
            && i.removal.is_none()
            && i.state.is_live()
        {
            remove.push((i.id.clone(), RemovalReason::Reconcile));
            continue;
        }
        if let Some(r) = &i.removal {
            removing += 1;
            // Jobs told their instance was lost may still be tearing down there.
            if i.missing == 0
                && ledger.lost_on(&i.id) == 0
                && needs_deletion(i.state, config)
                && deletion_due(r, config, now)
                && !(r.accepted && ledger.accepted_removal_is_final())
                && !ledger.shutting_down()
            {
                retry_remove.push(i.id.clone());
            }
            continue;
        }
        if i.missing > 0 {
            // Missing from the last listing: neither capacity nor a candidate until the
            // next listings tell whether it is gone.
            continue;
        }
        if i.state == State::Timeout {
            remove.push((i.id.clone(), RemovalReason::Timeout));
            continue;
        }
        if matches!(i.readiness, Readiness::Failed(_)) {
            remove.push((i.id.clone(), RemovalReason::ReadyUpFailed));
            continue;
        }
        if ledger.unhealthy(i) {
            // No new work (taskscaler !109); removed once its jobs end, unless it cannot be
            // removed: then it waits for a passing check.
            if i.acquired() == 0 && !ledger.permanent_instances() {
                remove.push((i.id.clone(), RemovalReason::Unhealthy));
            }
            continue;
        }
        if ledger.used_up(i) {
            if i.acquired() == 0 {
                remove.push((i.id.clone(), RemovalReason::MaxUseCount));
            }
            continue;
        }
        if !ledger.usable(i) {
            continue;
        }
        usable_instances += 1;
        let takeable = ledger.takeable_slots(i);
        free_slots += takeable;
        reserved_free += i.reserved().min(takeable);
        // A reserved slot keeps its instance: the job behind the reservation must not wait
        // for a cold instance. Reservations are not demand either (below).
        if unheld(i)
            && !ledger.permanent_instances()
            && i.state == State::Running
            && i.readiness == Readiness::Ready
            && now.saturating_duration_since(i.idle_since) >= policy.idle_time
        {
            candidates.push(i);
        }
    }
    // "current in-use capacity": every running job, including those on instances that
    // take no more work (used up, unhealthy).
    let in_use = ledger.acquired_total();

    let idle_target = policy.idle_target(in_use);
    let demand = counts.pending + idle_target;
    let limit = match (config.max_instances, provider_max) {
        (0, p) => p,
        (m, p) => m.min(p),
    };
    let total = ours + requested;

    let mut increase = 0usize;
    let mut required: i64 = 0;
    let mut limited_by = None;
    let action;
    if ledger.shutting_down() {
        action = "shutting down: no scaling".to_string();
    } else if free_slots < demand || free_slots - reserved_free < counts.pending {
        // Short of the idle target, or of slots the waiting jobs can take: a slot another
        // key's reservation holds is not one of those (its job may come with the next long
        // poll), so a waiting job asks for capacity of its own.
        let short = demand
            .saturating_sub(free_slots)
            .max(counts.pending.saturating_sub(free_slots - reserved_free));
        let need = short.div_ceil(cap);
        required = need as i64;
        let room = limit.saturating_sub(total);
        increase = need.min(room);
        if increase < need {
            limited_by = Some(format!(
                "max instances ({limit}): {total} held or requested, {need} more needed"
            ));
        }
        action = format!("scale up by {increase}");
    } else {
        let mut surplus = free_slots - demand;
        candidates.sort_by(|a, b| a.idle_since.cmp(&b.idle_since).then(a.id.cmp(&b.id)));
        let mut removed = 0usize;
        for c in &candidates {
            if surplus < cap {
                break;
            }
            remove.push((c.id.clone(), RemovalReason::IdleTime));
            surplus -= cap;
            removed += 1;
        }
        required = -(removed as i64);
        if removed > 0 {
            action = format!("scale down by {removed} idle past {:?}", policy.idle_time);
        } else if surplus >= cap {
            action = "hold".to_string();
            limited_by = Some(format!(
                "{} free slots beyond demand, but no instance idle past {:?}",
                surplus, policy.idle_time
            ));
        } else {
            action = "hold".to_string();
        }
    }

    Decision {
        increase,
        remove,
        retry_remove,
        explanation: Explanation {
            counts,
            usable_instances,
            requested,
            removing,
            capacity_per_instance: cap,
            max_instances: config.max_instances,
            policy_index,
            idle_target,
            free_slots,
            demand,
            required,
            action,
            limited_by,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_fleet::InstanceStatus;
    use std::time::Duration;

    struct World {
        ledger: Ledger,
        config: ScalerConfig,
        policy: Policy,
        now: Instant,
    }

    impl World {
        fn new(cap: usize, idle_count: usize) -> Self {
            World {
                ledger: Ledger::new(cap, 0, 3),
                config: ScalerConfig {
                    capacity_per_instance: cap,
                    ..Default::default()
                },
                policy: Policy {
                    idle_count,
                    idle_time: Duration::from_secs(60),
                    ..Default::default()
                },
                now: Instant::now(),
            }
        }

        fn running(&mut self, ids: &[&str]) {
            let listing: Vec<_> = ids
                .iter()
                .map(|i| InstanceStatus::new(*i, State::Running))
                .collect();
            self.ledger.observe(&listing, self.now);
            for id in ids {
                self.ledger.ready_up_done(id, Ok(()), self.now);
            }
        }

        fn decide(&self) -> Decision {
            desired(Inputs {
                ledger: &self.ledger,
                policy: &self.policy,
                policy_index: Some(0),
                config: &self.config,
                provider_max: usize::MAX,
                now: self.now,
            })
        }

        fn advance(&mut self, secs: u64) {
            self.now += Duration::from_secs(secs);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn scales_up_to_idle_target_in_whole_instances() {
        let mut w = World::new(4, 6);
        let d = w.decide();
        assert_eq!(d.increase, 2, "{}", d.explanation);
        w.ledger.add_requested(2, w.now);
        assert_eq!(
            w.decide().increase,
            0,
            "requested instances count as capacity"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn respects_max_instances() {
        let mut w = World::new(1, 10);
        w.config.max_instances = 3;
        w.running(&["a"]);
        let d = w.decide();
        assert_eq!(d.increase, 2);
        assert!(d.explanation.limited_by.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn pending_acquires_drive_scale_up() {
        let mut w = World::new(2, 0);
        for k in ["a", "b", "c"] {
            w.ledger.try_acquire(k, w.now).unwrap();
        }
        assert_eq!(w.decide().increase, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn scale_down_oldest_idle_first_keeping_target() {
        let mut w = World::new(1, 1);
        w.running(&["old"]);
        w.advance(10);
        let listing = vec![
            InstanceStatus::new("old", State::Running),
            InstanceStatus::new("new", State::Running),
        ];
        w.ledger.observe(&listing, w.now);
        w.ledger.ready_up_done("new", Ok(()), w.now);
        w.advance(100);
        let d = w.decide();
        assert_eq!(d.remove, vec![("old".to_string(), RemovalReason::IdleTime)]);
        assert_eq!(d.increase, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn never_removes_an_instance_with_a_job() {
        let mut w = World::new(1, 0);
        w.running(&["a"]);
        w.ledger.try_acquire("job", w.now).unwrap();
        w.advance(3600);
        assert!(w.decide().remove.is_empty());
    }

    /// Issue 27 (1): this host as the only instance is never marked for removal (the
    /// provider cannot delete it, so the mark would never end); past the health-failure
    /// threshold it only stops taking jobs until a check passes. With `permanent` false (the
    /// bug put back), the same ledger removes it for idleness and then for health.
    fn this_host_world(permanent: bool) -> World {
        let mut w = World::new(2, 0);
        w.ledger = Ledger::new(2, 0, 3).with_permanent_instances(permanent);
        w.running(&["local"]);
        w
    }

    #[tokio::test(start_paused = true)]
    async fn never_removes_an_instance_the_provider_cannot_delete() {
        let mut w = this_host_world(true);
        w.advance(3600);
        let d = w.decide();
        assert!(d.remove.is_empty(), "idle: {}", d.explanation);
        for _ in 0..3 {
            w.ledger.health_failure("local");
        }
        let d = w.decide();
        assert!(d.remove.is_empty(), "unhealthy: {}", d.explanation);
        let usable = |w: &World| w.ledger.usable(w.ledger.instance("local").unwrap());
        assert!(!usable(&w), "no new jobs while its checks fail");
        w.ledger.health_ok("local");
        assert!(usable(&w), "back in service after a passing check");
        assert!(matches!(
            w.ledger.try_acquire("job", w.now),
            Ok(crate::ledger::TryAcquire::Assigned(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn deletable_instances_are_still_removed() {
        let mut w = this_host_world(false);
        w.advance(3600);
        assert_eq!(
            w.decide().remove,
            vec![("local".to_string(), RemovalReason::IdleTime)]
        );
        let mut w = this_host_world(false);
        for _ in 0..3 {
            w.ledger.health_failure("local");
        }
        assert_eq!(
            w.decide().remove,
            vec![("local".to_string(), RemovalReason::Unhealthy)]
        );
    }

    /// Issue 27 (8): `idle_count` counts slots a job can still have. An instance of 4 slots
    /// with one use left under `max_use_count` offers one idle slot, not four; counting four
    /// (the bug) held no instance for an idle target of 2.
    #[tokio::test(start_paused = true)]
    async fn idle_slots_are_those_max_use_count_still_allows() {
        let mut w = World::new(4, 2);
        w.ledger = Ledger::new(4, 3, 3);
        w.config.max_use_count = 3;
        w.running(&["a"]);
        for k in ["j1", "j2"] {
            w.ledger.try_acquire(k, w.now).unwrap();
            w.ledger.release(k, w.now);
        }
        let d = w.decide();
        assert_eq!(d.explanation.free_slots, 1, "{}", d.explanation);
        assert_eq!(d.increase, 1, "{}", d.explanation);
    }

    /// Issue 27 (5): a waiting job asks for capacity even when another key's reservation
    /// holds the idle slot (that key's job may come with its next long poll). Before, the
    /// reserved slot counted as free for the waiting job, and no instance was made.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_job_scales_up_past_another_keys_reservation() {
        let mut w = World::new(1, 0);
        w.running(&["a"]);
        let lease = Duration::from_secs(600);
        w.ledger
            .reserve("polling", true, None, lease, w.now)
            .unwrap();
        assert_eq!(
            w.ledger.try_acquire("waiting", w.now).unwrap(),
            crate::ledger::TryAcquire::Queued
        );
        let d = w.decide();
        assert_eq!(d.increase, 1, "{}", d.explanation);
    }

    #[tokio::test(start_paused = true)]
    async fn explanation_reads_well() {
        let mut w = World::new(2, 3);
        w.running(&["a"]);
        let text = w.decide().explanation.to_string();
        assert!(text.starts_with("scale up by 1"), "{text}");
        assert!(text.contains("idle target 3"), "{text}");
    }
}
