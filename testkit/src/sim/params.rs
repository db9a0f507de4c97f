//! One simulation's parameters, drawn from its seed.

use crate::fake_group::FakeConfig;
use chrono::{DateTime, TimeZone, Utc};
use flotilla_scaler::{Policy, Preexisting, ScaleThrottle, ScalerConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// What kind of provider a seed's fleet runs on. Each profile has faults the others cannot
/// show; [`SimParams::random`] spreads the seeds over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A cloud: every instance new, every kind of transient fault (the first simulation).
    Cloud,
    /// This host as the group's one instance, always there and never deleted (the `local`
    /// provider under a shell runner): long idle gaps, health failures, restarts.
    SingleHost,
    /// Machines lent from a fixed pool that lends the same ids again (a static pool,
    /// Proxmox VM ids, StatefulSet pods): short idle times, so hosts go back and return.
    FixedPool,
    /// A cloud with listing outages of tens of minutes, deletions refused for minutes,
    /// and acquire heartbeats that hang; half of these seeds set no `max_instances`.
    Outages,
}

impl Profile {
    /// The profiles and their names (`SIM_PROFILE`).
    pub const NAMED: [(&'static str, Profile); 4] = [
        ("cloud", Profile::Cloud),
        ("single-host", Profile::SingleHost),
        ("fixed-pool", Profile::FixedPool),
        ("outages", Profile::Outages),
    ];

    /// The profile called `name`.
    pub fn named(name: &str) -> Option<Profile> {
        Self::NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| *p)
    }

    /// The profile of `seed`: six in ten are clouds, the rest spread over the others.
    pub fn of(seed: u64) -> Profile {
        match seed % 10 {
            6 => Profile::SingleHost,
            7 => Profile::FixedPool,
            8 | 9 => Profile::Outages,
            _ => Profile::Cloud,
        }
    }
}

/// A policy with its periods and time zone, as configured.
#[derive(Debug, Clone)]
pub struct SimPolicy {
    /// The policy.
    pub policy: Policy,
    /// Its periods (empty: always).
    pub periods: Vec<String>,
    /// Its time zone (always named: the simulation must not depend on the host's zone).
    pub timezone: String,
}

/// One simulation's parameters.
#[derive(Debug, Clone)]
pub struct SimParams {
    /// The seed everything derives from.
    pub seed: u64,
    /// The kind of provider.
    pub profile: Profile,
    /// Simulated time during which jobs arrive.
    pub duration: Duration,
    /// Mean jobs per second, sized from the provider's latencies (see [`SimParams::random`]).
    pub arrival_rate: f64,
    /// Probability that an arrival is a burst.
    pub burst_probability: f64,
    /// Jobs in a burst (uniform 1..=max).
    pub burst_max: usize,
    /// Jobs' duration range.
    pub job: (Duration, Duration),
    /// Fraction of jobs cancelled part-way.
    pub cancel_fraction: f64,
    /// Fraction of arrivals whose acquire is dropped mid-wait.
    pub drop_fraction: f64,
    /// Fraction of arrivals that only reserve, and never acquire.
    pub unused_reservation_fraction: f64,
    /// Jobs reserve before acquiring (non-preemptive policies only: in preemptive mode a
    /// job source asks for jobs only when a slot is idle, which is a throughput limit by
    /// design, not a liveness failure).
    pub reserve_first: bool,
    /// The scaler's limits.
    pub scaler: ScalerConfig,
    /// The policies, in configuration order.
    pub policies: Vec<SimPolicy>,
    /// When the run starts (shortly before a daylight saving time change in Europe/Berlin).
    pub start_utc: DateTime<Utc>,
    /// The provider's behaviour.
    pub provider: FakeConfig,
    /// How long a ready-up takes.
    pub ready_up_latency: (Duration, Duration),
    /// Probability that a ready-up fails.
    pub ready_up_failure_rate: f64,
    /// Probability that a listing is the previous one again (lag).
    pub lag_rate: f64,
    /// Probability that a listing leaves instances out (flapping, partial).
    pub flap_rate: f64,
    /// When the one empty listing comes.
    pub empty_listing_at: Duration,
    /// Mean time between instances removed from outside.
    pub external_removal_every: Duration,
    /// Mean time between instances turning unhealthy (with acquire heartbeats on).
    pub unhealthy_every: Option<Duration>,
    /// Foreign instances in the group at start.
    pub foreign_at_start: usize,
    /// When a foreign instance appears mid-run (`None`: never).
    pub foreign_mid_run_at: Option<Duration>,
    /// Windows (from, to) during which every listing fails.
    pub listing_outages: Vec<(Duration, Duration)>,
    /// When the scaler crashes and restarts from its store.
    pub restarts: Vec<Duration>,
    /// How long a restart takes.
    pub restart_gap: Duration,
    /// How long a job whose instance was lost takes to tear down.
    pub teardown: (Duration, Duration),
    /// Longest wait the provider's latencies, faults and restarts explain.
    pub liveness_grace: Duration,
    /// Share of jobs that must be served within `instance_acquire_timeout` (jobs whose wait
    /// overlapped a listing outage are not counted: no scaler can see new instances then).
    pub min_served: f64,
    /// How long the idle slots may stay below the policy's `idle_count` while the fleet
    /// could grow, before it is a violation.
    pub idle_grace: Duration,
}

