//! The job source end to end against the fake GitLab, with jobs run by real bash through
//! the job engine: admission (preemptive and not), acceptance with two-phase acceptance off
//! (GitLab as installed) and on, unanswered and refused accepts, payloads that do not decode
//! and payloads with informational fields of unexpected types, 50 jobs each ending exactly
//! once, hooks, cancellation while waiting for a slot.

use crate::runner_support;

use async_trait::async_trait;
use flotilla_gitlab::{FinalReport, JobHooks, StartedJob};
use flotilla_job::Outcome;
use flotilla_scaler::{Policy, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder, Scripted};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use runner_support::*;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(i64, String)>>,
}

#[async_trait]
impl JobHooks for Recorder {
    async fn job_started(&self, job: &StartedJob) {
        assert!(job.token.expose().starts_with("glcbt-"));
        self.events.lock().unwrap().push((job.id, "started".into()));
    }
    async fn job_finished(&self, job: &StartedJob, outcome: &Outcome) {
        self.events
            .lock()
            .unwrap()
            .push((job.id, format!("finished:{}", outcome.is_success())));
    }
    async fn job_reported(&self, job: &StartedJob, report: &FinalReport) {
        self.events
            .lock()
            .unwrap()
            .push((job.id, format!("reported:{}", report.settled())));
    }
}

