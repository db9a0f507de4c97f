//! One runner's Prometheus series, with GitLab's names, labels and (where GitLab has them)
//! buckets, plus flotilla's own (`flotilla_*`).
//!
//! Sources of the names: GitLab Runner's own collectors (`commands/builds_helper.go`,
//! `commands/multi.go`, `network/api_requests_collector.go`), and for fleeting's and
//! taskscaler's collectors, whose source is not public outside gitlab.com, the series
//! GitLab's own dashboards and runbooks query (the hosted-runners dashboards of GitLab's
//! runbooks repository: `fleeting_provisioner_instances{state}`,
//! `fleeting_provisioner_max_instances`, the `..._instance_{creation,is_running}_time_seconds`,
//! `..._instance_deletion_time_seconds` and `..._instance_life_duration_seconds`
//! histograms, `fleeting_provisioner_instance_operations_total{operation}`,
//! `fleeting_taskscaler_tasks{state}`, `fleeting_taskscaler_max_tasks_per_instance`,
//! `fleeting_taskscaler_max_use_count_per_instance`,
//! `fleeting_taskscaler_scale_operations_total{operation}`,
//! `fleeting_taskscaler_desired_instances` and
//! `fleeting_taskscaler_task_instance_readiness_time_seconds`). The meanings follow the
//! descriptions of those panels (gitlab-com/runbooks, the hosted-runner dashboards' panel
//! library: `provisionerInstancesStates` "requested, creating, pending, running, deleting",
//! `provisionerCreationTiming` and `provisionerIsRunningTiming`, which GitLab's hosted-runner
//! performance runbook explains as the same request-to-instance time recorded when the
//! instance first appears and when it first runs, `provisionerDeletionTiming`,
//! `provisionerInstanceLifeDuration`, `taskscalerInstanceReadinessTiming`,
//! `taskscalerScaleOperationsRate`, `taskscalerDesiredInstances`), and the states of
//! `fleeting_taskscaler_tasks` the runbook's "Taskscaler tasks" section defines. Not
//! reported yet: `fleeting_provisioner_missed_updates_total` and
//! `fleeting_provisioner_internal_operations_total`. `fleeting_taskscaler_task_operations_total`
//! carries the operations the runbook's `taskscalerOperationsRate` and
//! `taskscalerOperationsFailure` panels name (acquire, release, and the two reservation
//! failures), and `reserve`. Every series of a runner
//! carries GitLab's constant labels (see [`crate::labels`]); registering one set per runner
//! in one registry gives the same exposition as GitLab's one collector per scaler.

use crate::buckets::{self, InstanceBuckets};
use crate::labels::RunnerLabels;
use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// The states of `fleeting_taskscaler_tasks`, as taskscaler names them.
pub const TASK_STATES: [&str; 7] = [
    "idle",
    "pending",
    "reserved",
    "acquired",
    "unavailable",
    "unhealthy",
    "unready",
];

/// The states of `fleeting_provisioner_instances` flotilla reports: instances requested
/// but not listed yet, then fleeting's provider states. An instance flotilla is removing
/// counts as `deleting`, as fleeting's provisioner counts it (taskscaler !127).
pub const INSTANCE_STATES: [&str; 5] = ["requested", "creating", "running", "deleting", "timeout"];

/// Why a metric could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("registering the metrics of runner {runner:?}: {source}")]
pub struct MetricsError {
    /// The runner's name.
    pub runner: String,
    /// What the Prometheus library said.
    #[source]
    pub source: prometheus::Error,
}

