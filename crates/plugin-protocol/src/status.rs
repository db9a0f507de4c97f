//! The fleet's errors as gRPC status codes, and back (the table in
//! `proto/flotilla/instance_group.proto`).
//!
//! Plain status codes, so that a plugin in any language can say what went wrong without
//! knowing flotilla's error type.

use flotilla_fleet::FleetError;
use tonic::{Code, Status};

/// The status a plugin answers with for `e`.
pub fn to_status(e: &FleetError) -> Status {
    match e {
        FleetError::InstanceNotFound(id) => Status::not_found(id.clone()),
        FleetError::InstanceUnhealthy { reason, .. } => Status::failed_precondition(reason.clone()),
        FleetError::NotInitialized => Status::failed_precondition("provider not initialised"),
        FleetError::Config(m) => Status::invalid_argument(m.clone()),
        FleetError::Unsupported(op) => Status::unimplemented(format!("{op} is not supported")),
        FleetError::Provider { message, .. } => Status::unknown(message.clone()),
    }
}

/// The error a plugin's `status` means for the call `op` about instance `id` (for calls
/// about one instance). Codes that say the *transport* failed (unavailable, cancelled,
/// deadline exceeded) also end up as [`FleetError::Provider`]: the host decides before this
/// whether such a call is retried.
pub fn from_status(op: &'static str, id: Option<&str>, status: &Status) -> FleetError {
    let message = status.message().to_string();
    match (status.code(), id) {
        (Code::NotFound, Some(id)) => FleetError::InstanceNotFound(id.to_string()),
        (Code::FailedPrecondition, Some(id)) => FleetError::InstanceUnhealthy {
            id: id.to_string(),
            reason: message,
        },
        (Code::FailedPrecondition, None) => FleetError::NotInitialized,
        (Code::InvalidArgument, _) if op == "init" => FleetError::Config(message),
        (Code::Unimplemented, _) => FleetError::Unsupported(op),
        (code, _) => FleetError::provider(op, format!("{message} ({code:?})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fleet_error_comes_back_as_itself() {
        let id = Some("i-1");
        let cases = [
            (FleetError::InstanceNotFound("i-1".into()), "heartbeat", id),
            (
                FleetError::InstanceUnhealthy {
                    id: "i-1".into(),
                    reason: "stopped".into(),
                },
                "heartbeat",
                id,
            ),
            (FleetError::NotInitialized, "update", None),
            (FleetError::Config("bad key".into()), "init", None),
            (FleetError::Unsupported("increase"), "increase", None),
        ];
        for (e, op, id) in cases {
            let back = from_status(op, id, &to_status(&e));
            assert_eq!(back.to_string(), e.to_string(), "{e:?}");
        }
        let p = from_status(
            "update",
            None,
            &to_status(&FleetError::provider("update", "cloud said no")),
        );
        assert!(
            matches!(&p, FleetError::Provider { op: "update", message } if message.starts_with("cloud said no")),
            "{p:?}"
        );
    }

    #[test]
    fn transport_failures_are_provider_errors() {
        let e = from_status("update", None, &Status::unavailable("connection refused"));
        assert!(
            matches!(e, FleetError::Provider { op: "update", .. }),
            "{e:?}"
        );
    }
}
