//! `flotilla run`: take jobs from GitLab for every configured runner and run each on a slot
//! of that runner's fleet, with state in the durable store.
//!
//! Start-up, per runner: verify the token, take the store's lease on the runner's fleet (a
//! second manager refuses to start), report jobs that were running when a previous process
//! died (failed, exactly once), restore the fleet's ledger (instances are adopted, not
//! deleted), then request jobs. SIGTERM or SIGINT stops taking jobs and waits up to
//! `shutdown_timeout` for running ones; a second signal, or SIGQUIT, stops at once and fails
//! running jobs as system failures. The fleet shuts down last (deleting instances when
//! `delete_instances_on_shutdown` is set), then the lease is released.

use crate::cli::RunArgs;
use crate::config::{Config, IsolationLevel, RunnerConfig};
use crate::fleet::{self, Durable, FleetParts};
use anyhow::{Context, Result, anyhow, bail};
use async_trait::async_trait;
use flotilla_gitlab::{
    Client, ClientConfig, FinalReport, GitLabArtifactStore, Info, JobHooks, JobSource,
    SlotExecutor, SourceConfig, StartedJob, StopHandle, UpdateJobRequest,
};
use flotilla_job::{LocalCacheStore, Outcome, RunOptions};
use flotilla_scaler::Scaler;
use flotilla_store::{
    Identity, JobOutcome, JobStart, LeaseHolder, ScopeId, Store, StoreError, StoreOptions,
};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;

/// How long a manager's lease on a fleet lasts without renewal.
const LEASE_TTL: Duration = Duration::from_secs(45);
/// How often the lease is renewed.
const LEASE_RENEW: Duration = Duration::from_secs(15);

/// How often the scaler's last decision is copied to the store (when it changed).
const DECISION_RECORD_INTERVAL: Duration = Duration::from_secs(2);

