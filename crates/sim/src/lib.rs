//! Simulating a fleet before paying for it.
//!
//! - [`fake_group`]: [`FakeInstanceGroup`], an in-memory instance group whose latencies and
//!   faults are configured, deterministic given a seed and tokio's (possibly paused) clock.
//!   The scaler's tests and simulation (through `flotilla-testkit`) and `flotilla simulate`
//!   use it.
//! - [`workload`]: job arrivals and durations, from a CSV file or generated from a rate,
//!   bursts and a daily pattern.
//! - [`simulation`]: the real scaler, its policies and limits, against the fake provider
//!   with given latencies, fed by a model of `flotilla run`'s job source, in virtual time;
//!   what it measures (instance-hours, idle slot-hours, job waits) and samples of the fleet.

#![warn(missing_docs)]

pub mod fake_group;
pub mod simulation;
pub mod workload;

pub use fake_group::{FakeConfig, FakeInstance, FakeInstanceGroup};
pub use simulation::{
    GITLAB_PENDING_TIMEOUT, Outcome, ProviderProfile, RunnerModel, Sample, SimError, Spec, run,
};
pub use workload::{DailyPattern, JobSpec, Synthetic, WorkloadError, parse_csv};
