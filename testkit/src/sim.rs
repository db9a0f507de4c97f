//! Deterministic simulation of the scaler: the real [`Scaler`] and its driver against a
//! [`FakeInstanceGroup`], in virtual time, with a seeded workload and seeded faults.
//!
//! [`run`] builds a current-thread runtime with paused time, so everything (provider
//! latencies, job durations, policy periods) happens in virtual time and a seed replays
//! exactly. While it runs it checks the invariants below and returns every violation:
//!
//! 1. never more instances in the group than `max_instances`;
//! 2. no slot held by two running jobs (checked by the jobs themselves and by the ledger);
//! 3. no job handed a slot on an instance that is not running, or not through ready-up;
//! 4. no instance asked to be deleted while a job runs on it, unless the instance died;
//! 5. every job gets a slot when the fleet could grow (an acquire timeout with room below
//!    `max_instances` is a violation);
//! 6. no job waits while an idle slot exists;
//! 7. after shutdown with deletion, no instance remains.

use crate::fake_group::{FakeConfig, FakeInstanceGroup};
use async_trait::async_trait;
use flotilla_fleet::{
    ConnectInfo, FleetError, InstanceGroup, InstanceId, InstanceStatus, ProviderInfo, Settings,
    State,
};
use flotilla_scaler::{
    Clock, Policy, ScaleThrottle, Scaler, ScalerBuilder, ScalerConfig, ScalerError, Schedule,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One simulation's parameters.
#[derive(Debug, Clone)]
pub struct SimParams {
    /// The seed everything derives from.
    pub seed: u64,
    /// Simulated time during which jobs arrive.
    pub duration: Duration,
    /// Mean jobs per second.
    pub arrival_rate: f64,
    /// Probability that an arrival is a burst.
    pub burst_probability: f64,
    /// Jobs in a burst (uniform 1..=max).
    pub burst_max: usize,
    /// Short jobs' duration range.
    pub short_job: (Duration, Duration),
    /// Long jobs' duration range.
    pub long_job: (Duration, Duration),
    /// Fraction of long jobs.
    pub long_fraction: f64,
    /// Fraction of jobs cancelled part-way.
    pub cancel_fraction: f64,
    /// Mean time between instances removed from outside (`None`: never).
    pub external_removal_every: Option<Duration>,
    /// Mean time between instances turning unhealthy (`None`: never).
    pub unhealthy_every: Option<Duration>,
    /// Jobs reserve before acquiring (preemptive job sources).
    pub reserve_first: bool,
    /// The scaler's limits.
    pub scaler: ScalerConfig,
    /// The policy.
    pub policy: Policy,
    /// The provider's behaviour.
    pub provider: FakeConfig,
    /// How often the invariant checker runs.
    pub check_every: Duration,
}

impl SimParams {
    /// Random but plausible parameters for `seed`: a few simulated hours, small fleets,
    /// moderate faults.
    pub fn random(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5eed);
        let cap = rng.random_range(1..=4usize);
        let max_instances = rng.random_range(3..=30usize);
        let idle_count = rng.random_range(0..=6usize);
        let scale_factor = if rng.random_bool(0.3) {
            rng.random_range(0.0..2.0)
        } else {
            0.0
        };
        let faults = rng.random_bool(0.7);
        let f = |rng: &mut ChaCha8Rng, max: f64| {
            if faults {
                rng.random_range(0.0..max)
            } else {
                0.0
            }
        };
        let heartbeat = rng.random_bool(0.3);
        let max_use_count = if rng.random_bool(0.3) {
            rng.random_range(1..=5u32)
        } else {
            0
        };
        // Keep demand within what the fleet can serve, so acquire timeouts mean a bug.
        let capacity = (max_instances * cap) as f64;
        let mean_job = 0.8 * 90.0 + 0.2 * 900.0;
        let arrival_rate = (capacity * rng.random_range(0.05..0.5)) / mean_job;
        SimParams {
            seed,
            duration: Duration::from_secs(rng.random_range(1200..=2 * 3600)),
            arrival_rate,
            burst_probability: rng.random_range(0.0..0.1),
            burst_max: (cap * 2).max(2),
            short_job: (Duration::from_secs(5), Duration::from_secs(180)),
            long_job: (Duration::from_secs(300), Duration::from_secs(1500)),
            long_fraction: 0.2,
            cancel_fraction: rng.random_range(0.0..0.1),
            external_removal_every: faults
                .then(|| Duration::from_secs(rng.random_range(600..3600))),
            unhealthy_every: (faults && heartbeat)
                .then(|| Duration::from_secs(rng.random_range(600..3600))),
            reserve_first: rng.random_bool(0.5),
            scaler: ScalerConfig {
                capacity_per_instance: cap,
                max_instances,
                max_use_count,
                instance_acquire_timeout: Duration::from_secs(15 * 60),
                acquire_heartbeat: heartbeat,
                delete_instances_on_shutdown: true,
                shutdown_deletion_retries: 100,
                scale_throttle: ScaleThrottle {
                    limit: if rng.random_bool(0.5) { 1.0 } else { 100.0 },
                    burst: rng.random_range(1..=max_instances),
                },
                ..ScalerConfig::default()
            },
            policy: Policy {
                idle_count,
                idle_time: Duration::from_secs(rng.random_range(60..=1200)),
                scale_factor,
                scale_factor_limit: rng.random_range(0..=8),
                preemptive_mode: None,
            },
            provider: FakeConfig {
                id: format!("sim/{seed}"),
                max_size: 1000,
                create_latency: (
                    Duration::from_secs(rng.random_range(1..=30)),
                    Duration::from_secs(rng.random_range(30..=240)),
                ),
                delete_latency: (
                    Duration::from_secs(1),
                    Duration::from_secs(rng.random_range(1..=600)),
                ),
                call_latency: Duration::from_millis(rng.random_range(0..=500)),
                update_failure_rate: f(&mut rng, 0.2),
                increase_failure_rate: f(&mut rng, 0.2),
                partial_increase_rate: f(&mut rng, 0.3),
                decrease_failure_rate: f(&mut rng, 0.2),
                creation_timeout_rate: f(&mut rng, 0.1),
                heartbeat_failure_rate: if heartbeat { f(&mut rng, 0.05) } else { 0.0 },
            },
            check_every: Duration::from_secs(1),
        }
    }
}

