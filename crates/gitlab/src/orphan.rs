//! Reporting a job that a previous manager process left running (it was killed, or its
//! final update never got through): one line at the end of the job's log saying so, then a
//! final `PUT` with the outcome that process recorded, or `runner_system_failure` when it
//! recorded none.
//!
//! The `PUT` carries no trace checksum: the log GitLab holds is whatever the dead process
//! sent, and Rails applies a final state without a checksum at once
//! (`Ci::UpdateBuildStateService#accept_available?`), so no 202 loop is needed.

use super::client::Client;
use super::final_update::{FinalReport, wire_fields};
use super::job_status::RemoteJobState;
use super::wire::UpdateJobRequest;
use bytes::Bytes;
use flotilla_fleet::Secret;
use flotilla_job::{FailureReason, Outcome};

const RED: &str = "\x1b[31;1m";
const RESET: &str = "\x1b[0;m";

/// What the previous process recorded about the job's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedEnd {
    /// Nothing: it died while the job ran (or waited for its slot).
    Unknown,
    /// The job succeeded; only the report was missing.
    Success,
    /// The job failed with this reason (its wire name) and exit code.
    Failed {
        /// The wire name of the reason (`script_failure` ...); one this runner does not know
        /// is sent as `unknown_failure`.
        failure_reason: String,
        /// The script's exit code.
        exit_code: Option<i32>,
    },
}

/// A job a previous process left unreported.
#[derive(Debug, Clone)]
pub struct LeftRunning {
    /// The job id.
    pub id: i64,
    /// Its job token.
    pub token: Secret<String>,
    /// What was recorded about its end.
    pub end: RecordedEnd,
}

impl LeftRunning {
    /// The outcome to report.
    pub fn outcome(&self) -> Outcome {
        match &self.end {
            RecordedEnd::Unknown => Outcome::Failed {
                reason: FailureReason::RunnerSystemFailure,
                exit_code: None,
            },
            RecordedEnd::Success => Outcome::Success,
            RecordedEnd::Failed {
                failure_reason,
                exit_code,
            } => Outcome::Failed {
                reason: FailureReason::from_wire(failure_reason)
                    .unwrap_or(FailureReason::UnknownFailure),
                exit_code: *exit_code,
            },
        }
    }
}

/// Appends `text` at the end of the log GitLab holds (its size learned from a 416); false when
/// GitLab no longer takes the job's log.
async fn append_note(client: &Client, job: &LeftRunning, text: &str) -> bool {
    let mut offset = 0;
    for _ in 0..3 {
        let body = Bytes::copy_from_slice(text.as_bytes());
        match client
            .patch_trace(job.id, &job.token, offset, body, false)
            .await
        {
            Ok(r) if r.remote == RemoteJobState::Gone || matches!(r.status, 403 | 404) => {
                return false;
            }
            Ok(r) if r.status == 416 => match r.range_end {
                Some(end) => offset = end,
                None => return true,
            },
            // Accepted, or not reachable now: the PUT decides.
            _ => return true,
        }
    }
    true
}

/// Reports `job` to GitLab. [`FinalReport::GaveUp`] means GitLab could not be reached (or
/// answered a server error): keep the record and try again at the next start.
pub async fn report_left_running(client: &Client, job: &LeftRunning) -> FinalReport {
    let outcome = job.outcome();
    let note = match &job.end {
        RecordedEnd::Unknown => format!(
            "\n{RED}ERROR: Job failed (system failure): the runner manager running this job stopped; \
             its next start reports it{RESET}\n"
        ),
        _ => "\nThe runner manager restarted before it could report this job; reported now.\n"
            .to_string(),
    };
    if !append_note(client, job, &note).await {
        return FinalReport::Gone { status: 403 };
    }
    let (state, failure_reason, exit_code) = wire_fields(&outcome, &[]);
    let request = UpdateJobRequest {
        info: client.info(),
        token: job.token.expose(),
        state,
        failure_reason,
        checksum: None,
        output: None,
        exit_code,
    };
    match client.update_job(job.id, &request).await {
        Ok(r) if r.status == 200 => FinalReport::Accepted { attempts: 1 },
        Ok(r) if matches!(r.status, 403 | 404) || r.remote == RemoteJobState::Gone => {
            FinalReport::Gone { status: r.status }
        }
        Ok(r) if (400..500).contains(&r.status) && !matches!(r.status, 408 | 429) => {
            FinalReport::Refused { status: r.status }
        }
        Ok(r) => FinalReport::GaveUp {
            error: format!("GitLab answered {}", r.status),
        },
        Err(e) => FinalReport::GaveUp {
            error: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_ends_become_outcomes() {
        let job = |end| LeftRunning {
            id: 1,
            token: Secret::new("t".into()),
            end,
        };
        assert_eq!(
            job(RecordedEnd::Unknown).outcome(),
            Outcome::Failed {
                reason: FailureReason::RunnerSystemFailure,
                exit_code: None
            }
        );
        assert_eq!(job(RecordedEnd::Success).outcome(), Outcome::Success);
        assert_eq!(
            job(RecordedEnd::Failed {
                failure_reason: "script_failure".into(),
                exit_code: Some(7)
            })
            .outcome(),
            Outcome::Failed {
                reason: FailureReason::ScriptFailure,
                exit_code: Some(7)
            }
        );
        assert_eq!(
            job(RecordedEnd::Failed {
                failure_reason: "something_new".into(),
                exit_code: None
            })
            .outcome(),
            Outcome::Failed {
                reason: FailureReason::UnknownFailure,
                exit_code: None
            }
        );
    }
}
