//! What `acquire` hands a job: its slot, how to reach the instance, and a signal for when
//! the instance dies under it.

use crate::cause::LostCause;
use crate::ledger::{KeyState, SlotRef};
use crate::shared::{LostSignal, Shared};
use flotilla_fleet::{ConnectInfo, FleetError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// A slot handed to a job. Release it with [`crate::Scaler::release`] when the job ends
/// (or turn it into an [`AcquisitionGuard`], which releases it when dropped).
pub struct Acquisition {
    pub(crate) key: String,
    pub(crate) slot: SlotRef,
    pub(crate) signal: Arc<LostSignal>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) info: tokio::sync::Mutex<Option<ConnectInfo>>,
}

impl std::fmt::Debug for Acquisition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquisition")
            .field("key", &self.key)
            .field("instance", &self.slot.instance)
            .field("slot", &self.slot.slot)
            .finish()
    }
}

impl Acquisition {
    /// The key it was acquired with.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The instance's id.
    pub fn instance_id(&self) -> &str {
        &self.slot.instance
    }

    /// The slot index within the instance (`0..capacity_per_instance`), stable and never
    /// held by two jobs at once.
    pub fn slot(&self) -> usize {
        self.slot.slot
    }

    /// How to connect to the instance; fetched from the provider once and again when the
    /// credentials expire.
    pub async fn connect_info(&self) -> Result<ConnectInfo, FleetError> {
        let mut cached = self.info.lock().await;
        if let Some(info) = cached.as_ref()
            && !info.expired(SystemTime::now(), Duration::from_secs(5))
        {
            return Ok(info.clone());
        }
        let info = self.shared.group.connect_info(&self.slot.instance).await?;
        *cached = Some(info.clone());
        Ok(info)
    }

    /// A token cancelled when the instance dies under the job.
    pub fn lost_token(&self) -> CancellationToken {
        self.signal.token.clone()
    }

    /// Why the instance was lost, once it was.
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.signal.cause.get().copied()
    }

    /// Turns this acquisition into a guard that releases the slot when dropped (like
    /// tokio's `OwnedSemaphorePermit`).
    pub fn into_guard(self) -> AcquisitionGuard {
        AcquisitionGuard { acquisition: self }
    }
}

/// An [`Acquisition`] that releases its slot when dropped.
#[derive(Debug)]
pub struct AcquisitionGuard {
    acquisition: Acquisition,
}

impl std::ops::Deref for AcquisitionGuard {
    type Target = Acquisition;
    fn deref(&self) -> &Acquisition {
        &self.acquisition
    }
}

impl Drop for AcquisitionGuard {
    fn drop(&mut self) {
        self.acquisition.shared.release(&self.acquisition.key);
    }
}

/// Removes a queued key if `acquire` is dropped or fails before it completes.
pub(crate) struct PendingGuard<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) key: &'a str,
    pub(crate) armed: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut inner = self.shared.lock();
        inner.waiters.remove(self.key);
        match inner.ledger.key(self.key) {
            Some(KeyState::Pending { .. }) => {
                inner.ledger.cancel_pending(self.key);
            }
            Some(KeyState::Acquired { .. }) => {
                // Assigned but never handed to the job: not a use.
                inner.ledger.undo_assignment(self.key);
                self.shared.fulfil(&mut inner);
            }
            _ => {}
        }
    }
}
