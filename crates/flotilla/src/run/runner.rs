//! One `[[runners]]` entry from start to stop, as one task of the manager:
//!
//! 1. verify with GitLab until it answers (never giving up, see [`super::verify`]);
//! 2. take the store's lease on the runner's fleet (a second manager is refused: fatal);
//! 3. report the jobs a previous process left unreported;
//! 4. restore the fleet (instances are adopted, not deleted) and build its dispatcher;
//! 5. take and run jobs until stopped, with two helper tasks of its own: lease renewal (a
//!    lost lease stops this runner gracefully) and the scaler-decision recorder;
//! 6. shut down in order: the job source finishes (or aborts, on a forced stop) its jobs; the
//!    decision recorder writes a last time and ends; the fleet shuts down (deleting instances
//!    when configured); lease renewal ends; the lease is released.
//!
//! Helper loops are ended through their cancellation token and awaited, never aborted, so
//! nothing they hold (a store transaction, a half-written record) is cut off.

use super::monitor::{ApiMetrics, ObservedExecutor, ObservedHooks};
use super::orphans::report_orphans;
use super::store_hooks::StoreHooks;
use super::verify::verify_until_ok;
use crate::config::{Config, IsolationLevel, RunnerConfig};
use crate::fleet::{self, Durable, FleetParts};
use anyhow::{Context, Result, anyhow, bail};
use flotilla_gitlab::{
    Client, ClientConfig, GitLabArtifactStore, Info, JobHooks, JobSource, SlotExecutor,
    SourceConfig, SourceReport,
};
use flotilla_job::LocalCacheStore;
use flotilla_monitor::RunnerHandle;
use flotilla_scaler::Scaler;
use flotilla_store::{Identity, LeaseHolder, ScopeId, Store};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a manager's lease on a fleet lasts without renewal.
const LEASE_TTL: Duration = Duration::from_secs(45);
/// How often the lease is renewed.
const LEASE_RENEW: Duration = Duration::from_secs(15);
/// How often the scaler's last decision is copied to the store (when it changed).
const DECISION_RECORD_INTERVAL: Duration = Duration::from_secs(2);

/// What every runner task shares with the manager.
pub(super) struct Shared {
    pub config: Config,
    pub store: Store,
    pub state_dir: PathBuf,
    pub system_id: String,
    pub holder: LeaseHolder,
    pub concurrent: Arc<Semaphore>,
    /// A graceful stop: no new jobs, running ones finish (up to `shutdown_timeout`).
    pub stop: CancellationToken,
    /// A forced stop: running jobs are aborted and reported.
    pub force: CancellationToken,
    /// The state directory's disk, looked at before each job request.
    pub disk: Arc<super::disk::DiskGate>,
}

/// How a runner ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// It was stopped before GitLab ever verified it.
    NeverStarted,
    /// It ran and stopped.
    Stopped {
        /// What its job source did.
        report: SourceReport,
        /// Whether it stopped because it lost its lease.
        lost_lease: bool,
    },
}

/// The source name jobs are recorded under.
fn source_name(runner: &RunnerConfig) -> String {
    format!("gitlab:{}", runner.name)
}

