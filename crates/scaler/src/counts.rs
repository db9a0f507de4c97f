//! Slot counts by state (taskscaler's `fleeting_taskscaler_tasks{state}`).

use std::fmt;

/// Counts of slots by state (taskscaler's `fleeting_taskscaler_tasks{state}`), plus
/// instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotCounts {
    /// Free and ready.
    pub idle: usize,
    /// Held by a reservation.
    pub reserved: usize,
    /// `acquire` calls waiting for a slot.
    pub pending: usize,
    /// Running jobs.
    pub acquired: usize,
    /// On instances that take no new jobs (used up, being removed, missing from the listing).
    pub unavailable: usize,
    /// On instances past the health-failure threshold.
    pub unhealthy: usize,
    /// On instances not yet through ready-up.
    pub unready: usize,
    /// Instances in the ledger (any state, removing ones included).
    pub instances: usize,
}

impl fmt::Display for SlotCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "idle:{},reserved:{},pending:{},acquired:{},unavailable:{},unhealthy:{},unready:{},instances:{}",
            self.idle,
            self.reserved,
            self.pending,
            self.acquired,
            self.unavailable,
            self.unhealthy,
            self.unready,
            self.instances
        )
    }
}