#[tokio::test]
async fn jobs_run_and_are_reported_with_state_exit_code_and_checksum() {
    let fake = fake().start().await.unwrap();
    let c = client(&fake);
    let exec = LocalExecutor::new(local_scaler(2, true).await, None);
    let hooks = Arc::new(Recorder::default());
    let source = Arc::new(
        flotilla_gitlab::JobSource::new(c, exec.clone(), source_config()).with_hooks(hooks.clone()),
    );
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let ok = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("ok")
            .masked_variable("SECRET_PW", "hunter2-very-secret")
            .script([
                "echo hello from $CI_JOB_NAME",
                "echo the password is $SECRET_PW",
            ]),
    );
    let bad = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("bad").script(["echo failing", "exit 3"]),
    );
    assert!(
        fake.wait_finished(&[ok, bad], Duration::from_secs(60))
            .await
    );

    let j = fake.job(ok).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.times_finished(), 1);
    let text = j.trace_text();
    assert!(text.contains("hello from ok"), "{text}");
    assert!(text.contains("the password is [MASKED]"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert_eq!(
        j.trace,
        exec.log(ok),
        "GitLab holds exactly the emitted log"
    );
    let f = j.final_update.clone().unwrap();
    assert_eq!(
        f.checksum.unwrap(),
        format!("crc32:{:08x}", crc32fast::hash(&j.trace))
    );
    assert_eq!(f.bytesize, Some(j.trace.len() as u64));
    assert_eq!(f.failure_reason, None);
    assert_eq!(f.exit_code, None);

    let j = fake.job(bad).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    let f = j.final_update.clone().unwrap();
    assert_eq!(f.failure_reason.as_deref(), Some("script_failure"));
    assert_eq!(f.exit_code, Some(3));
    assert_eq!(j.trace, exec.log(bad));

    // The exchange for one job, in order: hand-out, accept, trace, final update.
    let reqs = fake.requests();
    let path = format!("/api/v4/jobs/{ok}");
    let puts: Vec<_> = reqs
        .iter()
        .filter(|r| r.method == "PUT" && r.path == path)
        .collect();
    assert_eq!(puts.first().unwrap().json().unwrap()["state"], "running");
    assert_eq!(puts.last().unwrap().json().unwrap()["state"], "success");
    for p in &puts {
        assert_eq!(p.header("job-token"), Some(j_token(&fake, ok).as_str()));
    }
    let patches: Vec<_> = reqs
        .iter()
        .filter(|r| r.method == "PATCH" && r.path == format!("{path}/trace"))
        .collect();
    assert!(!patches.is_empty());
    assert!(
        patches
            .iter()
            .all(|p| p.seq > puts[0].seq && p.seq < puts.last().unwrap().seq)
    );
    assert!(
        patches
            .iter()
            .all(|p| p.query.as_deref() == Some("debug_trace=false"))
    );

    source.stop_handle().graceful();
    let report = run.await.unwrap();
    let ev = hooks.events.lock().unwrap().clone();
    let mine: Vec<&str> = ev
        .iter()
        .filter(|(id, _)| *id == bad)
        .map(|(_, e)| e.as_str())
        .collect();
    assert_eq!(mine, vec!["started", "finished:false", "reported:true"]);
    assert_eq!(report.jobs_succeeded, 1);
    assert_eq!(report.jobs_failed, 1);
}

/// `[[runners]] environment` reaches every job, before the job's own variables: a job
/// variable of the same name wins, and the values expand like any variable (GitLab Runner's
/// `RunnerConfig.GetVariables`, ahead of the job's in `Build.GetAllVariables`). Before, the
/// entries were parsed and dropped.
#[tokio::test]
async fn the_runners_environment_reaches_the_job_and_the_job_wins() {
    let fake = fake().start().await.unwrap();
    let c = client(&fake);
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let config = flotilla_gitlab::SourceConfig {
        environment: vec![
            flotilla_job::model::Variable::new("HTTP_PROXY_HOST", "proxy.internal"),
            flotilla_job::model::Variable::new("OVERRIDDEN", "from the runner"),
            flotilla_job::model::Variable::new("PROXY_URL", "http://$HTTP_PROXY_HOST:3128"),
        ],
        ..source_config()
    };
    let source = Arc::new(flotilla_gitlab::JobSource::new(c, exec.clone(), config));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("env")
            .variable("OVERRIDDEN", "from the job")
            .script([
                "echo host=$HTTP_PROXY_HOST",
                "echo overridden=$OVERRIDDEN",
                "echo url=$PROXY_URL",
            ]),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    let text = j.trace_text();
    assert!(text.contains("host=proxy.internal"), "{text}");
    assert!(text.contains("overridden=from the job"), "{text}");
    assert!(text.contains("url=http://proxy.internal:3128"), "{text}");
    source.stop_handle().graceful();
    run.await.unwrap();
}

/// `[runners.feature_flags]` decides a flag it names for every job, over the job's own
/// variable (GitLab Runner's `Build.IsFeatureFlagOn`): here the flags that change the stage
/// script, which flotilla does not support and says so in the job's log when one is on.
#[tokio::test]
async fn the_runners_feature_flags_decide_over_the_jobs_variables() {
    let fake = fake().start().await.unwrap();
    let c = client(&fake);
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let config = flotilla_gitlab::SourceConfig {
        feature_flags: [
            ("FF_USE_LEGACY_BASH_EVAL".to_string(), true),
            ("FF_ENABLE_BASH_EXIT_CODE_CHECK".to_string(), false),
        ]
        .into(),
        ..source_config()
    };
    let source = Arc::new(flotilla_gitlab::JobSource::new(c, exec.clone(), config));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("flags")
            .variable("FF_USE_LEGACY_BASH_EVAL", "false")
            .variable("FF_ENABLE_BASH_EXIT_CODE_CHECK", "true")
            .script(["echo ran"]),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let text = fake.job(id).unwrap().trace_text();
    assert!(
        text.contains("FF_USE_LEGACY_BASH_EVAL is not supported by this runner"),
        "the runner's true wins over the job's false: {text}"
    );
    assert!(
        !text.contains("FF_ENABLE_BASH_EXIT_CODE_CHECK is not supported"),
        "the runner's false wins over the job's true: {text}"
    );
    source.stop_handle().graceful();
    run.await.unwrap();
}

fn j_token(fake: &flotilla_testkit::fake_gitlab::FakeGitLab, id: i64) -> String {
    fake.job(id).unwrap().token
}

#[tokio::test]
async fn a_malformed_payload_fails_that_job_and_the_runner_keeps_serving() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let broken = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("broken").field("steps", json!({"name": "not a list"})),
    );
    let next = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("next").script(["echo still serving"]),
    );
    assert!(
        fake.wait_finished(&[broken, next], Duration::from_secs(60))
            .await
    );
    let j = fake.job(broken).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    let f = j.final_update.clone().unwrap();
    assert_eq!(f.failure_reason.as_deref(), Some("runner_system_failure"));
    let text = j.trace_text();
    assert!(
        text.contains("could not read this job's payload") && text.contains("steps"),
        "{text}"
    );
    assert_eq!(
        f.checksum.unwrap(),
        format!("crc32:{:08x}", crc32fast::hash(&j.trace))
    );
    assert_eq!(exec.runs(broken), 0);
    let j = fake.job(next).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert!(j.trace_text().contains("still serving"));
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_malformed, 1);
}