/// Runs `runner` until the manager stops it, telling `monitor` (when `listen_address` is
/// set) what it does. An error means it could not start.
pub(super) async fn run_runner(
    shared: Arc<Shared>,
    runner: RunnerConfig,
    monitor: Option<RunnerHandle>,
) -> Result<Ended> {
    let Some((url, token)) = runner.gitlab_credentials() else {
        bail!("runner {:?} has no url or token", runner.name);
    };
    let containers = runner.isolation_levels().offers(IsolationLevel::Docker);
    let info = Info::flotilla(runner.executor.as_str(), containers);
    let mut client_config = ClientConfig::new(url, token.clone(), shared.system_id.clone(), info);
    client_config.tls = runner.tls_files();
    let mut client =
        Client::new(client_config).with_context(|| format!("runner {:?}", runner.name))?;
    if let Some(m) = &monitor {
        client = client.with_observer(Arc::new(ApiMetrics(m.clone())));
    }
    let client = Arc::new(client);
    let Some(verified) = verify_until_ok(&client, &runner.name, &shared.stop).await else {
        return Ok(Ended::NeverStarted);
    };
    let runner_id = match (verified.id, runner.id) {
        (Some(id), _) | (None, Some(id)) => id.to_string(),
        (None, None) => {
            tracing::warn!(runner = %runner.name, "GitLab did not say the runner's id; keying state by the runner's name");
            format!("name:{}", runner.name)
        }
    };
    let store = &shared.store;
    // The provider says what it is (its id keys the fleet's state) before anything is read.
    let provider = fleet::provider(&runner, Some(&shared.state_dir)).await?;
    let identity = Identity::new(url, runner_id, provider.info.id.clone());
    let scope = store.scope(&identity)?;
    store
        .acquire_lease(scope, &shared.holder, LEASE_TTL, SystemTime::now())
        .with_context(|| format!("runner {:?} ({identity})", runner.name))?;
    let started = start_fleet(&shared, &runner, provider, &client, scope, monitor.as_ref()).await;
    let (scaler, source, extra) = match started {
        Ok(s) => s,
        Err(e) => {
            let _ = store.release_lease(scope, &shared.holder);
            return Err(e);
        }
    };

    if let Some(m) = &monitor {
        m.attach(scaler.clone());
    }
    // The runner's own helpers, ended in order below.
    let helpers = TaskTracker::new();
    let recorder_done = CancellationToken::new();
    let renewal_done = CancellationToken::new();
    let lost_lease = CancellationToken::new();
    helpers.spawn(record_decisions(
        store.clone(),
        scope,
        scaler.clone(),
        runner.name.clone(),
        recorder_done.clone(),
    ));
    helpers.spawn(renew_lease(
        store.clone(),
        scope,
        shared.holder.clone(),
        runner.name.clone(),
        renewal_done.clone(),
        lost_lease.clone(),
    ));
    helpers.close();

    let handle = source.stop_handle();
    let stops = async {
        tokio::select! {
            () = shared.stop.cancelled() => {}
            () = lost_lease.cancelled() => {}
        }
        handle.graceful();
        shared.force.cancelled().await;
        handle.force();
        std::future::pending::<()>().await;
    };
    let report = tokio::select! {
        r = source.run() => r,
        () = stops => unreachable!("the stop forwarder never ends"),
    };
    tracing::info!(runner = %runner.name, ?report, "runner stopped taking jobs; its jobs are done");
    if let Some(m) = &monitor {
        m.stopping();
    }

    recorder_done.cancel();
    let shutdown = scaler.shutdown(shared.config.shutdown_timeout).await;
    tracing::info!(runner = %runner.name, report = ?shutdown, "fleet shut down");
    extra.shutdown(shared.config.shutdown_timeout).await;
    renewal_done.cancel();
    helpers.wait().await;
    if let Err(e) = store.release_lease(scope, &shared.holder) {
        tracing::warn!(runner = %runner.name, error = %e, "cannot release the lease");
    }
    if let Some(m) = &monitor {
        m.stopped();
    }
    Ok(Ended::Stopped {
        report,
        lost_lease: lost_lease.is_cancelled(),
    })
}

/// Fleets a runner has besides its own (pods sized per job), shut down after it.
#[derive(Default)]
struct ExtraFleets {
    #[cfg(feature = "kubernetes")]
    sized: Option<Arc<super::sizing::SizedFleets>>,
}

impl ExtraFleets {
    async fn shutdown(&self, drain: Duration) {
        #[cfg(feature = "kubernetes")]
        if let Some(sized) = &self.sized {
            sized.shutdown(drain).await;
        }
        #[cfg(not(feature = "kubernetes"))]
        let _ = drain;
    }
}

