//! The dispatcher itself.

use crate::merged_output::MergedOutput;
use crate::notice::Notices;
use crate::tally::Tally;
use crate::{ConnectorFactory, LevelRefused, Levels, WatchedConnector};
use flotilla_connect::Connector;
use flotilla_fleet::ConnectInfo;
use flotilla_isolate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest};
use flotilla_job::vars::RunnerIdentity;
use flotilla_job::{
    ArtifactStore, CacheStore, FailureReason, JobCancel, JobPayload, JobResult, JobRunner, Outcome,
    RunOptions, StageReport, TraceSink,
};
use flotilla_scaler::{Acquisition, Scaler};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// What the dispatcher runs jobs with.
#[derive(Clone)]
pub struct DispatcherConfig {
    /// The isolation levels jobs run at: the first unless a job picks another that is
    /// offered (see [`Levels`]).
    pub isolation: Levels,
    /// How instances are connected to.
    pub connectors: Arc<dyn ConnectorFactory>,
    /// Where artifacts go.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Where caches go.
    pub cache: Arc<dyn CacheStore>,
    /// The job runner's options; `concurrent_id` and `concurrent_project_id` are set to the
    /// slot, and the runner's `executor` to the isolation level's name unless it was changed
    /// from its default.
    pub run_options: RunOptions,
    /// The base builds directory on every instance (absolute).
    pub builds_dir: String,
    /// `[runners.custom_build_dir] enabled`: whether a job's `GIT_CLONE_PATH` may name its
    /// project directory (unset: the level's default, as GitLab's executors differ).
    pub custom_build_dir: Option<bool>,
    /// `log_internal_ip`, `log_external_ip`: the job's log names its instance's addresses.
    pub log_addresses: LogAddresses,
}

/// Which of its instance's addresses a job's log names (GitLab's `log_internal_ip` and
/// `log_external_ip`), on the line GitLab Runner writes: `Dialing instance <id>, <internal>,
/// <external>...`, then `Instance <id> connected`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogAddresses {
    /// The internal address.
    pub internal: bool,
    /// The external address.
    pub external: bool,
}

impl LogAddresses {
    /// The lines for instance `id` with these addresses; none when neither is asked for
    /// (GitLab's ident list, an address that is empty left out).
    pub fn lines(self, id: &str, internal: &str, external: &str) -> Vec<String> {
        if !self.internal && !self.external {
            return Vec::new();
        }
        let mut ident = vec![id];
        if self.internal && !internal.is_empty() {
            ident.push(internal);
        }
        if self.external && !external.is_empty() {
            ident.push(external);
        }
        vec![
            format!("Dialing instance {}...", ident.join(", ")),
            format!("Instance {id} connected"),
        ]
    }
}

impl fmt::Debug for DispatcherConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DispatcherConfig")
            .field("isolation", &self.isolation)
            .field("run_options", &self.run_options)
            .field("builds_dir", &self.builds_dir)
            .field("custom_build_dir", &self.custom_build_dir)
            .finish_non_exhaustive()
    }
}

/// Runs jobs on the scaler's slots.
pub struct Dispatcher {
    scaler: Scaler,
    config: DispatcherConfig,
    connectors: Mutex<HashMap<String, Arc<WatchedConnector>>>,
    /// Per instance: the sweep of leftovers of earlier managers, run once before the first
    /// job of this process prepares there.
    swept: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
    cleanup_timeout: Duration,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("scaler", &self.scaler)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher for the slots of `scaler`.
    pub fn new(scaler: Scaler, config: DispatcherConfig) -> Self {
        Dispatcher {
            scaler,
            config,
            connectors: Mutex::new(HashMap::new()),
            swept: Mutex::new(HashMap::new()),
            cleanup_timeout: Duration::from_secs(60),
        }
    }

    /// Bounds how long cleaning up one job's environment may take (default 60 s).
    pub fn with_cleanup_timeout(mut self, timeout: Duration) -> Self {
        self.cleanup_timeout = timeout;
        self
    }

    /// The scaler.
    pub fn scaler(&self) -> &Scaler {
        &self.scaler
    }

    /// The configuration.
    pub fn config(&self) -> &DispatcherConfig {
        &self.config
    }

    /// The connector jobs on `instance` currently share, if the dispatcher holds one (for
    /// tools and benchmarks that must use the same connection).
    pub fn connector(&self, instance: &str) -> Option<Arc<dyn Connector>> {
        let map = self.connectors.lock().unwrap_or_else(|e| e.into_inner());
        map.get(instance).map(|c| c.clone() as Arc<dyn Connector>)
    }

