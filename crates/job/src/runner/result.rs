//! What a job run ends with.

use crate::trace::TraceSummary;
use std::fmt;
use std::time::Duration;

/// Why a job failed, in GitLab's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// The user's script (or a stage acting on the user's behalf) failed.
    ScriptFailure,
    /// Something on the runner's side broke.
    RunnerSystemFailure,
    /// The job (or one of its steps) ran out of time.
    JobExecutionTimeout,
    /// An image could not be pulled.
    ImagePullFailure,
    /// Nothing more specific is known.
    UnknownFailure,
    /// The job asks for something this runner cannot do.
    RunnerConfigurationError,
    /// Something the runner depends on failed (a registry, a cache server).
    RunnerExternalDependencyFailure,
    /// The runner was interrupted (shut down) while running the job.
    RunnerInterrupted,
    /// The job was canceled (internal to the runner; mapped for GitLab).
    JobCanceled,
}

impl FailureReason {
    /// The reasons every GitLab accepts.
    pub const ALWAYS_SUPPORTED: [FailureReason; 3] = [
        FailureReason::ScriptFailure,
        FailureReason::RunnerSystemFailure,
        FailureReason::JobExecutionTimeout,
    ];

    /// The wire name, e.g. `script_failure`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::ScriptFailure => "script_failure",
            FailureReason::RunnerSystemFailure => "runner_system_failure",
            FailureReason::JobExecutionTimeout => "job_execution_timeout",
            FailureReason::ImagePullFailure => "image_pull_failure",
            FailureReason::UnknownFailure => "unknown_failure",
            FailureReason::RunnerConfigurationError => "runner_configuration_error",
            FailureReason::RunnerExternalDependencyFailure => "runner_external_dependency_failure",
            FailureReason::RunnerInterrupted => "runner_interrupted",
            FailureReason::JobCanceled => "job_canceled",
        }
    }

    /// The reason with this wire name, if it is one of this runner's.
    pub fn from_wire(name: &str) -> Option<FailureReason> {
        [
            FailureReason::ScriptFailure,
            FailureReason::RunnerSystemFailure,
            FailureReason::JobExecutionTimeout,
            FailureReason::ImagePullFailure,
            FailureReason::UnknownFailure,
            FailureReason::RunnerConfigurationError,
            FailureReason::RunnerExternalDependencyFailure,
            FailureReason::RunnerInterrupted,
            FailureReason::JobCanceled,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }

    /// The reason to report to a GitLab that accepts `supported` (its
    /// `features.failure_reasons`) besides the always-supported ones: the reason itself if
    /// accepted, else its older, wider category (`image_pull_failure` and
    /// `runner_external_dependency_failure` → `runner_system_failure`,
    /// `runner_configuration_error` → `script_failure`), else `unknown_failure`, which every
    /// GitLab knows (GitLab Runner's `common/failure_reason_mapper.go` `Map`; Rails maps any
    /// reason it does not know to it too, `Ci::UpdateBuildStateService#failure_reason`).
    pub fn for_gitlab(self, supported: &[String]) -> FailureReason {
        let accepted = |r: FailureReason| {
            Self::ALWAYS_SUPPORTED.contains(&r) || supported.iter().any(|s| s == r.as_str())
        };
        if accepted(self) {
            return self;
        }
        let wider = match self {
            FailureReason::ImagePullFailure | FailureReason::RunnerExternalDependencyFailure => {
                Some(FailureReason::RunnerSystemFailure)
            }
            FailureReason::RunnerConfigurationError => Some(FailureReason::ScriptFailure),
            _ => None,
        };
        wider.unwrap_or(FailureReason::UnknownFailure)
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Success or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The job succeeded.
    Success,
    /// The job failed.
    Failed {
        /// Why.
        reason: FailureReason,
        /// The script's exit code, when the script failed (for `allow_failure: exit_codes`).
        exit_code: Option<i32>,
    },
}

impl Outcome {
    /// Whether the job succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success)
    }
}

/// How one stage went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageReport {
    /// GitLab's stage name (`get_sources`, `step_script`, ...).
    pub name: String,
    /// How long it took.
    pub duration: Duration,
    /// Whether it succeeded (for after_script and caches, whose failures do not fail the job,
    /// this is still their own result).
    pub ok: bool,
}

/// The result of running a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobResult {
    /// Success, or failure with its reason and exit code.
    pub outcome: Outcome,
    /// The emitted log's size and checksum (for GitLab's final update).
    pub trace: TraceSummary,
    /// Wall time of the whole run.
    pub duration: Duration,
    /// The stages that ran, in order.
    pub stages: Vec<StageReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_reasons_fall_back_for_older_gitlabs() {
        let none: Vec<String> = vec![];
        assert_eq!(
            FailureReason::ImagePullFailure.for_gitlab(&none),
            FailureReason::RunnerSystemFailure
        );
        assert_eq!(
            FailureReason::RunnerConfigurationError.for_gitlab(&none),
            FailureReason::ScriptFailure
        );
        assert_eq!(
            FailureReason::JobExecutionTimeout.for_gitlab(&none),
            FailureReason::JobExecutionTimeout
        );
        assert_eq!(
            FailureReason::JobCanceled.for_gitlab(&none),
            FailureReason::UnknownFailure
        );
        assert_eq!(
            FailureReason::RunnerInterrupted.for_gitlab(&none),
            FailureReason::UnknownFailure
        );
        let newer = vec![
            "image_pull_failure".to_string(),
            "unknown_failure".to_string(),
        ];
        assert_eq!(
            FailureReason::ImagePullFailure.for_gitlab(&newer),
            FailureReason::ImagePullFailure
        );
        assert_eq!(
            FailureReason::RunnerInterrupted.for_gitlab(&newer),
            FailureReason::UnknownFailure
        );
        assert_eq!(
            FailureReason::from_wire("runner_interrupted"),
            Some(FailureReason::RunnerInterrupted)
        );
        assert_eq!(FailureReason::from_wire("stuck_or_timeout_failure"), None);
        assert_eq!(
            FailureReason::JobCanceled.for_gitlab(&["job_canceled".to_string()]),
            FailureReason::JobCanceled
        );
    }
}