/// What a simulation did and what went wrong.
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    /// Jobs that arrived.
    pub jobs: u64,
    /// Jobs that ran to the end (or to their cancellation).
    pub completed: u64,
    /// Jobs whose instance died under them.
    pub lost: u64,
    /// Jobs that timed out waiting with the fleet at `max_instances` (allowed).
    pub timed_out_at_limit: u64,
    /// Most instances seen at once.
    pub peak_instances: usize,
    /// Provider calls.
    pub increases: u64,
    /// Provider calls.
    pub decreases: u64,
    /// A digest of the run's observable history; equal for equal seeds.
    pub digest: u64,
    /// Invariant violations, with the virtual time they were seen at.
    pub violations: Vec<String>,
}

/// Jobs currently running, by slot: (instance, slot) -> (job, its lost token).
type Registry = Arc<Mutex<HashMap<(InstanceId, usize), (u64, CancellationToken)>>>;

struct Shared {
    fake: Arc<FakeInstanceGroup>,
    registry: Registry,
    violations: Mutex<Vec<String>>,
    report: Mutex<SimReport>,
    history: Mutex<DefaultHasher>,
    start: tokio::time::Instant,
    max_instances: usize,
    /// When the scaler last held `max_instances` (checked every `check_every`).
    last_at_limit: Mutex<tokio::time::Instant>,
}

impl Shared {
    fn violation(&self, what: String) {
        let at = self.start.elapsed().as_secs_f64();
        let mut v = self.violations.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() < 20 {
            v.push(format!("t={at:.1}s: {what}"));
        }
    }

    fn record(&self, event: impl Hash) {
        let at = self.start.elapsed().as_millis();
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        at.hash(&mut *h);
        event.hash(&mut *h);
    }

    fn report(&self) -> std::sync::MutexGuard<'_, SimReport> {
        self.report.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fake group, watched: deletions of instances with running jobs are violations.
struct Watched {
    shared: Arc<Shared>,
}

#[async_trait]
impl InstanceGroup for Watched {
    async fn init(&self, s: &Settings) -> Result<ProviderInfo, FleetError> {
        self.shared.fake.init(s).await
    }
    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        self.shared.fake.update().await
    }
    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        self.shared.report().increases += 1;
        let r = self.shared.fake.increase(n).await;
        self.shared
            .record(("increase", n, r.as_ref().ok().copied()));
        r
    }
    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        self.shared.report().decreases += 1;
        {
            let reg = self
                .shared
                .registry
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for ((inst, slot), (job, lost)) in reg.iter() {
                // A job whose instance the scaler declared dead (unhealthy, deleting) has
                // been told so before any deletion; anything else is a live job.
                if ids.contains(inst) && !lost.is_cancelled() {
                    {
                        self.shared.violation(format!(
                            "instance {inst} asked to be deleted while job {job} runs in slot {slot}"
                        ));
                    }
                }
            }
        }
        let r = self.shared.fake.decrease(ids).await;
        self.shared.record(("decrease", ids.to_vec()));
        r
    }
    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        self.shared.fake.connect_info(id).await
    }
    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        self.shared.fake.heartbeat(id).await
    }
    async fn shutdown(&self) -> Result<(), FleetError> {
        self.shared.fake.shutdown().await
    }
}

