//! What the scaler did, kept for the people who operate it: the last decisions with their
//! explanations, the fleet's recent events (instances requested, appearing, running, ready,
//! removed, gone), and counters that only go up.
//!
//! Read-only for everyone but the driver: metrics follow the events by sequence number
//! ([`crate::Scaler::history_since`]), the status page shows the last decisions and
//! removals. Nothing here feeds back into a decision. Memory is bounded: the event ring keeps
//! the last [`EVENTS_KEPT`] events and says how many a slow reader missed.

use crate::cause::{Cause, RemovalReason};
use crate::desired::Explanation;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

/// Events kept for readers that follow them.
pub const EVENTS_KEPT: usize = 4096;
/// Decisions kept (only those that differ from the one before).
pub const DECISIONS_KEPT: usize = 64;

/// What one decision of the driver amounted to, after the creation throttle and backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecisionKind {
    /// Instances were requested.
    ScaleUp,
    /// Idle instances past `idle_time` were removed.
    ScaleDown,
    /// Instances that cannot serve (used up, unhealthy, failed ready-up, timed out) were
    /// removed, and nothing else was done.
    RemoveUnusable,
    /// More instances were needed but `max_instances` (or the provider's size) was reached.
    AtMaxInstances,
    /// More instances were needed but the creation throttle (`scale_throttle`) held them
    /// back for now.
    Throttled,
    /// More instances were needed but creation is backing off after failures.
    BackingOff,
    /// Nothing to do.
    Hold,
    /// The scaler is shutting down.
    ShuttingDown,
}

impl DecisionKind {
    /// Every kind, in a stable order.
    pub const ALL: [DecisionKind; 8] = [
        DecisionKind::ScaleUp,
        DecisionKind::ScaleDown,
        DecisionKind::RemoveUnusable,
        DecisionKind::AtMaxInstances,
        DecisionKind::Throttled,
        DecisionKind::BackingOff,
        DecisionKind::Hold,
        DecisionKind::ShuttingDown,
    ];

    /// A short name for metrics labels and the status page.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::ScaleUp => "scale_up",
            DecisionKind::ScaleDown => "scale_down",
            DecisionKind::RemoveUnusable => "remove_unusable",
            DecisionKind::AtMaxInstances => "at_max_instances",
            DecisionKind::Throttled => "throttled",
            DecisionKind::BackingOff => "backing_off",
            DecisionKind::Hold => "hold",
            DecisionKind::ShuttingDown => "shutting_down",
        }
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decision, as the status page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRecord {
    /// When it was made (calendar time of the scaler's clock).
    pub at: DateTime<Utc>,
    /// What it amounted to.
    pub kind: DecisionKind,
    /// Instances requested by it (after the throttle).
    pub requested: usize,
    /// Instances it marked for removal.
    pub removed: usize,
    /// Why.
    pub explanation: Explanation,
    /// How many times the same decision (kind and explanation) was made again right after
    /// this one: kept once, counted here.
    pub repeated: u32,
    /// When it was last made (`at` when it never was again).
    pub last_at: DateTime<Utc>,
}

/// Something that happened to the fleet.
#[derive(Debug, Clone, PartialEq)]
pub enum FleetEvent {
    /// `increase` was asked for `count` instances.
    Requested {
        /// How many.
        count: usize,
    },
    /// An instance appeared in a listing.
    Appeared {
        /// The instance.
        instance: String,
        /// How it came to be known.
        cause: Cause,
        /// Time since the request it answered (fleeting's creation time), if it answered one.
        after_request: Option<Duration>,
    },
    /// An instance was first listed as running.
    Running {
        /// The instance.
        instance: String,
        /// Time since the request it answered (fleeting's is-running time), if any.
        after_request: Option<Duration>,
    },
    /// An instance passed its ready-up and takes jobs.
    Ready {
        /// The instance.
        instance: String,
        /// Time since its request, or since it was first seen when it answered none
        /// (taskscaler's instance readiness time).
        after_creation: Duration,
    },
    /// An instance's ready-up failed; it will be removed.
    ReadyUpFailed {
        /// The instance.
        instance: String,
        /// What failed.
        error: String,
    },
    /// The scaler decided to remove an instance.
    RemovalDecided {
        /// The instance.
        instance: String,
        /// Why.
        reason: RemovalReason,
    },
    /// An instance left the fleet.
    Gone {
        /// The instance.
        instance: String,
        /// Why it was removed; vanished instances count as
        /// [`RemovalReason::RemovedFromOutside`].
        reason: RemovalReason,
        /// Time from the removal decision to its disappearance (fleeting's deletion time),
        /// when flotilla removed it.
        after_removal: Option<Duration>,
        /// Time from its request (or first sighting) to its disappearance (fleeting's life
        /// duration).
        life: Duration,
        /// Jobs it ran.
        use_count: u32,
    },
}

