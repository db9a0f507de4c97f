//! What the status page shows, as JSON (`/api/status`): for each runner its fleet (every
//! instance with its slots coloured by taskscaler's slot states), its jobs, the scaler's last
//! decisions with their explanations, the last removals with their reasons, and the chart
//! of the last hour.

use crate::chart::ChartPoint;
use crate::jobs::{EndedJobView, JobView};
use flotilla_scaler::ledger::{Instance, Ledger, Readiness, Slot};
use serde::Serialize;
use std::collections::BTreeMap;
use tokio::time::Instant;

/// The whole page.
#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    /// When this view was made (RFC 3339, UTC).
    pub generated_at: String,
    /// flotilla's version.
    pub version: String,
    /// `concurrent`.
    pub concurrent: u32,
    /// One entry per runner, in configuration order.
    pub runners: Vec<RunnerView>,
}

/// Where a runner is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Verifying with GitLab and restoring its fleet.
    Starting,
    /// Taking jobs.
    Running,
    /// Finishing its jobs and shutting its fleet down.
    Stopping,
    /// Stopped.
    Stopped,
    /// Could not start.
    Failed,
}

/// One runner.
#[derive(Debug, Clone, Serialize)]
pub struct RunnerView {
    /// Its `name`.
    pub name: String,
    /// GitLab's short token (the `runner` label of its metrics).
    pub runner: String,
    /// Where it is in its life.
    pub phase: Phase,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// The provider's id, once its fleet started.
    pub provider: Option<String>,
    /// Slots per instance.
    pub capacity_per_instance: usize,
    /// `max_instances` (0: unlimited).
    pub max_instances: usize,
    /// The policy in force.
    pub policy: Option<PolicyView>,
    /// Slot counts by taskscaler's states, and instances.
    pub counts: BTreeMap<&'static str, usize>,
    /// Instances, oldest first.
    pub instances: Vec<InstanceView>,
    /// Jobs received: waiting for a slot or running.
    pub jobs: Vec<JobView>,
    /// Jobs that ended in the last hour, newest first.
    pub ended: Vec<EndedJobView>,
    /// The scaler's last decisions, newest first.
    pub decisions: Vec<DecisionView>,
    /// The last instances that left the fleet, newest first.
    pub removals: Vec<RemovalView>,
    /// The last hour, oldest first.
    pub chart: Vec<ChartPoint>,
}

/// The policy in force.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyView {
    /// Its index among `[[runners.autoscaler.policy]]` (`None`: none matches, the default).
    pub index: Option<usize>,
    /// `idle_count`.
    pub idle_count: usize,
    /// `idle_time`, in seconds.
    pub idle_time_s: f64,
    /// `scale_factor`.
    pub scale_factor: f64,
    /// `scale_factor_limit`.
    pub scale_factor_limit: usize,
    /// Whether jobs are requested only with an idle slot.
    pub preemptive: bool,
}

/// One instance.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceView {
    /// The provider's id.
    pub id: String,
    /// The provider's state (`creating`, `running`, `deleting`, ...).
    pub state: String,
    /// Ready-up: `waiting`, `in_progress`, `ready`, `failed`.
    pub readiness: &'static str,
    /// How it came to be known: `requested`, `preexisted`, `restored`.
    pub cause: &'static str,
    /// Jobs it ran.
    pub use_count: u32,
    /// Seconds since the scaler first saw it.
    pub age_s: f64,
    /// Why it is being removed, if it is.
    pub removing: Option<&'static str>,
    /// Whether it is missing from the last listing.
    pub missing: bool,
    /// Its slots.
    pub slots: Vec<SlotView>,
}

/// One slot, in taskscaler's slot states.
#[derive(Debug, Clone, Serialize)]
pub struct SlotView {
    /// `idle`, `reserved`, `acquired`, `unavailable`, `unhealthy` or `unready`.
    pub state: &'static str,
    /// The GitLab job running on it, when known.
    pub job: Option<i64>,
}

