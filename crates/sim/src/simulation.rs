//! A fleet under a workload, in virtual time: the real scaler (its driver, policies and
//! limits) against the [`FakeInstanceGroup`] with the given latencies, fed by a model of
//! flotilla's GitLab job source.
//!
//! The job source is modelled as `flotilla run` behaves (`flotilla-gitlab` `source.rs`):
//! `request_concurrency` workers each take a `limit` and a `concurrent` permit, reserve a
//! slot (in preemptive mode only an idle ready one), and then ask GitLab for a job: a job
//! in the queue comes at once, otherwise the request is a long poll that a new job answers
//! (or that ends after [`LONG_POLL`], giving the reservation back). A worker that could not
//! reserve waits `check_interval`, or less when one of its own jobs frees a slot. A job
//! then acquires its slot (waiting up to `instance_acquire_timeout`), runs for its
//! duration, and releases it. A job's *wait* is from its arrival in GitLab's queue to the
//! moment it has its slot: what GitLab shows as its queued time, plus the slot wait. A job
//! still in GitLab's queue [`Spec::pending_timeout`] after it arrived is dropped there, as
//! GitLab fails it ([`GITLAB_PENDING_TIMEOUT`]): it is never served, and its slot time and
//! instance-hours are not spent, so an overloaded fleet's waits and cost are what they would
//! be, not those of a queue that grows for ever.
//!
//! Everything runs on one thread with tokio's clock paused, so a week takes seconds and a
//! seed replays exactly.

use crate::fake_group::{FakeConfig, FakeInstanceGroup};
use crate::workload::JobSpec;
use chrono::{DateTime, Utc};
use flotilla_scaler::{Clock, ScalerBuilder, ScalerConfig, ScalerError, Schedule};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

/// How long GitLab (Workhorse) holds a job request open when no job comes.
pub const LONG_POLL: Duration = Duration::from_secs(50);

/// How long a job may stay pending in GitLab's queue: GitLab then fails it
/// (`Ci::StuckBuilds::DropPendingService`, `BUILD_PENDING_OUTDATED_TIMEOUT = 1.day`, failure
/// reason `stuck_or_timeout_failure`). GitLab's cron worker looks hourly, so a job may stay up
/// to an hour longer; the simulation drops it at the day.
pub const GITLAB_PENDING_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The provider's latencies.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderProfile {
    /// From `increase` to running, drawn uniformly from this range per instance.
    pub create: (Duration, Duration),
    /// From `decrease` to gone, drawn uniformly from this range per instance.
    pub delete: (Duration, Duration),
    /// Every provider call's latency.
    pub call: Duration,
}

impl ProviderProfile {
    /// A named profile: `instant` (no latency), `docker` (containers: ~2 s),
    /// `cloud-vm` (a Linux VM in a public cloud: 40-90 s to running, 20-60 s to delete),
    /// `windows-vm` (4-8 min, 1-3 min).
    pub fn named(name: &str) -> Option<ProviderProfile> {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        Some(match name {
            "instant" => ProviderProfile {
                create: (Duration::ZERO, Duration::ZERO),
                delete: (Duration::ZERO, Duration::ZERO),
                call: Duration::ZERO,
            },
            "docker" => ProviderProfile {
                create: (s(1), s(3)),
                delete: (ms(500), s(2)),
                call: ms(20),
            },
            "cloud-vm" => ProviderProfile {
                create: (s(40), s(90)),
                delete: (s(20), s(60)),
                call: ms(300),
            },
            "windows-vm" => ProviderProfile {
                create: (s(240), s(480)),
                delete: (s(60), s(180)),
                call: ms(300),
            },
            _ => return None,
        })
    }

    /// The names [`ProviderProfile::named`] knows.
    pub const NAMES: [&'static str; 4] = ["instant", "docker", "cloud-vm", "windows-vm"];
}

/// The job source's settings (from `config.toml`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerModel {
    /// `request_concurrency` (at least 1).
    pub request_concurrency: usize,
    /// `check_interval`.
    pub check_interval: Duration,
    /// `limit` (0: none).
    pub limit: usize,
    /// `concurrent` (0: none).
    pub concurrent: usize,
}

