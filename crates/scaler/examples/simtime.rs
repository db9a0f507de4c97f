//! Runs simulation seeds one by one and prints what each did (a debugging aid for the
//! scaler's simulation; `cargo run --release -p flotilla-scaler --example simtime -- FIRST N`).
//! `SIM_LEGACY` puts a fixed bug back (`SimParams::put_back`): `timeouts` or `missing` (bugs
//! 1 and 3 of issue 12), `permanent`, `reused`, `requests`, `heartbeat` or `idle` (issue 27's
//! items 1, 2, 3, 6, 8).
//! `SIM_PROFILE` (`cloud`, `single-host`, `fixed-pool`, `outages`) runs every seed on one
//! profile; with `SIM_LEGACY` and no `SIM_PROFILE`, the profile that shows that bug
//! (`SimParams::BUGS`).

use flotilla_testkit::sim::{Profile, SimParams};

fn main() {
    let mut args = std::env::args().skip(1);
    let first: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let verbose = args.next().is_some();
    let bug = std::env::var("SIM_LEGACY").ok();
    let profile = std::env::var("SIM_PROFILE")
        .ok()
        .and_then(|name| Profile::named(&name))
        .or_else(|| {
            let bug = bug.as_deref()?;
            SimParams::BUGS
                .iter()
                .find(|(name, _)| *name == bug)
                .map(|(_, profile)| *profile)
        });
    for seed in first..first + n {
        let mut p = match profile {
            Some(profile) => SimParams::of(profile, seed),
            None => SimParams::random(seed),
        };
        if let Some(bug) = &bug
            && !p.put_back(bug)
        {
            let known: Vec<&str> = SimParams::BUGS.iter().map(|(name, _)| *name).collect();
            eprintln!("unknown SIM_LEGACY `{bug}`; known: {}", known.join(", "));
            std::process::exit(2);
        }
        if verbose {
            println!("{p:#?}");
        }
        let t = std::time::Instant::now();
        let r = flotilla_testkit::sim::run(&p);
        println!(
            "seed {seed} {:?}: {:?} jobs={} served={} timed_out={} ({} across outages) lost={} \
             restarts={} peak={} increases={} decreases={} billed={:.0}s best={:.0}s \
             excess={:.0}s checks={} violations={:?}",
            p.profile,
            t.elapsed(),
            r.jobs,
            r.served,
            r.timed_out,
            r.timed_out_in_outage,
            r.lost,
            r.restarts,
            r.peak_instances,
            r.increases,
            r.decreases,
            r.billed_instance_secs,
            r.best_instance_secs,
            r.excess_instance_secs,
            r.checks,
            r.violations
        );
    }
}
