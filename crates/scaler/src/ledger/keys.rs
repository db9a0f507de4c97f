//! The key ledger's vocabulary: what state a job source's key is in.

use super::instance::SlotRef;
use crate::cause::LostCause;
use tokio::time::Instant;

/// The state of a key.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// A reservation; bound to a slot when one was idle and ready.
    Reserved {
        /// The slot it holds, if any.
        slot: Option<SlotRef>,
        /// When the lease runs out.
        expires: Instant,
    },
    /// An `acquire` waiting for a slot.
    Pending {
        /// Since when.
        since: Instant,
        /// Its place in the FIFO queue.
        seq: i64,
    },
    /// A job holds this slot.
    Acquired {
        /// The slot.
        slot: SlotRef,
    },
    /// The job's instance died; the key waits for its `release`.
    Lost {
        /// The slot it held.
        slot: SlotRef,
        /// Why it was lost.
        cause: LostCause,
    },
}

/// The result of trying to acquire a slot now.
#[derive(Debug, Clone, PartialEq)]
pub enum TryAcquire {
    /// The key holds this slot now.
    Assigned(SlotRef),
    /// No slot is ready; the key waits in the queue.
    Queued,
}
