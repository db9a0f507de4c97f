//! What the scaler's API can refuse or fail with.

use crate::counts::SlotCounts;
use std::time::Duration;

/// An error from [`crate::Scaler`]'s job-source API.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ScalerError {
    /// No capacity can be promised now (taskscaler's `ErrNoCapacity`); the job source should
    /// not request a job. The counts say why.
    #[error("no capacity: {why} ({counts})")]
    NoCapacity {
        /// Why nothing could be reserved.
        why: &'static str,
        /// The slot counts at the time.
        counts: SlotCounts,
    },
    /// No slot became ready in time.
    #[error("unable to acquire instance within the configured timeout of {0:?}")]
    AcquireTimeout(Duration),
    /// The scaler is shutting down and hands out nothing.
    #[error("the scaler is shutting down")]
    ShuttingDown,
    /// The key is already in use by another reservation or acquisition.
    #[error("key {0} is already reserved or acquired")]
    DuplicateKey(String),
    /// The durable store could not record the change; nothing was done.
    #[error("cannot record state: {0}")]
    Journal(String),
    /// The provider refused to initialise.
    #[error("instance group failed to initialise: {0}")]
    Init(String),
}
