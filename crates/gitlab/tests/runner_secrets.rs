//! Secrets never reach the client's logs: every log line of a run at TRACE level (the
//! runner token, job tokens and masked values all in play, failures and retries included)
//! is captured and searched.

use crate::runner_support;

use flotilla_gitlab::Client;
use flotilla_testkit::fake_gitlab::{FaultKind, JobBuilder, Scripted};
use runner_support::*;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn secrets_never_appear_in_the_clients_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    tracing_subscriber::fmt()
        .with_env_filter("trace")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let fake = fake().start().await.unwrap();
    // Failures on the way, so retry and error paths log too.
    fake.script(
        "POST",
        "/api/v4/jobs/request",
        [Scripted::Status {
            status: 500,
            retry_after: None,
        }],
    );
    fake.script(
        "PATCH",
        "/api/v4/jobs/",
        [Scripted::Fault(FaultKind::DropAfter)],
    );
    fake.script(
        "PUT",
        "/api/v4/jobs/",
        [Scripted::Status {
            status: 502,
            retry_after: None,
        }],
    );
    let c = client(&fake);
    c.verify().await.unwrap();
    let bad = Client::new(client_config(fake.url(), "glrt-another-secret-token")).unwrap();
    let e = bad.verify().await.unwrap_err();
    tracing::error!(error = %e, "verify failed");
    let exec = LocalExecutor::new(local_scaler(1, true).await, Some(gitlab_artifacts(&c)));
    let (source, run) = spawn_source(c, exec.clone(), source_config());
    let ok = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("secretive")
            .masked_variable("DB_PASSWORD", "pa55-word-in-the-log")
            .script(["echo $DB_PASSWORD", "mkdir out && echo x > out/x"])
            .artifact_paths(["out/"]),
    );
    let failing = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("failing")
            .dependency(ok)
            .masked_variable("DB_PASSWORD", "pa55-word-in-the-log")
            .script(["echo $DB_PASSWORD", "exit 1"]),
    );
    assert!(
        fake.wait_finished(&[ok, failing], Duration::from_secs(60))
            .await
    );
    source.stop_handle().graceful();
    run.await.unwrap();

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("job reported to GitLab"), "the capture works");
    assert!(logs.contains("runner API call"), "the capture works");
    let mut secrets = vec![
        RUNNER_TOKEN.to_string(),
        "glrt-another-secret-token".to_string(),
        "pa55-word-in-the-log".to_string(),
    ];
    for j in fake.jobs() {
        secrets.push(j.token.clone());
    }
    for s in &secrets {
        assert!(
            !logs.contains(s.as_str()),
            "a secret leaked into the logs: {s}"
        );
    }
}
