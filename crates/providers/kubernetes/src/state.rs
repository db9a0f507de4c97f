//! How a pod's phase and conditions become an instance state (pure; the clock is passed in).
//!
//! From the API reference's pod lifecycle (`PodPhase`, `PodCondition` in
//! `staging/src/k8s.io/api/core/v1/types.go`):
//! - being deleted (`metadata.deletionTimestamp`) → `deleting`;
//! - `Running` with the `Ready` condition true → `running`;
//! - `Pending`, `Unknown`, or `Running` but not ready → `creating`, until the pod is older
//!   than the pending timeout → `timeout` (the scaler then deletes it);
//! - `Succeeded` or `Failed`: the pod's container ended, it can serve no job → `timeout`.

use flotilla_fleet::State;
use k8s_openapi::api::core::v1::Pod;
use std::time::{Duration, SystemTime};

/// The instance state of `pod` at `now`.
pub fn instance_state(pod: &Pod, now: SystemTime, pending_timeout: Duration) -> State {
    if pod.metadata.deletion_timestamp.is_some() {
        return State::Deleting;
    }
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    match phase {
        "Running" if is_ready(pod) => State::Running,
        "Succeeded" | "Failed" => State::Timeout,
        _ => {
            let created = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| SystemTime::from(t.0));
            match created.and_then(|c| now.duration_since(c).ok()) {
                Some(age) if age > pending_timeout => State::Timeout,
                _ => State::Creating,
            }
        }
    }
}

/// Whether the pod's `Ready` condition is true.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Why a pod is not ready, from its status: its phase, each condition that is not true (type,
/// reason, message) and each container waiting or terminated (reason, message). This is
/// what a "timed out waiting for the pod" message must carry.
pub fn not_ready_reasons(pod: &Pod) -> String {
    let Some(status) = pod.status.as_ref() else {
        return "no status yet".into();
    };
    let mut parts = vec![format!(
        "phase {}",
        status.phase.as_deref().unwrap_or("unknown")
    )];
    for c in status.conditions.iter().flatten() {
        if c.status != "True" {
            let mut s = format!("{} {}", c.type_, c.status);
            if let Some(r) = &c.reason {
                s.push_str(&format!(" ({r})"));
            }
            if let Some(m) = &c.message {
                s.push_str(&format!(": {m}"));
            }
            parts.push(s);
        }
    }
    for cs in status.container_statuses.iter().flatten() {
        let state = cs.state.as_ref();
        if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            parts.push(format!(
                "container {} waiting: {} {}",
                cs.name,
                w.reason.as_deref().unwrap_or(""),
                w.message.as_deref().unwrap_or("")
            ));
        }
        if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            parts.push(format!(
                "container {} terminated with exit code {} ({})",
                cs.name,
                t.exit_code,
                t.reason.as_deref().unwrap_or("")
            ));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    const T0: &str = "2026-01-01T00:00:00Z";

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600 + seconds)
    }

    #[test]
    fn phases_and_conditions_map_to_states() {
        let limit = Duration::from_secs(60);
        let ready = pod(
            json!({"metadata": {"creationTimestamp": T0}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(instance_state(&ready, at(5), limit), State::Running);
        assert_eq!(
            instance_state(&ready, at(5000), limit),
            State::Running,
            "age matters only before ready"
        );
        let unready = pod(
            json!({"metadata": {"creationTimestamp": T0}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}),
        );
        assert_eq!(instance_state(&unready, at(5), limit), State::Creating);
        assert_eq!(instance_state(&unready, at(61), limit), State::Timeout);
        let pending =
            pod(json!({"metadata": {"creationTimestamp": T0}, "status": {"phase": "Pending"}}));
        assert_eq!(instance_state(&pending, at(60), limit), State::Creating);
        assert_eq!(instance_state(&pending, at(61), limit), State::Timeout);
        let failed =
            pod(json!({"metadata": {"creationTimestamp": T0}, "status": {"phase": "Failed"}}));
        assert_eq!(instance_state(&failed, at(1), limit), State::Timeout);
        let deleting = pod(
            json!({"metadata": {"creationTimestamp": T0, "deletionTimestamp": T0}, "status": {"phase": "Running"}}),
        );
        assert_eq!(instance_state(&deleting, at(1), limit), State::Deleting);
    }

    #[test]
    fn the_reasons_name_the_condition_and_the_container() {
        let p = pod(json!({"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}
        ], "containerStatuses": [{"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}}));
        let why = not_ready_reasons(&p);
        assert!(why.contains("phase Pending"), "{why}");
        assert!(
            why.contains(
                "PodScheduled False (Unschedulable): 0/3 nodes are available: 3 Insufficient cpu."
            ),
            "{why}"
        );
        assert!(
            why.contains("container main waiting: ImagePullBackOff Back-off pulling image"),
            "{why}"
        );
    }
}