/// One event with its place in the sequence and its time.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    /// Its sequence number: 1 for the first event, one more for each after.
    pub seq: u64,
    /// When it happened (calendar time of the scaler's clock).
    pub at: DateTime<Utc>,
    /// What happened.
    pub event: FleetEvent,
}

/// Events since a sequence number.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistoryPage {
    /// The events, oldest first.
    pub entries: Vec<HistoryEntry>,
    /// Events the reader missed: they left the ring before it asked.
    pub missed: u64,
    /// The sequence number to ask from next time.
    pub next: u64,
}

/// Counters that only go up, since the scaler started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Decisions made, by kind.
    pub decisions: BTreeMap<DecisionKind, u64>,
    /// Decisions that requested instances (taskscaler's scale operation `up`).
    pub scale_up_operations: u64,
    /// Decisions that removed idle instances (taskscaler's scale operation `down`).
    pub scale_down_operations: u64,
    /// Instances requested.
    pub instances_requested: u64,
    /// Instances that left the fleet, by removal reason.
    pub removals: BTreeMap<RemovalReason, u64>,
    /// Operations of the job source on slots, by [`TaskOperation`].
    pub task_operations: BTreeMap<TaskOperation, u64>,
}

/// What the job source did with the scaler's slots (taskscaler's task operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskOperation {
    /// Capacity was reserved for a job request.
    Reserve,
    /// A reservation failed with no free slot now, though the fleet may still grow.
    ReserveAvailableCapacityFailure,
    /// A reservation failed with every slot the fleet may have promised.
    ReserveIopCapacityFailure,
    /// A job got its slot.
    Acquire,
    /// A key was ended: its slot freed, or its reservation or wait dropped.
    Release,
}

impl TaskOperation {
    /// Every operation, in a stable order.
    pub const ALL: [TaskOperation; 5] = [
        TaskOperation::Reserve,
        TaskOperation::ReserveAvailableCapacityFailure,
        TaskOperation::ReserveIopCapacityFailure,
        TaskOperation::Acquire,
        TaskOperation::Release,
    ];

    /// The `operation` label, as GitLab's dashboards name the operations.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskOperation::Reserve => "reserve",
            TaskOperation::ReserveAvailableCapacityFailure => "reserve_available_capacity_failure",
            TaskOperation::ReserveIopCapacityFailure => "reserve_iop_capacity_failure",
            TaskOperation::Acquire => "acquire",
            TaskOperation::Release => "release",
        }
    }
}

/// The history itself, inside the scaler's lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    events: VecDeque<HistoryEntry>,
    decisions: VecDeque<DecisionRecord>,
    counters: Counters,
    next_seq: u64,
}

impl History {
    pub(crate) fn new() -> History {
        History {
            next_seq: 1,
            ..History::default()
        }
    }

    /// Appends an event.
    pub(crate) fn push(&mut self, at: DateTime<Utc>, event: FleetEvent) {
        match &event {
            FleetEvent::Requested { count } => self.counters.instances_requested += *count as u64,
            FleetEvent::Gone { reason, .. } => {
                *self.counters.removals.entry(*reason).or_default() += 1;
            }
            _ => {}
        }
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(HistoryEntry {
            seq: self.next_seq,
            at,
            event,
        });
        self.next_seq += 1;
    }

    /// Counts a decision, and keeps it when it differs from the last one kept; else the last
    /// one counts it as repeated, at its time.
    pub(crate) fn decided(&mut self, record: DecisionRecord) {
        *self.counters.decisions.entry(record.kind).or_default() += 1;
        if record.requested > 0 {
            self.counters.scale_up_operations += 1;
        }
        if record.kind == DecisionKind::ScaleDown {
            self.counters.scale_down_operations += 1;
        }
        if let Some(last) = self
            .decisions
            .back_mut()
            .filter(|last| last.kind == record.kind && last.explanation == record.explanation)
        {
            last.repeated = last.repeated.saturating_add(1);
            last.last_at = record.at;
            return;
        }
        if self.decisions.len() == DECISIONS_KEPT {
            self.decisions.pop_front();
        }
        self.decisions.push_back(record);
    }

