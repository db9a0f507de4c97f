//! The scaler's limits and timings (the non-policy keys of `[runners.autoscaler]`).

use std::time::Duration;

/// `[runners.autoscaler.scale_throttle]`: a token bucket on instance creation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleThrottle {
    /// New instances per second; a negative value means unlimited.
    pub limit: f64,
    /// Instances that may be created at once.
    pub burst: usize,
}

impl ScaleThrottle {
    /// GitLab's defaults: 100 instances per second, burst `max_instances` (or the limit when
    /// `max_instances` is 0).
    pub fn gitlab_default(max_instances: usize) -> Self {
        ScaleThrottle {
            limit: 100.0,
            burst: if max_instances > 0 {
                max_instances
            } else {
                100
            },
        }
    }
}

/// Limits and timings of one scaler.
#[derive(Debug, Clone)]
pub struct ScalerConfig {
    /// Job slots per instance (`capacity_per_instance`, at least 1).
    pub capacity_per_instance: usize,
    /// Most instances in the group, deleting ones included (0: unlimited).
    pub max_instances: usize,
    /// Jobs an instance runs before it is retired (0: unlimited).
    pub max_use_count: u32,
    /// Default time `acquire` waits for a slot.
    pub instance_acquire_timeout: Duration,
    /// Listing interval when nothing is expected to change.
    pub update_interval: Duration,
    /// Listing interval while a state change is expected.
    pub update_interval_when_expecting: Duration,
    /// How long a deletion may show no effect before it is requested again.
    pub deletion_retry_interval: Duration,
    /// Interval between deletion checks at shutdown.
    pub shutdown_deletion_interval: Duration,
    /// Deletion checks at shutdown before giving up.
    pub shutdown_deletion_retries: u32,
    /// Consecutive health failures after which an instance is excluded and replaced.
    pub failure_threshold: u32,
    /// Creation throttle.
    pub scale_throttle: ScaleThrottle,
    /// Delete every instance when the scaler shuts down.
    pub delete_instances_on_shutdown: bool,
    /// Heartbeat an instance before handing it to a job.
    pub acquire_heartbeat: bool,
    /// How long one such heartbeat may take before the instance counts as failing it and
    /// the job is offered another (never past the acquire's own deadline). GitLab Runner's
    /// heartbeat is a connector `exit 0` bounded by the connection's own timeouts; a
    /// heartbeat that hangs must not cost the job its whole `instance_acquire_timeout`.
    pub acquire_heartbeat_timeout: Duration,
    /// How long a reservation lives without being acquired or released (flotilla extension;
    /// it must exceed a job request's long poll).
    pub reservation_lease: Duration,
    /// First delay after a failed ready-up or increase; doubles per consecutive failure.
    pub backoff_base: Duration,
    /// Longest delay between creation attempts after failures.
    pub backoff_max: Duration,
    /// How long requested instances may take to appear in the listing before the request
    /// is considered lost.
    pub request_timeout: Duration,
    /// How long an instance's ready-up (`instance_ready_command`) may take before it is
    /// given up and the instance removed (flotilla extension; GitLab Runner waits for ever,
    /// so a hung command holds the instance's capacity for good).
    pub ready_up_timeout: Duration,
    /// What to do with instances in the group that this scaler never created.
    pub preexisting: crate::cause::Preexisting,
    /// Shortest time between two decisions when events (acquires, reservations) wake the
    /// driver early: a burst of jobs gets one decision, not one per job.
    pub decision_debounce: Duration,
    /// Keep an instance restored from the store that had jobs when the previous process
    /// stopped (`[runners.autoscaler.state_storage] keep_instance_with_acquisitions`);
    /// otherwise it is removed for safety, as GitLab does.
    pub keep_instance_with_acquisitions: bool,
    /// Test-only switches that put fixed bugs back, so the simulation can show it catches
    /// them. Never set outside tests.
    #[doc(hidden)]
    pub legacy: Legacy,
}

/// Test-only switches restoring old, wrong behaviour (issue 12's mutation demonstration).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Legacy {
    /// Bug 1: instances the provider reports as timed out are never deleted.
    pub timeouts_never_deleted: bool,
    /// Bug 3: an instance missing from one listing is forgotten at once (and comes back as
    /// a new, unused one).
    pub forget_missing_at_once: bool,
    /// Issue 27 (1): an instance the provider cannot delete (this host) is marked for removal
    /// by `idle_time` and health failures like any other, and the mark never ends.
    pub removes_permanent_instances: bool,
    /// Issue 27 (2): an instance removed on purpose that comes back under its id (a fixed pool
    /// lending the same host again) is taken for the old one, removal mark and all.
    pub reused_id_is_the_old_instance: bool,
    /// Issue 27 (3): requests age with the clock, not with listings, so a listing outage
    /// gives them up and makes them again, past `max_instances`.
    pub requests_age_without_listings: bool,
    /// Issue 27 (6): the heartbeat before an acquisition is not bounded: one that hangs holds
    /// the job for as long as it hangs.
    pub unbounded_acquire_heartbeat: bool,
    /// Issue 27 (8): every slot without a job counts as idle capacity, even those
    /// `max_use_count` no longer lets the instance take.
    pub idle_counts_used_up_slots: bool,
}

impl Default for ScalerConfig {
    fn default() -> Self {
        ScalerConfig {
            capacity_per_instance: 1,
            max_instances: 0,
            max_use_count: 0,
            instance_acquire_timeout: Duration::from_secs(15 * 60),
            update_interval: Duration::from_secs(60),
            update_interval_when_expecting: Duration::from_secs(2),
            deletion_retry_interval: Duration::from_secs(60),
            shutdown_deletion_interval: Duration::from_secs(10),
            shutdown_deletion_retries: 3,
            failure_threshold: 3,
            scale_throttle: ScaleThrottle::gitlab_default(0),
            delete_instances_on_shutdown: false,
            acquire_heartbeat: false,
            acquire_heartbeat_timeout: Duration::from_secs(60),
            reservation_lease: Duration::from_secs(10 * 60),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(5 * 60),
            request_timeout: Duration::from_secs(20 * 60),
            ready_up_timeout: Duration::from_secs(30 * 60),
            preexisting: crate::cause::Preexisting::Adopt,
            decision_debounce: Duration::from_secs(1),
            keep_instance_with_acquisitions: false,
            legacy: Legacy::default(),
        }
    }
}

impl ScalerConfig {
    /// The most job slots the fleet may ever have (`None`: unbounded).
    pub fn max_slots(&self) -> Option<usize> {
        (self.max_instances > 0).then(|| self.max_instances * self.capacity_per_instance)
    }
}
