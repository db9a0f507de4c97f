//! The runner API client against the fake GitLab: verify, job requests (headers, system_id,
//! features, `last_update` and Workhorse's long polling), the runner's health after refused
//! requests, and how 204, 409, 422, 429, 5xx and dropped connections are handled.

use crate::runner_support;

use flotilla_gitlab::{Client, ClientError, FeaturesInfo, JobRequestOutcome};
use flotilla_testkit::fake_gitlab::{FaultKind, JobBuilder, Scripted};
use runner_support::*;
use std::time::Duration;

fn is_request_id(v: Option<&str>) -> bool {
    v.is_some_and(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[tokio::test]
async fn verify_sends_the_token_system_id_and_info() {
    let fake = fake().start().await.unwrap();
    let c = client(&fake);
    let v = c.verify().await.unwrap();
    assert_eq!(v.id, Some(1));
    let reqs = fake.requests_to("POST", "/api/v4/runners/verify");
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.header("RUNNER-TOKEN"), Some(RUNNER_TOKEN));
    assert!(
        is_request_id(r.header("X-Request-Id")),
        "{:?}",
        r.header("x-request-id")
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("application/json"));
    assert!(r.header("user-agent").unwrap().starts_with("flotilla "));
    let body = r.json().unwrap();
    assert_eq!(body["token"], RUNNER_TOKEN);
    assert_eq!(body["system_id"], "s_0123456789ab");
    assert_eq!(body["info"]["executor"], "instance");
    assert_eq!(body["info"]["features"]["cancel_gracefully"], true);
    assert_eq!(body["info"]["features"]["upload_multiple_artifacts"], true);
    assert_eq!(fake.system_ids(), vec!["s_0123456789ab".to_string()]);
}

#[tokio::test]
async fn an_invalid_runner_token_is_a_clear_error() {
    let fake = fake().start().await.unwrap();
    let c = Client::new(client_config(fake.url(), "glrt-wrong")).unwrap();
    let e = c.verify().await.unwrap_err();
    assert!(matches!(e, ClientError::InvalidRunnerToken { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("refused the runner token") && msg.contains("403"),
        "{msg}"
    );
    assert!(!msg.contains("glrt-wrong"), "{msg}");
    let e = c.request_job().await.unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::InvalidRunnerToken {
                endpoint: "/api/v4/jobs/request"
            }
        ),
        "{e:?}"
    );
    // One request each: a 403 is not retried.
    assert_eq!(fake.requests().len(), 2);
}

/// A 403 on job requests marks the runner unhealthy after `unhealthy_requests_limit` of them
/// in a row, and it asks again after `unhealthy_interval` (GitLab Runner's
/// `health_helper.go`): it never stops for good. Once GitLab knows the token, jobs run.
#[tokio::test]
async fn refused_requests_make_the_runner_unhealthy_for_a_while_not_for_good() {
    let fake = fake().start().await.unwrap();
    let c = std::sync::Arc::new(Client::new(client_config(fake.url(), "glrt-not-yet")).unwrap());
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let (source, run) = spawn_source(c, exec, source_config());
    // check_interval 100 ms: three refusals, then a 2 s pause.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let early = fake.requests_to("POST", "/api/v4/jobs/request");
    assert_eq!(early.len(), 3, "three refusals, then quiet");
    assert!(early.iter().all(|r| r.status == 403));
    assert!(!run.is_finished(), "the source keeps going");
    // GitLab learns the token (the runner was re-created); the next check gets a job.
    fake.add_runner("glrt-not-yet");
    let id = fake.enqueue("glrt-not-yet", JobBuilder::new("later").script(["echo ok"]));
    assert!(fake.wait_finished(&[id], Duration::from_secs(30)).await);
    let reqs = fake.requests_to("POST", "/api/v4/jobs/request");
    let fourth = &reqs[3];
    // The interval counts from the last time the runner was known healthy (its start).
    assert!(
        fourth.at - early[0].at >= Duration::from_millis(1900),
        "asked again after the unhealthy interval, not before: {:?}",
        fourth.at - early[0].at
    );
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.unhealthy, 1);
    assert_eq!(report.jobs_succeeded, 1);
}

#[tokio::test]
async fn an_orphaned_runner_is_told_apart() {
    let fake = fake().orphaned(true).start().await.unwrap();
    let c = client(&fake);
    let e = c.verify().await.unwrap_err();
    assert!(matches!(e, ClientError::RunnerOrphaned { .. }), "{e:?}");
    assert!(e.to_string().contains("orphaned"), "{e}");
    let e = c.request_job().await.unwrap_err();
    assert!(matches!(e, ClientError::RunnerOrphaned { .. }), "{e:?}");
    assert_eq!(e.status(), Some(422));
}

