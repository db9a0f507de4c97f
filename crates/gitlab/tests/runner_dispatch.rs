//! The job source with the real dispatcher: the local provider, shell isolation, and the
//! GitLab artifact store, against the fake GitLab.

use crate::runner_support;

use flotilla_dispatch::{Dispatcher, DispatcherConfig, LocalConnectors};
use flotilla_gitlab::JobSource;
use flotilla_isolate::ShellIsolation;
use flotilla_job::{LocalCacheStore, RunOptions};
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use runner_support::*;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn jobs_run_through_the_dispatcher_with_artifacts_passed_between_them() {
    let fake = fake().start().await.unwrap();
    let c = client(&fake);
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = Dispatcher::new(
        local_scaler(2, true).await,
        DispatcherConfig {
            isolation: Arc::new(ShellIsolation::new()).into(),
            connectors: Arc::new(LocalConnectors),
            artifacts: gitlab_artifacts(&c),
            cache: Arc::new(LocalCacheStore::new(dir.path().join("cache"))),
            run_options: RunOptions {
                stop_grace: Duration::from_secs(5),
                scratch_dir: Some(dir.path().to_path_buf()),
                ..RunOptions::default()
            },
            builds_dir: dir.path().join("builds").to_string_lossy().into_owned(),
            custom_build_dir: None,
            log_addresses: flotilla_dispatch::LogAddresses::default(),
        },
    );
    let source = Arc::new(JobSource::new(c, Arc::new(dispatcher), source_config()));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });
    let producer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("producer")
            .masked_variable("SIGNING_KEY", "very-secret-signing-key")
            .script([
                "mkdir -p dist",
                "echo built-by-$CI_JOB_NAME > dist/app.txt",
                "echo key=$SIGNING_KEY",
            ])
            .artifact_paths(["dist/"]),
    );
    assert!(
        fake.wait_finished(&[producer], Duration::from_secs(60))
            .await
    );
    let consumer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("consumer")
            .dependency(producer)
            .script(["cat dist/app.txt", "exit 4"]),
    );
    assert!(
        fake.wait_finished(&[consumer], Duration::from_secs(60))
            .await
    );
    let p = fake.job(producer).unwrap();
    assert_eq!(p.state, FakeJobState::Success, "{}", p.trace_text());
    assert!(p.trace_text().contains("key=[MASKED]"));
    assert!(!p.trace_text().contains("very-secret"));
    assert_eq!(p.artifacts.len(), 1);
    let f = p.final_update.clone().unwrap();
    assert_eq!(
        f.checksum.unwrap(),
        format!("crc32:{:08x}", crc32fast::hash(&p.trace))
    );
    let c = fake.job(consumer).unwrap();
    assert_eq!(c.state, FakeJobState::Failed);
    assert!(
        c.trace_text().contains("built-by-producer"),
        "{}",
        c.trace_text()
    );
    let f = c.final_update.clone().unwrap();
    assert_eq!(f.exit_code, Some(4));
    assert_eq!(f.failure_reason.as_deref(), Some("script_failure"));
    assert_eq!(
        f.checksum.unwrap(),
        format!("crc32:{:08x}", crc32fast::hash(&c.trace))
    );
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_run, 2);
}