fn draw(rng: &mut ChaCha8Rng, (lo, hi): (Duration, Duration)) -> Duration {
    if hi <= lo {
        lo
    } else {
        lo + Duration::from_millis(rng.random_range(0..=(hi - lo).as_millis() as u64))
    }
}

fn exp(rng: &mut ChaCha8Rng, mean: f64) -> Duration {
    let u: f64 = rng.random_range(f64::EPSILON..1.0);
    Duration::from_secs_f64(-mean * u.ln())
}

struct JobSpec {
    id: u64,
    duration: Duration,
    cancel_after: Option<Duration>,
}

async fn job(scaler: Scaler, shared: Arc<Shared>, spec: JobSpec, reserve_first: bool) {
    let key = format!("job-{}", spec.id);
    if reserve_first {
        // A preemptive job source: ask only when a slot is promised.
        loop {
            match scaler.reserve(&key) {
                Ok(()) => break,
                Err(ScalerError::NoCapacity { .. }) => {
                    tokio::time::sleep(Duration::from_secs(3)).await
                }
                Err(ScalerError::ShuttingDown) => return,
                Err(e) => {
                    shared.violation(format!("reserve {key}: unexpected error {e}"));
                    return;
                }
            }
        }
    }
    let acq = match scaler.acquire(&key, None).await {
        Ok(a) => a,
        Err(ScalerError::AcquireTimeout(_)) => {
            // A wait may time out while the fleet is at max_instances (dying instances
            // count against it). It is a bug only if the fleet had room for a long while
            // and still did not serve the job.
            let snap = scaler.snapshot();
            let held = snap.ledger.instances().count() + snap.ledger.requested_in_flight();
            let since_limit = shared
                .last_at_limit
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed();
            if since_limit >= Duration::from_secs(600) {
                shared.violation(format!(
                    "{key} timed out waiting for a slot with {held} < max {} instances; \
                     provider: {:?}; last decision: {}",
                    shared.max_instances,
                    shared.fake.snapshot(),
                    snap.last_decision
                        .map(|d| d.to_string())
                        .unwrap_or_default()
                ));
            } else {
                shared.report().timed_out_at_limit += 1;
            }
            scaler.release(&key);
            return;
        }
        Err(ScalerError::ShuttingDown) => return,
        Err(e) => {
            shared.violation(format!("acquire {key}: unexpected error {e}"));
            return;
        }
    };
    let inst = acq.instance_id().to_string();
    let slot = acq.slot();
    match shared.fake.state_of(&inst) {
        Some(State::Running) => {}
        // Deleted from outside after the slot was handed out: the scaler could not know.
        None if shared.fake.was_removed_from_outside(&inst) => {}
        other => shared.violation(format!(
            "{key} got slot {slot} on {inst} which is {other:?}, not running"
        )),
    }
    if let Some(other) = shared
        .registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((inst.clone(), slot), (spec.id, acq.lost_token()))
    {
        let other = other.0;
        shared.violation(format!(
            "slot {slot} of {inst} held by job {other} and {key}"
        ));
    }
    shared.record(("run", spec.id, inst.clone(), slot));
    let run_for = spec.cancel_after.unwrap_or(spec.duration);
    let lost = acq.lost_token();
    tokio::select! {
        biased;
        _ = lost.cancelled() => {
            shared.report().lost += 1;
        }
        _ = tokio::time::sleep(run_for) => {
            shared.report().completed += 1;
        }
    }
    shared
        .registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(inst, slot));
    scaler.release(&key);
}

/// Runs one simulation to the end (all jobs done, shutdown with deletion) and reports.
pub fn run(params: &SimParams) -> SimReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            return SimReport {
                violations: vec![format!("cannot build runtime: {e}")],
                ..Default::default()
            };
        }
    };
    rt.block_on(simulate(params.clone()))
}

