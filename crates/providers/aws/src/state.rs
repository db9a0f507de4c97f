//! How an Auto Scaling instance's lifecycle state maps to an instance state.
//!
//! The states are those of `LifecycleState` in the Amazon EC2 Auto Scaling API Reference
//! (data type `AutoScalingInstanceDetails`, docs.aws.amazon.com/autoscaling/ec2/APIReference/
//! API_AutoScalingInstanceDetails.html): `Pending`, `Pending:Wait`, `Pending:Proceed`,
//! `Quarantined` (not used), `InService`, `Terminating`, `Terminating:Wait`,
//! `Terminating:Proceed`, `Terminated`, `Detaching`, `Detached`, `EnteringStandby`, `Standby`,
//! and the warm pool's `Warmed:*`.

use flotilla_fleet::State;

/// What one lifecycle state means to flotilla: a state in the listing, or not listed at all.
///
/// fleeting-plugin-aws maps `Terminat*` to deleting, `InService` to running and everything
/// else to creating. flotilla does the same, with three refinements that keep the scaler's
/// counts right:
/// - `Terminated` is [`State::Deleted`]: the instance is gone, not going.
/// - `Detaching` and `Detached` are [`State::Deleting`]: the instance is leaving the group and
///   will never serve it again (someone ran `detach-instances`).
/// - `Warmed:*` is not listed: a warm pool's instances are outside the group's desired
///   capacity until they leave the pool, when they pass through `Pending` like any other.
///   Listing them as creating would count them against `max_instances` and, since they never
///   come into service by themselves, have the scaler time them out and terminate them.
pub fn instance_state(lifecycle: &str) -> Option<State> {
    if lifecycle.starts_with("Warmed:") {
        return None;
    }
    Some(match lifecycle {
        "InService" => State::Running,
        "Terminated" => State::Deleted,
        s if s.starts_with("Terminating") => State::Deleting,
        "Detaching" | "Detached" => State::Deleting,
        // Pending*, EnteringStandby, Standby, Quarantined and anything newer: on its way, or
        // parked by someone; the scaler's startup timeout deals with one that never arrives.
        _ => State::Creating,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_state_maps() {
        let cases = [
            ("Pending", Some(State::Creating)),
            ("Pending:Wait", Some(State::Creating)),
            ("Pending:Proceed", Some(State::Creating)),
            ("Quarantined", Some(State::Creating)),
            ("InService", Some(State::Running)),
            ("Terminating", Some(State::Deleting)),
            ("Terminating:Wait", Some(State::Deleting)),
            ("Terminating:Proceed", Some(State::Deleting)),
            ("Terminated", Some(State::Deleted)),
            ("Detaching", Some(State::Deleting)),
            ("Detached", Some(State::Deleting)),
            ("EnteringStandby", Some(State::Creating)),
            ("Standby", Some(State::Creating)),
            ("Warmed:Pending", None),
            ("Warmed:Running", None),
            ("Warmed:Terminated", None),
            ("SomethingNew", Some(State::Creating)),
        ];
        for (aws, want) in cases {
            assert_eq!(instance_state(aws), want, "{aws}");
        }
    }
}
