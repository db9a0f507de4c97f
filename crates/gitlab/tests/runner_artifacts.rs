//! Artifacts through GitLab's API: uploaded by one job, downloaded by its dependant with the
//! dependency's token, directly or through a redirect to storage (which never sees the
//! token).

mod runner_support;

use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use runner_support::*;
use std::time::Duration;

async fn upload_then_download(redirect: bool) {
    let fake = fake().artifact_redirect(redirect).start().await.unwrap();
    let c = client(&fake);
    let exec = LocalExecutor::new(local_scaler(1, true).await, Some(gitlab_artifacts(&c)));
    let (source, run) = spawn_source(c, exec.clone(), source_config());
    let producer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("producer")
            .script([
                "mkdir -p out",
                "echo payload-of-$CI_JOB_NAME > out/result.txt",
            ])
            .artifact_paths(["out/"]),
    );
    assert!(
        fake.wait_finished(&[producer], Duration::from_secs(60))
            .await
    );
    let p = fake.job(producer).unwrap();
    assert_eq!(p.state, FakeJobState::Success, "{}", p.trace_text());
    assert_eq!(p.artifacts.len(), 1);
    let a = &p.artifacts[0];
    assert_eq!(a.artifact_type, "archive");
    assert_eq!(a.artifact_format, "zip");
    assert_eq!(a.expire_in, "1 day");
    assert_eq!(a.filename, "artifacts.zip");
    assert!(a.data.starts_with(b"PK"), "a zip archive");
    let up = fake.requests_to("POST", &format!("/api/v4/jobs/{producer}/artifacts"));
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].header("job-token"), Some(p.token.as_str()));
    assert!(
        up[0]
            .header("content-type")
            .unwrap()
            .starts_with("multipart/form-data")
    );
    let q = up[0].query.clone().unwrap();
    assert!(
        q.contains("artifact_format=zip") && q.contains("artifact_type=archive"),
        "{q}"
    );

    let consumer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("consumer")
            .dependency(producer)
            .script(["cat out/result.txt"]),
    );
    assert!(
        fake.wait_finished(&[consumer], Duration::from_secs(60))
            .await
    );
    let c = fake.job(consumer).unwrap();
    assert_eq!(c.state, FakeJobState::Success, "{}", c.trace_text());
    assert!(
        c.trace_text().contains("payload-of-producer"),
        "{}",
        c.trace_text()
    );
    let down = fake.requests_to("GET", &format!("/api/v4/jobs/{producer}/artifacts"));
    assert_eq!(down.len(), 1);
    // The dependency's token, as the payload gave it.
    assert_eq!(down[0].header("job-token"), Some(p.token.as_str()));
    let storage = fake.requests_to("GET", "/_storage/");
    if redirect {
        assert_eq!(down[0].status, 302);
        assert_eq!(storage.len(), 1);
        assert_eq!(
            storage[0].header("job-token"),
            None,
            "storage never sees the job token"
        );
        assert_eq!(storage[0].status, 200);
    } else {
        assert_eq!(down[0].status, 200);
        assert!(storage.is_empty());
    }
    source.stop_handle().graceful();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn artifacts_uploaded_by_one_job_are_downloaded_by_its_dependant() {
    upload_then_download(false).await;
}

#[tokio::test]
async fn artifact_downloads_follow_redirects_without_leaking_the_token() {
    upload_then_download(true).await;
}