#[tokio::test]
async fn job_requests_carry_features_and_echo_last_update_for_long_polling() {
    let fake = fake()
        .poll_duration(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let c = client(&fake);
    // First request: no last_update yet; Workhorse passes it to Rails, which answers 204
    // with its queue value.
    let r = c.request_job().await.unwrap();
    assert!(
        matches!(
            r,
            JobRequestOutcome::NoJob {
                queue_changed: true
            }
        ),
        "{r:?}"
    );
    assert_eq!(c.last_update(), "q0");
    // Second: last_update echoed; Workhorse waits a second, then answers 204 itself
    // (without Rails' header): it waited the whole poll, so asking again at once is right.
    let started = std::time::Instant::now();
    let r = c.request_job().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert!(
        matches!(
            r,
            JobRequestOutcome::NoJob {
                queue_changed: true
            }
        ),
        "{r:?}"
    );
    let reqs = fake.requests_to("POST", "/api/v4/jobs/request");
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].json().unwrap();
    assert!(first.get("last_update").is_none(), "{first}");
    assert_eq!(reqs[1].json().unwrap()["last_update"], "q0");
    assert_eq!(reqs[0].response_header("x-gitlab-last-update"), Some("q0"));
    assert_eq!(reqs[1].response_header("x-gitlab-last-update"), None);
    for r in &reqs {
        assert_eq!(r.header("RUNNER-TOKEN"), Some(RUNNER_TOKEN));
        assert!(is_request_id(r.header("X-Request-Id")));
        let body = r.json().unwrap();
        assert_eq!(body["token"], RUNNER_TOKEN);
        assert_eq!(body["system_id"], "s_0123456789ab");
        assert_eq!(
            body["info"]["features"],
            serde_json::to_value(FeaturesInfo::flotilla(false)).unwrap()
        );
        assert_eq!(r.status, 204);
    }

    // A job queued during a long poll ends the poll at once, and the next request gets the
    // job (a 201 without X-GitLab-Last-Update).
    let c2 = c.clone();
    let poll = tokio::spawn(async move { c2.request_job().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("build").script(["true"]));
    let r = tokio::time::timeout(Duration::from_millis(900), poll)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            r,
            JobRequestOutcome::NoJob {
                queue_changed: true
            }
        ),
        "{r:?}"
    );
    // The runner keeps its old value, which now differs from the queue's: the job comes.
    assert_eq!(c.last_update(), "q0");
    match c.request_job().await.unwrap() {
        JobRequestOutcome::Job(job) => {
            assert_eq!(job.id, Some(id));
            let p = job.payload.unwrap();
            assert!(p.ignored.is_empty(), "{:?}", p.ignored);
            let p = p.payload;
            assert_eq!(p.job_info.name, "build");
            assert_eq!(p.job_info.instance_id, "2b5e7d2c0a7c4d3e9f4f8a1b6c0d9e7a");
            assert!(p.token.expose().starts_with("glcbt-"));
        }
        other => panic!("expected a job, got {other:?}"),
    }
    let reqs = fake.requests_to("POST", "/api/v4/jobs/request");
    let handout = reqs.iter().find(|r| r.status == 201).unwrap();
    assert_eq!(handout.response_header("x-gitlab-last-update"), None);
    // Every answer carries Workhorse's header while long polling is on, waited or not.
    assert!(
        reqs.iter()
            .all(|r| r.response_header("gitlab-ci-builds-polling") == Some("yes"))
    );
}

/// Workhorse's `Gitlab-Ci-Builds-Polling: yes` is on every answer, so it cannot tell a
/// request that waited from one answered at once: after a quick 204 (here a 409, which is
/// no job either) the source still waits out `check_interval` before asking again.
#[tokio::test]
async fn the_long_poll_header_proves_no_waiting() {
    let fake = fake().start().await.unwrap();
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [const {
            Scripted::Status {
                status: 409,
                retry_after: None,
            }
        }; 4],
    );
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let mut config = source_config();
    config.check_interval = Duration::from_millis(700);
    let (source, run) = spawn_source(client(&fake), exec, config);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    source.stop_handle().graceful();
    run.await.unwrap();
    let reqs = fake.requests_to("POST", "/api/v4/jobs/request");
    assert!(
        reqs[0].response_header("gitlab-ci-builds-polling") == Some("yes") && reqs[0].status == 409
    );
    assert!(reqs.len() <= 5, "{} requests in 2.5 s", reqs.len());
    for w in reqs.windows(2).take(3) {
        assert!(
            w[1].at - w[0].at >= Duration::from_millis(650),
            "asked again after {:?}",
            w[1].at - w[0].at
        );
    }
}

