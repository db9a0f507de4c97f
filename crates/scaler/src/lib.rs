//! The scaler: taskscaler's job, proven by deterministic simulation.
//!
//! It decides how many instances the fleet needs and hands job slots to jobs:
//!
//! - [`ledger`]: two ledgers, instances (state, slots, use count, idle time, health, why it
//!   is being removed) and keys (reservations, waiting acquires, acquisitions), with an
//!   index of free slots by preference. Pure data.
//! - [`desired()`]: one pure function from the ledger, the policy in force and the limits to a
//!   [`Decision`] that explains itself.
//! - [`Scaler`]: the API job sources use (`reserve`, `unreserve`, `acquire`, `release`, or a
//!   [`Reservation`] that ends its key when dropped) and
//!   the async driver that polls the provider's listing (the truth), applies decisions with a
//!   creation throttle and per-cause backoff, runs ready-ups, and shuts down cleanly.
//!
//! Time comes from a [`Clock`] on tokio's instant, so a paused runtime drives it all in
//! virtual time; the simulation tests do exactly that.

mod acquisition;
mod cause;
mod clock;
mod config;
mod counts;
mod creation;
pub mod desired;
mod driver;
mod error;
mod history;
mod hooks;
mod journal;
pub mod ledger;
mod policy;
mod reservation;
mod scaler;
mod shared;
mod sweep;
mod throttle;

pub use acquisition::{Acquisition, AcquisitionGuard};
pub use cause::{Cause, LostCause, Preexisting, RemovalReason};
pub use clock::Clock;
pub use config::{Legacy, ScaleThrottle, ScalerConfig};
pub use counts::SlotCounts;
pub use creation::CreationTrouble;
pub use desired::{Decision, Explanation, Inputs, desired};
pub use error::ScalerError;
pub use history::{
    Counters, DECISIONS_KEPT, DecisionKind, DecisionRecord, EVENTS_KEPT, FleetEvent, HistoryEntry,
    HistoryPage, TaskOperation,
};
pub use hooks::{Hooks, NoHooks, ReadyUpInstance};
pub use journal::{InstanceRecord, Journal, JournalError, JournalEvent, NoJournal, Persisted};
pub use ledger::Ledger;
pub use policy::{Policy, PolicyError, Schedule, ScheduledPolicy};
pub use reservation::Reservation;
pub use scaler::{Scaler, ScalerBuilder, ShutdownReport, Snapshot};
pub use throttle::{Backoff, NEVER, TokenBucket};
