//! The monitor: one Prometheus registry for every runner, the status page's model, and the
//! health answer; refreshed from the scalers every second and at every scrape.

use crate::build::BuildInfo;
use crate::error::MonitorError;
use crate::runner::{RunnerHandle, RunnerSpec, RunnerState};
use crate::status::{Phase, StatusView};
use prometheus::{Encoder, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the monitor reads the scalers when nobody scrapes.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// Everything an operator can see of one flotilla process. Cheap to clone.
#[derive(Clone)]
pub struct Monitor {
    shared: Arc<Shared>,
}

struct Shared {
    registry: Registry,
    concurrent: u32,
    version: String,
    runners: Mutex<Vec<Arc<RunnerState>>>,
    /// One refresh at a time: a scrape and the follower would otherwise race on the
    /// counters' deltas.
    refreshing: Mutex<()>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

/// The answer of `/debug/health`.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// `ok` when every runner takes jobs, `starting` while some are still starting (or
    /// stopping), `failing` when one could not start.
    pub status: &'static str,
    /// Each runner.
    pub runners: Vec<RunnerHealth>,
}

/// One runner in [`Health`].
#[derive(Debug, Clone, Serialize)]
pub struct RunnerHealth {
    /// Its name.
    pub name: String,
    /// Where it is.
    pub phase: Phase,
    /// Why it failed.
    pub error: Option<String>,
}

impl Health {
    /// Whether `/debug/health` answers 200.
    pub fn is_ok(&self) -> bool {
        self.status == "ok"
    }
}

impl Monitor {
    /// A monitor for a process with `concurrent` (`gitlab_runner_concurrent`), reporting
    /// `version` and nothing else of its build.
    pub fn new(concurrent: u32, version: &str) -> Result<Monitor, MonitorError> {
        Monitor::with_build(concurrent, &BuildInfo::of_version(version))
    }

    /// A monitor for a process with `concurrent` (`gitlab_runner_concurrent`) built as
    /// `build` says.
    pub fn with_build(concurrent: u32, build: &BuildInfo) -> Result<Monitor, MonitorError> {
        let version = build.version.as_str();
        let registry = Registry::new();
        let gauge = IntGauge::with_opts(Opts::new(
            "gitlab_runner_concurrent",
            "The current value of concurrent setting",
        ))
        .map_err(MonitorError::Metrics)?;
        gauge.set(i64::from(concurrent));
        registry
            .register(Box::new(gauge))
            .map_err(MonitorError::Metrics)?;
        // `gitlab_runner_version_info` (`commands/multi.go` registers GitLab's), always 1,
        // with GitLab's labels.
        let labels = build.labels();
        let version_info = IntGaugeVec::new(
            Opts::new(
                "gitlab_runner_version_info",
                "A metric with a constant '1' value labeled by different build stats fields.",
            ),
            &labels.map(|(name, _)| name),
        )
        .map_err(MonitorError::Metrics)?;
        version_info
            .with_label_values(&labels.map(|(_, value)| value))
            .set(1);
        registry
            .register(Box::new(version_info))
            .map_err(MonitorError::Metrics)?;
        registry
            .register(Box::new(
                crate::process::ProcessMetrics::new().map_err(MonitorError::Metrics)?,
            ))
            .map_err(MonitorError::Metrics)?;
        Ok(Monitor {
            shared: Arc::new(Shared {
                registry,
                concurrent,
                version: version.to_string(),
                runners: Mutex::new(Vec::new()),
                refreshing: Mutex::new(()),
            }),
        })
    }

    fn runners(&self) -> Vec<Arc<RunnerState>> {
        self.shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Adds a runner; its series exist from now on (GitLab's do too, at zero, from the
    /// runner's first request).
    pub fn add_runner(&self, spec: &RunnerSpec) -> Result<RunnerHandle, MonitorError> {
        let state = RunnerState::new(spec).map_err(MonitorError::Metrics)?;
        state
            .metrics
            .register(&self.shared.registry)
            .map_err(|source| {
                MonitorError::Register(crate::metrics::MetricsError {
                    runner: spec.labels.runner_name.clone(),
                    source,
                })
            })?;
        let state = Arc::new(state);
        self.shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(state.clone());
        Ok(RunnerHandle { state })
    }

    /// Reads every runner's scaler into the series and the chart.
    pub fn refresh(&self) {
        let _one = self
            .shared
            .refreshing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for r in self.runners() {
            r.refresh();
        }
    }

    /// The registry holding every series (a handle to it): what the Prometheus library
    /// alone gathers and encodes, without reading the scalers.
    pub fn registry(&self) -> Registry {
        self.shared.registry.clone()
    }

    /// The Prometheus text exposition (format 0.0.4), fresh.
    pub fn metrics_text(&self) -> Result<String, MonitorError> {
        self.refresh();
        let families = self.shared.registry.gather();
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut out)
            .map_err(MonitorError::Metrics)?;
        String::from_utf8(out).map_err(|e| MonitorError::Encoding(e.to_string()))
    }

    /// The status page's model.
    pub fn status(&self) -> StatusView {
        StatusView {
            generated_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            version: self.shared.version.clone(),
            concurrent: self.shared.concurrent,
            runners: self.runners().iter().map(|r| r.view()).collect(),
        }
    }

    /// The answer of `/debug/health`.
    pub fn health(&self) -> Health {
        let runners: Vec<RunnerHealth> = self
            .runners()
            .iter()
            .map(|r| {
                let (phase, error) = r.health();
                RunnerHealth {
                    name: r.labels.runner_name.clone(),
                    phase,
                    error,
                }
            })
            .collect();
        let status = if runners.iter().any(|r| r.phase == Phase::Failed) {
            "failing"
        } else if runners.iter().all(|r| r.phase == Phase::Running) {
            "ok"
        } else {
            "starting"
        };
        Health { status, runners }
    }

    /// Follows the scalers every [`FOLLOW_INTERVAL`] until `stop`, so histograms and the
    /// chart keep up when nobody scrapes; refreshes once more at the end.
    pub async fn follow(&self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(FOLLOW_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => self.refresh(),
            }
        }
        self.refresh();
    }
}
