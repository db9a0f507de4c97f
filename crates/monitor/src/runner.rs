//! One runner as the monitor follows it: its series, its jobs, and what it has read of its
//! scaler's history so far.

use crate::chart::{Chart, ChartPoint};
use crate::jobs::{JobEnd, JobEntry, JobPhase, JobTable};
use crate::labels::RunnerLabels;
use crate::metrics::{INSTANCE_STATES, RunnerMetrics, TASK_STATES};
use crate::status::{self, DecisionView, Phase, PolicyView, RemovalView, RunnerView};
use flotilla_scaler::{Counters, DecisionKind, FleetEvent, RemovalReason, Scaler, TaskOperation};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Removals kept for the status page.
const REMOVALS_KEPT: usize = 50;
/// Decisions shown on the status page.
const DECISIONS_SHOWN: usize = 20;

/// GitLab Runner's build stages (`common/build.go`), the only section names of a job log
/// reported as `gitlab_runner_jobs{stage}`: the log may carry sections of the job's own.
const BUILD_STAGES: [&str; 14] = [
    "resolve_secrets",
    "prepare_executor",
    "prepare_script",
    "get_sources",
    "clear_worktree",
    "restore_cache",
    "download_artifacts",
    "step_script",
    "after_script",
    "archive_cache",
    "archive_cache_on_failure",
    "upload_artifacts_on_success",
    "upload_artifacts_on_failure",
    "cleanup_file_variables",
];

/// What a runner's configuration says, for its series and its card on the status page.
#[derive(Debug, Clone)]
pub struct RunnerSpec {
    /// GitLab's labels.
    pub labels: RunnerLabels,
    /// `limit`.
    pub limit: u32,
    /// `request_concurrency`.
    pub request_concurrency: u32,
    /// The histogram buckets of its fleet.
    pub buckets: crate::buckets::InstanceBuckets,
}

pub(crate) struct RunnerState {
    pub(crate) labels: RunnerLabels,
    pub(crate) metrics: RunnerMetrics,
    inner: Mutex<RunnerInner>,
}

struct RunnerInner {
    phase: Phase,
    error: Option<String>,
    scaler: Option<Scaler>,
    jobs: JobTable,
    /// Running jobs by their current build stage.
    stages: BTreeMap<i64, &'static str>,
    next_seq: u64,
    seen: Counters,
    removals: VecDeque<RemovalView>,
    chart: Chart,
}

/// The handle through which the daemon tells the monitor about one runner: its scaler
/// once its fleet is up, its phase, and its jobs. Cheap to clone.
#[derive(Clone)]
pub struct RunnerHandle {
    pub(crate) state: Arc<RunnerState>,
}

impl std::fmt::Debug for RunnerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerHandle")
            .field("runner", &self.state.labels.runner_name)
            .finish_non_exhaustive()
    }
}

