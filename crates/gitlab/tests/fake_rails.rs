//! The fake GitLab itself, spoken to with plain HTTP: each test pins one behaviour of GitLab's
//! Rails code that the fake copies (the source is named at each), so that the client's tests
//! judge the client against GitLab, not against a fake that drifted.

use crate::runner_support;

use flotilla_gitlab::JobRequestOutcome;
use flotilla_testkit::fake_gitlab::{FakeGitLab, FakeJobState, JobBuilder};
use runner_support::*;
use serde_json::{Value, json};
use std::time::Duration;

struct Http {
    base: String,
    http: reqwest::Client,
}

impl Http {
    fn new(fake: &FakeGitLab) -> Http {
        Http {
            base: fake.url().to_string(),
            http: reqwest::Client::new(),
        }
    }

    async fn put(&self, id: i64, header_token: Option<&str>, body: Value) -> reqwest::Response {
        let mut r = self
            .http
            .put(format!("{}/api/v4/jobs/{id}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = header_token {
            r = r.header("JOB-TOKEN", t);
        }
        r.send().await.unwrap()
    }

    async fn patch(
        &self,
        id: i64,
        token: &str,
        range: &str,
        body: &'static [u8],
    ) -> reqwest::Response {
        self.http
            .patch(format!("{}/api/v4/jobs/{id}/trace", self.base))
            .header("JOB-TOKEN", token)
            .header("content-range", range)
            .header("content-type", "text/plain")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    async fn download(&self, id: i64, token: &str, query: &str) -> reqwest::Response {
        self.http
            .get(format!("{}/api/v4/jobs/{id}/artifacts{query}", self.base))
            .header("JOB-TOKEN", token)
            .send()
            .await
            .unwrap()
    }
}

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

/// Takes the next job for our runner; returns (id, token).
async fn take(fake: &FakeGitLab) -> (i64, String) {
    let c = client(fake);
    for _ in 0..5 {
        if let JobRequestOutcome::Job(j) = c.request_job().await.unwrap() {
            return (j.id.unwrap(), j.token.unwrap().expose().clone());
        }
    }
    panic!("no job handed out");
}

/// `put '/:id'` `requires :token`: the job token as a parameter; the header alone is a 400.
#[tokio::test]
async fn a_put_needs_the_token_in_its_body() {
    let fake = fake().start().await.unwrap();
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    let h = Http::new(&fake);
    let r = h.put(id, Some(&token), json!({"state": "running"})).await;
    assert_eq!(r.status(), 400);
    let r = h
        .put(id, None, json!({"state": "running", "token": token}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "job-status").as_deref(), Some("running"));
}

/// `authenticate_job!`: an unknown job is a 403 (not 404), on PUT and PATCH; so is a job that
/// ended, with its `Job-Status`.
#[tokio::test]
async fn unknown_and_finished_jobs_are_403() {
    let fake = fake().start().await.unwrap();
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    let h = Http::new(&fake);
    assert_eq!(
        h.put(999, None, json!({"state": "running", "token": token}))
            .await
            .status(),
        403
    );
    assert_eq!(h.patch(999, &token, "0-0", b"x").await.status(), 403);
    let r = h
        .put(id, None, json!({"state": "success", "token": token}))
        .await;
    assert_eq!(r.status(), 200);
    let r = h
        .put(id, None, json!({"state": "running", "token": token}))
        .await;
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, "job-status").as_deref(), Some("success"));
    let r = h.patch(id, &token, "0-0", b"x").await;
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, "job-status").as_deref(), Some("success"));
}

/// Two-phase acceptance off (the default): a job is running from the 201 on, and `pending`
/// is a 400 (`update_build_state!`: anything but running, success, failed).
#[tokio::test]
async fn by_default_pending_on_a_running_job_is_400() {
    let fake = fake().start().await.unwrap();
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    assert_eq!(fake.job(id).unwrap().state, FakeJobState::Running);
    let h = Http::new(&fake);
    let r = h
        .put(id, None, json!({"state": "pending", "token": token}))
        .await;
    assert_eq!(r.status(), 400);
}