/// Everything one simulation needs.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The scaler's limits and timings.
    pub scaler: ScalerConfig,
    /// Its policies.
    pub schedule: Schedule,
    /// The provider.
    pub provider: ProviderProfile,
    /// The job source.
    pub runner: RunnerModel,
    /// The calendar time the simulation starts at (policies' periods follow it).
    pub start: DateTime<Utc>,
    /// How often the fleet is sampled for the plots and the idle slot-hours.
    pub sample_every: Duration,
    /// The provider's seed.
    pub seed: u64,
    /// How long a job stays in GitLab's queue before GitLab fails it
    /// ([`GITLAB_PENDING_TIMEOUT`]); zero: never.
    pub pending_timeout: Duration,
}

/// The fleet at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start.
    pub t: f64,
    /// Instances the provider holds (what is paid for).
    pub instances: u32,
    /// Slots running a job.
    pub busy: u32,
    /// Idle ready slots.
    pub idle: u32,
    /// Jobs waiting: in GitLab's queue or for their slot.
    pub waiting: u32,
}

/// What a simulation measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Jobs in the workload.
    pub jobs: u64,
    /// Jobs that got a slot.
    pub served: u64,
    /// Jobs whose slot did not come within `instance_acquire_timeout`.
    pub timed_out: u64,
    /// Jobs GitLab failed while they were still in its queue, after
    /// [`Spec::pending_timeout`]: never taken by the runner.
    pub dropped_pending: u64,
    /// Each served job's wait, in seconds (arrival to slot), in arrival order.
    pub waits: Vec<f32>,
    /// Instance-seconds paid for (creation to deletion, as the provider bills).
    pub instance_seconds: f64,
    /// Idle ready slot-seconds (sampled).
    pub idle_slot_seconds: f64,
    /// Slot-seconds running jobs.
    pub busy_slot_seconds: f64,
    /// Virtual time from the start to the last job's end.
    pub span: Duration,
    /// The samples, oldest first.
    pub samples: Vec<Sample>,
    /// Most instances held at once (sampled).
    pub peak_instances: u32,
    /// `increase` calls.
    pub increases: u64,
}

impl Outcome {
    /// The wait at quantile `q` (0..=1), in seconds; 0 with no job.
    pub fn wait_quantile(&self, q: f64) -> f64 {
        quantile(&self.waits, q)
    }
}

/// The `q` quantile (nearest rank) of `values`.
pub fn quantile(values: &[f32], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(rank, f32::total_cmp);
    f64::from(*x)
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The runtime could not be built.
    #[error("cannot build the simulation's runtime: {0}")]
    Runtime(std::io::Error),
    /// The scaler did not start.
    #[error("the scaler did not start: {0}")]
    Scaler(ScalerError),
}

struct Queue {
    jobs: VecDeque<(usize, Instant)>,
    waiting_for_slot: usize,
    done: usize,
}

struct World {
    spec: Spec,
    jobs: Vec<JobSpec>,
    queue: Mutex<Queue>,
    arrived: Notify,
    freed: Notify,
    limit: Option<Arc<Semaphore>>,
    concurrent: Option<Arc<Semaphore>>,
    waits: Mutex<Vec<(usize, f32)>>,
    timed_out: Mutex<u64>,
    dropped_pending: Mutex<u64>,
    busy_secs: Mutex<f64>,
    all_done: Notify,
}

/// Runs `jobs` (sorted by arrival) through the fleet of `spec`.
pub fn run(spec: &Spec, jobs: Vec<JobSpec>) -> Result<Outcome, SimError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(SimError::Runtime)?;
    rt.block_on(simulate(spec.clone(), jobs))
}