/// Runs `flotilla run`.
pub fn run(args: &RunArgs, err: &mut dyn Write) -> ExitCode {
    let path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from("config.toml"));
    let Some(config) = crate::cli::load_config(&path, err) else {
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(daemon(config, args.rebuild_state)) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The source name jobs are recorded under.
fn source_name(runner: &RunnerConfig) -> String {
    format!("gitlab:{}", runner.name)
}

/// Records every job in the store, and its token so a restart can report it.
struct StoreHooks {
    store: Store,
    scope: ScopeId,
    source: String,
}

fn token_name(id: i64) -> String {
    format!("job-token/{id}")
}

#[async_trait]
impl JobHooks for StoreHooks {
    async fn job_started(&self, job: &StartedJob) {
        let start = JobStart {
            source: self.source.clone(),
            job_id: job.id.to_string(),
            key: String::new(),
            instance: String::new(),
            slot: 0,
            started_at: SystemTime::now(),
        };
        // The token first: a job recorded without one could not be reported after a crash.
        if let Err(e) = self.store.put_credential(
            self.scope,
            &token_name(job.id),
            job.token.expose().as_bytes(),
        ) {
            tracing::error!(job = job.id, error = %e, "cannot record the job's token");
        }
        if let Err(e) = self.store.job_started(self.scope, &start) {
            tracing::error!(job = job.id, error = %e, "cannot record the job's start");
        }
    }

    async fn job_withdrawn(&self, job: &StartedJob) {
        // Forgotten, not ended: GitLab may hand the same job out again.
        if let Err(e) = self
            .store
            .forget_job(self.scope, &self.source, &job.id.to_string())
        {
            tracing::error!(job = job.id, error = %e, "cannot forget the withdrawn job");
        }
        let _ = self
            .store
            .delete_credential(self.scope, &token_name(job.id));
    }

    async fn job_finished(&self, job: &StartedJob, outcome: &Outcome) {
        let outcome = match outcome {
            Outcome::Success => JobOutcome::Success,
            Outcome::Failed { reason, exit_code } => JobOutcome::Failed {
                failure_reason: reason.as_str().to_string(),
                exit_code: *exit_code,
            },
        };
        if let Err(e) = self.store.job_finished(
            self.scope,
            &self.source,
            &job.id.to_string(),
            &outcome,
            SystemTime::now(),
        ) {
            tracing::error!(job = job.id, error = %e, "cannot record the job's end");
        }
    }

    async fn job_reported(&self, job: &StartedJob, report: &FinalReport) {
        tracing::debug!(job = job.id, ?report, "job reported");
        if !report.settled() {
            // GitLab never took the final update: keep the job (and its token) unreported,
            // so the next start sends it again.
            tracing::warn!(
                job = job.id,
                "the job's final state did not reach GitLab; it is sent again at the next start"
            );
            return;
        }
        if let Err(e) = self.store.job_reported(
            self.scope,
            &self.source,
            &job.id.to_string(),
            SystemTime::now(),
        ) {
            tracing::error!(job = job.id, error = %e, "cannot record that the job was reported");
        }
        let _ = self
            .store
            .delete_credential(self.scope, &token_name(job.id));
    }
}

/// Reports the jobs a previous process left running: failed as a system failure (or with the
/// outcome it recorded), exactly once.
async fn report_orphans(store: &Store, scope: ScopeId, client: &Client, info: &Info, runner: &str) {
    let orphans = match store.unfinished_jobs(scope) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(runner, error = %e, "cannot read unfinished jobs");
            return;
        }
    };
    for job in orphans {
        let Ok(id) = job.job_id.parse::<i64>() else {
            continue;
        };
        // A job that never recorded an outcome died with the previous process.
        if job.outcome.is_none()
            && let Err(e) = store.job_finished(
                scope,
                &job.source,
                &job.job_id,
                &JobOutcome::Failed {
                    failure_reason: "runner_system_failure".into(),
                    exit_code: None,
                },
                SystemTime::now(),
            )
        {
            tracing::error!(runner, job = id, error = %e, "cannot record the end of an unfinished job");
            continue;
        }
        let token = match store.get_credential(scope, &token_name(id)) {
            Ok(Some(t)) => String::from_utf8_lossy(t.expose()).into_owned(),
            _ => {
                tracing::warn!(
                    runner,
                    job = id,
                    "no token recorded for an unfinished job; it cannot be reported"
                );
                if let Err(e) =
                    store.job_reported(scope, &job.source, &job.job_id, SystemTime::now())
                {
                    tracing::error!(runner, job = id, error = %e, "cannot record an unfinished job as handled");
                }
                continue;
            }
        };
        let (state, reason, exit_code) = match &job.outcome {
            Some(JobOutcome::Success) => ("success", None, None),
            Some(JobOutcome::Failed {
                failure_reason,
                exit_code,
            }) => ("failed", Some(failure_reason.as_str()), *exit_code),
            None => ("failed", Some("runner_system_failure"), None),
        };
        let request = UpdateJobRequest {
            info,
            token: &token,
            state,
            failure_reason: reason,
            checksum: None,
            output: None,
            exit_code,
        };
        match client.update_job(id, &request).await {
            Ok(resp) => {
                tracing::warn!(
                    runner,
                    job = id,
                    state,
                    status = resp.status,
                    "reported a job the previous process left running"
                );
                if let Err(e) =
                    store.job_reported(scope, &job.source, &job.job_id, SystemTime::now())
                {
                    tracing::error!(runner, job = id, error = %e, "cannot record that the job was reported");
                }
                let _ = store.delete_credential(scope, &token_name(id));
            }
            Err(e) => {
                tracing::error!(runner, job = id, error = %e, "cannot report a job the previous process left running; will try at the next start");
            }
        }
    }
}

/// One runner, started.
struct Started {
    name: String,
    source: Arc<JobSource>,
    stop: StopHandle,
    scaler: Scaler,
    store: Store,
    scope: ScopeId,
    shutdown_timeout: Duration,
}

fn open_store(state_dir: &Path, rebuild: bool) -> Result<Store> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating the state directory {}", state_dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700));
    }
    let options = StoreOptions {
        mode: if rebuild {
            flotilla_store::OpenMode::Rebuild
        } else {
            flotilla_store::OpenMode::Refuse
        },
        ..StoreOptions::default()
    };
    let path = state_dir.join("flotilla.db");
    match Store::open(&path, options) {
        Ok(s) => {
            if let Some(aside) = s.moved_aside() {
                tracing::warn!(moved = %aside.display(), "the unusable state file was moved aside; state is rebuilt from the providers' listings");
            }
            Ok(s)
        }
        Err(
            e @ (StoreError::NotOurs { .. }
            | StoreError::Corrupt { .. }
            | StoreError::TooNew { .. }),
        ) => Err(anyhow!(e)).context(
            "refusing to start; the file was left untouched (start with --rebuild-state to \
                 move it aside and rebuild state from the instance groups)",
        ),
        Err(e) => Err(anyhow!(e)),
    }
}