/// Two-phase acceptance on (`handle_runner_ack_workflow`): `pending` is a keep-alive,
/// `running` accepts, a final state before the accept is a 400, and the log is refused
/// (403) until the accept.
#[tokio::test]
async fn with_two_phase_acceptance_the_job_waits_for_its_accept() {
    let fake = fake().two_phase(true).start().await.unwrap();
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    assert_eq!(fake.job(id).unwrap().state, FakeJobState::WaitingForAck);
    let h = Http::new(&fake);
    let r = h
        .put(id, None, json!({"state": "pending", "token": token}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "job-status").as_deref(), Some("pending"));
    let r = h.patch(id, &token, "0-0", b"x").await;
    assert_eq!(r.status(), 403);
    let r = h
        .put(id, None, json!({"state": "failed", "token": token}))
        .await;
    assert_eq!(r.status(), 400);
    let r = h
        .put(id, None, json!({"state": "running", "token": token}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(fake.job(id).unwrap().state, FakeJobState::Running);
}

/// A checksum that does not match is recorded, not refused: current Rails has no 412
/// (`validate_build_trace!` only counts it).
#[tokio::test]
async fn a_wrong_checksum_is_no_412() {
    let fake = fake().start().await.unwrap();
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    let h = Http::new(&fake);
    assert_eq!(h.patch(id, &token, "0-4", b"hello").await.status(), 202);
    let r = h
        .put(
            id,
            None,
            json!({"state": "success", "token": token,
                   "output": {"checksum": "crc32:00000000", "bytesize": 5}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let f = fake.job(id).unwrap().final_update.unwrap();
    assert!(!f.trace_matched);
}

/// Only the start of `Content-Range` counts (`AppendBuildTraceService`); a start that is not
/// the size held is a 416 with `Range: 0-<size>`.
#[tokio::test]
async fn trace_appends_at_the_size_held() {
    let fake = fake().start().await.unwrap();
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    let h = Http::new(&fake);
    let r = h.patch(id, &token, "0-999", b"hello").await;
    assert_eq!(r.status(), 202);
    assert_eq!(header(&r, "range").as_deref(), Some("0-5"));
    assert_eq!(header(&r, "job-status").as_deref(), Some("running"));
    let r = h.patch(id, &token, "3-7", b"lo wo").await;
    assert_eq!(r.status(), 416);
    assert_eq!(header(&r, "range").as_deref(), Some("0-5"));
    assert_eq!(fake.job(id).unwrap().trace, b"hello");
}

/// Live trace on: the first final update and those following it within the window are 202
/// with `backoff.rb`'s interval; after it, 200.
#[tokio::test]
async fn live_trace_answers_202_with_rails_backoff_then_200() {
    let fake = fake()
        .live_trace(Duration::from_millis(1500))
        .start()
        .await
        .unwrap();
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    let h = Http::new(&fake);
    let body = json!({"state": "success", "token": token,
                      "output": {"checksum": "crc32:00000000", "bytesize": 0}});
    let r = h.put(id, None, body.clone()).await;
    assert_eq!(r.status(), 202);
    assert_eq!(
        header(&r, "x-gitlab-trace-update-interval").as_deref(),
        Some("1")
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = h.put(id, None, body.clone()).await;
    assert_eq!(r.status(), 202);
    assert_eq!(
        header(&r, "x-gitlab-trace-update-interval").as_deref(),
        Some("1/2")
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = h.put(id, None, body).await;
    assert_eq!(r.status(), 200);
    // Without a checksum Rails applies a final state at once (`accept_available?`).
    let fake = fake_live().await;
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("j"));
    let (id, token) = take(&fake).await;
    let r = Http::new(&fake)
        .put(id, None, json!({"state": "failed", "token": token}))
        .await;
    assert_eq!(r.status(), 200);
}

async fn fake_live() -> FakeGitLab {
    fake()
        .live_trace(Duration::from_secs(60))
        .start()
        .await
        .unwrap()
}

/// `get '/:id/artifacts'` (`authenticate_job_via_dependent_job!`): a running job's token
/// authorises the download, a finished job's does not (401); no archive is a 404;
/// `direct_download=true` redirects to object storage.
#[tokio::test]
async fn downloads_need_a_running_jobs_token() {
    let fake = fake().object_storage(true).start().await.unwrap();
    let exec = LocalExecutor::new(
        local_scaler(1, true).await,
        Some(gitlab_artifacts(&client(&fake))),
    );
    let (source, run) = spawn_source(client(&fake), exec, source_config());
    let producer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("producer")
            .script(["mkdir out", "echo x > out/x"])
            .artifact_paths(["out/"]),
    );
    let empty = fake.enqueue(RUNNER_TOKEN, JobBuilder::new("empty").script(["true"]));
    assert!(
        fake.wait_finished(&[producer, empty], Duration::from_secs(60))
            .await
    );
    source.stop_handle().graceful();
    run.await.unwrap();
    let producer_token = fake.job(producer).unwrap().token;
    fake.enqueue(RUNNER_TOKEN, JobBuilder::new("consumer"));
    let (_, running) = take(&fake).await;
    let h = Http::new(&fake);
    assert_eq!(
        h.download(producer, &producer_token, "").await.status(),
        401
    );
    assert_eq!(h.download(producer, &running, "").await.status(), 200);
    assert_eq!(h.download(empty, &running, "").await.status(), 404);
    let r = h
        .download(producer, &running, "?direct_download=true")
        .await;
    assert_eq!(r.status(), 200, "redirect followed to storage");
    let storage = fake.requests_to("GET", "/_storage/");
    assert_eq!(storage.len(), 1);
    assert_eq!(fake.job(producer).unwrap().state, FakeJobState::Success);
}
