//! Deterministic simulation of the scaler: the real [`Scaler`], its driver and its SQLite
//! journal against a [`FakeInstanceGroup`], in virtual time, with a seeded workload and
//! faults injected in every seed.
//!
//! [`run`] builds a current-thread runtime with paused time, so everything (provider
//! latencies, job durations, policy periods, restarts) happens in virtual time and a seed
//! replays exactly. Every seed exercises the production paths: `Preexisting::Ignore` or
//! `Adopt` with foreign instances at start and mid-run; ready-up failures; the journal
//! through the real SQLite store with restarts mid-run (a new scaler built from the store,
//! with jobs running at the crash); listings that lag, flap, come back partial, or empty
//! once; `increase` calls that fail after creating some instances; policies switching
//! across schedule periods in a zone with daylight saving time, the run crossing a DST
//! change; acquires dropped mid-wait and reservations never used.
//!
//! Each seed runs on one [`Profile`] of provider: a cloud (the faults above); this host as
//! the only instance, never deleted (the `local` provider under a shell runner); a fixed
//! pool that lends the same ids again (the static provider); or a cloud with listing
//! outages of tens of minutes, deletions refused for minutes and acquire heartbeats that
//! hang, half of them with no `max_instances`.
//!
//! Invariants are checked at every event (every provider call, job step, ready-up, fault
//! and restart), with no exemptions:
//!
//! 1. the scaler's own instances never exceed `max_instances`;
//! 2. no slot is held by two jobs, counting a job whose instance was lost until it has torn
//!    down; no instance runs more than `max_use_count` jobs over its life, across restarts;
//! 3. a job only gets a slot on an instance that is running, ours, and through ready-up
//!    (the ledger's invariants, checked on the live ledger), and never on an instance that
//!    ran a job at a crash unless `keep_instance_with_acquisitions`;
//! 4. no instance is asked to be deleted while a job runs on it, and no instance the scaler
//!    must leave alone is ever asked to be deleted;
//! 5. liveness: a job may wait only while every instance the limit allows is live and busy.
//!    Leaked, foreign, timed-out, deleting or idle instances are never an excuse; a job that
//!    waits longer than the latencies the seed's provider can explain, while the fleet is
//!    not saturated, breaks it. This is each job's latency bound; instances the provider
//!    refuses to delete (they count against the limit) and listing outages (no scaler sees
//!    new instances) excuse the wait;
//! 6. no job waits while an idle slot exists, and no instance of ours that timed out is left
//!    undeleted past the same grace (a leak);
//! 7. at least [`SimParams::min_served`] of the jobs get a slot within
//!    `instance_acquire_timeout` (the workload is sized from the provider's latencies so a
//!    healthy scaler does);
//! 8. after shutdown with deletion, none of the scaler's instances remain (this host
//!    excepted: it cannot be deleted) and foreign ones are untouched;
//! 9. the idle target is kept: whenever the fleet may grow, the slots a job can still have
//!    (counted with the simulation's own tally of jobs and uses per instance, so a slot
//!    `max_use_count` no longer allows is not one) on usable and requested instances cover
//!    `idle_count` (raised by `scale_factor`), within the grace creation failures explain;
//! 10. billed instance-time: the instances the scaler made and keeps never exceed, for
//!     longer than an allowance in all ([`SimParams::overprovision_allowance`]), what the
//!     demand of the recent past needs (running and waiting jobs, reservations, the idle
//!     target; in a listing outage, all the demand since it began; plus what a glitched
//!     listing hid). The report sets what was billed against what the workload needed at
//!     best;
//! 11. no acquire outlives `instance_acquire_timeout`, whatever the provider does.

mod params;
mod world;

pub use params::{Profile, SimParams};
use world::World;

use std::time::Duration;

/// What a simulation did and what went wrong.
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    /// Jobs that arrived and wanted a slot (dropped acquires and unused reservations not
    /// included).
    pub jobs: u64,
    /// Jobs that got a slot within `instance_acquire_timeout`.
    pub served: u64,
    /// Jobs whose acquire timed out.
    pub timed_out: u64,
    /// Of those, the ones whose wait overlapped a listing outage (or the grace after one).
    pub timed_out_in_outage: u64,
    /// Listings that failed because the seed's provider was in an outage.
    pub outage_listings: u64,
    /// Instance-seconds the provider billed (creation to gone).
    pub billed_instance_secs: f64,
    /// Instance-seconds the workload needed at best: at every tick, its running and waiting
    /// jobs, reservations and idle target, in whole instances.
    pub best_instance_secs: f64,
    /// Instance-seconds held beyond what the demand of the recent past needed.
    pub excess_instance_secs: f64,
    /// Jobs that ended with the process at a restart before they got a slot.
    pub interrupted: u64,
    /// Acquires dropped mid-wait by their job source.
    pub dropped: u64,
    /// Reservations never used.
    pub unused_reservations: u64,
    /// Jobs that ran to the end (or to their cancellation).
    pub completed: u64,
    /// Jobs whose instance died under them.
    pub lost: u64,
    /// Jobs running when the process crashed.
    pub running_at_crash: u64,
    /// Foreign instances that appeared while requests were outstanding and were taken for
    /// the scaler's own (fleeting's `increase` returns no ids to tell them apart).
    pub foreign_taken_for_ours: u64,
    /// The scaler's own instances taken for someone else's in exchange.
    pub swapped: u64,
    /// Times the policy in force changed (schedule periods, across the DST change).
    pub policy_switches: u64,
    /// Restarts of the scaler from its store.
    pub restarts: u64,
    /// Ready-ups that failed.
    pub ready_up_failures: u64,
    /// Listings that came back empty, stale (the previous one) or partial.
    pub listing_glitches: u64,
    /// Provider calls that failed (`update`, `increase`, and `increase` after creating).
    pub provider_errors: u64,
    /// The longest wait for a slot, in seconds.
    pub longest_wait_secs: f64,
    /// Most of the scaler's own instances at once.
    pub peak_instances: usize,
    /// Provider calls.
    pub increases: u64,
    /// Provider calls.
    pub decreases: u64,
    /// Times the invariants were checked.
    pub checks: u64,
    /// A digest of the run's observable history; equal for equal seeds.
    pub digest: u64,
    /// Invariant violations, with the virtual time they were seen at.
    pub violations: Vec<String>,
}

impl SimReport {
    /// The share of jobs served within `instance_acquire_timeout`.
    pub fn served_ratio(&self) -> f64 {
        let wanted = self.served + self.timed_out - self.timed_out_in_outage;
        if wanted == 0 {
            1.0
        } else {
            self.served as f64 / wanted as f64
        }
    }
}

/// Runs one simulation to the end (all jobs done, shutdown with deletion) and reports.
pub fn run(params: &SimParams) -> SimReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            return SimReport {
                violations: vec![format!("cannot build runtime: {e}")],
                ..Default::default()
            };
        }
    };
    rt.block_on(World::simulate(params.clone()))
}

/// The one-line command that replays `seed` with logs.
pub fn replay_command(seed: u64) -> String {
    format!(
        "SIM_SEED={seed} cargo nextest run -p flotilla-scaler -E 'test(=simulation::replay)' --no-capture"
    )
}

/// How long a seed may take before the test harness calls it stuck (virtual time).
pub const MAX_VIRTUAL: Duration = Duration::from_secs(6 * 3600);
