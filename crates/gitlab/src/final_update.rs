//! The final `PUT /jobs/:id`: the job's state, failure reason, exit code and the trace's
//! checksum and size. It follows GitLab Runner's `network/trace.go` (`finalUpdate`,
//! `finishWithFinalUpdate`, `ensureAllTraceSent`):
//!
//! - every trace PATCH is accepted before the PUT is sent; a PATCH that fails counts as a
//!   failed attempt;
//! - a 202 ("accepted, trace still being persisted": Rails' `Ci::UpdateBuildStateService`
//!   answers it while live trace chunks are persisted, for up to five minutes) is not a
//!   failure: the PUT is repeated after `Retry-After`, else `X-GitLab-Trace-Update-Interval`,
//!   else the backoff of `lib/gitlab/ci/runner/backoff.rb`, for as long as GitLab answers it;
//! - a 412 (checksum mismatch, older GitLab) resends the whole log, also without counting;
//! - only failures (5xx, 408, 429, no answer) count toward the attempts (10), with a backoff
//!   doubling from the client's base up to 60 minutes (a server's `Retry-After` wins);
//! - 403, 404, or `Job-Status: canceled|failed` mean GitLab has a final state already; any
//!   other client error means it will never take this one.

use super::rails_backoff::rails_backoff;
use super::retry::RetryPolicy;
use super::trace::{SendOutcome, Shared};
use super::wire::{TraceOutput, UpdateJobRequest};
use flotilla_job::{Outcome, TraceSummary};
use std::time::Duration;
use tokio::time::Instant;

/// How the final update ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalReport {
    /// GitLab applied it (200).
    Accepted {
        /// PUTs sent, this one included (202s and failures included).
        attempts: u32,
    },
    /// GitLab no longer takes updates for the job (canceled, token revoked, 403/404): it
    /// has its final state already.
    Gone {
        /// The status that said so (0 when learned from `Job-Status` alone).
        status: u16,
    },
    /// GitLab refused the update with a client error it will give again (400, 409, 422):
    /// sending it again is pointless. The job stays as GitLab has it.
    Refused {
        /// The status.
        status: u16,
    },
    /// Every attempt failed; the job stays `running` on GitLab until its stuck-job timeout.
    GaveUp {
        /// The last failure.
        error: String,
    },
}

impl FinalReport {
    /// Whether nothing more can be done for the job (accepted, gone, or refused for good).
    pub fn settled(&self) -> bool {
        !matches!(self, FinalReport::GaveUp { .. })
    }
}

/// The wire fields of an outcome: state, failure reason, exit code.
pub(crate) fn wire_fields(
    outcome: &Outcome,
    supported: &[String],
) -> (&'static str, Option<&'static str>, Option<i32>) {
    match outcome {
        Outcome::Success => ("success", None, None),
        Outcome::Failed { reason, exit_code } => (
            "failed",
            Some(reason.for_gitlab(supported).as_str()),
            *exit_code,
        ),
    }
}

/// Whether a status of a final update is a refusal GitLab will repeat.
fn refused_for_good(status: u16) -> bool {
    (400..500).contains(&status) && !matches!(status, 408 | 412 | 429)
}

/// The wait after the `failures`-th failure: GitLab Runner's `retry.WithBackoff(1s, max)`,
/// with the client's base delay.
fn failure_backoff(
    retry: RetryPolicy,
    failures: u32,
    hint: Option<Duration>,
    max: Duration,
) -> Duration {
    RetryPolicy { max, ..retry }.delay(failures, hint, rand::random::<f64>())
}