async fn start_runner(
    config: &Config,
    runner: &RunnerConfig,
    store: &Store,
    state_dir: &Path,
    system_id: &str,
    holder: &LeaseHolder,
    concurrent: Arc<Semaphore>,
) -> Result<Started> {
    let Some((url, token)) = runner.gitlab_credentials() else {
        bail!("runner {:?} has no url or token", runner.name);
    };
    let containers = runner.isolation_levels().offers(IsolationLevel::Docker);
    let info = Info::flotilla(runner.executor.as_str(), containers);
    let client = Arc::new(
        Client::new(ClientConfig::new(
            url,
            token.clone(),
            system_id.to_string(),
            info.clone(),
        ))
        .with_context(|| format!("runner {:?}", runner.name))?,
    );
    let verified = client
        .verify()
        .await
        .with_context(|| format!("runner {:?}: verifying with GitLab at {url}", runner.name))?;
    let runner_id = match (verified.id, runner.id) {
        (Some(id), _) | (None, Some(id)) => id.to_string(),
        (None, None) => {
            tracing::warn!(runner = %runner.name, "GitLab did not say the runner's id; keying state by the runner's name");
            format!("name:{}", runner.name)
        }
    };
    // The provider says what it is (its id keys the fleet's state) before anything is read.
    let provider = fleet::provider(runner, Some(state_dir)).await?;
    let identity = Identity::new(url, runner_id, provider.info.id.clone());
    let scope = store.scope(&identity)?;
    store
        .acquire_lease(scope, holder, LEASE_TTL, SystemTime::now())
        .with_context(|| format!("runner {:?} ({identity})", runner.name))?;
    report_orphans(store, scope, &client, &info, &runner.name).await;
    let persisted = store.load_fleet(scope)?;
    tracing::info!(
        runner = %runner.name,
        instances = persisted.instances.len(),
        requested = persisted.requested_in_flight,
        "restoring the fleet's ledger"
    );
    std::fs::create_dir_all(state_dir.join("scratch")).context("creating the scratch directory")?;
    let mut run_options = RunOptions {
        scratch_dir: Some(state_dir.join("scratch")),
        ..RunOptions::default()
    };
    run_options.runner.id = runner.id.unwrap_or(0);
    let parts = FleetParts {
        artifacts: Arc::new(GitLabArtifactStore::new(client.clone())),
        cache: Arc::new(LocalCacheStore::new(
            state_dir.join("cache").join(fleet::file_name(&runner.name)),
        )),
        local_builds_dir: state_dir
            .join("builds")
            .join(fleet::file_name(&runner.name))
            .to_string_lossy()
            .into_owned(),
        run_options,
        durable: Some(Durable {
            persisted,
            journal: store.journal(scope),
        }),
    };
    let fleet = fleet::from_runner(runner, provider, parts).await?;
    tracing::info!("{}", fleet.description);
    let source_config = SourceConfig {
        name: runner.name.clone(),
        limit: runner.limit as usize,
        request_concurrency: (runner.request_concurrency as usize).max(1),
        check_interval: config.check_interval,
        instance_acquire_timeout: runner
            .autoscaler
            .as_ref()
            .map(|a| a.instance_acquire_timeout),
        shutdown_timeout: config.shutdown_timeout,
        ..SourceConfig::default()
    };
    let executor: Arc<dyn SlotExecutor> = fleet.dispatcher.clone();
    let source = JobSource::new(client, executor, source_config)
        .with_hooks(Arc::new(StoreHooks {
            store: store.clone(),
            scope,
            source: source_name(runner),
        }))
        .with_concurrent(concurrent);
    let stop = source.stop_handle();
    Ok(Started {
        name: runner.name.clone(),
        source: Arc::new(source),
        stop,
        scaler: fleet.scaler,
        store: store.clone(),
        scope,
        shutdown_timeout: config.shutdown_timeout,
    })
}