/// Informational fields of an unexpected type (here `job_info` as an older fake and older
/// GitLab typed it, numbers where strings are now and strings where numbers are) are logged
/// and ignored: the job runs.
#[tokio::test]
async fn informational_fields_of_unexpected_types_do_not_fail_the_job() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("odd")
            .script(["echo fine"])
            .field(
                "job_info",
                json!({"name": "odd", "stage": "test", "instance_id": 123456,
                       "instance_uuid": 7, "project_jobs_running_on_instance_runners_count": 3,
                       "queue_size": "many", "time_in_queue_seconds": "long"}),
            )
            .field("runner_info", json!({"timeout": 3600, "uuid": 99}))
            .field("secrets", json!("none")),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
    assert!(j.trace_text().contains("fine"));
    assert_eq!(exec.runs(id), 1);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_malformed, 0);
}

/// A payload that cannot be read at all is still reported, failed, with the reason in its
/// log, using the id and token read on their own; only a job without a readable id or token
/// cannot be reported.
#[tokio::test]
async fn payloads_that_do_not_decode_are_reported_with_the_id_and_token_read_leniently() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let strange = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("strange").raw(json!({
            "allow_git_fetch": "sometimes",
            "variables": {"A": 1},
            "steps": [{"name": "script", "script": ["true"], "timeout": "one hour"}]
        })),
    );
    assert!(
        fake.wait_finished(&[strange], Duration::from_secs(60))
            .await
    );
    let j = fake.job(strange).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    let f = j.final_update.clone().unwrap();
    assert_eq!(f.failure_reason.as_deref(), Some("runner_system_failure"));
    assert!(j.trace_text().contains("could not read this job's payload"));
    // The offending value is not repeated in the log.
    assert!(!j.trace_text().contains("one hour"), "{}", j.trace_text());
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_malformed, 1);
    assert_eq!(exec.runs(strange), 0);
}

#[tokio::test]
async fn fifty_jobs_each_end_exactly_once_with_the_right_state_and_exit_code() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(4, true).await, None);
    let mut config = source_config();
    config.request_concurrency = 2;
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let ids: Vec<(i64, i32)> = (0..50)
        .map(|i| {
            let code = if i % 5 == 0 { 1 + (i % 7) } else { 0 };
            let id = fake.enqueue(
                RUNNER_TOKEN,
                JobBuilder::new(format!("job-{i}"))
                    .masked_variable("TOKEN_VALUE", format!("s3cr3t-value-{i:03}"))
                    .script([format!("echo job {i} $TOKEN_VALUE"), format!("exit {code}")]),
            );
            (id, code)
        })
        .collect();
    let all: Vec<i64> = ids.iter().map(|(id, _)| *id).collect();
    assert!(fake.wait_finished(&all, Duration::from_secs(240)).await);
    for (i, (id, code)) in ids.iter().enumerate() {
        let j = fake.job(*id).unwrap();
        assert_eq!(j.times_finished(), 1, "job {id}: {:?}", j.history);
        assert_eq!(j.final_updates, 1);
        assert_eq!(j.handouts, 1);
        assert_eq!(exec.runs(*id), 1);
        let f = j.final_update.clone().unwrap();
        if *code == 0 {
            assert_eq!(j.state, FakeJobState::Success, "job {id}");
        } else {
            assert_eq!(j.state, FakeJobState::Failed, "job {id}");
            assert_eq!(f.exit_code, Some(i64::from(*code)));
            assert_eq!(f.failure_reason.as_deref(), Some("script_failure"));
        }
        assert_eq!(j.trace, exec.log(*id), "job {id}'s log differs");
        assert!(j.trace_text().contains(&format!("job {i} [MASKED]")));
        assert_eq!(
            f.checksum.unwrap(),
            format!("crc32:{:08x}", crc32fast::hash(&j.trace))
        );
    }
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_run, 50);
    assert_eq!(report.jobs_succeeded + report.jobs_failed, 50);
    assert_eq!(report.final_updates_given_up, 0);
    exec.scaler.check_invariants().unwrap();
}