#[tokio::test]
async fn without_long_polling_there_is_no_polling_header() {
    let fake = fake().poll_duration(Duration::ZERO).start().await.unwrap();
    let c = client(&fake);
    c.request_job().await.unwrap();
    c.request_job().await.unwrap();
    let reqs = fake.requests_to("POST", "/api/v4/jobs/request");
    assert!(
        reqs.iter()
            .all(|r| r.response_header("gitlab-ci-builds-polling").is_none())
    );
    // Rails answers an unchanged last_update at once, with the same value: nothing changed,
    // so the source waits out `check_interval` before asking again.
    assert_eq!(reqs[1].response_header("x-gitlab-last-update"), Some("q0"));
    let r = c.request_job().await.unwrap();
    assert!(
        matches!(
            r,
            JobRequestOutcome::NoJob {
                queue_changed: false
            }
        ),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_conflict_is_no_job() {
    let fake = fake().start().await.unwrap();
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [Scripted::Status {
            status: 409,
            retry_after: None,
        }],
    );
    let c = client(&fake);
    let r = c.request_job().await.unwrap();
    assert!(
        matches!(
            r,
            JobRequestOutcome::NoJob {
                queue_changed: false
            }
        ),
        "{r:?}"
    );
    assert_eq!(fake.requests().len(), 1, "409 is not retried");
}

#[tokio::test]
async fn retry_after_is_honoured_on_429_and_503() {
    let fake = fake().poll_duration(Duration::ZERO).start().await.unwrap();
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [
            Scripted::Status {
                status: 429,
                retry_after: Some(1),
            },
            Scripted::Status {
                status: 503,
                retry_after: Some(1),
            },
        ],
    );
    let c = client(&fake);
    let r = c.request_job().await.unwrap();
    assert!(matches!(r, JobRequestOutcome::NoJob { .. }), "{r:?}");
    let reqs = fake.requests();
    assert_eq!(
        reqs.iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![429, 503, 204]
    );
    // The client's own backoff is 20 ms: only Retry-After explains a second's wait.
    assert!(
        reqs[1].at - reqs[0].at >= Duration::from_millis(950),
        "{:?}",
        reqs[1].at - reqs[0].at
    );
    assert!(reqs[2].at - reqs[1].at >= Duration::from_millis(950));
    // Each attempt is a new request id.
    assert_ne!(
        reqs[0].header("x-request-id"),
        reqs[1].header("x-request-id")
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let fake = fake().poll_duration(Duration::ZERO).start().await.unwrap();
    let c = client(&fake);
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [500, 502, 504].map(|s| Scripted::Status {
            status: s,
            retry_after: None,
        }),
    );
    let r = c.request_job().await.unwrap();
    assert!(matches!(r, JobRequestOutcome::NoJob { .. }), "{r:?}");
    assert_eq!(fake.requests().len(), 4);

    // Five failures in a row exhaust the attempts: the error says what failed.
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [500; 5].map(|s| Scripted::Status {
            status: s,
            retry_after: None,
        }),
    );
    let e = c.request_job().await.unwrap_err();
    assert_eq!(e.status(), Some(500), "{e}");
    assert!(
        e.to_string()
            .contains("POST /api/v4/jobs/request answered 500"),
        "{e}"
    );
    assert_eq!(fake.requests().len(), 9);
}

/// GitLab Runner's `retry_requester.go` retries on status codes only. A job request that
/// got no answer is not sent again (a new request would take another job anyway); other
/// calls are.
#[tokio::test]
async fn dropped_job_requests_are_not_repeated_other_calls_are() {
    let fake = fake().poll_duration(Duration::ZERO).start().await.unwrap();
    let c = client(&fake);
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [Scripted::Fault(FaultKind::DropBefore)],
    );
    let e = c.request_job().await.unwrap_err();
    assert!(
        matches!(e, ClientError::Transport { attempts: 1, .. }),
        "{e:?}"
    );
    assert_eq!(fake.requests_to("POST", "/api/v4/jobs/request").len(), 1);
    fake.script(
        "POST",
        "/api/v4/runners/verify",
        [
            Scripted::Fault(FaultKind::DropBefore),
            Scripted::Fault(FaultKind::DropBefore),
        ],
    );
    c.verify().await.unwrap();
    let statuses: Vec<u16> = fake
        .requests_to("POST", "/api/v4/runners/verify")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, vec![0, 0, 200]);
}
