//! The client and job source against `gitlab-runner-mock` 0.3.2 (Collabora's independent fake
//! of the runner API), for every point of issue 11 it can express:
//!
//! - acceptance: the mock, like GitLab as installed, makes a job `running` when it hands it
//!   out and takes `PUT state=running` as a touch; the job is accepted once, right away, then
//!   reported (the mock counts state updates);
//! - the happy path with a masked variable, and a failing job whose `after_script` runs;
//! - cancellation surfacing as a 403 with `Job-Status: canceled` on the next update;
//! - artifact uploads, named `Base(name)` + `.zip`.
//!
//! Where the mock disagrees with GitLab's sources (and so cannot judge a point):
//!
//! - **verify**: the mock has none (404); Rails answers 200 with the runner's id, 403, or 422
//!   when orphaned. Not called here.
//! - **long polling**: the mock never sends `X-GitLab-Last-Update` and does not long-poll.
//! - **two-phase acceptance**: the mock has none; `PUT state=pending` on its running jobs
//!   panics its state machine (Rails answers 400).
//! - **416**: answered without `Range`, so a client cannot learn the size it holds (Rails
//!   sends `Range: 0-<size>`); it also checks the `Content-Range` end, which Rails ignores
//!   (`AppendBuildTraceService`).
//! - **final update**: never 202 (Rails: while live trace chunks are persisted); the checksum
//!   is not looked at; `failure_reason` and `exit_code` are not recorded.
//! - **unknown jobs**: 404 (Rails: 403, `authenticate_job!`).
//! - **artifacts**: `artifact_type`/`artifact_format` read from multipart fields (Rails and
//!   GitLab Runner use the query string, so the mock records none); dependency downloads
//!   authorised only by the dependency's own token, where current Rails accepts only the
//!   running job's (`authenticate_job_via_dependent_job!`), which flotilla sends.
//! - **cancellation**: no `canceling` (graceful) state.
//! - **features**: jobs only for runners advertising `refspecs`; `system_id` must be exactly
//!   14 characters (asserted, panicking the mock).

use crate::runner_support;

use flotilla_gitlab::{Client, JobSource};
use gitlab_runner_mock::{
    GitlabRunnerMock, MockJob, MockJobBuilder, MockJobState, MockJobStepName, MockJobStepWhen,
};
use runner_support::*;
use std::sync::Arc;
use std::time::Duration;

fn builder(mock: &GitlabRunnerMock, name: &str) -> MockJobBuilder {
    let mut b = mock.job_builder(name.into());
    b.add_variable("GIT_STRATEGY".into(), "none".into(), true, false);
    b
}

fn script(b: &mut MockJobBuilder, lines: &[&str]) {
    b.add_step(
        MockJobStepName::Script,
        lines.iter().map(|s| s.to_string()).collect(),
        3600,
        MockJobStepWhen::OnSuccess,
        false,
    );
}

