//! Artifacts through GitLab's API: uploaded by one job (named as GitLab Runner names them,
//! reports each with its type and format), downloaded by its dependant with the *running*
//! job's token and `direct_download=true`, directly or through object storage (which never
//! sees the token); a 404 fails the job; uploads follow a 307 and nothing else.

use crate::runner_support;

use flotilla_testkit::fake_gitlab::{FakeGitLab, FakeJobState, JobBuilder, Scripted};
use runner_support::*;
use std::io::Read;
use std::time::Duration;

async fn upload_then_download(object_storage: bool, running_token_in_payload: bool) {
    let fake = fake()
        .object_storage(object_storage)
        .dependency_token_is_running_job(running_token_in_payload)
        .start()
        .await
        .unwrap();
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
    // `filepath.Base(name) + ".zip"` (`artifacts_uploader.go` `artifactFilename`).
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
    // The running job's token, whatever the payload's `dependencies[].token` was; the
    // producer's own token no longer authenticates once it finished.
    assert_eq!(down[0].header("job-token"), Some(c.token.as_str()));
    assert_eq!(down[0].query.as_deref(), Some("direct_download=true"));
    let storage = fake.requests_to("GET", "/_storage/");
    if object_storage {
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
    run.await.unwrap();
}

#[tokio::test]
async fn artifacts_uploaded_by_one_job_are_downloaded_by_its_dependant() {
    upload_then_download(false, true).await;
}

#[tokio::test]
async fn artifact_downloads_follow_object_storage_redirects_without_leaking_the_token() {
    upload_then_download(true, true).await;
}

/// Older GitLab (or the feature flag `ci_expose_running_job_token_for_artifacts` off) puts the
/// dependency's own token in the payload; the running job's token works there too, and it
/// is the only one a current GitLab accepts.
#[tokio::test]
async fn downloads_use_the_running_jobs_token_even_when_the_payload_gives_another() {
    upload_then_download(false, false).await;
}

/// A dependency announced with artifacts that GitLab answers 404 for fails the job
/// (GitLab Runner's `artifacts_downloader.go` treats it as fatal).
#[tokio::test]
async fn a_404_on_a_dependency_download_fails_the_job() {
    let fake = fake().start().await.unwrap();
    let c = client(&fake);
    let exec = LocalExecutor::new(local_scaler(1, true).await, Some(gitlab_artifacts(&c)));
    let (source, run) = spawn_source(c, exec.clone(), source_config());
    let producer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("producer")
            .script(["mkdir out", "echo x > out/x"])
            .artifact_paths(["out/"]),
    );
    assert!(
        fake.wait_finished(&[producer], Duration::from_secs(60))
            .await
    );
    fake.script(
        "GET",
        &format!("/api/v4/jobs/{producer}/artifacts"),
        [Scripted::Status {
            status: 404,
            retry_after: None,
        }],
    );
    let consumer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("consumer")
            .dependency(producer)
            .script(["echo must-not-run"]),
    );
    assert!(
        fake.wait_finished(&[consumer], Duration::from_secs(60))
            .await
    );
    let j = fake.job(consumer).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    let text = j.trace_text();
    assert!(text.contains("no artifacts found for producer"), "{text}");
    assert!(!text.contains("must-not-run\n"), "{text}");
    assert_eq!(
        j.final_update.unwrap().failure_reason.as_deref(),
        Some("script_failure")
    );
    source.stop_handle().graceful();
    run.await.unwrap();
}

async fn upload_with_redirect(fake: &FakeGitLab, status: u16) -> (i64, Vec<u8>) {
    let c = client(fake);
    let exec = LocalExecutor::new(local_scaler(1, true).await, Some(gitlab_artifacts(&c)));
    let (source, run) = spawn_source(c, exec.clone(), source_config());
    let id = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("producer")
            .script(["mkdir out", "echo x > out/x"])
            .artifact_paths(["out/"]),
    );
    fake.script(
        "POST",
        &format!("/api/v4/jobs/{id}/artifacts"),
        [Scripted::Redirect {
            status,
            location: format!("{}/uploads/elsewhere?signature=abc", fake.other_origin()),
        }],
    );
    assert!(fake.wait_finished(&[id], Duration::from_secs(60)).await);
    source.stop_handle().graceful();
    run.await.unwrap();
    (id, exec.log(id))
}