    /// Acquires a slot for `key` (waiting up to the scaler's `instance_acquire_timeout`, or
    /// until `cancel` fires) and runs `job` on it. A job that gets no slot fails with
    /// `runner_system_failure` (`job_canceled` when it was canceled meanwhile) and a line in
    /// its trace saying why.
    pub async fn dispatch(
        &self,
        key: &str,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        let started = Instant::now();
        if let Err(refused) = self.config.isolation.choose(job) {
            let mut tally = Tally::new(sink);
            return self.refuse_level(&mut tally, job, started, &refused).await;
        }
        let acquired = tokio::select! {
            r = self.scaler.acquire(key, None) => Some(r),
            () = cancel.requested() => None,
        };
        let (reason, message) = match acquired {
            Some(Ok(acquisition)) => return self.run(acquisition, job, sink, cancel).await,
            Some(Err(e)) => (
                FailureReason::RunnerSystemFailure,
                format!("Job failed (system failure): no slot for the job: {e}"),
            ),
            None => (
                FailureReason::JobCanceled,
                "Job failed: canceled while waiting for a slot".to_string(),
            ),
        };
        let mut tally = Tally::new(sink);
        self.fail_early(&mut tally, job, started, reason, &message, None)
            .await
    }

    /// Fails a job that asks for a level this runner does not offer, before anything ran.
    async fn refuse_level(
        &self,
        tally: &mut Tally<'_>,
        job: &JobPayload,
        started: Instant,
        refused: &LevelRefused,
    ) -> JobResult {
        self.fail_early(
            tally,
            job,
            started,
            FailureReason::RunnerConfigurationError,
            &format!("Job failed: {refused}"),
            None,
        )
        .await
    }

    /// Runs `job` on a slot already acquired; always releases the slot (the acquisition's
    /// key) when done, after the environment is cleaned up.
    pub async fn run(
        &self,
        acquisition: Acquisition,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        // The slot is released when the run ends, however it ends.
        let acquisition = acquisition.into_guard();
        let started = Instant::now();
        let mut tally = Tally::new(sink);
        let instance = acquisition.instance_id().to_string();
        let slot = acquisition.slot();
        let level = match self.config.isolation.choose(job) {
            Ok(level) => level.clone(),
            Err(refused) => return self.refuse_level(&mut tally, job, started, &refused).await,
        };

        let (connector, failures_before, env) = match self
            .environment(&acquisition, &*level, job, &instance, slot)
            .await
        {
            Ok(parts) => parts,
            Err((reason, message)) => {
                return self
                    .fail_early(&mut tally, job, started, reason, &message, Some(started))
                    .await;
            }
        };

        let run_cancel = cancel.child();
        let lost = acquisition.lost_token();
        let mut lost_seen = false;
        let result = {
            // Stage scripts write stdout and stderr as one stream (see `merged_output`).
            let merged = MergedOutput::new(env.as_ref());
            let mut options = self.run_options(slot, &*level);
            let (internal, external) = connector.addresses();
            options.prepare_lines = self
                .config
                .log_addresses
                .lines(&instance, internal, external);
            let runner = JobRunner::new(&merged, &*self.config.artifacts, &*self.config.cache)
                .with_options(options);
            let run = runner.run(job, &mut tally, &run_cancel);
            tokio::pin!(run);
            tokio::select! {
                r = &mut run => r,
                () = lost.cancelled() => {
                    lost_seen = true;
                    run_cancel.abort();
                    run.await
                }
            }
        };
        lost_seen |= lost.is_cancelled();

        let notices = Notices::for_job(job);
        let timeout = if lost_seen {
            self.cleanup_timeout.min(Duration::from_secs(5))
        } else {
            self.cleanup_timeout
        };
        match tokio::time::timeout(timeout, env.cleanup()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(%instance, error = %e, "cleaning up a job's environment failed");
                if !lost_seen {
                    tally
                        .emit(&notices.warning(&format!("cleaning up the environment: {e}")))
                        .await;
                }
            }
            Err(_) => {
                tracing::warn!(%instance, "cleaning up a job's environment timed out");
                if !lost_seen {
                    tally
                        .emit(&notices.warning(&format!(
                            "cleaning up the environment did not finish within {}s",
                            timeout.as_secs()
                        )))
                        .await;
                }
            }
        }
        drop(env);

