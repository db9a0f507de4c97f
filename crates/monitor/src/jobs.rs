//! The jobs of one runner as the status page shows them: received and waiting for a slot,
//! or running on one, with their isolation level.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobPhase {
    /// GitLab handed it out; it waits for a slot.
    Waiting,
    /// It runs on a slot.
    Running,
}

/// One job.
#[derive(Debug, Clone)]
pub(crate) struct JobEntry {
    pub(crate) name: String,
    pub(crate) phase: JobPhase,
    pub(crate) received: Instant,
    pub(crate) started: Option<Instant>,
    pub(crate) level: Option<String>,
    pub(crate) instance: Option<String>,
    pub(crate) slot: Option<usize>,
    /// The scaler key its slot is held under.
    pub(crate) key: Option<String>,
    pub(crate) first_byte_seen: bool,
}

/// A job as the status page's JSON has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    /// GitLab's job id.
    pub id: i64,
    /// The job's name.
    pub name: String,
    /// Waiting or running.
    pub phase: JobPhase,
    /// The isolation level it runs at (once running).
    pub level: Option<String>,
    /// Its instance (once running).
    pub instance: Option<String>,
    /// Its slot on the instance (once running).
    pub slot: Option<usize>,
    /// Seconds since GitLab handed it out.
    pub elapsed_s: f64,
    /// Seconds since it got its slot.
    pub running_s: Option<f64>,
}

/// The jobs of one runner, by GitLab job id.
#[derive(Debug, Default)]
pub(crate) struct JobTable {
    pub(crate) jobs: BTreeMap<i64, JobEntry>,
}

impl JobTable {
    pub(crate) fn views(&self, now: Instant) -> Vec<JobView> {
        self.jobs
            .iter()
            .map(|(id, j)| JobView {
                id: *id,
                name: j.name.clone(),
                phase: j.phase,
                level: j.level.clone(),
                instance: j.instance.clone(),
                slot: j.slot,
                elapsed_s: now.saturating_duration_since(j.received).as_secs_f64(),
                running_s: j
                    .started
                    .map(|s| now.saturating_duration_since(s).as_secs_f64()),
            })
            .collect()
    }

    /// Job id by the scaler key of its slot.
    pub(crate) fn by_key(&self) -> BTreeMap<&str, i64> {
        self.jobs
            .iter()
            .filter_map(|(id, j)| j.key.as_deref().map(|k| (k, *id)))
            .collect()
    }

    /// Jobs received and waiting for a slot.
    pub(crate) fn waiting(&self) -> usize {
        self.jobs
            .values()
            .filter(|j| j.phase == JobPhase::Waiting)
            .count()
    }
}