/// One decision, or a run of the same decision made again and again (the scaler decides
/// every second; a fleet at rest holds for hours).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionView {
    /// When (RFC 3339): the latest of the run.
    pub at: String,
    /// What it amounted to (`scale_up`, `hold`, ...).
    pub kind: &'static str,
    /// The scaler's explanation.
    pub explanation: String,
    /// How many times in a row it was made (1 for a lone decision).
    pub count: u32,
    /// When the run began (RFC 3339; `at` for a lone decision).
    pub since: String,
}

/// `newest_first` with each run of identical consecutive decisions (same kind and
/// explanation) made one, counted, keeping the latest time and the run's first.
pub fn collapse(newest_first: impl IntoIterator<Item = DecisionView>) -> Vec<DecisionView> {
    let mut out: Vec<DecisionView> = Vec::new();
    for d in newest_first {
        match out.last_mut() {
            Some(last) if last.kind == d.kind && last.explanation == d.explanation => {
                last.count += d.count;
                last.since = d.since;
            }
            _ => out.push(d),
        }
    }
    out
}

/// One instance that left the fleet.
#[derive(Debug, Clone, Serialize)]
pub struct RemovalView {
    /// When it was gone (RFC 3339).
    pub at: String,
    /// The instance.
    pub instance: String,
    /// Why (`idle_time`, `max_use_count`, ...).
    pub reason: &'static str,
    /// Its life, in seconds.
    pub life_s: f64,
    /// Jobs it ran.
    pub use_count: u32,
}

/// The instances of `ledger` with their slots; `jobs` maps slot keys to job ids.
pub(crate) fn instances(
    ledger: &Ledger,
    jobs: &BTreeMap<&str, i64>,
    now: Instant,
) -> Vec<InstanceView> {
    let mut list: Vec<&Instance> = ledger
        .instances()
        .filter(|i| !ledger.left_alone(i))
        .collect();
    list.sort_by(|a, b| a.first_seen.cmp(&b.first_seen).then(a.id.cmp(&b.id)));
    list.into_iter()
        .map(|i| {
            let free_state = if ledger.allocatable(i) {
                "idle"
            } else if ledger.unhealthy(i) {
                "unhealthy"
            } else if !ledger.usable(i) {
                "unavailable"
            } else {
                "unready"
            };
            InstanceView {
                id: i.id.clone(),
                state: i.state.to_string(),
                readiness: match i.readiness {
                    Readiness::Waiting => "waiting",
                    Readiness::InProgress => "in_progress",
                    Readiness::Ready => "ready",
                    Readiness::Failed(_) => "failed",
                },
                cause: i.cause.as_str(),
                use_count: i.use_count,
                age_s: now.saturating_duration_since(i.first_seen).as_secs_f64(),
                removing: i.removal.as_ref().map(|r| r.reason.as_str()),
                missing: i.missing > 0,
                slots: i
                    .slots()
                    .iter()
                    .map(|s| match s {
                        Slot::Free => SlotView {
                            state: free_state,
                            job: None,
                        },
                        Slot::Reserved(_) => SlotView {
                            state: "reserved",
                            job: None,
                        },
                        Slot::Acquired(k) => SlotView {
                            state: "acquired",
                            job: jobs.get(k.as_str()).copied(),
                        },
                    })
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(at: &str, kind: &'static str, why: &str) -> DecisionView {
        DecisionView {
            at: at.into(),
            kind,
            explanation: why.into(),
            count: 1,
            since: at.into(),
        }
    }

    #[test]
    fn runs_of_the_same_decision_are_one_with_a_count() {
        let got = collapse([
            d("t5", "hold", "demand 0 vs free 2"),
            d("t4", "hold", "demand 0 vs free 2"),
            d("t3", "hold", "demand 0 vs free 2"),
            d("t2", "scale_up", "demand 3 vs free 2"),
            d("t1", "hold", "demand 0 vs free 2"),
        ]);
        assert_eq!(got.len(), 3);
        assert_eq!(
            (got[0].count, got[0].at.as_str(), got[0].since.as_str()),
            (3, "t5", "t3")
        );
        assert_eq!((got[1].kind, got[1].count), ("scale_up", 1));
        assert_eq!((got[2].count, got[2].since.as_str()), (1, "t1"));
        // A hold for another reason is another entry.
        let other = collapse([d("t2", "hold", "a"), d("t1", "hold", "b")]);
        assert_eq!(other.len(), 2);
    }
}