        let mut outcome = result.outcome;
        if lost_seen {
            let cause = acquisition
                .lost_cause()
                .map(|c| c.to_string())
                .unwrap_or_else(|| "instance lost".into());
            tally
                .emit(&notices.error(&format!(
                    "Job failed (system failure): instance {instance} was lost while the job ran: {cause}"
                )))
                .await;
            outcome = Outcome::Failed {
                reason: FailureReason::RunnerSystemFailure,
                exit_code: None,
            };
            self.forget_connector(&instance, &connector);
        } else if connector.failures() > failures_before {
            self.instance_failed(&instance, &connector);
        } else {
            // Reached and ran: the instance's failure streak ends (failure_threshold counts
            // consecutive failures).
            self.scaler.report_success(&instance);
        }
        tally.complete().await;
        JobResult {
            outcome,
            trace: tally.summary(result.trace.truncated),
            duration: started.elapsed(),
            stages: result.stages,
        }
    }

    /// The runner options for a job on `slot` at `level`.
    fn run_options(&self, slot: usize, level: &dyn Isolation) -> RunOptions {
        let mut o = self.config.run_options.clone();
        o.concurrent_id = slot as u32;
        o.concurrent_project_id = slot as u32;
        o.runner.executor = self.executor_name(level).to_string();
        o
    }

    /// The executor name a job's log and variables show: the runner's own, unless it was
    /// left at the default, in which case the job's isolation level says more.
    fn executor_name<'a>(&'a self, level: &'a dyn Isolation) -> &'a str {
        let runner = &self.config.run_options.runner;
        if runner.executor.is_empty() || runner.executor == RunnerIdentity::default().executor {
            level.name()
        } else {
            &runner.executor
        }
    }

    /// Connects to the acquired instance and prepares the job's environment there: the
    /// connector, its failure count before preparing, and the environment; or why not, with
    /// the failure reason and the job log's line.
    async fn environment(
        &self,
        acquisition: &Acquisition,
        level: &dyn Isolation,
        job: &JobPayload,
        instance: &str,
        slot: usize,
    ) -> Result<(Arc<WatchedConnector>, u64, Box<dyn IsolatedEnvironment>), (FailureReason, String)>
    {
        let system = |why: String| {
            (
                FailureReason::RunnerSystemFailure,
                format!("Job failed (system failure): {why}"),
            )
        };
        // The connector kept for the instance needs no connection details: asking the
        // provider for them again (a Docker or cloud API call) for every job is waste.
        let connector = match self.cached_connector(instance) {
            Some(c) => c,
            None => match acquisition.connect_info().await {
                Ok(info) => self
                    .connector_for(&info)
                    .map_err(|e| system(e.to_string()))?,
                Err(e) => {
                    self.scaler.report_failure(instance);
                    return Err(system(format!(
                        "getting the connection details of instance {instance}: {e}"
                    )));
                }
            },
        };
        self.swept_once(instance, &connector).await;
        let failures_before = connector.failures();
        let shared: Arc<dyn Connector> = connector.clone();
        let prepared = level
            .prepare(PrepareRequest {
                job,
                instance_id: instance,
                slot,
                connector: shared,
                builds_dir: self.config.builds_dir.clone(),
                custom_build_dir: self.config.custom_build_dir,
            })
            .await;
        match prepared {
            Ok(env) => Ok((connector, failures_before, env)),
            // What the job asked for and the runner does not allow: GitLab's configuration
            // error, in its words ("Job failed: <why>").
            Err(IsolateError::JobRefused(why)) => Err((
                FailureReason::RunnerConfigurationError,
                format!("Job failed: {why}"),
            )),
            Err(e) => {
                if e.is_instance_failure() || connector.failures() > failures_before {
                    self.instance_failed(instance, &connector);
                }
                Err(system(format!(
                    "preparing the {} environment on instance {instance}: {e}",
                    level.name()
                )))
            }
        }
    }

    /// The connector kept for `instance`, if any.
    fn cached_connector(&self, instance: &str) -> Option<Arc<WatchedConnector>> {
        let map = self.connectors.lock().unwrap_or_else(|e| e.into_inner());
        map.get(instance).cloned()
    }

    /// The connector for the instance `info` describes: the cached one, or a new one.
    fn connector_for(
        &self,
        info: &ConnectInfo,
    ) -> Result<Arc<WatchedConnector>, crate::DispatchError> {
        let mut map = self.connectors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(&info.id) {
            return Ok(c.clone());
        }
        let c = Arc::new(
            WatchedConnector::new(self.config.connectors.connector(info)?)
                .with_addresses(&info.internal_addr, &info.external_addr),
        );
        map.insert(info.id.clone(), c.clone());
        Ok(c)
    }

    /// The first time this process meets `instance`: every level offered removes what earlier
    /// managers' jobs left there, and every job waits for that before it prepares, so a sweep
    /// never meets (and never stops) a job of this process. A failed sweep is logged; jobs
    /// go on (each level also clears a slot before using it).
    async fn swept_once(&self, instance: &str, connector: &Arc<WatchedConnector>) {
        let once = self
            .swept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(instance.to_string())
            .or_default()
            .clone();
        once.get_or_init(|| async {
            for level in self.config.isolation.all() {
                let shared: Arc<dyn Connector> = connector.clone();
                match level.cleanup_instance(shared, instance).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(%instance, level = level.name(), removed = n, "removed leftovers of earlier jobs");
                    }
                    Err(e) => {
                        tracing::warn!(%instance, level = level.name(), error = %e, "sweeping leftovers of earlier jobs failed");
                    }
                }
            }
        })
        .await;
    }

    /// Drops the cached connector of `instance` if it is still `connector`.
    fn forget_connector(&self, instance: &str, connector: &Arc<WatchedConnector>) {
        let mut map = self.connectors.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(instance).is_some_and(|c| Arc::ptr_eq(c, connector)) {
            map.remove(instance);
        }
    }

    /// Tells the scaler the instance failed us, and stops reusing its connector.
    fn instance_failed(&self, instance: &str, connector: &Arc<WatchedConnector>) {
        tracing::warn!(%instance, "the instance could not be reached; reporting it");
        self.scaler.report_failure(instance);
        self.forget_connector(instance, connector);
    }

    /// Ends a job that never reached the runner: a header, the reason, and a failed result
    /// whose trace summary covers exactly what was written.
    async fn fail_early(
        &self,
        tally: &mut Tally<'_>,
        job: &JobPayload,
        started: Instant,
        reason: FailureReason,
        message: &str,
        prepare_since: Option<Instant>,
    ) -> JobResult {
        let notices = Notices::for_job(job);
        let runner = &self.config.run_options.runner;
        let levels = &self.config.isolation;
        let level = levels
            .choose(job)
            .unwrap_or_else(|_| levels.default_level());
        let executor = self.executor_name(&**level);
        tally
            .emit(&notices.line(&format!(
                "Running with flotilla {} ({executor})\n  on {}",
                runner.version, runner.description
            )))
            .await;
        tally.emit(&notices.error(message)).await;
        tally.complete().await;
        JobResult {
            outcome: Outcome::Failed {
                reason,
                exit_code: None,
            },
            trace: tally.summary(false),
            duration: started.elapsed(),
            stages: prepare_since
                .map(|since| StageReport {
                    name: "prepare_executor".into(),
                    duration: since.elapsed(),
                    ok: false,
                })
                .into_iter()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send<T: Send>(_: &T) {}

    /// Job sources run jobs on spawned tasks: the futures must be `Send`.
    #[allow(dead_code)]
    fn futures_are_send(
        d: &Dispatcher,
        a: Acquisition,
        j: &JobPayload,
        s: &mut dyn TraceSink,
        c: &JobCancel,
    ) {
        is_send(&d.run(a, j, s, c));
    }

    #[allow(dead_code)]
    fn dispatch_is_send(d: &Dispatcher, j: &JobPayload, s: &mut dyn TraceSink, c: &JobCancel) {
        is_send(&d.dispatch("key", j, s, c));
    }

    #[test]
    fn dispatchers_can_be_shared() {
        fn shared<T: Send + Sync>() {}
        shared::<Dispatcher>();
        shared::<DispatcherConfig>();
    }

    /// GitLab Runner's ident list (`acquisition.go`): the id, then each address asked for
    /// that the instance has.
    #[test]
    fn the_dialing_line_names_the_addresses_asked_for() {
        let none = LogAddresses::default();
        assert!(none.lines("i-1", "10.0.0.5", "203.0.113.7").is_empty());
        let both = LogAddresses {
            internal: true,
            external: true,
        };
        assert_eq!(
            both.lines("i-1", "10.0.0.5", "203.0.113.7"),
            [
                "Dialing instance i-1, 10.0.0.5, 203.0.113.7...",
                "Instance i-1 connected"
            ]
        );
        let external = LogAddresses {
            internal: false,
            external: true,
        };
        assert_eq!(
            external.lines("i-1", "10.0.0.5", "")[0],
            "Dialing instance i-1..."
        );
    }
}
