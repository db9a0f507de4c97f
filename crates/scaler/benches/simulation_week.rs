//! Benchmark: a long simulated stretch (default one day, `FLOTILLA_SIM_DAYS` to change;
//! about 100,000 jobs a day) through the real scaler, driver and SQLite journal against the
//! fake provider (virtual time), with every fault the simulation injects and the invariants
//! checked at every event. Prints the wall time (reference: under 60 s per simulated day on
//! the project's 2-core machine) and what happened.
//! `cargo bench -p flotilla-scaler --bench simulation_week`.

use flotilla_scaler::ScaleThrottle;
use flotilla_testkit::sim::{self, SimParams};
use std::time::{Duration, Instant};

fn main() {
    let days: u64 = std::env::var("FLOTILLA_SIM_DAYS")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(1);
    let span = Duration::from_secs(days * 24 * 3600);
    let jobs_target = 100_000.0 * days as f64;
    let mut params = SimParams::random(20261122);
    params.duration = span;
    params.scaler.capacity_per_instance = 4;
    params.scaler.max_instances = 150;
    params.scaler.max_use_count = 0;
    params.scaler.scale_throttle = ScaleThrottle {
        limit: 10.0,
        burst: 50,
    };
    params.arrival_rate = jobs_target / span.as_secs_f64();
    params.job = (Duration::from_secs(5), Duration::from_secs(600));
    params.restarts = vec![span / 3, span * 2 / 3];
    let started = Instant::now();
    let cpu_before = cpu_time();
    let report = sim::run(&params);
    let wall = started.elapsed();
    let cpu = cpu_time().checked_sub(cpu_before).unwrap();
    println!(
        "simulated: {days} day(s) ({} s), seed {}",
        span.as_secs(),
        params.seed
    );
    println!(
        "jobs: {} arrived, {} served within instance_acquire_timeout ({:.2}%), {} timed out, \
         {} completed, {} lost to instance failures, {} restarts",
        report.jobs,
        report.served,
        100.0 * report.served_ratio(),
        report.timed_out,
        report.completed,
        report.lost,
        report.restarts
    );
    println!(
        "fleet: peak {} instances, {} increase and {} decrease calls",
        report.peak_instances, report.increases, report.decreases
    );
    println!(
        "wall time: {:.1} s (reference < {} s); {:.0} jobs per wall second; {} invariant checks",
        wall.as_secs_f64(),
        60 * days,
        report.jobs as f64 / wall.as_secs_f64(),
        report.checks
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
