//! One simulation's parameters, drawn from its seed.

use crate::fake_group::FakeConfig;
use chrono::{DateTime, TimeZone, Utc};
use flotilla_scaler::{Policy, Preexisting, ScaleThrottle, ScalerConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

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
    /// When a foreign instance appears mid-run.
    pub foreign_mid_run_at: Duration,
    /// When the scaler crashes and restarts from its store.
    pub restarts: Vec<Duration>,
    /// How long a restart takes.
    pub restart_gap: Duration,
    /// How long a job whose instance was lost takes to tear down.
    pub teardown: (Duration, Duration),
    /// Longest wait the provider's latencies, faults and restarts explain.
    pub liveness_grace: Duration,
    /// Share of jobs that must be served within `instance_acquire_timeout`.
    pub min_served: f64,
}

fn secs(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_secs(rng.random_range(lo..=hi))
}

impl SimParams {
    /// Random but plausible parameters for `seed`: tens of simulated minutes, small
    /// fleets, every kind of fault.
    pub fn random(seed: u64) -> Self {
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
        SimParams {
            seed,
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
            },
            ready_up_latency: ready,
            ready_up_failure_rate: rng.random_range(0.01..0.06),
            lag_rate: rng.random_range(0.01..0.08),
            flap_rate: rng.random_range(0.01..0.06),
            empty_listing_at: secs(&mut rng, 60, duration.as_secs()),
            external_removal_every: secs(&mut rng, 600, 1800),
            unhealthy_every: heartbeat.then(|| secs(&mut rng, 600, 1800)),
            foreign_at_start: rng.random_range(1..=2),
            foreign_mid_run_at: secs(&mut rng, 60, duration.as_secs()),
            restarts,
            restart_gap,
            teardown: (Duration::from_secs(1), secs(&mut rng, 1, 30)),
            liveness_grace,
            min_served: 0.99,
        }
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
