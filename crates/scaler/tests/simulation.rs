//! Deterministic simulation: the real scaler, driver and SQLite journal against the fake
//! provider, in virtual time, over thousands of seeds, with faults in every seed and the
//! invariants checked at every event (see `flotilla_testkit::sim`).
//!
//! - `many_seeds` runs `SIM_SEEDS` seeds (default 2000) starting at `SIM_FIRST_SEED` (0),
//!   each on its seed's provider profile (`Profile::of`: clouds, a single host, a fixed pool
//!   lending ids again, listing outages with refused deletions and hanging heartbeats); a
//!   failing seed prints its one-line replay command.
//! - `replay` runs the one seed in `SIM_SEED` with logs, to debug a failure (`SIM_LEGACY`
//!   puts a fixed bug back, as `SimParams::put_back` names them; `SIM_PROFILE` runs the seed
//!   on another profile than its own).
//! - `catches_*` put a fixed bug back (a test-only switch) and show the simulation fails,
//!   by the checker written for it.

use flotilla_testkit::sim::{self, Profile, SimParams, SimReport};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `count` seeds from `first` on every core, each on its own profile or all on
/// `profile`; returns the failing ones and the totals.
fn run_seeds(
    first: u64,
    count: u64,
    profile: Option<Profile>,
    tweak: fn(&mut SimParams),
) -> (Vec<(u64, SimReport)>, SimReport) {
    let next = Arc::new(AtomicU64::new(first));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let totals = Arc::new(Mutex::new(SimReport::default()));
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (next, failures, totals) = (next.clone(), failures.clone(), totals.clone());
            std::thread::spawn(move || {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= first + count {
                        break;
                    }
                    let mut params = match profile {
                        Some(profile) => SimParams::of(profile, seed),
                        None => SimParams::random(seed),
                    };
                    tweak(&mut params);
                    let r = sim::run(&params);
                    {
                        let mut t = totals.lock().unwrap();
                        t.jobs += r.jobs;
                        t.served += r.served;
                        t.timed_out += r.timed_out;
                        t.timed_out_in_outage += r.timed_out_in_outage;
                        t.outage_listings += r.outage_listings;
                        t.billed_instance_secs += r.billed_instance_secs;
                        t.best_instance_secs += r.best_instance_secs;
                        t.excess_instance_secs += r.excess_instance_secs;
                        t.interrupted += r.interrupted;
                        t.dropped += r.dropped;
                        t.unused_reservations += r.unused_reservations;
                        t.lost += r.lost;
                        t.running_at_crash += r.running_at_crash;
                        t.restarts += r.restarts;
                        t.policy_switches += r.policy_switches;
                        t.ready_up_failures += r.ready_up_failures;
                        t.listing_glitches += r.listing_glitches;
                        t.provider_errors += r.provider_errors;
                        t.foreign_taken_for_ours += r.foreign_taken_for_ours;
                        t.checks += r.checks;
                        t.longest_wait_secs = t.longest_wait_secs.max(r.longest_wait_secs);
                    }
                    if !r.violations.is_empty() {
                        failures.lock().unwrap().push((seed, r));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut failures = std::mem::take(&mut *failures.lock().unwrap());
    failures.sort_by_key(|(s, _)| *s);
    let totals = totals.lock().unwrap().clone();
    (failures, totals)
}

fn describe(totals: &SimReport, count: u64) -> String {
    format!(
        "{count} seeds: {} jobs, {} served within instance_acquire_timeout ({:.3}%), {} timed \
         out ({} of them across listing outages, {} listings failed in outages), {} interrupted \
         by {} restarts ({} running at the crash), {} lost their instance, \
         {} acquires dropped, {} reservations unused, {} policy switches, {} ready-up failures, \
         {} listing glitches, {} provider errors, {} foreign instances taken for ours, longest \
         wait {:.0}s, {:.0} instance-hours billed against {:.0} needed at best ({:.1} held \
         beyond recent demand), {} invariant checks",
        totals.jobs,
        totals.served,
        100.0 * totals.served_ratio(),
        totals.timed_out,
        totals.timed_out_in_outage,
        totals.outage_listings,
        totals.interrupted,
        totals.restarts,
        totals.running_at_crash,
        totals.lost,
        totals.dropped,
        totals.unused_reservations,
        totals.policy_switches,
        totals.ready_up_failures,
        totals.listing_glitches,
        totals.provider_errors,
        totals.foreign_taken_for_ours,
        totals.longest_wait_secs,
        totals.billed_instance_secs / 3600.0,
        totals.best_instance_secs / 3600.0,
        totals.excess_instance_secs / 3600.0,
        totals.checks
    )
}

#[test]
fn many_seeds() {
    let first = env_u64("SIM_FIRST_SEED", 0);
    let count = env_u64("SIM_SEEDS", 2000);
    let started = std::time::Instant::now();
    let (failures, totals) = run_seeds(first, count, None, |_| {});
    eprintln!("{} in {:?}", describe(&totals, count), started.elapsed());
    if !failures.is_empty() {
        let mut msg = format!("{} of {count} seeds broke invariants:\n", failures.len());
        for (seed, r) in failures.iter().take(10) {
            msg.push_str(&format!(
                "\nseed {seed}: replay with: {}\n",
                sim::replay_command(*seed)
            ));
            for line in r.violations.iter().take(4) {
                msg.push_str(&format!("  {line}\n"));
            }
        }
        panic!("{msg}");
    }
    assert!(totals.jobs > count * 10, "the workload ran jobs");
    assert!(totals.restarts >= count, "every seed restarts");
    assert!(totals.running_at_crash > 0, "jobs ran at crashes");
    assert!(totals.policy_switches >= count, "policies switched");
    assert!(totals.dropped > 0 && totals.unused_reservations > 0);
    assert!(totals.ready_up_failures > 0 && totals.provider_errors > 0 && totals.lost > 0);
    assert!(
        totals.outage_listings > 0,
        "the outage profile's listings failed"
    );
    assert!(totals.best_instance_secs > 0.0 && totals.billed_instance_secs > 0.0);
}

/// Log timestamps in the simulation's virtual time (seconds since the first line).
#[derive(Default)]
struct VirtualTime(std::sync::OnceLock<tokio::time::Instant>);

impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let start = *self.0.get_or_init(tokio::time::Instant::now);
        write!(w, "t={:.1}s", start.elapsed().as_secs_f64())
    }
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
        .with_timer(VirtualTime::default())
        .try_init();
    let mut params = match std::env::var("SIM_PROFILE") {
        Ok(name) => SimParams::of(
            Profile::named(&name).expect("SIM_PROFILE names a profile"),
            seed,
        ),
        Err(_) => SimParams::random(seed),
    };
    if let Ok(bug) = std::env::var("SIM_LEGACY") {
        assert!(params.put_back(&bug), "unknown SIM_LEGACY `{bug}`");
    }
    eprintln!("{params:#?}");
    let r = sim::run(&params);
    eprintln!("{r:#?}");
    assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
}

/// The table of fixed bugs and the switches that put them back agree: every name is known.
#[test]
fn every_listed_bug_can_be_put_back() {
    for (name, profile) in SimParams::BUGS {
        let mut p = SimParams::of(profile, 0);
        assert!(p.put_back(name), "{name}");
        assert_ne!(
            p.scaler.legacy,
            flotilla_scaler::Legacy::default(),
            "{name}"
        );
    }
    assert!(!SimParams::random(0).put_back("no-such-bug"));
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

/// Runs 40 seeds of `profile` with `faults`, then again with `faults` and `bug`: the first
/// run must pass and the second fail, so the simulation catches the bug and not the fault
/// mix. Returns the failing seeds.
fn catches(
    name: &str,
    profile: Profile,
    faults: fn(&mut SimParams),
    bug: fn(&mut SimParams),
) -> Vec<(u64, SimReport)> {
    let (clean, _) = run_seeds(0, 40, Some(profile), faults);
    assert!(
        clean.is_empty(),
        "without {name}, seeds {:?} fail: {:?}",
        clean.iter().map(|(s, _)| s).collect::<Vec<_>>(),
        clean.first().map(|(_, r)| &r.violations)
    );
    let (failures, _) = run_seeds(0, 40, Some(profile), bug);
    assert!(
        failures.len() >= 4,
        "the simulation must catch {name}: {} of 40 seeds failed",
        failures.len()
    );
    eprintln!(
        "{name} caught by {} of 40 seeds; first: seed {}: {:?}",
        failures.len(),
        failures[0].0,
        failures[0].1.violations.first()
    );
    failures
}

fn many_timeouts(p: &mut SimParams) {
    p.provider.creation_timeout_rate = 0.25;
}

/// Bug 1 put back (timed-out instances never deleted): the simulation fails.
#[test]
fn catches_timed_out_instances_never_deleted() {
    catches("bug 1", Profile::Cloud, many_timeouts, |p| {
        many_timeouts(p);
        p.scaler.legacy.timeouts_never_deleted = true;
    });
}

/// Bug 3 put back (an instance missing from one listing forgotten at once): the simulation
/// fails.
#[test]
fn catches_a_listing_glitch_resetting_use_count() {
    catches(
        "bug 3",
        Profile::Cloud,
        |_| {},
        |p| p.scaler.legacy.forget_missing_at_once = true,
    );
}

/// Asserts that at least 4 of `failures` were caught by the checker whose violations say
/// `says`: the bug is seen by the check written for it, not only by another.
fn caught_by(failures: &[(u64, SimReport)], says: &str) {
    let by = failures
        .iter()
        .filter(|(_, r)| r.violations.iter().any(|v| v.contains(says)))
        .count();
    assert!(
        by >= 4,
        "only {by} of {} failing seeds were caught by \"{says}\"",
        failures.len()
    );
}

/// Issue 27 (1) put back (this host marked for removal by `idle_time`, and the mark never
/// ending): on a single host the next job waits for a slot that never comes, and the
/// per-job latency bound (liveness) fails.
#[test]
fn catches_this_host_taken_out_of_service() {
    let failures = catches(
        "issue 27 (1)",
        Profile::SingleHost,
        |_| {},
        |p| {
            p.put_back("permanent");
        },
    );
    caught_by(&failures, "liveness");
}

/// Issue 27 (2) put back (a pool's host lent again taken for the old one, removal mark
/// and all): requests are never matched, jobs wait, and the per-job bound fails.
#[test]
fn catches_a_host_lent_again_taken_for_the_old_one() {
    let failures = catches(
        "issue 27 (2)",
        Profile::FixedPool,
        |_| {},
        |p| {
            p.put_back("reused");
        },
    );
    caught_by(&failures, "liveness");
}

/// Issue 27 (3) put back (requests given up while listings fail, and made again): the
/// group passes `max_instances` during a listing outage.
#[test]
fn catches_requests_made_again_through_a_listing_outage() {
    let failures = catches(
        "issue 27 (3)",
        Profile::Outages,
        |_| {},
        |p| {
            p.put_back("requests");
        },
    );
    caught_by(&failures, "exceed max_instances");
}

fn unlimited(p: &mut SimParams) {
    p.scaler.max_instances = 0;
}

/// The billed instance-time bound, shown with issue 27 (3) put back where no
/// `max_instances` stops the requests made again: the fleet holds far more instance-time
/// than the demand explains.
#[test]
fn catches_over_provisioning_without_max_instances() {
    let failures = catches("over-provisioning", Profile::Outages, unlimited, |p| {
        unlimited(p);
        p.put_back("requests");
    });
    caught_by(&failures, "over-provisioned");
}

/// Issue 27 (6) put back (the heartbeat before an acquisition unbounded): a heartbeat that
/// hangs holds its job past `instance_acquire_timeout`, which the hard per-job bound
/// forbids whatever the provider does.
#[test]
fn catches_a_hanging_heartbeat_holding_the_job() {
    let failures = catches(
        "issue 27 (6)",
        Profile::Outages,
        |_| {},
        |p| {
            p.put_back("heartbeat");
        },
    );
    caught_by(&failures, "past instance_acquire_timeout");
}

/// Sparse jobs on instances of four slots that run two jobs each, with an idle target of
/// three: an instance with one use left offers one idle slot, not four.
fn few_uses(p: &mut SimParams) {
    p.scaler.capacity_per_instance = 4;
    p.scaler.max_use_count = 2;
    for sp in &mut p.policies {
        sp.policy.idle_count = 3;
        sp.policy.scale_factor = 0.0;
    }
    p.arrival_rate = 1.0 / 300.0;
    p.burst_probability = 0.0;
}

/// Issue 27 (8) put back (every slot without a job counted as idle, even those
/// `max_use_count` no longer allows): the idle target is not kept.
#[test]
fn catches_idle_slots_an_instance_can_no_longer_run() {
    let failures = catches("issue 27 (8)", Profile::Cloud, few_uses, |p| {
        few_uses(p);
        p.put_back("idle");
    });
    caught_by(&failures, "idle target");
}
