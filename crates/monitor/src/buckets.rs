//! Histogram buckets: GitLab Runner's where it has them, the `instance_*_buckets` keys of
//! `[runners.autoscaler]` for the fleeting and taskscaler histograms.

/// `gitlab_runner_job_duration_seconds` (GitLab Runner `commands/builds_helper.go`).
pub const JOB_DURATION: [f64; 10] = [
    30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 10800.0, 18000.0, 36000.0,
];

/// `gitlab_runner_job_stage_duration_seconds` (`commands/builds_helper.go`,
/// `jobStagesDurationHistogram`).
pub const JOB_STAGE_DURATION: [f64; 10] = [
    1.0, 3.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0,
];

/// `gitlab_runner_job_queue_duration_seconds` (GitLab Runner `commands/builds_helper.go`).
pub const JOB_QUEUE_DURATION: [f64; 10] = [
    1.0, 3.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0,
];

/// `gitlab_runner_api_request_duration_seconds` (GitLab Runner
/// `network/api_requests_collector.go`).
pub const API_REQUEST_DURATION: [f64; 9] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// flotilla's default for instance operations (creation, running, deletion, readiness),
/// used when neither the specific key nor `instance_operation_time_buckets` is set. The
/// defaults of fleeting's own collectors are not published (its source is not public
/// outside gitlab.com), so these are flotilla's choice: from seconds (containers) to tens
/// of minutes (Windows VMs).
pub const INSTANCE_OPERATION: [f64; 12] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 300.0, 600.0, 1800.0,
];

/// flotilla's default for instance life durations (see [`INSTANCE_OPERATION`]).
pub const INSTANCE_LIFE: [f64; 10] = [
    60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, 604800.0,
];

/// flotilla's buckets for queue → first log byte and isolation start times: milliseconds
/// (a warm shell slot) to minutes (a cold VM).
pub const JOB_START: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// The histogram buckets of one runner's fleet, as `[runners.autoscaler]` sets them.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceBuckets {
    /// `fleeting_provisioner_instance_creation_time_seconds`.
    pub creation: Vec<f64>,
    /// `fleeting_provisioner_instance_is_running_time_seconds`.
    pub is_running: Vec<f64>,
    /// `fleeting_provisioner_instance_deletion_time_seconds`.
    pub deletion: Vec<f64>,
    /// `fleeting_taskscaler_task_instance_readiness_time_seconds`.
    pub readiness: Vec<f64>,
    /// `fleeting_provisioner_instance_life_duration_seconds`.
    pub life: Vec<f64>,
}

impl Default for InstanceBuckets {
    fn default() -> Self {
        InstanceBuckets::from_config(None, None, None, None, None, None)
    }
}

impl InstanceBuckets {
    /// GitLab's rule (`common/config.go`, `GetInstance*TimeBuckets`): a specific key wins,
    /// else `instance_operation_time_buckets`; life durations have no fallback key.
    pub fn from_config(
        operation: Option<&[f64]>,
        creation: Option<&[f64]>,
        is_running: Option<&[f64]>,
        deletion: Option<&[f64]>,
        readiness: Option<&[f64]>,
        life: Option<&[f64]>,
    ) -> InstanceBuckets {
        let pick = |specific: Option<&[f64]>| -> Vec<f64> {
            specific
                .filter(|b| !b.is_empty())
                .or(operation.filter(|b| !b.is_empty()))
                .map_or_else(|| INSTANCE_OPERATION.to_vec(), <[f64]>::to_vec)
        };
        InstanceBuckets {
            creation: pick(creation),
            is_running: pick(is_running),
            deletion: pick(deletion),
            readiness: pick(readiness),
            life: life
                .filter(|b| !b.is_empty())
                .map_or_else(|| INSTANCE_LIFE.to_vec(), <[f64]>::to_vec),
        }
    }
}

/// Why a bucket list cannot be used.
pub fn check(buckets: &[f64]) -> Result<(), String> {
    if buckets.iter().any(|b| !b.is_finite()) {
        return Err("bucket bounds must be finite numbers".into());
    }
    if buckets.windows(2).any(|w| w[0] >= w[1]) {
        return Err("bucket bounds must be in strictly increasing order".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specific_keys_win_then_the_operation_key() {
        let op = [1.0, 2.0];
        let creation = [5.0];
        let b = InstanceBuckets::from_config(Some(&op), Some(&creation), None, None, None, None);
        assert_eq!(b.creation, vec![5.0]);
        assert_eq!(b.is_running, vec![1.0, 2.0]);
        assert_eq!(b.deletion, vec![1.0, 2.0]);
        assert_eq!(b.readiness, vec![1.0, 2.0]);
        assert_eq!(b.life, INSTANCE_LIFE.to_vec());
        let d = InstanceBuckets::default();
        assert_eq!(d.creation, INSTANCE_OPERATION.to_vec());
    }

    #[test]
    fn bucket_lists_must_increase() {
        assert!(check(&[1.0, 2.0, 3.0]).is_ok());
        assert!(check(&[]).is_ok());
        assert!(check(&[2.0, 1.0]).is_err());
        assert!(check(&[1.0, 1.0]).is_err());
        assert!(check(&[f64::NAN]).is_err());
    }
}