/// Steps 3 and 4: orphans reported, fleet restored, job source built.
async fn start_fleet(
    shared: &Shared,
    runner: &RunnerConfig,
    provider: fleet::Provider,
    client: &Arc<Client>,
    scope: ScopeId,
    monitor: Option<&RunnerHandle>,
) -> Result<(Scaler, JobSource, ExtraFleets)> {
    let store = &shared.store;
    let state_dir = &shared.state_dir;
    report_orphans(store, scope, client, &runner.name).await;
    let persisted = store.load_fleet(scope)?;
    tracing::info!(
        runner = %runner.name,
        instances = persisted.instances.len(),
        requested = persisted.requested_in_flight,
        "restoring the fleet's ledger"
    );
    std::fs::create_dir_all(state_dir.join("scratch")).context("creating the scratch directory")?;
    let mut run_options = fleet::run_options(runner, state_dir.join("scratch"));
    run_options.runner.id = runner.id.unwrap_or(0);
    let cache = cache_store(runner, state_dir).await;
    let parts = FleetParts {
        artifacts: Arc::new(GitLabArtifactStore::new(client.clone())),
        cache,
        snapshots: Some(Arc::new(LocalCacheStore::new(fleet::snapshot_store_dir(
            state_dir,
            &runner.name,
        )))),
        local_builds_dir: state_dir
            .join("builds")
            .join(fleet::file_name(&runner.name))
            .to_string_lossy()
            .into_owned(),
        run_options,
        local_slots: Some(if runner.limit > 0 {
            runner.limit as usize
        } else {
            shared.config.concurrent.max(1) as usize
        }),
        shared_instances: false,
        durable: Some(Durable {
            persisted,
            journal: store.journal(scope),
        }),
    };
    #[cfg(feature = "kubernetes")]
    let plugin = provider.plugin;
    #[cfg(feature = "kubernetes")]
    let sized_parts = super::sizing::PartsTemplate {
        artifacts: parts.artifacts.clone(),
        cache: parts.cache.clone(),
        snapshots: parts.snapshots.clone(),
        local_builds_dir: parts.local_builds_dir.clone(),
        run_options: parts.run_options.clone(),
    };
    let fleet = fleet::from_runner(runner, provider, parts)
        .await
        .map_err(|e| anyhow!(e))?;
    tracing::info!("{}", fleet.description);
    let source_config = SourceConfig {
        name: runner.name.clone(),
        limit: runner.limit as usize,
        request_concurrency: (runner.request_concurrency as usize).max(1),
        check_interval: shared.config.check_interval,
        instance_acquire_timeout: runner
            .autoscaler
            .as_ref()
            .map(|a| a.instance_acquire_timeout),
        shutdown_timeout: shared.config.shutdown_timeout,
        environment: runner
            .environment_pairs()
            .into_iter()
            .map(|(key, value)| flotilla_job::model::Variable::new(key, value))
            .chain(tls_variables(runner)?)
            .collect(),
        trace: flotilla_gitlab::TraceOptions {
            debug_trace_disabled: runner.debug_trace_disabled,
            ..flotilla_gitlab::TraceOptions::default()
        },
        clone_url: runner.clone_url.clone(),
        feature_flags: runner.feature_flags.clone(),
        ..SourceConfig::default()
    };
    let mut executor: Arc<dyn SlotExecutor> = fleet.dispatcher.clone();
    #[allow(unused_mut)]
    let mut extra = ExtraFleets::default();
    #[cfg(feature = "kubernetes")]
    if let Some(sized) =
        super::sizing::sized_fleets(runner, plugin, executor.clone(), state_dir, sized_parts)
            .await?
    {
        extra.sized = Some(sized.clone());
        executor = sized;
    }
    let mut hooks: Arc<dyn JobHooks> = Arc::new(StoreHooks {
        store: store.clone(),
        scope,
        source: source_name(runner),
        disk: shared.disk.clone(),
    });
    if let Some(m) = monitor {
        executor = Arc::new(ObservedExecutor {
            inner: executor,
            handle: m.clone(),
            levels: runner
                .isolation_levels()
                .all()
                .iter()
                .map(|l| l.as_str().to_string())
                .collect(),
        });
        hooks = Arc::new(ObservedHooks {
            inner: hooks,
            handle: m.clone(),
        });
    }
    let source = JobSource::new(client.clone(), executor, source_config)
        .with_hooks(hooks)
        .with_concurrent(shared.concurrent.clone());
    Ok((fleet.scaler, source, extra))
}