async fn simulate(spec: Spec, jobs: Vec<JobSpec>) -> Result<Outcome, SimError> {
    let group = Arc::new(FakeInstanceGroup::new(
        FakeConfig {
            id: "simulate/fleet".into(),
            max_size: usize::MAX,
            create_latency: spec.provider.create,
            delete_latency: spec.provider.delete,
            call_latency: spec.provider.call,
            ..FakeConfig::default()
        },
        spec.seed,
    ));
    let scaler = ScalerBuilder::new(group.clone(), spec.scaler.clone())
        .schedule(spec.schedule.clone())
        .clock(Clock::anchored(spec.start))
        .start()
        .await
        .map_err(SimError::Scaler)?;
    let semaphore = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
    let world = Arc::new(World {
        limit: semaphore(spec.runner.limit),
        concurrent: semaphore(spec.runner.concurrent),
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            waiting_for_slot: 0,
            done: 0,
        }),
        arrived: Notify::new(),
        freed: Notify::new(),
        waits: Mutex::new(Vec::with_capacity(jobs.len())),
        timed_out: Mutex::new(0),
        dropped_pending: Mutex::new(0),
        busy_secs: Mutex::new(0.0),
        all_done: Notify::new(),
        spec,
        jobs,
    });
    let start = Instant::now();
    let total = world.jobs.len();

    // Arrivals.
    let feeder = {
        let world = world.clone();
        tokio::spawn(async move {
            for (i, job) in world.jobs.iter().enumerate() {
                tokio::time::sleep_until(start + job.arrival).await;
                world
                    .queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .jobs
                    .push_back((i, Instant::now()));
                world.arrived.notify_one();
            }
        })
    };
    let stop = tokio_util::sync::CancellationToken::new();
    // GitLab failing the jobs that stayed too long in its queue.
    let dropper = tokio::spawn(drop_pending(world.clone(), stop.clone()));
    // The job source's workers.
    let mut workers = Vec::new();
    for n in 0..world.spec.runner.request_concurrency.max(1) {
        workers.push(tokio::spawn(worker(
            world.clone(),
            scaler.clone(),
            n,
            stop.clone(),
        )));
    }
    // Samples.
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let sampler = {
        let world = world.clone();
        let samples = samples.clone();
        let scaler = scaler.clone();
        let group = group.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(world.spec.sample_every);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let c = scaler.counts();
                let q = world.queue.lock().unwrap_or_else(|e| e.into_inner());
                let waiting = q.jobs.len() + q.waiting_for_slot;
                drop(q);
                samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Sample {
                        t: start.elapsed().as_secs_f64(),
                        instances: group.len() as u32,
                        busy: c.acquired as u32,
                        idle: c.idle as u32,
                        waiting: waiting as u32,
                    });
            }
        })
    };

    if total > 0 {
        loop {
            let done = world.all_done.notified();
            if world.queue.lock().unwrap_or_else(|e| e.into_inner()).done >= total {
                break;
            }
            done.await;
        }
    }
    let span = start.elapsed();
    let billed = group.billed_time();
    stop.cancel();
    world.arrived.notify_waiters();
    let _ = feeder.await;
    let _ = dropper.await;
    for w in workers {
        let _ = w.await;
    }
    let _ = sampler.await;
    scaler.abandon();

    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    let every = world.spec.sample_every.as_secs_f64();
    let idle_slot_seconds = samples.iter().map(|s| f64::from(s.idle) * every).sum();
    let peak_instances = samples.iter().map(|s| s.instances).max().unwrap_or(0);
    let mut waits = std::mem::take(&mut *world.waits.lock().unwrap_or_else(|e| e.into_inner()));
    waits.sort_by_key(|(i, _)| *i);
    let timed_out = *world.timed_out.lock().unwrap_or_else(|e| e.into_inner());
    let dropped_pending = *world
        .dropped_pending
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let busy_slot_seconds = *world.busy_secs.lock().unwrap_or_else(|e| e.into_inner());
    Ok(Outcome {
        jobs: total as u64,
        served: waits.len() as u64,
        timed_out,
        dropped_pending,
        waits: waits.into_iter().map(|(_, w)| w).collect(),
        instance_seconds: billed.as_secs_f64(),
        idle_slot_seconds,
        busy_slot_seconds,
        span,
        samples,
        peak_instances,
        increases: group.call_count("increase"),
    })
}

