//! Benchmark: one update reconciliation plus one decision over a ledger of 10,000 instances
//! × 4 slots, and the ledger's memory per slot.
//!
//! A driver tick's CPU work is exactly this: reconcile the ledger with the provider's
//! listing (`Ledger::observe`), expire reservations, and decide (`desired`). Provider calls
//! are I/O and not measured here. Run with `cargo bench -p flotilla-scaler --bench desired`.

use flotilla_fleet::{InstanceStatus, State};
use flotilla_scaler::{Inputs, Ledger, Policy, ScalerConfig, desired};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant as StdInstant};
use tokio::time::Instant;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const INSTANCES: usize = 10_000;
const CAP: usize = 4;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let now = Instant::now();
        let listing: Vec<InstanceStatus> = (0..INSTANCES)
            .map(|i| InstanceStatus::new(format!("i-{i:08x}"), State::Running))
            .collect();

        let before = LIVE.load(Ordering::Relaxed);
        let mut ledger = Ledger::new(CAP, 0, 3);
        ledger.observe(&listing, now);
        for s in &listing {
            ledger.ready_up_done(&s.id, Ok(()), now);
        }
        // Half the slots busy, some reservations, some waiters.
        for j in 0..(INSTANCES * CAP / 2) {
            ledger.try_acquire(&format!("job-{j}"), now).expect("acquire");
        }
        for r in 0..1000 {
            ledger
                .reserve(&format!("res-{r}"), false, None, Duration::from_secs(600), now)
                .expect("reserve");
        }
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        let per_slot = bytes as f64 / (INSTANCES * CAP) as f64;

        let config = ScalerConfig {
            capacity_per_instance: CAP,
            ..Default::default()
        };
        let policy = Policy {
            idle_count: 100,
            idle_time: Duration::from_secs(600),
            ..Policy::default()
        };
        let rounds = 200;
        let mut samples = Vec::with_capacity(rounds);
        let mut sink = 0usize;
        for r in 0..rounds {
            let t = now + Duration::from_secs(r as u64);
            let start = StdInstant::now();
            let observed = ledger.observe(&listing, t);
            ledger.expire_reservations(t);
            let d = desired(Inputs {
                ledger: &ledger,
                policy: &policy,
                policy_index: Some(0),
                config: &config,
                provider_max: usize::MAX,
                now: t,
            });
            samples.push(start.elapsed());
            sink += d.increase + d.remove.len() + observed.lost.len();
        }
        samples.sort();
        let p50 = samples[rounds / 2];
        let p99 = samples[rounds * 99 / 100];
        let mean = samples.iter().sum::<Duration>() / rounds as u32;
        println!("ledger: {INSTANCES} instances x {CAP} slots");
        println!(
            "tick (observe listing + expire reservations + desired): mean {:.3} ms, p50 {:.3} ms, p99 {:.3} ms (target <= 5 ms)",
            mean.as_secs_f64() * 1e3,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        println!(
            "ledger memory: {bytes} bytes = {per_slot:.0} bytes per slot (target <= 1024)"
        );
        assert!(sink < usize::MAX);
    });
}