fn secs(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_secs(rng.random_range(lo..=hi))
}

impl SimParams {
    /// Random but plausible parameters for `seed`, of the seed's [`Profile`].
    pub fn random(seed: u64) -> Self {
        Self::of(Profile::of(seed), seed)
    }

    /// Random but plausible parameters for `seed` on a provider of `profile`: tens of
    /// simulated minutes, small fleets, every kind of fault the profile can have.
    pub fn of(profile: Profile, seed: u64) -> Self {
        let mut p = Self::cloud(seed);
        p.profile = profile;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9f0f_11e5);
        match profile {
            Profile::Cloud => {}
            Profile::SingleHost => p.single_host(&mut rng),
            Profile::FixedPool => p.fixed_pool(&mut rng),
            Profile::Outages => p.outages(&mut rng),
        }
        p
    }

    /// This host as the only instance: nothing is created or deleted, the one instance is
    /// adopted at start, and what can go wrong is idleness, health failures, glitches and
    /// restarts.
    fn single_host(&mut self, rng: &mut ChaCha8Rng) {
        self.provider.capabilities = flotilla_fleet::Capabilities::this_host();
        self.provider.increase_failure_rate = 0.0;
        self.provider.partial_increase_rate = 0.0;
        self.provider.decrease_failure_rate = 0.0;
        self.provider.creation_timeout_rate = 0.0;
        self.provider.increase_error_after_create_rate = 0.0;
        self.scaler.max_instances = 1;
        self.scaler.max_use_count = 0;
        self.scaler.preexisting = Preexisting::Adopt;
        self.scaler.keep_instance_with_acquisitions = true;
        self.ready_up_failure_rate = 0.0;
        // The host is there from the start, adopted; nothing else ever joins or leaves.
        self.foreign_at_start = 1;
        self.foreign_mid_run_at = None;
        self.external_removal_every = Duration::MAX;
        self.unhealthy_every = None;
        // Jobs come minutes apart, often further apart than `idle_time`: the shell runner
        // of the issue ran one job, then waited for ever for the next.
        for sp in &mut self.policies {
            sp.policy.idle_time = secs(rng, 30, 300);
        }
        self.arrival_rate = 1.0 / secs(rng, 300, 1200).as_secs_f64();
        self.burst_max = self.scaler.capacity_per_instance;
    }

    /// A fixed pool that lends the lowest free id: hosts given back after short idle times
    /// come back under the same id while requests wait for them.
    fn fixed_pool(&mut self, rng: &mut ChaCha8Rng) {
        let size = self.scaler.max_instances + rng.random_range(0..=2);
        self.provider.capabilities = flotilla_fleet::Capabilities {
            fixed_pool: true,
            ..flotilla_fleet::Capabilities::remote()
        };
        self.provider.pool = Some(size);
        // Lending is quick and giving back immediate (the static provider's `decrease`
        // returns the host to the pool at once); a host is never "timed out" or lost.
        self.provider.create_latency = (Duration::ZERO, secs(rng, 0, 3));
        self.provider.delete_latency = (Duration::ZERO, Duration::ZERO);
        // The pool lists from its own record of what it lent, so its listings are the
        // truth: never stale, partial or empty (they can still fail). A lagging one would
        // show a host given back a moment ago as lent again; a partial one, a host being
        // given back as gone.
        self.lag_rate = 0.0;
        self.flap_rate = 0.0;
        self.empty_listing_at = Duration::MAX;
        self.provider.creation_timeout_rate = 0.0;
        self.scaler.max_use_count = 0;
        // GitLab's request timeout: nothing here removes a host before a listing shows it,
        // so a correct scaler never waits for it.
        self.scaler.request_timeout = Duration::from_secs(20 * 60);
        self.foreign_at_start = 0;
        self.foreign_mid_run_at = None;
        self.external_removal_every = Duration::MAX;
        for sp in &mut self.policies {
            sp.policy.idle_time = secs(rng, 20, 120);
        }
        self.liveness_grace = self
            .liveness_grace
            .saturating_sub(Duration::from_secs(120))
            .max(Duration::from_secs(180));
    }

    /// Listing outages, refused deletions and hanging heartbeats on top of a cloud.
    fn outages(&mut self, rng: &mut ChaCha8Rng) {
        // Outages of 10 to 45 minutes, over before the last arrivals so the run ends with
        // listings that work.
        self.duration = self.duration.max(Duration::from_secs(3000));
        let run = self.duration.saturating_sub(Duration::from_secs(300));
        let mut at = secs(rng, 120, 600);
        for _ in 0..rng.random_range(1..=2) {
            let end = (at + secs(rng, 600, 2700)).min(run);
            if end <= at + Duration::from_secs(300) {
                break;
            }
            self.listing_outages.push((at, end));
            at = end + secs(rng, 300, 900);
        }
        // Refusals shorter than the shutdown's deletion retries (100 × 10 s), so a correct
        // scaler still leaves nothing behind.
        self.provider.deletion_refusal_rate = rng.random_range(0.05..0.2);
        self.provider.deletion_refusal = (secs(rng, 60, 300), secs(rng, 300, 900));
        self.scaler.acquire_heartbeat = true;
        self.provider.heartbeat_failure_rate = rng.random_range(0.005..0.03);
        self.provider.heartbeat_hang_rate = rng.random_range(0.02..0.1);
        self.provider.heartbeat_hang = secs(rng, 1800, 3600);
        if rng.random_bool(0.5) {
            self.scaler.max_instances = 0;
        }
    }

    /// The cloud profile's parameters (the first simulation's, unchanged for its seeds).
    fn cloud(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5eed);
        let cap = rng.random_range(1..=4usize);
        let max_instances = rng.random_range(3..=16usize);
        let max_use_count = if rng.random_bool(0.35) {
            rng.random_range(1..=4u32)
        } else {
            0
        };
        let heartbeat = rng.random_bool(0.3);
        let reserve_first = rng.random_bool(0.4);
        let preexisting = if rng.random_bool(0.5) {
            Preexisting::Ignore
        } else {
            Preexisting::Adopt
        };
        let create = (secs(&mut rng, 1, 20), secs(&mut rng, 20, 90));
        let delete = (Duration::from_secs(1), secs(&mut rng, 1, 90));
        let ready = (Duration::ZERO, secs(&mut rng, 0, 15));
        let job = (Duration::from_secs(5), secs(&mut rng, 60, 600));

        // Size the workload from the latencies: the instance-seconds one job costs (its
        // share of an instance while it runs, plus creation, ready-up and deletion spread
        // over the jobs an instance runs), against the instance-seconds the limit allows.
        let mean = |(lo, hi): (Duration, Duration)| (lo.as_secs_f64() + hi.as_secs_f64()) / 2.0;
        let per_instance = match max_use_count {
            0 => cap as f64,
            m => (m as usize).min(cap) as f64,
        };
        let churn = mean(create) + mean(ready) + mean(delete) + 10.0;
        let churn_share = match max_use_count {
            0 => churn / 20.0,
            m => churn / m as f64,
        };
        let cost = mean(job) / per_instance + churn_share;
        // Instances that run few jobs spend much of their life being created and deleted;
        // their fleets queue sooner.
        let load = if max_use_count > 0 {
            rng.random_range(0.1..0.25)
        } else {
            rng.random_range(0.1..0.35)
        };
        let arrival_rate = load * max_instances as f64 / cost;
        // A burst never asks for more than half of the slots the limit allows at once.
        let concurrent = (max_instances as f64 * per_instance) as usize;
        let burst_max = (cap * 2).min(concurrent / 2).max(1);

        let mut policies = vec![SimPolicy {
            policy: policy(&mut rng, reserve_first),
            periods: vec![],
            timezone: "UTC".into(),
        }];
        // The run starts between 00:15 and 00:59 UTC on a day Berlin changes its clocks
        // (01:00 UTC) and crosses the change. 02:00-03:59 in Berlin begins at the change in
        // spring (the clocks jump from 02:00 to 03:00) and the hour 02:00-02:59 comes twice
        // in autumn, so the last matching policy switches at the change either way; the
        // UTC policy adds a switch before it.
        policies.push(SimPolicy {
            policy: policy(&mut rng, reserve_first),
            periods: vec!["* 2-3 * * *".into()],
            timezone: "Europe/Berlin".into(),
        });
        let autumn_first = rng.random_range(15..45);
        policies.push(SimPolicy {
            policy: policy(&mut rng, reserve_first),
            periods: vec![format!("{autumn_first}-59 0 * * *")],
            timezone: "UTC".into(),
        });
        let spring = rng.random_bool(0.5);
        let start_utc = Utc
            .with_ymd_and_hms(
                2026,
                if spring { 3 } else { 10 },
                if spring { 29 } else { 25 },
                0,
                rng.random_range(5..40),
                0,
            )
            .single()
            .unwrap_or_default();

        let duration = secs(&mut rng, 1500, 3600);
        let backoff_max = Duration::from_secs(30);
        let restart_gap = secs(&mut rng, 2, 30);
        let restarts: Vec<Duration> = (0..rng.random_range(1..=2))
            .map(|_| {
                secs(
                    &mut rng,
                    120,
                    duration.as_secs().saturating_sub(60).max(121),
                )
            })
            .collect();
        let mut restarts = restarts;
        restarts.sort();
        // The longest wait the provider can explain without the fleet being saturated: an
        // instance created, failing (timeout or ready-up) and created again, a deletion to
        // make room, a creation backoff, the grace of a failed increase's requests, a
        // request never served, a restart, and a minute of listings and decisions.
        let doubt_grace = Duration::from_secs(60);
        // An instance removed from outside before any listing showed it leaves a request
        // that is never served; it counts as capacity until `request_timeout`.
        let request_timeout = Duration::from_secs(120);
        let liveness_grace = (create.1 + ready.1) * 2
            + delete.1
            + backoff_max
            + doubt_grace
            + request_timeout
            + restart_gap
            + Duration::from_secs(60);
        let idle_grace = (create.1 + ready.1) * 2 + backoff_max + doubt_grace + restart_gap;
        SimParams {
            seed,
            profile: Profile::Cloud,
            duration,
            arrival_rate,
            burst_probability: rng.random_range(0.0..0.08),
            burst_max,
            job,
            cancel_fraction: rng.random_range(0.0..0.1),
            drop_fraction: rng.random_range(0.01..0.05),
            unused_reservation_fraction: rng.random_range(0.01..0.05),
            reserve_first,
            scaler: ScalerConfig {
                capacity_per_instance: cap,
                max_instances,
                max_use_count,
                instance_acquire_timeout: Duration::from_secs(15 * 60),
                acquire_heartbeat: heartbeat,
                delete_instances_on_shutdown: true,
                shutdown_deletion_interval: Duration::from_secs(10),
                shutdown_deletion_retries: 100,
                reservation_lease: secs(&mut rng, 60, 300),
                backoff_base: Duration::from_secs(1),
                backoff_max,
                request_timeout,
                preexisting,
                keep_instance_with_acquisitions: rng.random_bool(0.3),
                scale_throttle: ScaleThrottle {
                    limit: if rng.random_bool(0.5) { 1.0 } else { 100.0 },
                    burst: rng.random_range(1..=max_instances),
                },
                ..ScalerConfig::default()
            },
            policies,
            start_utc,
            provider: FakeConfig {
                id: format!("sim/{seed}"),
                max_size: 1000,
                create_latency: create,
                delete_latency: delete,
                call_latency: Duration::from_millis(rng.random_range(0..=300)),
                update_failure_rate: rng.random_range(0.01..0.1),
                increase_failure_rate: rng.random_range(0.01..0.08),
                partial_increase_rate: rng.random_range(0.01..0.15),
                decrease_failure_rate: rng.random_range(0.01..0.1),
                creation_timeout_rate: rng.random_range(0.005..0.05),
                heartbeat_failure_rate: if heartbeat {
                    rng.random_range(0.005..0.03)
                } else {
                    0.0
                },
                increase_error_after_create_rate: rng.random_range(0.01..0.08),
                ..FakeConfig::default()
            },
            ready_up_latency: ready,
            ready_up_failure_rate: rng.random_range(0.01..0.06),
            lag_rate: rng.random_range(0.01..0.08),
            flap_rate: rng.random_range(0.01..0.06),
            empty_listing_at: secs(&mut rng, 60, duration.as_secs()),
            external_removal_every: secs(&mut rng, 600, 1800),
            unhealthy_every: heartbeat.then(|| secs(&mut rng, 600, 1800)),
            foreign_at_start: rng.random_range(1..=2),
            foreign_mid_run_at: Some(secs(&mut rng, 60, duration.as_secs())),
            listing_outages: Vec::new(),
            restarts,
            restart_gap,
            teardown: (Duration::from_secs(1), secs(&mut rng, 1, 30)),
            liveness_grace,
            min_served: 0.99,
            idle_grace,
        }
    }
}

