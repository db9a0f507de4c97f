//! Benchmark: one simulated week with about 1,000,000 jobs through the real scaler and
//! driver against the fake provider (virtual time), with the invariants checked every
//! simulated minute. Prints the wall time (target: under 60 s on the project's 2-core
//! machine) and what happened. `cargo bench -p flotilla-scaler --bench simulation_week`.

use flotilla_scaler::{Policy, ScaleThrottle, ScalerConfig};
use flotilla_testkit::FakeConfig;
use flotilla_testkit::sim::{self, SimParams};
use std::time::{Duration, Instant};

fn main() {
    let week = Duration::from_secs(7 * 24 * 3600);
    let jobs_target = 1_000_000.0;
    let params = SimParams {
        seed: 20261122,
        duration: week,
        arrival_rate: jobs_target / week.as_secs_f64(),
        burst_probability: 0.02,
        burst_max: 8,
        short_job: (Duration::from_secs(5), Duration::from_secs(180)),
        long_job: (Duration::from_secs(300), Duration::from_secs(1500)),
        long_fraction: 0.2,
        cancel_fraction: 0.03,
        external_removal_every: Some(Duration::from_secs(3600)),
        unhealthy_every: None,
        reserve_first: false,
        scaler: ScalerConfig {
            capacity_per_instance: 4,
            max_instances: 300,
            max_use_count: 0,
            delete_instances_on_shutdown: true,
            shutdown_deletion_retries: 100,
            scale_throttle: ScaleThrottle {
                limit: 10.0,
                burst: 50,
            },
            ..ScalerConfig::default()
        },
        policy: Policy {
            idle_count: 8,
            idle_time: Duration::from_secs(600),
            scale_factor: 0.1,
            scale_factor_limit: 40,
            preemptive_mode: None,
        },
        provider: FakeConfig {
            id: "sim/week".into(),
            max_size: 1000,
            create_latency: (Duration::from_secs(20), Duration::from_secs(120)),
            delete_latency: (Duration::from_secs(5), Duration::from_secs(300)),
            call_latency: Duration::from_millis(200),
            update_failure_rate: 0.02,
            increase_failure_rate: 0.02,
            partial_increase_rate: 0.05,
            decrease_failure_rate: 0.02,
            creation_timeout_rate: 0.01,
            heartbeat_failure_rate: 0.0,
        },
        check_every: Duration::from_secs(60),
    };
    let started = Instant::now();
    let cpu_before = cpu_time();
    let report = sim::run(&params);
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu_before;
    println!("simulated: one week (604800 s), seed {}", params.seed);
    println!(
        "jobs: {} arrived, {} completed, {} lost to instance failures, {} timed out at max_instances",
        report.jobs, report.completed, report.lost, report.timed_out_at_limit
    );
    println!(
        "fleet: peak {} instances, {} increase and {} decrease calls",
        report.peak_instances, report.increases, report.decreases
    );
    println!(
        "wall time: {:.1} s (target < 60 s); {:.0} jobs per wall second",
        wall.as_secs_f64(),
        report.jobs as f64 / wall.as_secs_f64()
    );
    println!(
        "CPU time: {:.1} s (user+system; the wall time above also counts waiting for a core \
         on a busy machine)",
        cpu.as_secs_f64()
    );
    if report.violations.is_empty() {
        println!("invariants: all held");
    } else {
        println!("invariant violations:");
        for v in &report.violations {
            println!("  {v}");
        }
        std::process::exit(1);
    }
}

/// This process's user + system CPU time.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
