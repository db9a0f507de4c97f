//! Cancellation and stopping: GitLab's `canceling` (graceful: after_script runs) and
//! `canceled` (forced), noticed on trace PATCHes or on keep-alives of silent jobs; the job
//! timeout; the source's graceful and forced stop.

use crate::runner_support;

use flotilla_job::{FailureReason, Outcome};
use flotilla_testkit::fake_gitlab::{FakeJobState, GITLAB_FAILURE_REASONS, JobBuilder};
use runner_support::*;
use std::time::Duration;

#[tokio::test]
async fn graceful_cancel_runs_after_script_and_reports_the_job_failed() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("chatty")
            .script(["echo started", "while true; do echo tick; sleep 0.2; done"])
            .after_script(["echo after-script-ran"]),
    );
    wait_for_trace(&fake, id, "tick").await;
    fake.cancel(id);
    assert!(fake.wait_finished(&[id], Duration::from_secs(30)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Canceled, "{:?}", j.history);
    assert!(
        j.trace_text().contains("after-script-ran"),
        "{}",
        j.trace_text()
    );
    assert_eq!(j.trace, exec.log(id));
    let f = j.final_update.unwrap();
    assert_eq!(f.state, "failed");
    // job_canceled is internal; this GitLab does not list it, so unknown_failure.
    assert_eq!(f.failure_reason.as_deref(), Some("unknown_failure"));
    assert!(matches!(
        exec.result(id).unwrap().outcome,
        Outcome::Failed {
            reason: FailureReason::JobCanceled,
            ..
        }
    ));
    source.stop_handle().graceful();
    run.await.unwrap();
}

#[tokio::test]
async fn a_silent_job_learns_of_its_cancellation_from_a_keep_alive() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let mut config = source_config();
    config.trace.force_send_interval = Duration::from_millis(300);
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("silent")
            .script(["echo started", "sleep 60"])
            .after_script(["echo after-script-ran"]),
    );
    wait_for_trace(&fake, id, "started").await;
    fake.cancel(id);
    assert!(fake.wait_finished(&[id], Duration::from_secs(30)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Canceled);
    assert!(j.trace_text().contains("after-script-ran"));
    let told = fake
        .requests_to("PUT", &format!("/api/v4/jobs/{id}"))
        .into_iter()
        .any(|r| {
            r.json().unwrap()["state"] == "running" && r.json().unwrap().get("output").is_some()
        });
    assert!(told, "the cancellation came back on a keep-alive");
    source.stop_handle().graceful();
    run.await.unwrap();
}

#[tokio::test]
async fn forced_cancel_aborts_without_after_script_or_final_update() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("doomed")
            .script(["echo started", "while true; do echo tick; sleep 0.2; done"])
            .after_script(["echo after-script-ran"]),
    );
    wait_for_trace(&fake, id, "tick").await;
    fake.abort(id);
    // The executor ends the job promptly.
    for _ in 0..300 {
        if exec.result(id).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result = exec.result(id).expect("the job was aborted");
    assert!(!result.outcome.is_success());
    assert!(!String::from_utf8_lossy(&exec.log(id)).contains("after-script-ran"));
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Canceled);
    assert_eq!(
        j.final_updates, 0,
        "a canceled job's token is revoked: no final update"
    );
    assert_eq!(report.jobs_failed, 1);
    let after: Vec<_> = fake
        .requests_to("PATCH", &format!("/api/v4/jobs/{id}/trace"))
        .into_iter()
        .filter(|r| r.status == 403)
        .collect();
    assert_eq!(after.len(), 1, "one 403 stops all further updates");
}

#[tokio::test]
async fn a_job_past_its_timeout_fails_with_job_execution_timeout() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("slow").timeout_secs(2).script(["sleep 60"]),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(40)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    assert_eq!(
        j.final_update.unwrap().failure_reason.as_deref(),
        Some("job_execution_timeout")
    );
    source.stop_handle().graceful();
    run.await.unwrap();
}

#[tokio::test]
async fn a_graceful_stop_lets_running_jobs_finish_and_takes_no_more() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(2, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("running").script(["sleep 1", "echo finished"]),
    );
    fake.wait_for_job(id, Duration::from_secs(20), |j| {
        j.state == FakeJobState::Running
    })
    .await
    .unwrap();
    source.stop_handle().graceful();
    let later = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("later").script(["true"]));
    let report = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert!(j.trace_text().contains("finished"));
    assert_eq!(fake.job(later).unwrap().state, FakeJobState::Pending);
    assert_eq!(report.jobs_succeeded, 1);
    assert_eq!(report.jobs_interrupted, 0);
}

/// A forced stop reports `runner_interrupted` (GitLab Runner's `common/build.go`, on a system
/// interrupt) to a GitLab that lists it, `unknown_failure` to one that does not.
#[tokio::test]
async fn a_forced_stop_fails_running_jobs_as_interrupted() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let mut reasons: Vec<String> = GITLAB_FAILURE_REASONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    reasons.push("runner_interrupted".into());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("victim")
            .failure_reasons(reasons)
            .script(["echo started", "sleep 60"])
            .after_script(["echo after-script-ran"]),
    );
    wait_for_trace(&fake, id, "started").await;
    source.stop_handle().force();
    let report = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    assert_eq!(j.times_finished(), 1);
    let f = j.final_update.clone().unwrap();
    assert_eq!(f.failure_reason.as_deref(), Some("runner_interrupted"));
    let text = j.trace_text();
    assert!(
        text.contains("the runner was stopped while the job ran"),
        "{text}"
    );
    assert!(!text.contains("after-script-ran"));
    assert_eq!(
        f.checksum.unwrap(),
        format!("crc32:{:08x}", crc32fast::hash(&j.trace))
    );
    assert_eq!(report.jobs_interrupted, 1);
}