async fn simulate(p: SimParams) -> SimReport {
    use chrono::TimeZone;
    let fake = Arc::new(FakeInstanceGroup::new(p.provider.clone(), p.seed));
    let shared = Arc::new(Shared {
        fake: fake.clone(),
        registry: Arc::new(Mutex::new(HashMap::new())),
        violations: Mutex::new(Vec::new()),
        report: Mutex::new(SimReport::default()),
        history: Mutex::new(DefaultHasher::new()),
        start: tokio::time::Instant::now(),
        max_instances: p.scaler.max_instances,
        last_at_limit: Mutex::new(tokio::time::Instant::now()),
    });
    let group = Arc::new(Watched {
        shared: shared.clone(),
    });
    let start_utc = chrono::Utc
        .with_ymd_and_hms(2026, 11, 23, 0, 0, 0)
        .single()
        .unwrap_or_else(chrono::Utc::now);
    let scaler = match ScalerBuilder::new(group, p.scaler.clone())
        .schedule(Schedule::single(p.policy.clone()))
        .clock(Clock::anchored(start_utc))
        .start()
        .await
    {
        Ok(s) => s,
        Err(e) => {
            shared.violation(format!("scaler did not start: {e}"));
            return finish(&shared);
        }
    };

    // Invariant checker.
    let checker = {
        let scaler = scaler.clone();
        let shared = shared.clone();
        let every = p.check_every;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let n = shared.fake.len();
                {
                    let mut r = shared.report();
                    r.peak_instances = r.peak_instances.max(n);
                }
                if shared.max_instances > 0 && n > shared.max_instances {
                    shared.violation(format!(
                        "{n} instances exceed max_instances {}",
                        shared.max_instances
                    ));
                }
                let held = scaler.fleet_size();
                if shared.max_instances > 0 && held >= shared.max_instances {
                    *shared
                        .last_at_limit
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
                }
                if let Err(e) = scaler.check_invariants() {
                    shared.violation(format!("ledger: {e}"));
                }
            }
        })
    };

    // Faults from outside.
    let chaos = {
        let fake = fake.clone();
        let shared = shared.clone();
        let removal = p.external_removal_every;
        let unhealthy = p.unhealthy_every;
        let seed = p.seed;
        tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc4a0_5000);
            if removal.is_none() && unhealthy.is_none() {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                let ids = fake.ids();
                if ids.is_empty() {
                    continue;
                }
                if let Some(every) = removal
                    && rng.random_bool((60.0 / every.as_secs_f64()).min(1.0))
                {
                    let id = &ids[rng.random_range(0..ids.len())];
                    fake.remove_from_outside(id);
                    shared.record(("removed", id.clone()));
                }
                if let Some(every) = unhealthy
                    && rng.random_bool((60.0 / every.as_secs_f64()).min(1.0))
                {
                    let id = &ids[rng.random_range(0..ids.len())];
                    fake.set_unhealthy(id, true);
                    shared.record(("unhealthy", id.clone()));
                }
            }
        })
    };

    // Workload.
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed ^ 0x0b5e_55ed);
    let mut jobs = Vec::new();
    let mut id = 0u64;
    let end = tokio::time::Instant::now() + p.duration;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(exp(&mut rng, 1.0 / p.arrival_rate.max(1e-9))).await;
        let n = if rng.random_bool(p.burst_probability.clamp(0.0, 1.0)) {
            rng.random_range(1..=p.burst_max.max(1))
        } else {
            1
        };
        for _ in 0..n {
            id += 1;
            let long = rng.random_bool(p.long_fraction.clamp(0.0, 1.0));
            let duration = draw(&mut rng, if long { p.long_job } else { p.short_job });
            let cancel_after = rng
                .random_bool(p.cancel_fraction.clamp(0.0, 1.0))
                .then(|| duration.mul_f64(rng.random_range(0.0..1.0)));
            let spec = JobSpec {
                id,
                duration,
                cancel_after,
            };
            jobs.push(tokio::spawn(job(
                scaler.clone(),
                shared.clone(),
                spec,
                p.reserve_first,
            )));
        }
        // Keep the handle list short on long runs.
        if jobs.len() > 4096 {
            jobs.retain(|j| !j.is_finished());
        }
    }
    shared.report().jobs = id;
    for j in jobs {
        let _ = j.await;
    }
    chaos.abort();
    // Shutdown with deletion: nothing may remain.
    let report = scaler.shutdown(Duration::from_secs(60)).await;
    checker.abort();
    if report.jobs_still_running > 0 {
        shared.violation(format!(
            "{} jobs still held after every job ended",
            report.jobs_still_running
        ));
    }
    if report.instances_remaining > 0 || !fake.is_empty() {
        shared.violation(format!(
            "after shutdown with deletion {} instances remain: {:?}",
            fake.len(),
            fake.snapshot()
        ));
    }
    finish(&shared)
}

fn finish(shared: &Shared) -> SimReport {
    let mut r = shared.report().clone();
    r.violations = shared
        .violations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    r.digest = shared
        .history
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .finish();
    r
}
