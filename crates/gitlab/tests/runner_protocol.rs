//! The runner API client against the fake GitLab: verify, job requests (headers, system_id,
//! features, `last_update` and long polling), and how 204, 409, 429, 5xx and dropped
//! connections are handled.

mod runner_support;

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

    // The job source stops at once with that error.
    let scaler = local_scaler(1, false).await;
    let exec = LocalExecutor::new(scaler, None);
    let c = std::sync::Arc::new(c);
    let (_source, handle) = spawn_source(c, exec, source_config());
    let r = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(r, Err(ClientError::InvalidRunnerToken { .. })),
        "{r:?}"
    );
}

#[tokio::test]
async fn job_requests_carry_features_and_echo_last_update_for_long_polling() {
    let fake = fake()
        .poll_duration(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let c = client(&fake);
    // First request: no last_update yet; the fake answers 204 with its queue value.
    let r = c.request_job().await.unwrap();
    assert!(
        matches!(
            r,
            JobRequestOutcome::NoJob {
                queue_changed: true,
                long_polled: false
            }
        ),
        "{r:?}"
    );
    assert_eq!(c.last_update(), "q0");
    // Second: last_update echoed; the fake long-polls for a second, then 204.
    let r = c.request_job().await.unwrap();
    assert!(
        matches!(
            r,
            JobRequestOutcome::NoJob {
                queue_changed: false,
                long_polled: true
            }
        ),
        "{r:?}"
    );
    let reqs = fake.requests_to("POST", "/api/v4/jobs/request");
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].json().unwrap();
    assert!(first.get("last_update").is_none(), "{first}");
    assert_eq!(reqs[1].json().unwrap()["last_update"], "q0");
    assert!(reqs[1].at - reqs[0].at < Duration::from_secs(1));
    assert_eq!(reqs[0].header("x-gitlab-last-update"), None);
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

    // A job queued during a long poll ends the poll at once (queue changed), and the next
    // request gets the job.
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
                long_polled: true,
                ..
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
            assert_eq!(p.job_info.name, "build");
            assert!(p.token.expose().starts_with("glcbt-"));
        }
        other => panic!("expected a job, got {other:?}"),
    }
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
                queue_changed: false,
                long_polled: false
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

#[tokio::test]
async fn dropped_connections_are_retried() {
    let fake = fake().poll_duration(Duration::ZERO).start().await.unwrap();
    let c = client(&fake);
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [
            Scripted::Fault(FaultKind::DropBefore),
            Scripted::Fault(FaultKind::DropBefore),
        ],
    );
    let r = c.request_job().await.unwrap();
    assert!(matches!(r, JobRequestOutcome::NoJob { .. }), "{r:?}");
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![0, 0, 204]);
}
