//! The client and job source against `gitlab-runner-mock` 0.3.2 (Collabora's independent
//! fake of the runner API) for the request → trace → final update happy path.
//!
//! Disagreements between the two fakes and the reference (gitlab-runner-protocol.md §1):
//!
//! - **verify**: the mock has no `POST /runners/verify` (404); the reference (§1.2) and our
//!   fake answer 200, or 403 for unknown tokens. This test does not call verify.
//! - **long polling**: the mock never sends `X-GitLab-Last-Update` and does not long-poll,
//!   so the client never sends `last_update` and asks every `check_interval`. Our fake
//!   models Workhorse (§1.3); it also ticks the queue value when it hands a job out and
//!   sends the queue value only on "Rails" answers, not on Workhorse's long-poll 204s
//!   (inferred: the reference says the header comes from Rails).
//! - **two-phase commit**: the mock makes a job `running` when it hands it out and treats
//!   `PUT state=running` as a touch; `state=pending` would panic its state machine. Our fake
//!   waits for the accept (§1.5) and requeues a job whose accept does not come within an ack
//!   timeout (the requeue is our assumption; the reference does not say what GitLab does).
//! - **416**: the mock answers 416 without a `Range` header, so a client cannot learn the
//!   size it holds (the reference's recovery, §1.6, needs it); our fake sends `Range`.
//!   It also checks that the `Content-Range` end equals `start + len - 1`, like our fake;
//!   GitLab itself ignores the end (`AppendBuildTraceService`).
//! - **final update**: the mock never answers 202 or 412 and does not check the checksum;
//!   our fake does both. What GitLab does with its stored trace on a 412 is not in the
//!   reference; our fake drops its copy so the resent trace (from offset 0) appends.
//! - **cancellation**: the mock has no `canceling` (graceful) state; its canceled jobs
//!   answer 403 with `Job-Status: canceled`.
//! - **artifacts**: the mock reads `artifact_type` / `artifact_format` from multipart
//!   fields; the reference (§1.9) and our fake take them from the query string, which is
//!   what our client sends. The mock's payload spells `expire_in` as `exprire_in`.
//! - **features**: the mock hands out jobs only to runners advertising `refspecs`, and
//!   asserts (panics) that `system_id` is exactly 14 characters; the reference allows up
//!   to 64.

mod runner_support;

use flotilla_gitlab::{Client, JobSource};
use gitlab_runner_mock::{GitlabRunnerMock, MockJobState, MockJobStepName, MockJobStepWhen};
use runner_support::*;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn the_happy_path_works_against_gitlab_runner_mock() {
    let mock = GitlabRunnerMock::start().await;
    mock.set_update_interval(1);
    let mut b = mock.job_builder("mocked".into());
    b.add_variable("GIT_STRATEGY".into(), "none".into(), true, false);
    b.add_variable(
        "MOCK_SECRET".into(),
        "mock-secret-value-42".into(),
        false,
        true,
    );
    b.add_step(
        MockJobStepName::Script,
        vec![
            "echo hello from the mock".into(),
            "echo secret is $MOCK_SECRET".into(),
        ],
        3600,
        MockJobStepWhen::OnSuccess,
        false,
    );
    b.add_step(
        MockJobStepName::AfterScript,
        vec!["echo after".into()],
        3600,
        MockJobStepWhen::Always,
        true,
    );
    let job = b.build();
    mock.enqueue_job(job.clone());

    let url = mock.uri().to_string();
    let c = Arc::new(Client::new(client_config(&url, mock.runner_token())).unwrap());
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let source = Arc::new(JobSource::new(c, exec.clone(), source_config()));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    for _ in 0..600 {
        if job.finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(job.state(), MockJobState::Success);
    let id = job.id() as i64;
    let log = job.log();
    assert_eq!(log, exec.log(id), "the mock holds exactly the emitted log");
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("hello from the mock"), "{text}");
    assert!(text.contains("secret is [MASKED]"), "{text}");
    assert!(text.contains("after"), "{text}");
    assert!(job.log_patches() >= 1);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_succeeded, 1);
}