    /// Counts a task operation.
    pub(crate) fn task_operation(&mut self, op: TaskOperation) {
        *self.counters.task_operations.entry(op).or_default() += 1;
    }

    /// The events from sequence number `from` on.
    pub(crate) fn since(&self, from: u64) -> HistoryPage {
        let first = self.events.front().map_or(self.next_seq, |e| e.seq);
        let from = from.max(1);
        let missed = first.saturating_sub(from);
        let skip = from.saturating_sub(first) as usize;
        HistoryPage {
            entries: self.events.iter().skip(skip).cloned().collect(),
            missed,
            next: self.next_seq,
        }
    }

    /// The decisions kept, oldest first.
    pub(crate) fn decisions(&self) -> Vec<DecisionRecord> {
        self.decisions.iter().cloned().collect()
    }

    pub(crate) fn counters(&self) -> Counters {
        self.counters.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::SlotCounts;

    fn explanation(action: &str) -> Explanation {
        Explanation {
            counts: SlotCounts::default(),
            usable_instances: 0,
            requested: 0,
            removing: 0,
            capacity_per_instance: 1,
            max_instances: 0,
            policy_index: None,
            idle_target: 0,
            free_slots: 0,
            demand: 0,
            required: 0,
            action: action.into(),
            limited_by: None,
        }
    }

    #[test]
    fn readers_follow_by_sequence_and_learn_what_they_missed() {
        let mut h = History::new();
        let at = DateTime::<Utc>::UNIX_EPOCH;
        for _ in 0..EVENTS_KEPT + 10 {
            h.push(at, FleetEvent::Requested { count: 1 });
        }
        let page = h.since(1);
        assert_eq!(page.missed, 10);
        assert_eq!(page.entries.len(), EVENTS_KEPT);
        assert_eq!(page.entries[0].seq, 11);
        assert_eq!(page.next, EVENTS_KEPT as u64 + 11);
        let later = h.since(page.next);
        assert!(later.entries.is_empty());
        assert_eq!(later.missed, 0);
        let tail = h.since(page.next - 2);
        assert_eq!(tail.entries.len(), 2);
        assert_eq!(h.counters().instances_requested, EVENTS_KEPT as u64 + 10);
    }

    #[test]
    fn repeated_decisions_are_counted_but_kept_once() {
        let mut h = History::new();
        let record = |secs, kind, action: &str| DecisionRecord {
            at: DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::seconds(secs),
            kind,
            requested: usize::from(kind == DecisionKind::ScaleUp),
            removed: 0,
            explanation: explanation(action),
            repeated: 0,
            last_at: DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::seconds(secs),
        };
        h.decided(record(1, DecisionKind::Hold, "hold"));
        h.decided(record(2, DecisionKind::Hold, "hold"));
        h.decided(record(3, DecisionKind::Hold, "hold"));
        h.decided(record(4, DecisionKind::ScaleUp, "scale up by 1"));
        h.decided(record(5, DecisionKind::Hold, "hold"));
        let kept = h.decisions();
        assert_eq!(kept.len(), 3);
        // The run of three holds is one, with its count and its first and last times.
        assert_eq!(
            (
                kept[0].repeated,
                kept[0].at.timestamp(),
                kept[0].last_at.timestamp()
            ),
            (2, 1, 3)
        );
        assert_eq!((kept[1].repeated, kept[2].repeated), (0, 0));
        let c = h.counters();
        assert_eq!(c.decisions[&DecisionKind::Hold], 4);
        assert_eq!(c.scale_up_operations, 1);
    }

    #[test]
    fn departures_count_by_reason() {
        let mut h = History::new();
        let gone = |reason| FleetEvent::Gone {
            instance: "i".into(),
            reason,
            after_removal: None,
            life: Duration::from_secs(1),
            use_count: 0,
        };
        h.push(DateTime::<Utc>::UNIX_EPOCH, gone(RemovalReason::IdleTime));
        h.push(DateTime::<Utc>::UNIX_EPOCH, gone(RemovalReason::IdleTime));
        h.push(
            DateTime::<Utc>::UNIX_EPOCH,
            gone(RemovalReason::MaxUseCount),
        );
        let c = h.counters();
        assert_eq!(c.removals[&RemovalReason::IdleTime], 2);
        assert_eq!(c.removals[&RemovalReason::MaxUseCount], 1);
    }
}
