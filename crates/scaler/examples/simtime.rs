//! Runs simulation seeds one by one and prints what each did (a debugging aid for the
//! scaler's simulation; `cargo run --release -p flotilla-scaler --example simtime -- FIRST N`).

fn main() {
    let mut args = std::env::args().skip(1);
    let first: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let verbose = args.next().is_some();
    for seed in first..first + n {
        let p = flotilla_testkit::sim::SimParams::random(seed);
        if verbose {
            println!("{p:#?}");
        }
        let t = std::time::Instant::now();
        let r = flotilla_testkit::sim::run(&p);
        println!(
            "seed {seed}: {:?} jobs={} served={} timed_out={} lost={} restarts={} peak={} \
             increases={} decreases={} checks={} violations={:?}",
            t.elapsed(),
            r.jobs,
            r.served,
            r.timed_out,
            r.lost,
            r.restarts,
            r.peak_instances,
            r.increases,
            r.decreases,
            r.checks,
            r.violations
        );
    }
}