/// Keeps the lease until `done`; a renewal that fails fires `lost`.
/// `CI_SERVER_TLS_CA_FILE`, `CI_SERVER_TLS_CERT_FILE` and `CI_SERVER_TLS_KEY_FILE`: file
/// variables with the contents of the runner's `tls-*-file`s, for the job's git and its own
/// calls to GitLab, as GitLab Runner's `Build.GetCITLSVariables` gives them (it takes the CA
/// chain GitLab presented; flotilla gives the CA file the runner trusts GitLab with). The key
/// is not public; the certificate and key go only together.
fn tls_variables(runner: &RunnerConfig) -> Result<Vec<flotilla_job::model::Variable>> {
    use flotilla_job::model::Variable;
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let mut vars = Vec::new();
    if let Some(ca) = &runner.tls_ca_file {
        vars.push(Variable::new("CI_SERVER_TLS_CA_FILE", read(ca)?).file());
    }
    if let (Some(cert), Some(key)) = (&runner.tls_cert_file, &runner.tls_key_file) {
        vars.push(Variable::new("CI_SERVER_TLS_CERT_FILE", read(cert)?).file());
        let mut key = Variable::new("CI_SERVER_TLS_KEY_FILE", read(key)?).file();
        key.public = false;
        vars.push(key);
    }
    Ok(vars)
}

/// Where the runner's job caches go: the distributed cache its `[runners.cache]` names, else
/// a directory on the manager. A distributed cache that cannot be set up (its credentials
/// unreadable, say) is warned about and the runner goes on with the local one, as GitLab
/// Runner goes on without its cache adapter: a cache is never a reason to take no jobs.
async fn cache_store(
    runner: &RunnerConfig,
    state_dir: &std::path::Path,
) -> Arc<dyn flotilla_job::CacheStore> {
    let short = runner
        .token
        .as_ref()
        .map(|t| flotilla_monitor::short_token(t.expose()))
        .unwrap_or_default();
    if let Some(config) = &runner.cache {
        match flotilla_cache::build(config, &short).await {
            Ok(Some(store)) => {
                tracing::info!(runner = %runner.name, cache = %config.kind, "job caches go to the distributed cache");
                return store;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                runner = %runner.name,
                cache = %config.kind,
                error = %e,
                "[runners.cache] cannot be used; job caches stay on the manager"
            ),
        }
    }
    Arc::new(LocalCacheStore::new(
        runner
            .cache_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("cache").join(fleet::file_name(&runner.name))),
    ))
}

async fn renew_lease(
    store: Store,
    scope: ScopeId,
    holder: LeaseHolder,
    runner: String,
    done: CancellationToken,
    lost: CancellationToken,
) {
    loop {
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(LEASE_RENEW) => {}
        }
        if let Err(e) = store.renew_lease(scope, &holder, LEASE_TTL, SystemTime::now()) {
            tracing::error!(runner = %runner, error = %e, "lost the lease on the fleet; stopping this runner");
            lost.cancel();
        }
    }
}

/// Copies the scaler's last decision to the store for `flotilla status` whenever it
/// changes, until `done` (then once more).
async fn record_decisions(
    store: Store,
    scope: ScopeId,
    scaler: Scaler,
    runner: String,
    done: CancellationToken,
) {
    let mut written: Option<String> = None;
    loop {
        if let Some(text) = scaler.last_decision().map(|e| e.to_string())
            && written.as_ref() != Some(&text)
        {
            match store.record_decision(scope, &text, SystemTime::now()) {
                Ok(()) => written = Some(text),
                Err(e) => {
                    tracing::warn!(runner = %runner, error = %e, "cannot record the scaler's decision for `flotilla status`");
                }
            }
        }
        if done.is_cancelled() {
            return;
        }
        tokio::select! {
            () = done.cancelled() => {}
            () = tokio::time::sleep(DECISION_RECORD_INTERVAL) => {}
        }
    }
}
