//! The scaler: taskscaler's job, proven by deterministic simulation.
//!
//! It decides how many instances the fleet needs and hands job slots to jobs:
//!
//! - [`ledger`]: two ledgers, instances (state, slots, use count, idle time, health, why it
//!   is being removed) and keys (reservations, waiting acquires, acquisitions). Pure data.
//! - [`desired()`]: one pure function from the ledger, the policy in force and the limits to a
//!   [`Decision`] that explains itself.
//! - [`Scaler`]: the API job sources use (`reserve`, `unreserve`, `acquire`, `release`) and
//!   the async driver that polls the provider's listing (the truth), applies decisions with a
//!   creation throttle and backoff, runs ready-ups, and shuts down cleanly.
//!
//! Time comes from a [`Clock`] on tokio's instant, so a paused runtime drives it all in
//! virtual time; the simulation tests do exactly that.

mod clock;
mod config;
pub mod desired;
mod driver;
mod error;
mod hooks;
mod journal;
pub mod ledger;
mod policy;
mod scaler;
mod throttle;

pub use clock::Clock;
pub use config::{ScaleThrottle, ScalerConfig};
pub use desired::{Decision, Explanation, Inputs, desired};
pub use error::ScalerError;
pub use hooks::{Hooks, NoHooks};
pub use journal::{InstanceRecord, Journal, JournalError, JournalEvent, NoJournal, Persisted};
pub use ledger::{Cause, Ledger, LostCause, Preexisting, RemovalReason, SlotCounts};
pub use policy::{Policy, PolicyError, Schedule, ScheduledPolicy};
pub use scaler::{Acquisition, Scaler, ScalerBuilder, ShutdownReport, Snapshot};
pub use throttle::{Backoff, TokenBucket};
