//! How long `flotilla simulate` takes for a week with a million jobs: the real scaler in
//! paused time against the fake provider, the job source modelled as `flotilla run` behaves.
//! The issue's target: seconds. Printed beside it, the same simulation at a tenth of the jobs,
//! to show how the cost grows.
//!
//! ```text
//! cargo bench -p flotilla-sim --bench million_jobs
//! ```
//!
//! The fleet: up to 800 cloud VMs (40-90 s to start) of 8 slots, an idle target of 40 slots,
//! 20 job-request workers; an office-hours week whose peaks need most of it.

use chrono::{TimeZone, Utc};
use flotilla_scaler::{Policy, ScalerConfig, Schedule};
use flotilla_sim::{DailyPattern, ProviderProfile, RunnerModel, Spec, Synthetic, run};
use std::time::{Duration, Instant};

fn main() {
    let start = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
    let spec = Spec {
        scaler: ScalerConfig {
            capacity_per_instance: 8,
            max_instances: 800,
            ..ScalerConfig::default()
        },
        schedule: Schedule::single(Policy {
            idle_count: 40,
            idle_time: Duration::from_secs(20 * 60),
            ..Policy::default()
        }),
        provider: ProviderProfile::named("cloud-vm").expect("a profile"),
        runner: RunnerModel {
            request_concurrency: 20,
            check_interval: Duration::from_secs(3),
            limit: 0,
            concurrent: 0,
        },
        start,
        sample_every: Duration::from_secs(60),
        seed: 1,
        pending_timeout: flotilla_sim::GITLAB_PENDING_TIMEOUT,
    };
    println!(
        "{:>10} {:>8} {:>10} {:>12} {:>10} {:>10}",
        "jobs", "wall s", "jobs/s", "inst-hours", "wait p95", "peak inst"
    );
    for jobs_per_hour in [600.0, 6000.0] {
        let jobs = Synthetic {
            jobs_per_hour,
            burstiness: 3.0,
            daily: DailyPattern::Office,
            median_duration: Duration::from_secs(300),
            duration_sigma: 0.8,
            span: Duration::from_secs(7 * 86400),
            seed: 1,
        }
        .generate(start);
        let n = jobs.len();
        let t = Instant::now();
        let o = run(&spec, jobs).expect("the simulation runs");
        let wall = t.elapsed().as_secs_f64();
        println!(
            "{:>10} {:>8.1} {:>10.0} {:>12.0} {:>9.1}s {:>10}",
            n,
            wall,
            n as f64 / wall,
            o.instance_seconds / 3600.0,
            o.wait_quantile(0.95),
            o.peak_instances
        );
    }
    println!("target: a week with a million jobs in seconds");
}