/// One runner's series.
#[derive(Clone)]
pub(crate) struct RunnerMetrics {
    // fleeting
    pub(crate) instances: IntGaugeVec,
    pub(crate) max_instances: IntGauge,
    pub(crate) creation_time: Histogram,
    pub(crate) is_running_time: Histogram,
    pub(crate) deletion_time: Histogram,
    pub(crate) life_duration: Histogram,
    pub(crate) instance_operations: IntCounterVec,
    // taskscaler
    pub(crate) tasks: IntGaugeVec,
    pub(crate) max_tasks_per_instance: IntGauge,
    pub(crate) max_use_count_per_instance: IntGauge,
    pub(crate) scale_operations: IntCounterVec,
    pub(crate) task_operations: IntCounterVec,
    pub(crate) desired_instances: IntGauge,
    pub(crate) readiness_time: Histogram,
    // GitLab Runner
    pub(crate) jobs: IntGaugeVec,
    pub(crate) limit: IntGauge,
    pub(crate) jobs_total: IntCounter,
    pub(crate) failed_jobs: IntCounterVec,
    pub(crate) job_duration: Histogram,
    pub(crate) job_stage_duration: HistogramVec,
    pub(crate) job_queue_duration: HistogramVec,
    pub(crate) request_concurrency_hard_limit: IntGauge,
    pub(crate) api_statuses: IntCounterVec,
    pub(crate) api_duration: HistogramVec,
    // flotilla
    pub(crate) decisions: IntCounterVec,
    pub(crate) removals: IntCounterVec,
    pub(crate) first_byte: Histogram,
    pub(crate) isolation_start: HistogramVec,
    pub(crate) trace_bytes: IntCounter,
    pub(crate) history_missed: IntCounter,
    collectors: Vec<MakeCollector>,
}

/// Makes a registry handle to one of the series: the Prometheus library takes boxes, and
/// every collector type here is a cheap clone sharing its values.
type MakeCollector = std::sync::Arc<dyn Fn() -> Box<dyn Collector> + Send + Sync>;

/// Builds the series, one constructor call per family.
struct Builder<'a> {
    labels: &'a RunnerLabels,
    collectors: Vec<MakeCollector>,
}

impl Builder<'_> {
    /// `runner`, `runner_name`, `system_id`.
    fn opts(&self, name: &str, help: &str) -> Opts {
        Opts::new(name, help)
            .const_label("runner", &self.labels.runner)
            .const_label("runner_name", &self.labels.runner_name)
            .const_label("system_id", &self.labels.system_id)
    }

    /// `runner`, `system_id` only (GitLab's request metrics).
    fn opts_without_name(&self, name: &str, help: &str) -> Opts {
        Opts::new(name, help)
            .const_label("runner", &self.labels.runner)
            .const_label("system_id", &self.labels.system_id)
    }

    fn keep<C: Collector + Clone + Send + Sync + 'static>(&mut self, c: C) -> C {
        let kept = c.clone();
        self.collectors
            .push(std::sync::Arc::new(move || Box::new(kept.clone())));
        c
    }

    fn gauge(&mut self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        let g = IntGauge::with_opts(self.opts(name, help))?;
        Ok(self.keep(g))
    }

    fn gauge_vec(&mut self, name: &str, help: &str, l: &[&str]) -> prometheus::Result<IntGaugeVec> {
        let g = IntGaugeVec::new(self.opts(name, help), l)?;
        Ok(self.keep(g))
    }

    fn counter_vec(
        &mut self,
        name: &str,
        help: &str,
        l: &[&str],
    ) -> prometheus::Result<IntCounterVec> {
        let c = IntCounterVec::new(self.opts(name, help), l)?;
        Ok(self.keep(c))
    }

    fn histogram(&mut self, name: &str, help: &str, b: &[f64]) -> prometheus::Result<Histogram> {
        let h =
            Histogram::with_opts(HistogramOpts::from(self.opts(name, help)).buckets(b.to_vec()))?;
        Ok(self.keep(h))
    }

    fn histogram_vec(
        &mut self,
        opts: Opts,
        b: &[f64],
        l: &[&str],
    ) -> prometheus::Result<HistogramVec> {
        let h = HistogramVec::new(HistogramOpts::from(opts).buckets(b.to_vec()), l)?;
        Ok(self.keep(h))
    }
}

