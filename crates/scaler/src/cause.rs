//! Why things happen to instances and jobs: how an instance came to be known, what to do
//! with instances the scaler did not create, why one is removed, why a job lost its
//! instance.

use std::fmt;

/// How an instance came to be in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Created by this scaler's `increase`.
    Requested,
    /// Found in the group without a record of it (fleeting's `CausePreexisted`).
    Preexisted,
    /// Known from the durable store (restored after a restart).
    Restored,
}

impl Cause {
    /// A short name for the status page and `flotilla status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Requested => "requested",
            Cause::Preexisted => "preexisted",
            Cause::Restored => "restored",
        }
    }
}

/// What to do with instances found in the group that this scaler never created (and has no
/// record of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preexisting {
    /// Use them like our own after their ready-up (the `local` provider's one instance).
    #[default]
    Adopt,
    /// Report them and leave them alone: never used, never deleted, and not counted against
    /// `max_instances` (they are not the scaler's to count).
    Ignore,
    /// Delete them.
    Remove,
}

/// Why an instance is being removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RemovalReason {
    /// Unused for longer than `idle_time` and not needed for the idle target.
    IdleTime,
    /// Ran `max_use_count` jobs.
    MaxUseCount,
    /// `failure_threshold` consecutive health failures.
    Unhealthy,
    /// The ready-up hook failed.
    ReadyUpFailed,
    /// The provider reported it as timed out.
    Timeout,
    /// It was deleted outside flotilla.
    RemovedFromOutside,
    /// The scaler shut down with `delete_instances_on_shutdown`.
    Shutdown,
    /// Restart reconciliation decided to remove it (e.g. unknown and unreachable).
    Reconcile,
    /// Restored after a restart with jobs recorded on it, which died with the old process:
    /// removed for safety unless `keep_instance_with_acquisitions` (GitLab: "pre-existing
    /// instance has acquisition so removing for safety").
    AcquisitionsAtRestart,
}

impl RemovalReason {
    /// Every reason, in a stable order.
    pub const ALL: [RemovalReason; 9] = [
        RemovalReason::IdleTime,
        RemovalReason::MaxUseCount,
        RemovalReason::Unhealthy,
        RemovalReason::ReadyUpFailed,
        RemovalReason::Timeout,
        RemovalReason::RemovedFromOutside,
        RemovalReason::Shutdown,
        RemovalReason::Reconcile,
        RemovalReason::AcquisitionsAtRestart,
    ];

    /// A short name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::IdleTime => "idle_time",
            RemovalReason::MaxUseCount => "max_use_count",
            RemovalReason::Unhealthy => "unhealthy",
            RemovalReason::ReadyUpFailed => "ready_up_failed",
            RemovalReason::Timeout => "timeout",
            RemovalReason::RemovedFromOutside => "removed_from_outside",
            RemovalReason::Shutdown => "shutdown",
            RemovalReason::Reconcile => "reconcile",
            RemovalReason::AcquisitionsAtRestart => "acquisitions_at_restart",
        }
    }
}

impl fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an acquisition lost its instance while a job held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LostCause {
    /// The instance vanished from the provider's listing (for several listings in a row).
    InstanceRemoved,
    /// The provider reports the instance as deleting, deleted or timed out.
    InstanceDeleting,
    /// The instance failed `failure_threshold` health checks. The scaler itself no longer
    /// ends jobs for this (taskscaler !109 only stops new acquisitions); kept for callers
    /// that report it.
    InstanceUnhealthy,
    /// The scaler shut down and deleted instances.
    Shutdown,
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostCause::InstanceRemoved => "instance unexpectedly removed",
            LostCause::InstanceDeleting => "instance is being deleted",
            LostCause::InstanceUnhealthy => "instance is unhealthy",
            LostCause::Shutdown => "scaler shut down",
        })
    }
}