#[tokio::test]
async fn preemptive_mode_requests_no_job_without_an_idle_slot() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let long = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("long").script(["sleep 2"]));
    fake.wait_for_job(long, Duration::from_secs(20), |j| {
        j.state == FakeJobState::Running
    })
    .await
    .unwrap();
    let before = fake.requests_to("POST", "/api/v4/jobs/request").len();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let during = fake.requests_to("POST", "/api/v4/jobs/request").len() - before;
    assert!(fake.wait_finished(&[long], Duration::from_secs(20)).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = fake.requests_to("POST", "/api/v4/jobs/request").len();
    // While the only slot was busy, at most the request already in flight was answered.
    assert!(during <= 1, "{during} requests while the slot was busy");
    assert!(
        after > before + during,
        "requests resume once the slot is free"
    );
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert!(report.no_capacity > 0);
}

/// GitLab as installed (two-phase acceptance off): the job is accepted right after the 201,
/// never kept with `pending`, and waits for its slot (a new instance, 1.5 s) with a note in
/// its log; the log's keep-alives run meanwhile.
#[tokio::test]
async fn a_job_is_accepted_at_once_and_then_waits_for_its_slot() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(slow_fleet(Duration::from_millis(1500)).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), source_config());
    let id = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("waits").script(["echo ran"]));
    assert!(fake.wait_finished(&[id], Duration::from_secs(30)).await);
    let reqs = fake.requests();
    let handout = reqs
        .iter()
        .find(|r| r.path == "/api/v4/jobs/request" && r.status == 201)
        .unwrap();
    let puts: Vec<_> = reqs
        .iter()
        .filter(|r| r.method == "PUT" && r.path == format!("/api/v4/jobs/{id}"))
        .collect();
    assert_eq!(puts[0].json().unwrap()["state"], "running");
    assert!(
        puts[0].at - handout.at < Duration::from_millis(500),
        "accepted {:?} after the 201",
        puts[0].at - handout.at
    );
    assert!(puts.iter().all(|p| p.json().unwrap()["state"] != "pending"));
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    let text = j.trace_text();
    assert!(text.contains("Waiting for a job slot"), "{text}");
    assert!(text.contains("ran"), "{text}");
    assert_eq!(j.final_update.unwrap().bytesize, Some(j.trace.len() as u64));
    source.stop_handle().graceful();
    run.await.unwrap();
}

/// With two-phase acceptance on (and the source told so), the job is kept with
/// `PUT state=pending` while its slot comes, and accepted only then.
#[tokio::test]
async fn with_two_phase_acceptance_the_job_is_accepted_once_its_slot_is_acquired() {
    let fake = fake().two_phase(true).start().await.unwrap();
    let exec = LocalExecutor::new(slow_fleet(Duration::from_millis(1500)).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), two_phase_source_config());
    let id = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("waits").script(["echo ran"]));
    assert!(fake.wait_finished(&[id], Duration::from_secs(30)).await);
    let path = format!("/api/v4/jobs/{id}");
    let reqs = fake.requests();
    let handout = reqs
        .iter()
        .find(|r| r.path == "/api/v4/jobs/request" && r.status == 201)
        .unwrap();
    let states: Vec<(String, tokio::time::Instant, u16)> = reqs
        .iter()
        .filter(|r| r.method == "PUT" && r.path == path)
        .map(|r| {
            (
                r.json().unwrap()["state"].as_str().unwrap().to_string(),
                r.at,
                r.status,
            )
        })
        .collect();
    let first_running = states.iter().position(|(s, _, _)| s == "running").unwrap();
    assert!(
        first_running >= 1,
        "pending keep-alives come first: {states:?}"
    );
    assert!(
        states[..first_running]
            .iter()
            .all(|(s, _, status)| s == "pending" && *status == 200),
        "{states:?}"
    );
    assert!(
        states[first_running].1 - handout.at >= Duration::from_millis(1400),
        "accepted before the instance could exist"
    );
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success);
    assert_eq!(j.accepts, 1);
    assert!(j.history.contains(&FakeJobState::WaitingForAck));
    source.stop_handle().graceful();
    run.await.unwrap();
}

