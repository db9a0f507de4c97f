//! Sustained ledger transitions per second through `Journal::record`, each one its own
//! committed transaction, as the scaler issues them: Acquired/Released pairs (about 100 jobs
//! holding slots at any time on a 50-instance fleet), instance upserts and requested-count
//! updates. Runs for `FLOTILLA_BENCH_SECS` (default 10) seconds with `synchronous=NORMAL`
//! (the default: durable against `kill -9`) and again with `synchronous=FULL` (durable
//! against power loss). The database lives under the target directory (a real disk, not
//! tmpfs), so `fsync` costs what it costs.

use flotilla_fleet::State;
use flotilla_scaler::{Cause, InstanceRecord, JournalEvent};
use flotilla_store::{Identity, Store, StoreOptions, Synchronous};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const INSTANCES: usize = 50;
const SLOTS: usize = 4;
const HELD: usize = 100;

struct Figures {
    transitions: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

fn instance(n: usize, use_count: u32) -> JournalEvent {
    JournalEvent::Instance(InstanceRecord {
        id: format!("i-{n:04}"),
        state: State::Running,
        cause: Cause::Requested,
        use_count,
        removal: None,
    })
}

fn run(synchronous: Synchronous, duration: Duration) -> Figures {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let store = Store::open(
        dir.path().join("state.db"),
        StoreOptions {
            synchronous,
            ..StoreOptions::default()
        },
    )
    .expect("open the store");
    let scope = store
        .scope(&Identity::new("https://gitlab.example.com", "1", "bench"))
        .expect("scope");
    let journal = store.journal(scope);
    let mut use_counts = [0u32; INSTANCES];
    for n in 0..INSTANCES {
        journal.record(&instance(n, 0)).expect("seed instance");
    }

    let mut held = VecDeque::with_capacity(HELD + 1);
    let mut latencies = Vec::with_capacity(1 << 20);
    let mut record = |event: &JournalEvent| {
        let t = Instant::now();
        journal.record(event).expect("record");
        latencies.push(t.elapsed());
    };
    let start = Instant::now();
    let mut i = 0usize;
    while start.elapsed() < duration {
        let inst = i % INSTANCES;
        use_counts[inst] += 1;
        let key = format!("runner-job-{i}");
        record(&JournalEvent::Acquired {
            key: key.clone(),
            instance: format!("i-{inst:04}"),
            slot: (i / INSTANCES) % SLOTS,
            use_count: use_counts[inst],
        });
        held.push_back(key);
        if held.len() > HELD
            && let Some(key) = held.pop_front()
        {
            record(&JournalEvent::Released { key });
        }
        if i.is_multiple_of(8) {
            record(&instance(
                (i / 8) % INSTANCES,
                use_counts[(i / 8) % INSTANCES],
            ));
        }
        if i.is_multiple_of(16) {
            record(&JournalEvent::RequestedInFlight(i % 5));
        }
        i += 1;
    }
    let elapsed = start.elapsed();
    let fleet = store.load_fleet(scope).expect("load");
    assert_eq!(fleet.acquisitions.len(), held.len());
    Figures {
        transitions: latencies.len() as u64,
        elapsed,
        latencies,
    }
}

fn report(label: &str, mut f: Figures) {
    f.latencies.sort_unstable();
    let pct = |p: f64| {
        let idx = ((f.latencies.len() as f64 - 1.0) * p).round() as usize;
        f.latencies.get(idx).copied().unwrap_or_default()
    };
    let rate = f.transitions as f64 / f.elapsed.as_secs_f64();
    println!(
        "{label:<22} {:>9.0} transitions/s  ({} in {:.1} s; per record p50 {:?}, p99 {:?}, max {:?})",
        rate,
        f.transitions,
        f.elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        f.latencies.last().copied().unwrap_or_default(),
    );
}

fn main() {
    let secs: f64 = std::env::var("FLOTILLA_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let duration = Duration::from_secs_f64(secs);
    println!(
        "ledger transitions through Journal::record, one transaction each, WAL mode, {secs} s per setting (target >= 10000/s)"
    );
    report("synchronous=NORMAL", run(Synchronous::Normal, duration));
    report("synchronous=FULL", run(Synchronous::Full, duration));
}