impl RunnerState {
    pub(crate) fn new(spec: &RunnerSpec) -> Result<RunnerState, prometheus::Error> {
        let metrics = RunnerMetrics::new(&spec.labels, &spec.buckets)?;
        metrics.limit.set(i64::from(spec.limit));
        metrics
            .request_concurrency_hard_limit
            .set(i64::from(spec.request_concurrency.max(1)));
        for state in INSTANCE_STATES {
            metrics.instances.with_label_values(&[state]).set(0);
        }
        for state in TASK_STATES {
            metrics.tasks.with_label_values(&[state]).set(0);
        }
        metrics
            .jobs
            .with_label_values(&["idle", "idle", "idle"])
            .set(0);
        for op in ["up", "down"] {
            metrics.scale_operations.with_label_values(&[op]);
        }
        for op in ["create", "delete"] {
            metrics.instance_operations.with_label_values(&[op]);
        }
        for op in TaskOperation::ALL {
            metrics.task_operations.with_label_values(&[op.as_str()]);
        }
        for kind in DecisionKind::ALL {
            metrics.decisions.with_label_values(&[kind.as_str()]);
        }
        for reason in RemovalReason::ALL {
            metrics.removals.with_label_values(&[reason.as_str()]);
        }
        Ok(RunnerState {
            labels: spec.labels.clone(),
            metrics,
            inner: Mutex::new(RunnerInner {
                phase: Phase::Starting,
                error: None,
                scaler: None,
                jobs: JobTable::default(),
                stages: BTreeMap::new(),
                next_seq: 1,
                seen: Counters::default(),
                removals: VecDeque::new(),
                chart: Chart::default(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, RunnerInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads what the scaler did since the last call into the histograms and counters, and
    /// its state into the gauges.
    pub(crate) fn refresh(&self) {
        let mut inner = self.lock();
        let Some(scaler) = inner.scaler.clone() else {
            return;
        };
        let m = &self.metrics;
        let page = scaler.history_since(inner.next_seq);
        inner.next_seq = page.next;
        if page.missed > 0 {
            m.history_missed.inc_by(page.missed);
        }
        for entry in page.entries {
            match entry.event {
                FleetEvent::Requested { count } => m
                    .instance_operations
                    .with_label_values(&["create"])
                    .inc_by(count as u64),
                FleetEvent::Appeared {
                    after_request: Some(d),
                    ..
                } => m.creation_time.observe(d.as_secs_f64()),
                FleetEvent::Running {
                    after_request: Some(d),
                    ..
                } => m.is_running_time.observe(d.as_secs_f64()),
                FleetEvent::Ready { after_creation, .. } => {
                    m.readiness_time.observe(after_creation.as_secs_f64());
                }
                FleetEvent::RemovalDecided { .. } => {
                    m.instance_operations.with_label_values(&["delete"]).inc();
                }
                FleetEvent::Gone {
                    instance,
                    reason,
                    after_removal,
                    life,
                    use_count,
                } => {
                    if let Some(d) = after_removal {
                        m.deletion_time.observe(d.as_secs_f64());
                    }
                    m.life_duration.observe(life.as_secs_f64());
                    if inner.removals.len() == REMOVALS_KEPT {
                        inner.removals.pop_back();
                    }
                    inner.removals.push_front(RemovalView {
                        at: entry.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        instance,
                        reason: reason.as_str(),
                        life_s: life.as_secs_f64(),
                        use_count,
                    });
                }
                _ => {}
            }
        }
        let counters = scaler.counters();
        for (kind, n) in &counters.decisions {
            let before = inner.seen.decisions.get(kind).copied().unwrap_or(0);
            m.decisions
                .with_label_values(&[kind.as_str()])
                .inc_by(n.saturating_sub(before));
        }
        for (op, n) in &counters.task_operations {
            let before = inner.seen.task_operations.get(op).copied().unwrap_or(0);
            m.task_operations
                .with_label_values(&[op.as_str()])
                .inc_by(n.saturating_sub(before));
        }
        for (reason, n) in &counters.removals {
            let before = inner.seen.removals.get(reason).copied().unwrap_or(0);
            m.removals
                .with_label_values(&[reason.as_str()])
                .inc_by(n.saturating_sub(before));
        }
        m.scale_operations.with_label_values(&["up"]).inc_by(
            counters
                .scale_up_operations
                .saturating_sub(inner.seen.scale_up_operations),
        );
        m.scale_operations.with_label_values(&["down"]).inc_by(
            counters
                .scale_down_operations
                .saturating_sub(inner.seen.scale_down_operations),
        );
        inner.seen = counters;

        // Gauges.
        let snapshot = scaler.snapshot();
        let ledger = &snapshot.ledger;
        let mut by_state: BTreeMap<&str, i64> = INSTANCE_STATES.iter().map(|s| (*s, 0)).collect();
        for i in ledger.instances().filter(|i| !ledger.left_alone(i)) {
            let state = if i.removal.is_some() && i.state.is_live() {
                "deleting"
            } else {
                i.state.as_str()
            };
            if let Some(n) = by_state.get_mut(state) {
                *n += 1;
            }
        }
        by_state.insert("requested", ledger.requested_in_flight() as i64);
        // Instances in a state not listed above (deleted, and suspend states) are not
        // reported: fleeting reports none of them either.
        for (state, n) in by_state {
            m.instances.with_label_values(&[state]).set(n);
        }
        let c = snapshot.counts;
        for (state, n) in [
            ("idle", c.idle),
            ("pending", c.pending),
            ("reserved", c.reserved),
            ("acquired", c.acquired),
            ("unavailable", c.unavailable),
            ("unhealthy", c.unhealthy),
            ("unready", c.unready),
        ] {
            m.tasks.with_label_values(&[state]).set(n as i64);
        }
        let config = scaler.config();
        let max = match config.max_instances {
            0 if scaler.provider_info().max_size != usize::MAX => scaler.provider_info().max_size,
            n => n,
        };
        m.max_instances.set(max as i64);
        m.max_tasks_per_instance
            .set(config.capacity_per_instance as i64);
        m.max_use_count_per_instance
            .set(i64::from(config.max_use_count));
        let mut idle_target = 0;
        if let Some(e) = &snapshot.last_decision {
            let held = (e.usable_instances + e.requested) as i64;
            m.desired_instances.set((held + e.required).max(0));
            idle_target = e.idle_target;
        }
        let instances = ledger.instances().filter(|i| !ledger.left_alone(i)).count()
            + ledger.requested_in_flight();
        let point = ChartPoint {
            t: scaler.now_utc().timestamp(),
            instances,
            demand: c.acquired + inner.jobs.waiting(),
            idle_target,
        };
        inner.chart.offer(point);
    }

    /// The runner's card on the status page.
    pub(crate) fn view(&self) -> RunnerView {
        let inner = self.lock();
        let now = Instant::now();
        let jobs = inner.jobs.views(now);
        let mut view = RunnerView {
            name: self.labels.runner_name.clone(),
            runner: self.labels.runner.clone(),
            phase: inner.phase,
            error: inner.error.clone(),
            provider: None,
            capacity_per_instance: 0,
            max_instances: 0,
            policy: None,
            counts: BTreeMap::new(),
            instances: Vec::new(),
            jobs,
            ended: inner.jobs.ended_views(now),
            decisions: Vec::new(),
            removals: inner.removals.iter().cloned().collect(),
            chart: inner.chart.points(),
        };
        let Some(scaler) = inner.scaler.clone() else {
            return view;
        };
        let keys = inner.jobs.by_key();
        let snapshot = scaler.snapshot();
        view.provider = Some(scaler.provider_info().id.clone());
        view.capacity_per_instance = scaler.config().capacity_per_instance;
        view.max_instances = scaler.config().max_instances;
        let (index, policy) = scaler.policy_in_force();
        view.policy = Some(PolicyView {
            index,
            idle_count: policy.idle_count,
            idle_time_s: policy.idle_time.as_secs_f64(),
            scale_factor: policy.scale_factor,
            scale_factor_limit: policy.scale_factor_limit,
            preemptive: policy.preemptive(),
        });
        let c = snapshot.counts;
        view.counts = BTreeMap::from([
            ("idle", c.idle),
            ("pending", c.pending),
            ("reserved", c.reserved),
            ("acquired", c.acquired),
            ("unavailable", c.unavailable),
            ("unhealthy", c.unhealthy),
            ("unready", c.unready),
            ("instances", c.instances),
            ("requested", snapshot.ledger.requested_in_flight()),
        ]);
        view.instances = status::instances(&snapshot.ledger, &keys, tokio::time::Instant::now());
        // The scaler keeps a run of one decision once, with its count: shown as one row.
        let time =
            |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        view.decisions =
            status::collapse(
                scaler
                    .recent_decisions()
                    .into_iter()
                    .rev()
                    .map(|d| DecisionView {
                        since: time(d.at),
                        at: time(d.last_at),
                        kind: d.kind.as_str(),
                        explanation: d.explanation.to_string(),
                        count: d.repeated.saturating_add(1),
                    }),
            );
        view.decisions.truncate(DECISIONS_SHOWN);
        view
    }

    /// Whether this runner is healthy for `/debug/health`, and why not.
    pub(crate) fn health(&self) -> (Phase, Option<String>) {
        let inner = self.lock();
        (inner.phase, inner.error.clone())
    }

    fn set_job_gauges(&self, inner: &RunnerInner) {
        let m = &self.metrics;
        m.jobs.reset();
        m.jobs.with_label_values(&["idle", "idle", "idle"]).set(0);
        let waiting = inner.jobs.waiting();
        if waiting > 0 {
            m.jobs
                .with_label_values(&["pending", "prepare_executor", ""])
                .set(waiting as i64);
        }
        let mut running: BTreeMap<&str, i64> = BTreeMap::new();
        for (id, j) in &inner.jobs.jobs {
            if j.phase == JobPhase::Running {
                *running
                    .entry(inner.stages.get(id).copied().unwrap_or(""))
                    .or_default() += 1;
            }
        }
        for (stage, n) in running {
            m.jobs.with_label_values(&["running", stage, ""]).set(n);
        }
    }
}

impl RunnerHandle {
    fn state(&self) -> &RunnerState {
        &self.state
    }

    /// The runner's fleet is up: follow `scaler`.
    pub fn attach(&self, scaler: Scaler) {
        let mut inner = self.state().lock();
        inner.scaler = Some(scaler);
        inner.phase = Phase::Running;
    }

    /// The runner is stopping (finishing its jobs, shutting its fleet down).
    pub fn stopping(&self) {
        self.state().lock().phase = Phase::Stopping;
    }

    /// The runner stopped.
    pub fn stopped(&self) {
        self.state().lock().phase = Phase::Stopped;
    }

    /// The runner could not start, for `why`.
    pub fn failed(&self, why: &str) {
        let mut inner = self.state().lock();
        inner.phase = Phase::Failed;
        inner.error = Some(why.to_string());
    }

    /// GitLab handed job `id` out (`gitlab_runner_jobs_total`).
    pub fn job_received(&self, id: i64, name: &str) {
        let s = self.state();
        s.metrics.jobs_total.inc();
        let mut inner = s.lock();
        inner
            .jobs
            .jobs
            .insert(id, JobEntry::new(name, Instant::now()));
        s.set_job_gauges(&inner);
    }

    /// Job `id` ended on the fleet: successfully (`failure_reason` `None`), or failed for
    /// `failure_reason` (GitLab's name, `script_failure`...), which counts in
    /// `gitlab_runner_failed_jobs_total{failure_reason}`, the error-rate series of GitLab's
    /// runbooks. Its final update is next; [`RunnerHandle::job_done`] after it.
    pub fn job_ended(&self, id: i64, failure_reason: Option<&str>) {
        let s = self.state();
        if let Some(reason) = failure_reason {
            s.metrics.failed_jobs.with_label_values(&[reason]).inc();
        }
        let end = match failure_reason {
            None => (JobEnd::Success, None),
            Some(r) => (JobEnd::Failed, Some(r.to_string())),
        };
        if let Some(j) = s.lock().jobs.jobs.get_mut(&id) {
            j.end = Some(end);
        }
    }

    /// GitLab took job `id` back before it ran (nothing is reported for it): it leaves.
    pub fn job_withdrawn(&self, id: i64) {
        if let Some(j) = self.state().lock().jobs.jobs.get_mut(&id) {
            j.end = Some((JobEnd::Withdrawn, None));
        }
        self.job_done(id);
    }

    /// Job `id`'s page on GitLab (its `CI_JOB_URL`), linked from the status page; anything
    /// but an `http(s)` address is not linked.
    pub fn job_page(&self, id: i64, url: &str) {
        if !crate::jobs::linkable(url) {
            return;
        }
        if let Some(j) = self.state().lock().jobs.jobs.get_mut(&id) {
            j.page = Some(url.to_string());
        }
    }

    /// The build stages a job ran, with their durations, into
    /// `gitlab_runner_job_stage_duration_seconds{stage}`. GitLab exports them only for jobs
    /// with `FF_EXPORT_HIGH_CARDINALITY_METRICS` on; the caller decides. Only GitLab's build
    /// stages and `step_*` steps name a series (a stage label is not free text).
    pub fn job_stage_durations<'a>(&self, stages: impl IntoIterator<Item = (&'a str, Duration)>) {
        let m = &self.state().metrics;
        for (name, took) in stages {
            if is_stage_label(name) {
                m.job_stage_duration
                    .with_label_values(&[name])
                    .observe(took.as_secs_f64());
            }
        }
    }

    /// GitLab's queue facts of a job, from its payload
    /// (`gitlab_runner_job_queue_duration_seconds`).
    pub fn job_queue_facts(&self, time_in_queue: Duration, project_jobs_running: &str) {
        self.state()
            .metrics
            .job_queue_duration
            .with_label_values(&[project_jobs_running])
            .observe(time_in_queue.as_secs_f64());
    }

    /// Job `id` got slot `slot` of `instance` (held under `key`) and runs at `level`.
    pub fn job_started(&self, id: i64, level: &str, instance: &str, slot: usize, key: &str) {
        let s = self.state();
        let mut inner = s.lock();
        let now = Instant::now();
        let entry = inner
            .jobs
            .jobs
            .entry(id)
            .or_insert_with(|| JobEntry::new("", now));
        entry.phase = JobPhase::Running;
        entry.started = Some(now);
        entry.level = Some(level.to_string());
        entry.instance = Some(instance.to_string());
        entry.slot = Some(slot);
        entry.key = Some(key.to_string());
        s.set_job_gauges(&inner);
    }

    /// Job `id` produced `bytes` of log on the fleet; its first byte times the queue →
    /// first byte latency and its level's start.
    pub fn job_output(&self, id: i64, bytes: usize) {
        let s = self.state();
        s.metrics.trace_bytes.inc_by(bytes as u64);
        let mut inner = s.lock();
        let Some(j) = inner.jobs.jobs.get_mut(&id) else {
            return;
        };
        if j.first_byte_seen || bytes == 0 {
            return;
        }
        j.first_byte_seen = true;
        let now = Instant::now();
        s.metrics
            .first_byte
            .observe(now.saturating_duration_since(j.received).as_secs_f64());
        if let (Some(started), Some(level)) = (j.started, j.level.as_deref()) {
            s.metrics
                .isolation_start
                .with_label_values(&[level])
                .observe(now.saturating_duration_since(started).as_secs_f64());
        }
    }

    /// Job `id`'s log opened section `name` (only GitLab's build stages count).
    pub fn job_stage(&self, id: i64, name: &str) {
        let Some(stage) = BUILD_STAGES.iter().find(|s| **s == name) else {
            return;
        };
        let s = self.state();
        let mut inner = s.lock();
        if inner.jobs.jobs.contains_key(&id) {
            inner.stages.insert(id, stage);
            s.set_job_gauges(&inner);
        }
    }

    /// Job `id` is done (ran or not): it leaves the running jobs for the page's history of
    /// the last hour; a job that ran is timed (`gitlab_runner_job_duration_seconds`: from its
    /// arrival to its end, as GitLab Runner's `commands/builds_helper.go` times a build).
    pub fn job_done(&self, id: i64) {
        let s = self.state();
        let mut inner = s.lock();
        inner.stages.remove(&id);
        let now = Instant::now();
        if let Some(j) = inner.jobs.finish(id, now)
            && j.started.is_some()
        {
            s.metrics
                .job_duration
                .observe(now.saturating_duration_since(j.received).as_secs_f64());
        }
        s.set_job_gauges(&inner);
    }

    /// A runner API request ended with HTTP `status` after `duration`
    /// (`gitlab_runner_api_request_statuses_total`, `..._duration_seconds`).
    pub fn api_request(&self, endpoint: &str, method: &str, status: u16, duration: Duration) {
        let m = &self.state().metrics;
        let method = method.to_ascii_lowercase();
        m.api_statuses
            .with_label_values(&[endpoint, &status.to_string(), &method])
            .inc();
        m.api_duration
            .with_label_values(&[endpoint, status_class(status), &method])
            .observe(duration.as_secs_f64());
    }
}

/// Whether `name` may label `gitlab_runner_job_stage_duration_seconds`: one of GitLab's build
/// stages, or a step (`step_script`, `step_release`, ...: GitLab's own stage names for a job's
/// steps), in the characters GitLab's step names have.
fn is_stage_label(name: &str) -> bool {
    BUILD_STAGES.contains(&name)
        || name.strip_prefix("step_").is_some_and(|step| {
            !step.is_empty()
                && step.len() <= 64
                && step
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// GitLab Runner's `statusClass` (`network/api_requests_collector.go`).
fn status_class(status: u16) -> &'static str {
    match status {
        600.. => "unknown",
        500.. => "5xx",
        400.. => "4xx",
        300.. => "3xx",
        200.. => "2xx",
        100.. => "1xx",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::{is_stage_label, status_class};

    #[test]
    fn stage_labels_are_gitlabs_stages_and_steps() {
        assert!(is_stage_label("get_sources"));
        assert!(is_stage_label("step_script"));
        assert!(is_stage_label("step_release"));
        assert!(!is_stage_label("step_"));
        assert!(!is_stage_label("my own section"));
        assert!(!is_stage_label(&format!("step_{}", "x".repeat(65))));
    }

    #[test]
    fn status_classes_as_gitlab_names_them() {
        assert_eq!(status_class(201), "2xx");
        assert_eq!(status_class(204), "2xx");
        assert_eq!(status_class(409), "4xx");
        assert_eq!(status_class(502), "5xx");
        assert_eq!(status_class(42), "unknown");
        assert_eq!(status_class(600), "unknown");
    }
}
