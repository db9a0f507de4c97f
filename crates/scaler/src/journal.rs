//! The scaler's durable record: every ledger change that matters after a crash is written
//! here *before* it takes effect outside (an increase is recorded before the provider is
//! asked, a removal before `decrease`, an acquisition before the job gets its slot).
//!
//! The scaler calls the journal synchronously but, wherever correctness allows, *without*
//! its lock held: the driver gathers a tick's events under the lock and commits them in one
//! transaction ([`Journal::record_all`]) after releasing it, before the provider hears of
//! anything they describe. Implementations must still be quick (a local SQLite
//! transaction). An error makes the operation fail loudly rather than act on something that
//! was not recorded.

use crate::cause::{Cause, RemovalReason};
use flotilla_fleet::State;

/// One instance as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRecord {
    /// The provider's id.
    pub id: String,
    /// Last listed state.
    pub state: State,
    /// How the scaler came to know it.
    pub cause: Cause,
    /// Jobs handed to it.
    pub use_count: u32,
    /// Why it is being removed, once decided.
    pub removal: Option<RemovalReason>,
}

/// A change to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalEvent {
    /// Instances requested from the provider and not yet seen (absolute count).
    RequestedInFlight(usize),
    /// An instance appeared or changed.
    Instance(InstanceRecord),
    /// An instance left the group.
    InstanceGone(String),
    /// A job got a slot.
    Acquired {
        /// The job source's key.
        key: String,
        /// The instance.
        instance: String,
        /// The slot index.
        slot: usize,
        /// The instance's use count after this acquisition.
        use_count: u32,
    },
    /// A job gave its slot back.
    Released {
        /// The job source's key.
        key: String,
    },
}

/// Why the journal could not record a change.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("journal write failed: {0}")]
pub struct JournalError(pub String);

/// Durable storage for the scaler's ledger.
pub trait Journal: Send + Sync {
    /// Records `event`; returns only once it is durable against a process crash.
    fn record(&self, event: &JournalEvent) -> Result<(), JournalError>;

    /// Records `events` all or nothing (one transaction); returns only once they are
    /// durable. The default records them one by one, for journals without transactions.
    fn record_all(&self, events: &[JournalEvent]) -> Result<(), JournalError> {
        for e in events {
            self.record(e)?;
        }
        Ok(())
    }
}

/// A journal that keeps nothing (tests, `flotilla exec`).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoJournal;

impl Journal for NoJournal {
    fn record(&self, _event: &JournalEvent) -> Result<(), JournalError> {
        Ok(())
    }
}

/// What a journal holds for one scaler, read back at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persisted {
    /// Instances known before the restart.
    pub instances: Vec<InstanceRecord>,
    /// Instances requested but not seen before the restart.
    pub requested_in_flight: usize,
    /// Slots jobs held at the crash: `(key, instance, slot)`. Those jobs are gone with the
    /// old process; the slots start free.
    pub acquisitions: Vec<(String, String, usize)>,
}