/// A source told to wait for a slot before accepting, against a GitLab that does not wait
/// (the default): the first `pending` answers 400, which means "already running"; the job is
/// kept, accepted at once, and runs.
#[tokio::test]
async fn a_400_to_pending_means_already_running_and_the_job_is_kept() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(slow_fleet(Duration::from_millis(1500)).await, None);
    let (source, run) = spawn_source(client(&fake), exec.clone(), two_phase_source_config());
    let id = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("waits").script(["echo ran"]));
    assert!(fake.wait_finished(&[id], Duration::from_secs(30)).await);
    let puts: Vec<(String, u16)> = fake
        .requests_to("PUT", &format!("/api/v4/jobs/{id}"))
        .iter()
        .map(|r| {
            (
                r.json().unwrap()["state"].as_str().unwrap().to_string(),
                r.status,
            )
        })
        .collect();
    assert_eq!(puts[0], ("pending".to_string(), 400), "{puts:?}");
    assert_eq!(puts[1], ("running".to_string(), 200), "{puts:?}");
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
    assert!(j.trace_text().contains("ran"));
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_withdrawn, 0);
}

/// An accept that gets no usable answer (a 500 that outlasts the client's retries, a 429)
/// does not drop the job: GitLab may think it runs. It runs, its log and final update get
/// through, and it stays recorded until then.
#[tokio::test]
async fn an_unanswered_accept_still_runs_and_reports_the_job() {
    let fake = Arc::new(fake().start().await.unwrap());
    let hooks = Arc::new(AtStart::new(fake.clone()));
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let source = Arc::new(
        flotilla_gitlab::JobSource::new(client(&fake), exec.clone(), source_config())
            .with_hooks(hooks.clone()),
    );
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let mut ids = Vec::new();
    for (i, status) in [500u16, 429, 503].into_iter().enumerate() {
        let id = fake.enqueue(
            RUNNER_TOKEN,
            JobBuilder::new(format!("j{i}")).script(["echo ran anyway"]),
        );
        fake.script(
            "PUT",
            &format!("/api/v4/jobs/{id}"),
            std::iter::repeat_n(
                Scripted::Status {
                    status,
                    retry_after: None,
                },
                5,
            ),
        );
        ids.push(id);
    }
    assert!(fake.wait_finished(&ids, Duration::from_secs(60)).await);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    for id in &ids {
        let j = fake.job(*id).unwrap();
        assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
        assert!(j.trace_text().contains("ran anyway"));
        assert_eq!(exec.runs(*id), 1);
    }
    assert_eq!(report.accepts_unanswered, 3);
    assert!(hooks.withdrawn.lock().unwrap().is_empty());
    assert_eq!(hooks.finished.lock().unwrap().len(), 3);
}

/// GitLab refusing the accept (404, another client error, or `Job-Status: canceled` with a
/// 403) gives the job up: it never runs and its record is dropped.
#[tokio::test]
async fn a_refused_accept_gives_the_job_up() {
    let fake = Arc::new(fake().start().await.unwrap());
    let hooks = Arc::new(AtStart::new(fake.clone()));
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let source = Arc::new(
        flotilla_gitlab::JobSource::new(client(&fake), exec.clone(), source_config())
            .with_hooks(hooks.clone()),
    );
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let mut ids = Vec::new();
    for status in [404u16, 409, 400] {
        let id = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("refused").script(["echo no"]));
        fake.script(
            "PUT",
            &format!("/api/v4/jobs/{id}"),
            [Scripted::Status {
                status,
                retry_after: None,
            }],
        );
        ids.push(id);
    }
    let canceled = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("gone").script(["echo no"]));
    fake.abort(canceled);
    ids.push(canceled);
    let ok = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("ok").script(["echo yes"]));
    assert!(fake.wait_finished(&[ok], Duration::from_secs(60)).await);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    for id in &ids[..3] {
        assert_eq!(exec.runs(*id), 0);
    }
    let withdrawn = hooks.withdrawn.lock().unwrap().clone();
    assert_eq!(withdrawn, ids[..3].to_vec());
    assert_eq!(report.jobs_withdrawn, 3);
    assert_eq!(fake.job(ok).unwrap().state, FakeJobState::Success);
}