/// Fails each job still in GitLab's queue [`Spec::pending_timeout`] after its arrival, as
/// GitLab does: the queue is in arrival order, so only its front can be due.
async fn drop_pending(world: Arc<World>, stop: tokio_util::sync::CancellationToken) {
    let timeout = world.spec.pending_timeout;
    // Zero: GitLab never fails a pending job (a due time of now would spin in paused time).
    if timeout.is_zero() {
        return;
    }
    loop {
        // A job arriving from now on is due no earlier than a timeout from now.
        let next = world
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .jobs
            .front()
            .map_or_else(|| Instant::now() + timeout, |(_, at)| *at + timeout);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let now = Instant::now();
        let mut q = world.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut dropped = 0;
        while q.jobs.front().is_some_and(|(_, at)| *at + timeout <= now) {
            q.jobs.pop_front();
            dropped += 1;
        }
        q.done += dropped;
        drop(q);
        if dropped > 0 {
            *world
                .dropped_pending
                .lock()
                .unwrap_or_else(|e| e.into_inner()) += dropped as u64;
            world.all_done.notify_waiters();
        }
    }
}

/// Permits held for one job, from before its request to its end.
struct Permits {
    _limit: Option<tokio::sync::OwnedSemaphorePermit>,
    _concurrent: Option<tokio::sync::OwnedSemaphorePermit>,
}

async fn permits(world: &World) -> Permits {
    let take = |s: &Option<Arc<Semaphore>>| s.clone();
    let limit = match take(&world.limit) {
        Some(s) => s.acquire_owned().await.ok(),
        None => None,
    };
    let concurrent = match take(&world.concurrent) {
        Some(s) => s.acquire_owned().await.ok(),
        None => None,
    };
    Permits {
        _limit: limit,
        _concurrent: concurrent,
    }
}