impl SimParams {
    /// Names of the fixed bugs [`SimParams::put_back`] knows, with the profile that shows
    /// each best.
    pub const BUGS: [(&'static str, Profile); 7] = [
        ("timeouts", Profile::Cloud),
        ("missing", Profile::Cloud),
        ("permanent", Profile::SingleHost),
        ("reused", Profile::FixedPool),
        ("requests", Profile::Outages),
        ("heartbeat", Profile::Outages),
        ("idle", Profile::Cloud),
    ];

    /// Puts the fixed bug `name` back (see [`Self::BUGS`] and `flotilla_scaler::Legacy`):
    /// `timeouts` and `missing` are issue 12's bugs 1 and 3; `permanent`, `reused`,
    /// `requests`, `heartbeat` and `idle` are issue 27's items 1, 2, 3, 6 and 8. Returns
    /// whether the name is known.
    pub fn put_back(&mut self, name: &str) -> bool {
        let legacy = &mut self.scaler.legacy;
        match name {
            "timeouts" => {
                self.provider.creation_timeout_rate = 0.25;
                legacy.timeouts_never_deleted = true;
            }
            "missing" => legacy.forget_missing_at_once = true,
            "permanent" => legacy.removes_permanent_instances = true,
            "reused" => legacy.reused_id_is_the_old_instance = true,
            "requests" => legacy.requests_age_without_listings = true,
            "heartbeat" => legacy.unbounded_acquire_heartbeat = true,
            "idle" => legacy.idle_counts_used_up_slots = true,
            _ => return false,
        }
        true
    }

    /// How far back the demand explains the instances held (invariant 10): an instance made
    /// for a job may be created, readied, run it, sit idle for the longest `idle_time` of the
    /// policies and wait for a slow tick (`update_interval`) before its removal is decided;
    /// a failed creation may be made again after the longest backoff.
    pub fn overprovision_window(&self) -> Duration {
        let idle_time = self
            .policies
            .iter()
            .map(|sp| sp.policy.idle_time)
            .max()
            .unwrap_or_default();
        idle_time
            + self.provider.create_latency.1
            + self.ready_up_latency.1
            + self.scaler.update_interval
            + self.scaler.backoff_max
            + self.restart_gap
            + Duration::from_secs(60)
    }

    /// The instance-seconds a correct scaler may hold beyond what the recent demand needed:
    /// a tenth of what the workload needed at best, and at least an hour of one instance
    /// (listing glitches that hide instances, foreign instances taken for ours, instances a
    /// failed `increase` made that no request waits for).
    pub fn overprovision_allowance(&self, best_instance_secs: f64) -> f64 {
        (0.1 * best_instance_secs).max(3600.0)
    }
}

fn policy(rng: &mut ChaCha8Rng, reserve_first: bool) -> Policy {
    let scale_factor = if rng.random_bool(0.3) {
        rng.random_range(0.1..1.5)
    } else {
        0.0
    };
    Policy {
        idle_count: rng.random_range(0..=4usize),
        idle_time: Duration::from_secs(rng.random_range(30..=900)),
        scale_factor,
        scale_factor_limit: rng.random_range(0..=6),
        preemptive_mode: reserve_first.then_some(false),
    }
}
