//! Shared helpers for the runner API tests: a fake GitLab, a client for it, a scaler over
//! the local provider, and a [`SlotExecutor`] that runs jobs with the job engine's
//! `LocalEnvironment` (real bash) and keeps a copy of every byte of each job's log.
#![allow(dead_code)]

use async_trait::async_trait;
use flotilla_fleet::Secret;
use flotilla_gitlab::{
    Acceptance, Client, ClientConfig, GitLabArtifactStore, Info, JobSource, RetryPolicy,
    SlotExecutor, SourceConfig, SourceReport, TraceOptions,
};
use flotilla_job::{
    ArtifactStore, BufferSink, JobCancel, JobPayload, JobResult, JobRunner, LocalCacheStore,
    LocalEnvironment, RunOptions, TraceError, TraceSink,
};
use flotilla_provider_local::LocalGroup;
use flotilla_scaler::{Acquisition, Policy, Scaler, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::fake_gitlab::{FakeGitLab, FakeGitLabBuilder};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) const RUNNER_TOKEN: &str = "glrt-test_runner_token_0123456789";

/// A fake GitLab (GitLab as installed: two-phase acceptance off) with our runner token and
/// short timings.
pub(crate) fn fake() -> FakeGitLabBuilder {
    FakeGitLab::builder()
        .runner_token(RUNNER_TOKEN)
        .poll_duration(Duration::from_millis(800))
        .trace_update_interval(1)
}

/// Fast retries for tests.
pub(crate) fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: 5,
        base: Duration::from_millis(20),
        max: Duration::from_secs(2),
    }
}

pub(crate) fn client_config(url: &str, token: &str) -> ClientConfig {
    let mut c = ClientConfig::new(
        url,
        Secret::new(token.to_string()),
        "s_0123456789ab".into(),
        Info::flotilla("instance", false),
    );
    c.retry = fast_retry();
    c.request_timeout = Duration::from_secs(30);
    c.call_timeout = Duration::from_secs(30);
    c
}

pub(crate) fn client(fake: &FakeGitLab) -> Arc<Client> {
    Arc::new(Client::new(client_config(fake.url(), RUNNER_TOKEN)).unwrap())
}

/// Trace options for tests: 200 ms between PATCHes unless GitLab says otherwise.
pub(crate) fn trace_options() -> TraceOptions {
    TraceOptions {
        update_interval: Duration::from_millis(200),
        force_send_interval: Duration::from_secs(30),
        final_update_attempts: 10,
        final_update_backoff_max: Duration::from_millis(500),
        ..TraceOptions::default()
    }
}

pub(crate) fn source_config() -> SourceConfig {
    SourceConfig {
        name: "test-runner".into(),
        limit: 0,
        request_concurrency: 1,
        check_interval: Duration::from_millis(100),
        instance_acquire_timeout: Some(Duration::from_secs(20)),
        acceptance: Acceptance::Immediately,
        unhealthy_requests_limit: 3,
        unhealthy_interval: Duration::from_secs(2),
        shutdown_timeout: Duration::from_secs(10),
        trace: trace_options(),
        environment: Vec::new(),
        clone_url: None,
        feature_flags: Default::default(),
    }
}

/// [`source_config`] for a GitLab known to wait for the acknowledgement (two-phase on).
pub(crate) fn two_phase_source_config() -> SourceConfig {
    SourceConfig {
        acceptance: Acceptance::WhenSlotReady {
            interval: Duration::from_millis(300),
        },
        ..source_config()
    }
}

/// A scaler over this host (one instance) with `capacity` slots.
pub(crate) async fn local_scaler(capacity: usize, preemptive: bool) -> Scaler {
    let config = ScalerConfig {
        capacity_per_instance: capacity,
        max_instances: 1,
        update_interval: Duration::from_millis(200),
        update_interval_when_expecting: Duration::from_millis(100),
        ..ScalerConfig::default()
    };
    let policy = Policy {
        idle_count: if preemptive { 1 } else { 0 },
        preemptive_mode: Some(preemptive),
        ..Policy::default()
    };
    let s = ScalerBuilder::new(Arc::new(LocalGroup::new()), config)
        .schedule(Schedule::single(policy))
        .start()
        .await
        .unwrap();
    // Wait until the driver has seen the local instance.
    for _ in 0..100 {
        if s.snapshot().counts.idle + s.snapshot().counts.reserved + s.snapshot().counts.acquired
            > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s
}

/// Copies every byte to a second sink.
struct Tee<'a> {
    a: &'a mut dyn TraceSink,
    b: BufferSink,
}

#[async_trait]
impl TraceSink for Tee<'_> {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        self.b.write(bytes).await?;
        self.a.write(bytes).await
    }

    async fn finish(&mut self) -> Result<(), TraceError> {
        self.a.finish().await
    }
}

