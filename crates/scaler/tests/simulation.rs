//! Deterministic simulation: the real scaler and driver against the fake provider, in
//! virtual time, over thousands of seeds, with invariants checked throughout
//! (see `flotilla_testkit::sim`).
//!
//! - `many_seeds` runs `SIM_SEEDS` seeds (default 2000) starting at `SIM_FIRST_SEED` (0).
//! - `replay` runs the one seed in `SIM_SEED` with logs, to debug a failure.

use flotilla_testkit::sim::{self, SimParams};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn replay_command(seed: u64) -> String {
    format!("SIM_SEED={seed} cargo test -p flotilla-scaler --test simulation replay -- --nocapture")
}

#[test]
fn many_seeds() {
    let first = env_u64("SIM_FIRST_SEED", 0);
    let count = env_u64("SIM_SEEDS", 2000);
    let next = Arc::new(AtomicU64::new(first));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let totals = Arc::new(AtomicU64::new(0));
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let next = next.clone();
            let failures = failures.clone();
            let totals = totals.clone();
            std::thread::spawn(move || {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= first + count {
                        break;
                    }
                    let report = sim::run(&SimParams::random(seed));
                    totals.fetch_add(report.jobs, Ordering::Relaxed);
                    if !report.violations.is_empty() {
                        failures
                            .lock()
                            .unwrap()
                            .push((seed, report.violations.clone()));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    if !failures.is_empty() {
        let mut msg = format!(
            "{} of {count} seeds broke invariants ({} jobs simulated in all):\n",
            failures.len(),
            totals.load(Ordering::Relaxed)
        );
        for (seed, v) in failures.iter().take(10) {
            msg.push_str(&format!(
                "\nseed {seed}: replay with `{}`\n",
                replay_command(*seed)
            ));
            for line in v.iter().take(5) {
                msg.push_str(&format!("  {line}\n"));
            }
        }
        panic!("{msg}");
    }
    assert!(
        totals.load(Ordering::Relaxed) > count,
        "the workload ran jobs"
    );
}

#[test]
fn replay() {
    let Ok(seed) = std::env::var("SIM_SEED") else {
        // Nothing to replay; run one seed so the test still exercises the path.
        let r = sim::run(&SimParams::random(1));
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        return;
    };
    let seed: u64 = seed.parse().expect("SIM_SEED must be a number");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("flotilla_scaler=debug")),
        )
        .with_test_writer()
        .try_init();
    let params = SimParams::random(seed);
    eprintln!("{params:#?}");
    let r = sim::run(&params);
    eprintln!("{r:#?}");
    assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
}

#[test]
fn same_seed_same_history() {
    for seed in [3, 17, 99] {
        let a = sim::run(&SimParams::random(seed));
        let b = sim::run(&SimParams::random(seed));
        assert_eq!(a.digest, b.digest, "seed {seed} replays differently");
        assert_eq!((a.jobs, a.completed, a.lost), (b.jobs, b.completed, b.lost));
    }
    let a = sim::run(&SimParams::random(3));
    let c = sim::run(&SimParams::random(4));
    assert_ne!(a.digest, c.digest);
}