async fn daemon(config: Config, rebuild: bool) -> Result<ExitCode> {
    let state_dir = config
        .flotilla
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(".flotilla"));
    let store = open_store(&state_dir, rebuild)?;
    let system_id = flotilla_gitlab::system_id(&state_dir)
        .with_context(|| format!("system id in {}", state_dir.display()))?;
    let holder = LeaseHolder::this_process();
    let concurrent = Arc::new(Semaphore::new(config.concurrent.max(1) as usize));
    let mut started = Vec::new();
    for runner in &config.runners {
        if !runner.executor.requires_gitlab() {
            tracing::info!(runner = %runner.name, "not a GitLab runner (executor flotilla); skipped by `run`");
            continue;
        }
        match start_runner(
            &config,
            runner,
            &store,
            &state_dir,
            &system_id,
            &holder,
            concurrent.clone(),
        )
        .await
        {
            Ok(s) => started.push(s),
            Err(e) => {
                // Stop what already started before giving up.
                for s in &started {
                    s.stop.force();
                    s.scaler.shutdown(Duration::ZERO).await;
                    let _ = s.store.release_lease(s.scope, &holder);
                }
                return Err(e);
            }
        }
    }
    if started.is_empty() {
        bail!("no runner to run: configure a [[runners]] entry with url and token");
    }

    // Keep the leases.
    let renewer = {
        let leases: Vec<(Store, ScopeId, String)> = started
            .iter()
            .map(|s| (s.store.clone(), s.scope, s.name.clone()))
            .collect();
        let holder = holder.clone();
        let stops: Vec<StopHandle> = started.iter().map(|s| s.stop.clone()).collect();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(LEASE_RENEW).await;
                for ((store, scope, name), stop) in leases.iter().zip(&stops) {
                    if let Err(e) = store.renew_lease(*scope, &holder, LEASE_TTL, SystemTime::now())
                    {
                        tracing::error!(runner = %name, error = %e, "lost the lease on the fleet; stopping this runner");
                        stop.graceful();
                    }
                }
            }
        })
    };

    // Keep the scaler's last decision in the store for `flotilla status`.
    let decisions = {
        let fleets: Vec<(Store, ScopeId, Scaler, String)> = started
            .iter()
            .map(|s| (s.store.clone(), s.scope, s.scaler.clone(), s.name.clone()))
            .collect();
        tokio::spawn(async move {
            let mut written: Vec<Option<String>> = vec![None; fleets.len()];
            loop {
                for ((store, scope, scaler, name), last) in fleets.iter().zip(&mut written) {
                    let Some(text) = scaler.last_decision().map(|e| e.to_string()) else {
                        continue;
                    };
                    if last.as_ref() == Some(&text) {
                        continue;
                    }
                    match store.record_decision(*scope, &text, SystemTime::now()) {
                        Ok(()) => *last = Some(text),
                        Err(e) => {
                            tracing::warn!(runner = %name, error = %e, "cannot record the scaler's decision for `flotilla status`")
                        }
                    }
                }
                tokio::time::sleep(DECISION_RECORD_INTERVAL).await;
            }
        })
    };

    // Signals: the first stops taking jobs, the second (or SIGQUIT) stops at once.
    let stops: Vec<StopHandle> = started.iter().map(|s| s.stop.clone()).collect();
    let signals = tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        let mut graceful = false;
        loop {
            let forced = tokio::select! {
                _ = term.recv() => graceful,
                _ = int.recv() => graceful,
                _ = quit.recv() => true,
            };
            if forced {
                tracing::warn!("stopping now: running jobs are failed as system failures");
                for s in &stops {
                    s.force();
                }
                return;
            }
            graceful = true;
            tracing::info!(
                "stopping: no new jobs; waiting for running ones (signal again to stop at once)"
            );
            for s in &stops {
                s.graceful();
            }
        }
    });

    let mut tasks = tokio::task::JoinSet::new();
    for s in &started {
        let source = s.source.clone();
        let name = s.name.clone();
        tasks.spawn(async move { (name, source.run().await) });
    }
    let mut failed = false;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((name, Ok(report))) => tracing::info!(runner = %name, ?report, "runner stopped"),
            Ok((name, Err(e))) => {
                tracing::error!(runner = %name, error = %e, "runner stopped with an error");
                eprintln!("error: runner {name:?}: {e}");
                failed = true;
                // One runner failing (a revoked token) stops the others gracefully.
                for s in &started {
                    s.stop.graceful();
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "a runner task failed");
                failed = true;
            }
        }
    }
    signals.abort();
    renewer.abort();
    decisions.abort();
    for s in &started {
        let report = s.scaler.shutdown(s.shutdown_timeout).await;
        tracing::info!(runner = %s.name, ?report, "fleet shut down");
        if let Err(e) = s.store.release_lease(s.scope, &holder) {
            tracing::warn!(runner = %s.name, error = %e, "cannot release the lease");
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
