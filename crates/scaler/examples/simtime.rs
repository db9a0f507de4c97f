//! Runs simulation seeds one by one and prints what each did (a debugging aid for the
//! scaler's simulation; `cargo run --release -p flotilla-scaler --example simtime -- FIRST N`).
//! `SIM_LEGACY=timeouts` or `SIM_LEGACY=missing` puts bug 1 or bug 3 of issue 12 back.

fn main() {
    let mut args = std::env::args().skip(1);
    let first: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let verbose = args.next().is_some();
    for seed in first..first + n {
        let mut p = flotilla_testkit::sim::SimParams::random(seed);
        match std::env::var("SIM_LEGACY").as_deref() {
            Ok("timeouts") => {
                p.provider.creation_timeout_rate = 0.25;
                p.scaler.legacy.timeouts_never_deleted = true;
            }
            Ok("missing") => p.scaler.legacy.forget_missing_at_once = true,
            _ => {}
        }
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