async fn worker(
    world: Arc<World>,
    scaler: flotilla_scaler::Scaler,
    n: usize,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut seq = 0u64;
    loop {
        let held = tokio::select! {
            () = stop.cancelled() => return,
            p = permits(&world) => p,
        };
        seq += 1;
        let key = format!("w{n}-{seq}");
        let freed = world.freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        match scaler.reserve(&key) {
            Ok(()) => {}
            Err(_) => {
                drop(held);
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(world.spec.runner.check_interval) => {}
                    () = freed => {}
                }
                continue;
            }
        }
        // The request: a queued job at once, else a long poll.
        let deadline = Instant::now() + LONG_POLL;
        let job = loop {
            let arrived = world.arrived.notified();
            if let Some(j) = world
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .jobs
                .pop_front()
            {
                break Some(j);
            }
            tokio::select! {
                () = stop.cancelled() => break None,
                () = arrived => {}
                () = tokio::time::sleep_until(deadline) => break None,
            }
        };
        let Some((index, arrived_at)) = job else {
            scaler.unreserve(&key);
            drop(held);
            if stop.is_cancelled() {
                return;
            }
            continue;
        };
        world
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting_for_slot += 1;
        let world = world.clone();
        let scaler = scaler.clone();
        tokio::spawn(async move {
            let got = scaler.acquire(&key, None).await;
            world
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .waiting_for_slot -= 1;
            match got {
                Ok(acquisition) => {
                    let wait = arrived_at.elapsed().as_secs_f32();
                    world
                        .waits
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((index, wait));
                    let d = world.jobs[index].duration;
                    tokio::time::sleep(d).await;
                    *world.busy_secs.lock().unwrap_or_else(|e| e.into_inner()) += d.as_secs_f64();
                    drop(acquisition);
                }
                Err(_) => {
                    *world.timed_out.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                }
            }
            scaler.release(&key);
            drop(held);
            world.freed.notify_waiters();
            let mut q = world.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.done += 1;
            drop(q);
            world.all_done.notify_waiters();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use flotilla_scaler::Policy;

    fn spec(idle_count: usize) -> Spec {
        Spec {
            scaler: ScalerConfig {
                capacity_per_instance: 2,
                max_instances: 10,
                ..ScalerConfig::default()
            },
            schedule: Schedule::single(Policy {
                idle_count,
                idle_time: Duration::from_secs(20),
                ..Policy::default()
            }),
            provider: ProviderProfile::named("cloud-vm").unwrap(),
            runner: RunnerModel {
                request_concurrency: 4,
                check_interval: Duration::from_secs(3),
                limit: 0,
                concurrent: 0,
            },
            start: Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap(),
            sample_every: Duration::from_secs(10),
            seed: 3,
            pending_timeout: GITLAB_PENDING_TIMEOUT,
        }
    }

    fn jobs(n: usize, every: Duration, duration: Duration) -> Vec<JobSpec> {
        (0..n)
            .map(|i| JobSpec {
                arrival: every * i as u32,
                duration,
            })
            .collect()
    }

    #[test]
    fn idle_capacity_buys_shorter_waits_for_more_instance_hours() {
        let work = jobs(200, Duration::from_secs(120), Duration::from_secs(60));
        let cold = run(&spec(0), work.clone()).unwrap();
        let warm = run(&spec(2), work).unwrap();
        assert_eq!((cold.jobs, cold.served, cold.timed_out), (200, 200, 0));
        assert_eq!(warm.served, 200);
        // With no idle instance many jobs wait for a VM (40-90 s): not all, since the job
        // source's workers reserve a slot before they ask for a job, and that reservation
        // alone pulls up an instance between arrivals. With two idle slots none waits.
        assert!(
            cold.wait_quantile(0.95) >= 40.0,
            "{}",
            cold.wait_quantile(0.95)
        );
        assert!(
            warm.wait_quantile(0.95) < 5.0,
            "{}",
            warm.wait_quantile(0.95)
        );
        assert!(warm.instance_seconds > cold.instance_seconds);
        assert!(warm.idle_slot_seconds > cold.idle_slot_seconds);
        // Every job ran its minute.
        assert!((cold.busy_slot_seconds - 200.0 * 60.0).abs() < 1e-6);
        assert!(!cold.samples.is_empty());
    }

    #[test]
    fn limits_hold_and_a_seed_replays() {
        let mut s = spec(0);
        s.scaler.max_instances = 2;
        let work = jobs(40, Duration::from_secs(1), Duration::from_secs(30));
        let a = run(&s, work.clone()).unwrap();
        assert!(a.peak_instances <= 2, "{}", a.peak_instances);
        assert!(a.samples.iter().all(|x| x.busy <= 4));
        let b = run(&s, work).unwrap();
        assert_eq!(a.waits, b.waits);
        assert_eq!(a.instance_seconds, b.instance_seconds);
    }

    #[test]
    fn gitlab_fails_the_jobs_left_in_its_queue_past_the_pending_timeout() {
        // One instance of two slots runs 12 ten-minute jobs an hour; 360 arrive an hour.
        let mut s = spec(0);
        s.scaler.max_instances = 1;
        s.pending_timeout = Duration::from_secs(3600);
        let work = jobs(400, Duration::from_secs(10), Duration::from_secs(600));
        let o = run(&s, work).unwrap();
        assert!(o.dropped_pending > 300, "{}", o.dropped_pending);
        assert_eq!(o.served + o.timed_out + o.dropped_pending, o.jobs);
        // No job that ran waited longer than GitLab keeps it: the queue is bounded, and its
        // samples say so.
        assert!(o.wait_quantile(1.0) <= 3600.0, "{}", o.wait_quantile(1.0));
        let most_waiting = o.samples.iter().map(|x| x.waiting).max().unwrap_or(0);
        assert!(most_waiting <= 361, "{most_waiting}");
        // The same jobs with a queue GitLab never empties: they all run, hours late.
        s.pending_timeout = Duration::from_secs(1_000_000);
        let o = run(
            &s,
            jobs(400, Duration::from_secs(10), Duration::from_secs(600)),
        )
        .unwrap();
        assert_eq!((o.served, o.dropped_pending), (400, 0));
        assert!(
            o.wait_quantile(1.0) > 30.0 * 3600.0,
            "{}",
            o.wait_quantile(1.0)
        );
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f32> = (1..=100).map(|x| x as f32).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.95), 95.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