/// Runs jobs locally with real bash; remembers each job's log and how often it ran.
pub(crate) struct LocalExecutor {
    pub scaler: Scaler,
    pub root: tempfile::TempDir,
    pub artifacts: Arc<dyn ArtifactStore>,
    pub cache: LocalCacheStore,
    pub logs: Mutex<HashMap<i64, BufferSink>>,
    pub runs: Mutex<HashMap<i64, u32>>,
    pub results: Mutex<HashMap<i64, JobResult>>,
}

impl LocalExecutor {
    pub(crate) fn new(
        scaler: Scaler,
        artifacts: Option<Arc<dyn ArtifactStore>>,
    ) -> Arc<LocalExecutor> {
        let root = tempfile::tempdir().unwrap();
        let artifacts = artifacts.unwrap_or_else(|| {
            Arc::new(flotilla_job::LocalArtifactStore::new(
                root.path().join("artifacts"),
            ))
        });
        let cache = LocalCacheStore::new(root.path().join("cache"));
        Arc::new(LocalExecutor {
            scaler,
            root,
            artifacts,
            cache,
            logs: Mutex::new(HashMap::new()),
            runs: Mutex::new(HashMap::new()),
            results: Mutex::new(HashMap::new()),
        })
    }

    /// The log the job engine emitted for job `id` (what GitLab must hold).
    pub(crate) fn log(&self, id: i64) -> Vec<u8> {
        self.logs
            .lock()
            .unwrap()
            .get(&id)
            .map(|b| b.contents())
            .unwrap_or_default()
    }

    pub(crate) fn runs(&self, id: i64) -> u32 {
        self.runs.lock().unwrap().get(&id).copied().unwrap_or(0)
    }

    pub(crate) fn result(&self, id: i64) -> Option<JobResult> {
        self.results.lock().unwrap().get(&id).cloned()
    }
}

#[async_trait]
impl SlotExecutor for LocalExecutor {
    fn scaler(&self) -> &Scaler {
        &self.scaler
    }

    async fn run(
        &self,
        acquisition: Acquisition,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        *self.runs.lock().unwrap().entry(job.id).or_insert(0) += 1;
        let builds = self.root.path().join("builds");
        let project = builds.join(format!("slot{}-job{}", acquisition.slot(), job.id));
        std::fs::create_dir_all(&project).unwrap();
        let env = LocalEnvironment::new(&builds, &project).with_kill_grace(Duration::from_secs(2));
        let buffer = BufferSink::new();
        self.logs.lock().unwrap().insert(job.id, buffer.clone());
        let mut tee = Tee { a: sink, b: buffer };
        let runner = JobRunner::new(&env, &*self.artifacts, &self.cache).with_options(RunOptions {
            scratch_dir: Some(self.root.path().to_path_buf()),
            stop_grace: Duration::from_secs(5),
            concurrent_id: acquisition.slot() as u32,
            ..RunOptions::default()
        });
        let result = runner.run(job, &mut tee, cancel).await;
        self.scaler.release(acquisition.key());
        self.results.lock().unwrap().insert(job.id, result.clone());
        result
    }
}

/// A source over `executor` with `config`, running in the background.
pub(crate) fn spawn_source(
    client: Arc<Client>,
    executor: Arc<LocalExecutor>,
    config: SourceConfig,
) -> (Arc<JobSource>, tokio::task::JoinHandle<SourceReport>) {
    let source = Arc::new(JobSource::new(client, executor, config));
    let s = source.clone();
    let handle = tokio::spawn(async move { s.run().await });
    (source, handle)
}

/// The GitLab artifact store for `client`.
pub(crate) fn gitlab_artifacts(client: &Arc<Client>) -> Arc<dyn ArtifactStore> {
    Arc::new(GitLabArtifactStore::new(client.clone()))
}

/// Waits up to 20 s until the trace of job `id` shows `text`; panics if it never does.
pub(crate) async fn wait_for_trace(fake: &FakeGitLab, id: i64, text: &str) {
    let found = fake
        .wait_for_job(id, Duration::from_secs(20), |j| {
            j.trace_text().contains(text)
        })
        .await;
    assert!(found.is_some(), "job {id} never printed {text:?}");
}

/// Waits up to 20 s until the job's accept (`PUT state=running`) was answered, so that
/// answers scripted for its path next reach the PUTs after it.
pub(crate) async fn wait_for_accept(fake: &FakeGitLab, id: i64) {
    let path = format!("/api/v4/jobs/{id}");
    for _ in 0..1000 {
        if fake
            .requests_to("PUT", &path)
            .iter()
            .any(|r| r.path == path && r.status != 0)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("job {id} was never accepted");
}
