//! The final `PUT /jobs/:id`: the job's state, failure reason, exit code and the trace's
//! checksum and size, repeated while GitLab answers 202 (trace still being persisted) and
//! after resending the whole trace on 412 (checksum mismatch).

use super::trace::Shared;
use super::wire::{TraceOutput, UpdateJobRequest};
use flotilla_job::{Outcome, TraceSummary};
use std::time::Duration;

/// How the final update ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalReport {
    /// GitLab applied it (200).
    Accepted {
        /// PUTs sent, this one included.
        attempts: u32,
    },
    /// GitLab no longer takes updates for the job (canceled, token revoked, 403/404): it
    /// has its final state already.
    Gone {
        /// The status that said so (0 when learned from `Job-Status` alone).
        status: u16,
    },
    /// Every attempt failed; the job stays `running` on GitLab until its stuck-job timeout.
    GaveUp {
        /// The last failure.
        error: String,
    },
}

impl FinalReport {
    /// Whether GitLab holds a final state for the job (accepted, or gone).
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

pub(crate) async fn run(shared: &Shared, outcome: &Outcome, summary: &TraceSummary) -> FinalReport {
    if shared.is_gone() {
        return FinalReport::Gone {
            status: shared.gone_status(),
        };
    }
    let (state, failure_reason, exit_code) = wire_fields(outcome, &shared.failure_reasons);
    let checksum = summary.checksum();
    let attempts = shared.options.final_update_attempts.max(1);
    let retry = shared.client.retry_policy();
    let mut last_error = String::from("no attempt was made");
    let mut backoff_attempt = 0;
    for attempt in 1..=attempts {
        shared.send_pending().await;
        if shared.is_gone() {
            return FinalReport::Gone {
                status: shared.gone_status(),
            };
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
        let wait = match shared.client.update_job(shared.job_id, &req).await {
            Ok(resp) => match resp.status {
                200 => {
                    tracing::info!(
                        job = shared.job_id,
                        state,
                        failure_reason,
                        attempts = attempt,
                        "job reported to GitLab"
                    );
                    return FinalReport::Accepted { attempts: attempt };
                }
                202 => {
                    // GitLab still persists trace chunks: wait, send any rest, ask again.
                    Some(resp.update_interval.unwrap_or_else(|| shared.interval()))
                }
                412 => {
                    tracing::warn!(
                        job = shared.job_id,
                        "GitLab's copy of the job log failed its checksum; resending all of it"
                    );
                    shared.lock_buf().reset();
                    None
                }
                403 | 404 => {
                    shared.mark_gone(resp.status);
                    return FinalReport::Gone {
                        status: resp.status,
                    };
                }
                status => {
                    last_error = format!("GitLab answered {status}");
                    backoff_attempt += 1;
                    Some(backoff(
                        retry,
                        backoff_attempt,
                        shared.options.final_update_backoff_max,
                    ))
                }
            },
            Err(e) => {
                last_error = e.to_string();
                backoff_attempt += 1;
                Some(backoff(
                    retry,
                    backoff_attempt,
                    shared.options.final_update_backoff_max,
                ))
            }
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
    tracing::error!(job = shared.job_id, error = %last_error, "giving up on the job's final update");
    FinalReport::GaveUp { error: last_error }
}

fn backoff(retry: super::retry::RetryPolicy, attempt: u32, max: Duration) -> Duration {
    let p = super::retry::RetryPolicy { max, ..retry };
    p.delay(attempt, None, rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::wire_fields;
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
        assert_eq!(wire_fields(&canceled, &[]).1, Some("script_failure"));
        assert_eq!(
            wire_fields(&canceled, &["job_canceled".to_string()]).1,
            Some("job_canceled")
        );
    }
}
