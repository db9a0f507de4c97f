//! Stable string encodings of the scaler's enums as stored in the database.
//!
//! These names are part of the file format: renaming a variant in the scaler must not change
//! what is on disk, so the mapping lives here, written out in full, and the matches are
//! exhaustive so that a new variant does not compile until it has a name.

use flotilla_fleet::State;
use flotilla_scaler::{Cause, RemovalReason};

/// The stored name of an instance state.
pub fn state_as_str(state: State) -> &'static str {
    match state {
        State::Creating => "creating",
        State::Running => "running",
        State::Deleting => "deleting",
        State::Deleted => "deleted",
        State::Timeout => "timeout",
    }
}

/// Parses [`state_as_str`]'s output.
pub fn parse_state(s: &str) -> Option<State> {
    Some(match s {
        "creating" => State::Creating,
        "running" => State::Running,
        "deleting" => State::Deleting,
        "deleted" => State::Deleted,
        "timeout" => State::Timeout,
        _ => return None,
    })
}

/// The stored name of how an instance came to be known.
pub fn cause_as_str(cause: Cause) -> &'static str {
    match cause {
        Cause::Requested => "requested",
        Cause::Preexisted => "preexisted",
        Cause::Restored => "restored",
    }
}

/// Parses [`cause_as_str`]'s output.
pub fn parse_cause(s: &str) -> Option<Cause> {
    Some(match s {
        "requested" => Cause::Requested,
        "preexisted" => Cause::Preexisted,
        "restored" => Cause::Restored,
        _ => return None,
    })
}

/// The stored name of why an instance is being removed.
pub fn removal_as_str(reason: RemovalReason) -> &'static str {
    match reason {
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

/// Parses [`removal_as_str`]'s output.
pub fn parse_removal(s: &str) -> Option<RemovalReason> {
    Some(match s {
        "idle_time" => RemovalReason::IdleTime,
        "max_use_count" => RemovalReason::MaxUseCount,
        "unhealthy" => RemovalReason::Unhealthy,
        "ready_up_failed" => RemovalReason::ReadyUpFailed,
        "timeout" => RemovalReason::Timeout,
        "removed_from_outside" => RemovalReason::RemovedFromOutside,
        "shutdown" => RemovalReason::Shutdown,
        "reconcile" => RemovalReason::Reconcile,
        "acquisitions_at_restart" => RemovalReason::AcquisitionsAtRestart,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips() {
        let all = [
            State::Creating,
            State::Running,
            State::Deleting,
            State::Deleted,
            State::Timeout,
        ];
        for s in all {
            assert_eq!(parse_state(state_as_str(s)), Some(s));
        }
        assert_eq!(parse_state("Running"), None);
    }

    #[test]
    fn every_cause_round_trips() {
        for c in [Cause::Requested, Cause::Preexisted, Cause::Restored] {
            assert_eq!(parse_cause(cause_as_str(c)), Some(c));
        }
        assert_eq!(parse_cause(""), None);
    }

    #[test]
    fn every_removal_reason_round_trips_with_distinct_names() {
        let all = [
            RemovalReason::IdleTime,
            RemovalReason::MaxUseCount,
            RemovalReason::Unhealthy,
            RemovalReason::ReadyUpFailed,
            RemovalReason::Timeout,
            RemovalReason::RemovedFromOutside,
            RemovalReason::Shutdown,
            RemovalReason::Reconcile,
        ];
        let mut names = std::collections::HashSet::new();
        for r in all {
            assert_eq!(parse_removal(removal_as_str(r)), Some(r));
            assert!(names.insert(removal_as_str(r)));
        }
        assert_eq!(parse_removal("idle"), None);
    }
}