/// A job GitLab cancels while it waits for its slot ends there: it never runs, and it is
/// reported (failed, canceled).
#[tokio::test]
async fn a_job_canceled_while_it_waits_for_its_slot_never_runs() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(slow_fleet(Duration::from_secs(120)).await, None);
    let mut config = source_config();
    config.trace.force_send_interval = Duration::from_millis(300);
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("waits").script(["echo never"]),
    );
    wait_for_trace(&fake, id, "Waiting for a job slot").await;
    fake.cancel(id);
    assert!(fake.wait_finished(&[id], Duration::from_secs(30)).await);
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Canceled);
    assert!(
        j.trace_text().contains("Job canceled before it started"),
        "{}",
        j.trace_text()
    );
    assert_eq!(exec.runs(id), 0);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_canceled_waiting, 1);
}

#[tokio::test]
async fn without_a_slot_in_time_the_job_fails_as_a_system_failure() {
    // Non-preemptive: a job is requested while the fleet may still grow, but the instance
    // takes longer to create than instance_acquire_timeout.
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(slow_fleet(Duration::from_secs(120)).await, None);
    let mut config = source_config();
    config.instance_acquire_timeout = Some(Duration::from_secs(1));
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let starved = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("starved").script(["echo never"]),
    );
    let j = fake
        .wait_for_job(starved, Duration::from_secs(20), |j| j.state.is_finished())
        .await
        .expect("the starved job ends");
    assert_eq!(j.state, FakeJobState::Failed);
    let f = j.final_update.clone().unwrap();
    assert_eq!(f.failure_reason.as_deref(), Some("runner_system_failure"));
    assert!(
        j.trace_text().contains("no job slot became available"),
        "{}",
        j.trace_text()
    );
    assert_eq!(exec.runs(starved), 0);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_without_slot, 1);
}

/// A non-preemptive scaler over a fake group whose instances take `latency` to create.
async fn slow_fleet(latency: Duration) -> flotilla_scaler::Scaler {
    let group = Arc::new(FakeInstanceGroup::new(
        FakeConfig {
            create_latency: (latency, latency),
            ..FakeConfig::default()
        },
        7,
    ));
    ScalerBuilder::new(
        group,
        ScalerConfig {
            capacity_per_instance: 1,
            max_instances: 2,
            update_interval: Duration::from_millis(100),
            update_interval_when_expecting: Duration::from_millis(50),
            ..ScalerConfig::default()
        },
    )
    .schedule(Schedule::single(Policy {
        idle_count: 0,
        preemptive_mode: Some(false),
        ..Policy::default()
    }))
    .start()
    .await
    .unwrap()
}

/// Sees the job's state at GitLab when the source announces its start, and what was
/// withdrawn and finished.
struct AtStart {
    fake: Arc<flotilla_testkit::fake_gitlab::FakeGitLab>,
    seen: Mutex<Vec<(i64, FakeJobState, usize)>>,
    withdrawn: Mutex<Vec<i64>>,
    finished: Mutex<Vec<i64>>,
}

