//! The two ledgers: instances (with their slots) and keys (reservations, pending acquires,
//! acquisitions).
//!
//! Everything here is plain data and pure bookkeeping: no I/O, no clocks (every operation
//! takes `now`), no async. The driver feeds it provider listings ([`Ledger::observe`]) and
//! the job-source API feeds it reservations and acquisitions ([`Ledger::reserve`],
//! [`Ledger::try_acquire`], [`Ledger::release`]); `desired()` reads it to decide.
//!
//! One file per concept: [`Instance`] and its slots (`instance.rs`), the key states
//! (`keys.rs`), the free-slot index that makes handing out a slot O(log n) (`index.rs`),
//! outstanding requests (`requests.rs`), the job-source operations (`slots.rs`) and the
//! reconciliation with listings (`observe.rs`).
//!
//! Invariants (checked by [`Ledger::check_invariants`]):
//! - a slot is held by at most one key, and a key holds at most one slot;
//! - a slot is acquired only on an instance that was running and ready when it was handed
//!   out (no exemption for restored instances);
//! - every pending key is in the FIFO queue exactly once;
//! - the free-slot index holds exactly the allocatable instances with a free slot, and the
//!   per-instance and total counters match the slots.

mod index;
mod instance;
mod keys;
mod ledgers;
mod observe;
mod requests;
mod rules;
mod slots;
#[cfg(test)]
mod tests;

pub use crate::cause::{Cause, LostCause, Preexisting, RemovalReason};
pub use crate::counts::SlotCounts;
pub use instance::{Instance, Key, Readiness, Removal, Slot, SlotRef};
pub use keys::{KeyState, TryAcquire};
pub use ledgers::{Ledger, MISSING_FOR, MISSING_LISTINGS};
pub use observe::{Departure, Observed};
pub(crate) use requests::{
    doubt_grace as requests_doubt_grace, listing_interval as requests_listing_interval,
};
pub use slots::ReserveOptions;
