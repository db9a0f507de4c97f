//! A slot's resource limits, and how a job may lower them (pure).
//!
//! The runner configures the most a slot may use; a job asks for less with GitLab's
//! Kubernetes overwrite variables (`KUBERNETES_CPU_LIMIT`, `KUBERNETES_MEMORY_LIMIT`, written
//! as Kubernetes quantities: `500m`, `1.5`, `512Mi`, `1G`) and flotilla's
//! `FLOTILLA_PIDS_LIMIT`. A job never gets more than the slot's limit: a request above it is
//! held to it, with a warning in the job's log.

use crate::quantity::{parse_cpu, parse_memory, show_cpu, show_memory};
use flotilla_job::JobPayload;
use std::fmt;

/// The job variable that lowers the slot's CPU limit (GitLab's Kubernetes overwrite name).
pub const CPU_LIMIT_VARIABLE: &str = "KUBERNETES_CPU_LIMIT";
/// The job variable that lowers the slot's memory limit (GitLab's Kubernetes overwrite name).
pub const MEMORY_LIMIT_VARIABLE: &str = "KUBERNETES_MEMORY_LIMIT";
/// The job variable that lowers the slot's process limit (flotilla's; GitLab has none).
pub const PIDS_LIMIT_VARIABLE: &str = "FLOTILLA_PIDS_LIMIT";

/// What one slot's processes may use together; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotLimits {
    /// CPU time, in thousandths of a CPU (`1500` is one and a half CPUs).
    pub cpu_millis: Option<u64>,
    /// Memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes and threads.
    pub pids: Option<u64>,
}

impl SlotLimits {
    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == SlotLimits::default()
    }

    /// The limits `job` runs with in a slot limited to `self`: each lowered where the job
    /// asks for less; a request above the slot's limit, or one that does not parse, is
    /// ignored with a warning.
    pub fn for_job(&self, job: &JobPayload) -> (SlotLimits, Vec<String>) {
        let mut warnings = Vec::new();
        let mut limits = *self;
        let asked = |key: &str| {
            job.variables
                .iter()
                .rev()
                .find(|v| v.key == key)
                .map(|v| v.value.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut lower = |key: &str,
                         slot: Option<u64>,
                         parse: fn(&str) -> Option<u64>,
                         show: fn(u64) -> String|
         -> Option<u64> {
            let Some(text) = asked(key) else {
                return slot;
            };
            match (parse(&text), slot) {
                (None, _) => {
                    warnings.push(format!("{key}={text:?} is not a valid quantity; ignored"));
                    slot
                }
                (Some(0), _) => {
                    warnings.push(format!("{key}={text:?} would leave nothing; ignored"));
                    slot
                }
                (Some(want), Some(max)) if want > max => {
                    warnings.push(format!(
                        "{key}={text:?} is more than this slot's limit of {}; the slot's limit applies",
                        show(max)
                    ));
                    slot
                }
                (Some(want), _) => Some(want),
            }
        };
        limits.cpu_millis = lower(CPU_LIMIT_VARIABLE, self.cpu_millis, parse_cpu, show_cpu);
        limits.memory_bytes = lower(
            MEMORY_LIMIT_VARIABLE,
            self.memory_bytes,
            parse_memory,
            show_memory,
        );
        limits.pids = lower(PIDS_LIMIT_VARIABLE, self.pids, parse_count, |n| {
            n.to_string()
        });
        (limits, warnings)
    }
}

impl fmt::Display for SlotLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(c) = self.cpu_millis {
            parts.push(format!("cpu {}", show_cpu(c)));
        }
        if let Some(m) = self.memory_bytes {
            parts.push(format!("memory {}", show_memory(m)));
        }
        if let Some(p) = self.pids {
            parts.push(format!("pids {p}"));
        }
        if parts.is_empty() {
            f.write_str("no limits")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// A count of processes.
pub fn parse_count(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_job::Variable;

    fn job(vars: &[(&str, &str)]) -> JobPayload {
        JobPayload {
            variables: vars.iter().map(|(k, v)| Variable::new(*k, *v)).collect(),
            ..JobPayload::default()
        }
    }

    #[test]
    fn a_job_lowers_its_slots_limits_but_never_raises_them() {
        let slot = SlotLimits {
            cpu_millis: Some(2000),
            memory_bytes: Some(1 << 30),
            pids: Some(512),
        };
        let (limits, warnings) = slot.for_job(&job(&[
            (CPU_LIMIT_VARIABLE, "500m"),
            (MEMORY_LIMIT_VARIABLE, "4Gi"),
            (PIDS_LIMIT_VARIABLE, "64"),
        ]));
        assert_eq!(
            limits,
            SlotLimits {
                cpu_millis: Some(500),
                memory_bytes: Some(1 << 30),
                pids: Some(64),
            }
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("more than this slot's limit of 1 GiB"),
            "{warnings:?}"
        );
        let (limits, warnings) = slot.for_job(&job(&[]));
        assert_eq!((limits, warnings.len()), (slot, 0));
    }

    #[test]
    fn a_job_may_limit_what_the_slot_leaves_unlimited_and_bad_values_are_named() {
        let (limits, warnings) = SlotLimits::default().for_job(&job(&[
            (MEMORY_LIMIT_VARIABLE, "256Mi"),
            (CPU_LIMIT_VARIABLE, "fast"),
            (PIDS_LIMIT_VARIABLE, "0"),
        ]));
        assert_eq!(limits.memory_bytes, Some(256 << 20));
        assert_eq!(limits.cpu_millis, None);
        assert_eq!(limits.pids, None);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(limits.to_string(), "memory 256 MiB");
    }
}