pub(crate) async fn run(shared: &Shared, outcome: &Outcome, summary: &TraceSummary) -> FinalReport {
    if shared.is_gone() {
        return FinalReport::Gone {
            status: shared.gone_status(),
        };
    }
    let (state, failure_reason, exit_code) = wire_fields(outcome, &shared.failure_reasons);
    let checksum = summary.checksum();
    let limit = shared.options.final_update_attempts.max(1);
    let max_backoff = shared.options.final_update_backoff_max;
    let retry = shared.client.retry_policy();
    let mut failures = 0;
    let mut puts = 0;
    let mut first_accepted: Option<Instant> = None;
    let mut last_error = String::from("no attempt was made");
    loop {
        let failed = |failures: &mut u32, error: String, last_error: &mut String| {
            *failures += 1;
            *last_error = error;
            *failures >= limit
        };
        match shared.send_pending().await {
            SendOutcome::AllSent => {}
            SendOutcome::Gone => {
                return FinalReport::Gone {
                    status: shared.gone_status(),
                };
            }
            SendOutcome::Failed(e) => {
                if failed(
                    &mut failures,
                    format!("sending the rest of the log: {e}"),
                    &mut last_error,
                ) {
                    break;
                }
                tokio::time::sleep(failure_backoff(retry, failures, None, max_backoff)).await;
                continue;
            }
        }
        let req = UpdateJobRequest {
            info: shared.client.info(),
            token: shared.token.expose(),
            state,
            failure_reason,
            checksum: Some(checksum.clone()),
            output: Some(TraceOutput {
                checksum: checksum.clone(),
                bytesize: summary.bytesize,
            }),
            exit_code,
        };
        puts += 1;
        let resp = match shared.client.update_job(shared.job_id, &req).await {
            Ok(resp) => resp,
            Err(e) => {
                if failed(&mut failures, e.to_string(), &mut last_error) {
                    break;
                }
                tokio::time::sleep(failure_backoff(retry, failures, None, max_backoff)).await;
                continue;
            }
        };
        match resp.status {
            200 => {
                tracing::info!(
                    job = shared.job_id,
                    state,
                    failure_reason,
                    attempts = puts,
                    "job reported to GitLab"
                );
                return FinalReport::Accepted { attempts: puts };
            }
            202 => {
                let now = Instant::now();
                let since = *first_accepted.get_or_insert(now);
                let wait = resp
                    .retry_after
                    .or(resp.update_interval)
                    .unwrap_or_else(|| rails_backoff(now - since));
                tracing::debug!(
                    job = shared.job_id,
                    wait_ms = wait.as_millis() as u64,
                    "GitLab accepted the final update but still persists the log; asking again"
                );
                tokio::time::sleep(wait).await;
            }
            412 => {
                tracing::warn!(
                    job = shared.job_id,
                    "GitLab's copy of the job log failed its checksum; resending all of it"
                );
                shared.lock_buf().reset();
                tokio::time::sleep(shared.interval()).await;
            }
            403 | 404 => {
                shared.mark_gone(resp.status);
                return FinalReport::Gone {
                    status: resp.status,
                };
            }
            status if resp.remote == super::job_status::RemoteJobState::Gone => {
                shared.mark_gone(status);
                return FinalReport::Gone { status };
            }
            status if refused_for_good(status) => {
                tracing::error!(
                    job = shared.job_id,
                    status,
                    state,
                    "GitLab refused the job's final update; it is not sent again"
                );
                return FinalReport::Refused { status };
            }
            status => {
                if failed(
                    &mut failures,
                    format!("GitLab answered {status}"),
                    &mut last_error,
                ) {
                    break;
                }
                tokio::time::sleep(failure_backoff(
                    retry,
                    failures,
                    resp.retry_after,
                    max_backoff,
                ))
                .await;
            }
        }
    }
    tracing::error!(job = shared.job_id, error = %last_error, failures, "giving up on the job's final update");
    FinalReport::GaveUp { error: last_error }
}

#[cfg(test)]
mod tests {
    use super::{refused_for_good, wire_fields};
    use flotilla_job::{FailureReason, Outcome};

    #[test]
    fn outcomes_map_to_wire_fields() {
        assert_eq!(wire_fields(&Outcome::Success, &[]), ("success", None, None));
        let failed = Outcome::Failed {
            reason: FailureReason::ScriptFailure,
            exit_code: Some(3),
        };
        assert_eq!(
            wire_fields(&failed, &[]),
            ("failed", Some("script_failure"), Some(3))
        );
        let canceled = Outcome::Failed {
            reason: FailureReason::JobCanceled,
            exit_code: None,
        };
        assert_eq!(wire_fields(&canceled, &[]).1, Some("unknown_failure"));
        assert_eq!(
            wire_fields(&canceled, &["job_canceled".to_string()]).1,
            Some("job_canceled")
        );
        let interrupted = Outcome::Failed {
            reason: FailureReason::RunnerInterrupted,
            exit_code: None,
        };
        assert_eq!(wire_fields(&interrupted, &[]).1, Some("unknown_failure"));
    }

    #[test]
    fn only_client_errors_that_will_repeat_end_the_update() {
        for s in [400, 401, 409, 410, 422] {
            assert!(refused_for_good(s), "{s}");
        }
        for s in [200, 202, 408, 412, 429, 500, 502, 503] {
            assert!(!refused_for_good(s), "{s}");
        }
    }
}