/// A 307 sends the upload again, with the job token, to `/api/v4/jobs/:id/artifacts` on the
/// host the `Location` names (`artifacts_uploader.go` `handleRedirect` drops its path and
/// query).
#[tokio::test]
async fn uploads_follow_a_307_to_the_api_path_on_the_named_host() {
    let fake = fake().start().await.unwrap();
    let (id, _) = upload_with_redirect(&fake, 307).await;
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
    assert_eq!(j.artifacts.len(), 1);
    let ups = fake.requests_to("POST", &format!("/api/v4/jobs/{id}/artifacts"));
    assert_eq!(
        ups.iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![307, 201]
    );
    let other_host = fake
        .other_origin()
        .trim_start_matches("http://")
        .to_string();
    assert_eq!(ups[1].host, other_host);
    assert_eq!(ups[1].header("job-token"), Some(j.token.as_str()));
    assert_eq!(ups[0].query, ups[1].query);
    assert!(fake.requests_to("POST", "/uploads/").is_empty());
}

/// Any other redirect is not followed: the upload fails, and so does the job.
#[tokio::test]
async fn uploads_do_not_follow_other_redirects() {
    let fake = fake().start().await.unwrap();
    let (id, _) = upload_with_redirect(&fake, 302).await;
    let j = fake.job(id).unwrap();
    assert_eq!(j.state, FakeJobState::Failed);
    assert!(j.artifacts.is_empty());
    assert!(
        j.trace_text().contains("answered 302"),
        "{}",
        j.trace_text()
    );
    assert_eq!(
        fake.requests_to("POST", &format!("/api/v4/jobs/{id}/artifacts"))
            .len(),
        1
    );
}

/// `artifacts:reports` go up each with its `artifact_type` and `artifact_format` (junit and
/// dotenv as gzip, codequality raw), named `Base(name)` plus the format's extension; GitLab
/// passes the dotenv variables on to the jobs that depend on the job.
#[tokio::test]
async fn reports_are_uploaded_with_their_type_and_format_and_dotenv_reaches_dependants() {
    let fake = fake().start().await.unwrap();
    let c = client(&fake);
    let exec = LocalExecutor::new(local_scaler(1, true).await, Some(gitlab_artifacts(&c)));
    let (source, run) = spawn_source(c, exec.clone(), source_config());
    let build = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("build")
            .script([
                "echo '<testsuite name=\"unit\"/>' > rspec.xml",
                "echo 'BUILD_VERSION=4.2.0' > build.env",
                "echo '[]' > gl-code-quality-report.json",
                "mkdir bin && echo app > bin/app",
            ])
            .artifact_paths(["bin/"])
            .report("junit", ["rspec.xml"])
            .report("dotenv", ["build.env"])
            .report("codequality", ["gl-code-quality-report.json"]),
    );
    assert!(fake.wait_finished(&[build], Duration::from_secs(60)).await);
    let j = fake.job(build).unwrap();
    assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
    let mut got: Vec<(String, String, String)> = j
        .artifacts
        .iter()
        .map(|a| {
            (
                a.artifact_type.clone(),
                a.artifact_format.clone(),
                a.filename.clone(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("archive".into(), "zip".into(), "artifacts.zip".into()),
            (
                "codequality".into(),
                "raw".into(),
                "gl-code-quality-report.json".into()
            ),
            ("dotenv".into(), "gzip".into(), ".env.gz".into()),
            ("junit".into(), "gzip".into(), "junit.xml.gz".into()),
        ]
    );
    let junit = j
        .artifacts
        .iter()
        .find(|a| a.artifact_type == "junit")
        .unwrap();
    let mut xml = String::new();
    flate2::read::MultiGzDecoder::new(&junit.data[..])
        .read_to_string(&mut xml)
        .unwrap();
    assert_eq!(xml, "<testsuite name=\"unit\"/>\n");
    let dotenv = j
        .artifacts
        .iter()
        .find(|a| a.artifact_type == "dotenv")
        .unwrap();
    assert_eq!(
        dotenv.dotenv,
        vec![("BUILD_VERSION".to_string(), "4.2.0".to_string())]
    );

    let deploy = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("deploy")
            .dependency(build)
            .script(["echo deploying version $BUILD_VERSION"]),
    );
    assert!(fake.wait_finished(&[deploy], Duration::from_secs(60)).await);
    let d = fake.job(deploy).unwrap();
    assert!(
        d.trace_text().contains("deploying version 4.2.0"),
        "{}",
        d.trace_text()
    );
    source.stop_handle().graceful();
    run.await.unwrap();
}