async fn wait_until(job: &MockJob, what: impl Fn(&MockJob) -> bool) {
    for _ in 0..600 {
        if what(job) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {} never got there: {:?}", job.id(), job.state());
}

struct Running {
    exec: Arc<LocalExecutor>,
    source: Arc<JobSource>,
    run: tokio::task::JoinHandle<flotilla_gitlab::SourceReport>,
}

async fn start(mock: &GitlabRunnerMock, with_artifacts: bool) -> Running {
    let url = mock.uri().to_string();
    let c = Arc::new(Client::new(client_config(&url, mock.runner_token())).unwrap());
    let artifacts = with_artifacts.then(|| gitlab_artifacts(&c));
    let exec = LocalExecutor::new(local_scaler(1, true).await, artifacts);
    let source = Arc::new(JobSource::new(c, exec.clone(), source_config()));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    Running { exec, source, run }
}

#[tokio::test]
async fn the_happy_path_works_against_gitlab_runner_mock() {
    let mock = GitlabRunnerMock::start().await;
    mock.set_update_interval(1);
    let mut b = builder(&mock, "mocked");
    b.add_variable(
        "MOCK_SECRET".into(),
        "mock-secret-value-42".into(),
        false,
        true,
    );
    script(
        &mut b,
        &["echo hello from the mock", "echo secret is $MOCK_SECRET"],
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
    let r = start(&mock, false).await;
    wait_until(&job, |j| j.clone().finished()).await;
    assert_eq!(job.state(), MockJobState::Success);
    let id = job.id() as i64;
    let log = job.log();
    assert_eq!(
        log,
        r.exec.log(id),
        "the mock holds exactly the emitted log"
    );
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("hello from the mock"), "{text}");
    assert!(text.contains("secret is [MASKED]"), "{text}");
    assert!(!text.contains("mock-secret-value-42"), "{text}");
    assert!(text.contains("after"), "{text}");
    assert!(job.log_patches() >= 1);
    // Hand-out (running), the accept right after it (a touch), the final success: nothing
    // else changes the job's state, `pending` least of all.
    assert_eq!(job.state_updates(), 3);
    r.source.stop_handle().graceful();
    let report = r.run.await.unwrap();
    assert_eq!(report.jobs_succeeded, 1);
    assert_eq!(report.accepts_unanswered, 0);
}

#[tokio::test]
async fn a_failing_job_runs_its_after_script_and_is_reported_failed_on_the_mock() {
    let mock = GitlabRunnerMock::start().await;
    mock.set_update_interval(1);
    let mut b = builder(&mock, "failing");
    script(&mut b, &["echo about to fail", "exit 7"]);
    b.add_step(
        MockJobStepName::AfterScript,
        vec!["echo after_script ran".into()],
        3600,
        MockJobStepWhen::Always,
        true,
    );
    let job = b.build();
    mock.enqueue_job(job.clone());
    let r = start(&mock, false).await;
    wait_until(&job, |j| j.clone().finished()).await;
    assert_eq!(job.state(), MockJobState::Failed);
    let text = String::from_utf8_lossy(&job.log()).into_owned();
    assert!(text.contains("after_script ran"), "{text}");
    assert!(text.contains("exit code 7"), "{text}");
    r.source.stop_handle().graceful();
    let report = r.run.await.unwrap();
    assert_eq!(report.jobs_failed, 1);
}

/// The mock answers the first update after a cancel with 403 and `Job-Status: canceled`:
/// the job is aborted at once and nothing more is sent.
#[tokio::test]
async fn a_job_canceled_on_the_mock_is_aborted() {
    let mock = GitlabRunnerMock::start().await;
    mock.set_update_interval(1);
    let mut b = builder(&mock, "long");
    script(
        &mut b,
        &[
            "echo started",
            "for i in $(seq 1 300); do echo tick; sleep 0.1; done",
        ],
    );
    let job = b.build();
    mock.enqueue_job(job.clone());
    let r = start(&mock, false).await;
    wait_until(&job, |j| String::from_utf8_lossy(&j.log()).contains("tick")).await;
    job.cancel();
    let id = job.id() as i64;
    for _ in 0..300 {
        if r.exec.result(id).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result = r.exec.result(id).expect("the job was aborted");
    assert!(!result.outcome.is_success());
    assert_eq!(job.state(), MockJobState::Cancelled);
    r.source.stop_handle().graceful();
    let report = r.run.await.unwrap();
    assert_eq!(report.jobs_failed, 1);
    assert_eq!(report.final_updates_given_up, 0);
}

#[tokio::test]
async fn artifacts_are_uploaded_to_the_mock_with_gitlab_runners_file_name() {
    let mock = GitlabRunnerMock::start().await;
    mock.set_update_interval(1);
    let mut b = builder(&mock, "producer");
    script(&mut b, &["mkdir -p out", "echo built > out/app.txt"]);
    b.add_artifact_paths(vec!["out/".into()]);
    let job = b.build();
    mock.enqueue_job(job.clone());
    let r = start(&mock, true).await;
    wait_until(&job, |j| j.clone().finished()).await;
    assert_eq!(
        job.state(),
        MockJobState::Success,
        "{}",
        String::from_utf8_lossy(&job.log())
    );
    let uploaded: Vec<_> = job.uploaded_artifacts().collect();
    assert_eq!(uploaded.len(), 1);
    // The mock's artifact has no name, so GitLab Runner's default: `artifacts` + `.zip`.
    assert_eq!(uploaded[0].filename.as_deref(), Some("artifacts.zip"));
    assert!(uploaded[0].data.starts_with(b"PK"));
    r.source.stop_handle().graceful();
    r.run.await.unwrap();
}