impl RunnerMetrics {
    /// Creates one runner's series (not registered yet).
    pub(crate) fn new(
        labels: &RunnerLabels,
        b: &InstanceBuckets,
    ) -> Result<RunnerMetrics, prometheus::Error> {
        let mut k = Builder {
            labels,
            collectors: Vec::new(),
        };
        let queue_opts = k.opts(
            "gitlab_runner_job_queue_duration_seconds",
            "A histogram representing job queue duration.",
        );
        let api_duration_opts = k.opts_without_name(
            "gitlab_runner_api_request_duration_seconds",
            "Latency histogram of API requests made by the runner, partitioned by runner, \
             system_id, endpoint, status_class and method.",
        );
        // GitLab exports it only for jobs with `FF_EXPORT_HIGH_CARDINALITY_METRICS` on
        // (`initializeBuildStageMetrics`); so does the daemon, which decides per job.
        let stage_opts = k.opts(
            "gitlab_runner_job_stage_duration_seconds",
            "Histogram of each job stage duration",
        );
        let isolation_opts = k.opts(
            "flotilla_isolation_start_seconds",
            "Time from a job getting its slot to its first log line from the fleet (the \
             isolation level's environment ready), by isolation level.",
        );
        let api_statuses = IntCounterVec::new(
            k.opts_without_name(
                "gitlab_runner_api_request_statuses_total",
                "The total number of API requests made by the runner, partitioned by runner, \
                 system_id, endpoint, status and method.",
            ),
            &["endpoint", "status", "method"],
        )?;
        let hard_limit = IntGauge::with_opts(k.opts_without_name(
            "gitlab_runner_request_concurrency_hard_limit",
            "Configured request_concurrency limit",
        ))?;
        Ok(RunnerMetrics {
            instances: k.gauge_vec(
                "fleeting_provisioner_instances",
                "The current number of instances by state (instances being removed count as \
                 deleting).",
                &["state"],
            )?,
            max_instances: k.gauge(
                "fleeting_provisioner_max_instances",
                "The maximum number of instances (max_instances, or the provider's size).",
            )?,
            creation_time: k.histogram(
                "fleeting_provisioner_instance_creation_time_seconds",
                "Time from an instance's request until it first appears in a listing.",
                &b.creation,
            )?,
            is_running_time: k.histogram(
                "fleeting_provisioner_instance_is_running_time_seconds",
                "Time from an instance's request until it is listed as running.",
                &b.is_running,
            )?,
            deletion_time: k.histogram(
                "fleeting_provisioner_instance_deletion_time_seconds",
                "Time from the decision to remove an instance until it is gone.",
                &b.deletion,
            )?,
            life_duration: k.histogram(
                "fleeting_provisioner_instance_life_duration_seconds",
                "Time from an instance's request (or first sighting) until it is gone.",
                &b.life,
            )?,
            instance_operations: k.counter_vec(
                "fleeting_provisioner_instance_operations_total",
                "Instance operations: instances requested (create) and removals decided \
                 (delete).",
                &["operation"],
            )?,
            tasks: k.gauge_vec(
                "fleeting_taskscaler_tasks",
                "The current number of task slots by state.",
                &["state"],
            )?,
            max_tasks_per_instance: k.gauge(
                "fleeting_taskscaler_max_tasks_per_instance",
                "Task slots per instance (capacity_per_instance).",
            )?,
            max_use_count_per_instance: k.gauge(
                "fleeting_taskscaler_max_use_count_per_instance",
                "Jobs an instance runs before it is removed (max_use_count; 0 is unlimited).",
            )?,
            scale_operations: k.counter_vec(
                "fleeting_taskscaler_scale_operations_total",
                "Scaling decisions that requested instances (up) or removed idle ones (down).",
                &["operation"],
            )?,
            task_operations: k.counter_vec(
                "fleeting_taskscaler_task_operations_total",
                "Operations of the job source on task slots: reserve, acquire, release, and \
                 reservations refused with no free slot now (reserve_available_capacity_failure) \
                 or none even potentially (reserve_iop_capacity_failure).",
                &["operation"],
            )?,
            desired_instances: k.gauge(
                "fleeting_taskscaler_desired_instances",
                "Instances the scaler wants now: usable and requested ones plus the change it \
                 decided last.",
            )?,
            readiness_time: k.histogram(
                "fleeting_taskscaler_task_instance_readiness_time_seconds",
                "Time from an instance's request (or first sighting) until its ready-up \
                 passed and it takes jobs.",
                &b.readiness,
            )?,
            jobs: k.gauge_vec(
                "gitlab_runner_jobs",
                "The current number of running builds.",
                &["state", "stage", "executor_stage"],
            )?,
            limit: k.gauge("gitlab_runner_limit", "The current value of limit setting")?,
            jobs_total: {
                let c = IntCounter::with_opts(
                    k.opts("gitlab_runner_jobs_total", "Total number of handled jobs"),
                )?;
                k.keep(c)
            },
            // `commands/builds_helper.go`: `failedJobsCount`, by failure reason.
            failed_jobs: k.counter_vec(
                "gitlab_runner_failed_jobs_total",
                "Total number of failed jobs",
                &["failure_reason"],
            )?,
            job_duration: k.histogram(
                "gitlab_runner_job_duration_seconds",
                "Histogram of job durations",
                &buckets::JOB_DURATION,
            )?,
            job_stage_duration: k.histogram_vec(
                stage_opts,
                &buckets::JOB_STAGE_DURATION,
                &["stage"],
            )?,
            job_queue_duration: k.histogram_vec(
                queue_opts,
                &buckets::JOB_QUEUE_DURATION,
                &["project_jobs_running"],
            )?,
            request_concurrency_hard_limit: k.keep(hard_limit),
            api_statuses: k.keep(api_statuses),
            api_duration: k.histogram_vec(
                api_duration_opts,
                &buckets::API_REQUEST_DURATION,
                &["endpoint", "status_class", "method"],
            )?,
            decisions: k.counter_vec(
                "flotilla_scaler_decisions_total",
                "Scaling decisions by what they amounted to (scale_up, scale_down, \
                 remove_unusable, at_max_instances, throttled, backing_off, hold, \
                 shutting_down).",
                &["reason"],
            )?,
            removals: k.counter_vec(
                "flotilla_instance_removals_total",
                "Instances that left the fleet, by why (idle_time, max_use_count, unhealthy, \
                 ready_up_failed, timeout, removed_from_outside, shutdown, reconcile, \
                 acquisitions_at_restart).",
                &["reason"],
            )?,
            // Timed from the hand-out, not from the job's arrival in GitLab's queue: the
            // queue part is `gitlab_runner_job_queue_duration_seconds`, and GitLab gives it
            // only in whole seconds (Rails `Ci::Build#time_in_queue_seconds` ends in
            // `.to_i`), too coarse to add to a latency of milliseconds. Queue to first byte
            // is the sum of the two.
            first_byte: k.histogram(
                "flotilla_job_first_byte_seconds",
                "Time from GitLab handing a job out to the first byte of its log from the \
                 fleet.",
                &buckets::JOB_START,
            )?,
            isolation_start: k.histogram_vec(isolation_opts, &buckets::JOB_START, &["level"])?,
            trace_bytes: {
                let c = IntCounter::with_opts(k.opts(
                    "flotilla_trace_bytes_total",
                    "Bytes of job logs produced on the fleet (after masking).",
                ))?;
                k.keep(c)
            },
            history_missed: {
                let c = IntCounter::with_opts(k.opts(
                    "flotilla_scaler_events_missed_total",
                    "Scaler events the metrics could not follow (they left its history first); \
                     histograms missed that many observations.",
                ))?;
                k.keep(c)
            },
            collectors: k.collectors,
        })
    }

    /// Registers every series in `registry`.
    pub(crate) fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        for make in &self.collectors {
            registry.register(make())?;
        }
        Ok(())
    }
}