impl AtStart {
    fn new(fake: Arc<flotilla_testkit::fake_gitlab::FakeGitLab>) -> AtStart {
        AtStart {
            fake,
            seen: Mutex::new(Vec::new()),
            withdrawn: Mutex::new(Vec::new()),
            finished: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl JobHooks for AtStart {
    async fn job_started(&self, job: &StartedJob) {
        let state = self.fake.job(job.id).unwrap().state;
        let puts = self
            .fake
            .requests_to("PUT", &format!("/api/v4/jobs/{}", job.id))
            .len();
        self.seen.lock().unwrap().push((job.id, state, puts));
    }
    async fn job_withdrawn(&self, job: &StartedJob) {
        self.withdrawn.lock().unwrap().push(job.id);
    }
    async fn job_finished(&self, job: &StartedJob, _outcome: &Outcome) {
        self.finished.lock().unwrap().push(job.id);
    }
}

/// A manager killed between the 201 and recording the job would never report it: so the
/// job is announced to the hooks (the durable store) before anything is sent about it, and a
/// refused accept is announced as a withdrawal. Checked with GitLab as installed (the job is
/// running from the 201 on) and with two-phase acceptance (it waits for the accept).
async fn recorded_before_anything_is_sent(two_phase: bool) {
    use flotilla_testkit::fake_gitlab::Scripted;
    let fake = Arc::new(fake().two_phase(two_phase).start().await.unwrap());
    let refused = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("refused").script(["echo must not run"]),
    );
    fake.script(
        "PUT",
        &format!("/api/v4/jobs/{refused}"),
        [Scripted::Status {
            status: 403,
            retry_after: None,
        }],
    );
    let hooks = Arc::new(AtStart::new(fake.clone()));
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let config = if two_phase {
        two_phase_source_config()
    } else {
        source_config()
    };
    let source = Arc::new(
        flotilla_gitlab::JobSource::new(client(&fake), exec.clone(), config)
            .with_hooks(hooks.clone()),
    );
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while hooks.withdrawn.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no withdrawal seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ran = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("ran").script(["echo ran"]));
    assert!(fake.wait_finished(&[ran], Duration::from_secs(60)).await);
    source.stop_handle().graceful();
    run.await.unwrap();

    assert_eq!(*hooks.withdrawn.lock().unwrap(), vec![refused]);
    assert_eq!(exec.runs(refused), 0, "a refused job never runs");
    assert_eq!(*hooks.finished.lock().unwrap(), vec![ran]);
    let handed_out = if two_phase {
        FakeJobState::WaitingForAck
    } else {
        FakeJobState::Running
    };
    let seen = hooks.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![(refused, handed_out, 0), (ran, handed_out, 0)],
        "each job is announced before any PUT about it"
    );
    assert_eq!(fake.job(ran).unwrap().state, FakeJobState::Success);
}

#[tokio::test]
async fn jobs_are_recorded_before_the_accept_and_a_refused_accept_is_a_withdrawal() {
    recorded_before_anything_is_sent(false).await;
}

#[tokio::test]
async fn with_two_phase_acceptance_jobs_are_recorded_before_the_accept_too() {
    recorded_before_anything_is_sent(true).await;
}

/// Issue 32: the runner's `clone_url` is where jobs fetch from (GitLab Runner's
/// `GetRemoteURL`: `clone_url` + `<CI_PROJECT_PATH>.git`, as `gitlab-ci-token`); the payload's
/// `repo_url` here leads nowhere, so the job passes only through the clone URL. Before, the key
/// was warned and ignored.
#[tokio::test]
async fn clone_url_is_where_the_sources_come_from() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed");
    let mirror = dir.path().join("mirror/group/project.git");
    let git = |args: &[&str], cwd: &std::path::Path| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    std::fs::create_dir_all(&seed).unwrap();
    git(&["-c", "init.defaultBranch=main", "init", "-q", "."], &seed);
    std::fs::write(seed.join("README"), "from the clone url\n").unwrap();
    git(&["add", "README"], &seed);
    git(
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-qm",
            "one",
        ],
        &seed,
    );
    let sha = git(&["rev-parse", "HEAD"], &seed).trim().to_string();
    git(
        &["clone", "-q", "--bare", ".", mirror.to_str().unwrap()],
        &seed,
    );

    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let config = flotilla_gitlab::SourceConfig {
        clone_url: Some(format!("file://{}", dir.path().join("mirror").display())),
        ..source_config()
    };
    let source = Arc::new(flotilla_gitlab::JobSource::new(
        client(&fake),
        exec.clone(),
        config,
    ));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("cloned")
            .variable("GIT_STRATEGY", "clone")
            .variable("CI_PROJECT_PATH", "group/project")
            .field(
                "git_info",
                json!({
                    "repo_url": "http://gitlab-ci-token:x@127.0.0.1:9/nowhere.git",
                    "repo_object_format": "sha1", "ref": "main", "sha": sha,
                    "before_sha": "0000000000000000000000000000000000000000",
                    "ref_type": "branch", "refspecs": [], "depth": 0
                }),
            )
            .script(["cat README"]),
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    let j = fake.job(id).unwrap();
    let text = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{text}");
    assert!(text.contains("from the clone url"), "{text}");
    source.stop_handle().graceful();
    run.await.unwrap();
}
