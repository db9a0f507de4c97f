//! A job's claim on the scaler, from reservation to release, as a value that gives itself
//! back when dropped (like tokio's `OwnedSemaphorePermit`): a job source holds one per job
//! and never releases by key, so no path (an early return, a panic, a cancelled task) can
//! leave a reservation or a slot held.

use crate::acquisition::Acquisition;
use crate::error::ScalerError;
use crate::scaler::Scaler;
use std::time::Duration;

/// Capacity reserved for one key by [`Scaler::reserve_owned`]. Acquiring through it hands out
/// the slot; dropping it ends the key whatever state it reached (the reservation is given
/// back, a wait is dropped, an acquired slot becomes free). Ending a key twice is harmless,
/// so an [`Acquisition`]'s user may release the slot earlier with [`Scaler::release`].
#[derive(Debug)]
pub struct Reservation {
    key: String,
    scaler: Scaler,
}

// Defined here rather than in `scaler.rs` so that file needs nothing from this one.
impl Scaler {
    /// [`Scaler::reserve`] as a value: the [`Reservation`] ends `key` when dropped, so the
    /// caller never gives it back by name.
    pub fn reserve_owned(&self, key: impl Into<String>) -> Result<Reservation, ScalerError> {
        let key = key.into();
        self.reserve(&key)?;
        Ok(Reservation {
            key,
            scaler: self.clone(),
        })
    }
}

impl Scaler {
    /// A [`Reservation`] of `key` that holds no capacity yet: [`Reservation::acquire`] queues
    /// the key and waits for a slot, as a job GitLab already handed over waits (up to
    /// `instance_acquire_timeout`) when every slot is promised. Like any reservation, it ends
    /// the key when dropped.
    pub fn waiting_owned(&self, key: impl Into<String>) -> Reservation {
        Reservation {
            key: key.into(),
            scaler: self.clone(),
        }
    }
}

impl Reservation {
    /// The key the capacity was reserved for.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Ends the key now rather than when the reservation is dropped: its slot becomes free
    /// at once (a job that will not run gives it back before reporting why).
    pub fn release(&self) {
        self.scaler.release(&self.key);
    }

    /// Waits for the reserved slot, or any that becomes ready ([`Scaler::acquire`]). The slot
    /// stays this reservation's: it is released when the reservation is dropped, if not before.
    pub async fn acquire(&self, timeout: Option<Duration>) -> Result<Acquisition, ScalerError> {
        self.scaler.acquire(&self.key, timeout).await
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.scaler.release(&self.key);
    }
}
