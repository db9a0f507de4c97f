//! `[runners.cgroup]` (flotilla's table): what each slot's cgroup may use, read, checked and
//! turned into the level's [`CgroupConfig`] here. A job lowers these limits with
//! `KUBERNETES_CPU_LIMIT`, `KUBERNETES_MEMORY_LIMIT` and `FLOTILLA_PIDS_LIMIT` and never
//! raises them ([`super::limits`]).

use super::{CgroupConfig, DEFAULT_ROOT, SlotLimits};
use crate::quantity::{CpuQuantity, MemoryQuantity};
use crate::settings::{SettingError, SettingErrors};
use serde::{Deserialize, Serialize};

/// `[runners.cgroup]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CgroupSettings {
    /// CPUs, as a number (`1.5`) or a Kubernetes quantity (`"500m"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuQuantity>,
    /// Memory, as a Kubernetes quantity (`"512Mi"`, `"1G"`) or bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryQuantity>,
    /// Processes and threads (0: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Where cgroup file systems are mounted on the instances (default `/sys/fs/cgroup`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
}

impl CgroupSettings {
    /// The level's configuration, its slots' cgroups at `template` (the runner's
    /// `slot_cgroup_template`, checked when the level is made).
    pub fn build(&self, template: &str) -> Result<CgroupConfig, SettingErrors> {
        let CgroupSettings {
            cpu,
            memory,
            pids,
            root,
        } = self;
        let mut errors = SettingErrors::default();
        let cpu_millis = match cpu {
            None => None,
            Some(q) => {
                let millis = q.millis();
                if millis.is_none() {
                    errors.push(SettingError::new(
                        "cpu",
                        "cpu must be a positive number of CPUs (1.5) or a quantity such as \"500m\"",
                    ));
                }
                millis
            }
        };
        let memory_bytes = match memory {
            None => None,
            Some(q) => {
                let bytes = q.bytes();
                if bytes.is_none() {
                    errors.push(SettingError::new(
                        "memory",
                        "memory must be a positive quantity such as \"512Mi\" or \"1G\", or bytes",
                    ));
                }
                bytes
            }
        };
        if root.as_ref().is_some_and(|r| !r.starts_with('/')) {
            errors.push(SettingError::new("root", "root must be an absolute path"));
        }
        errors.or(|| CgroupConfig {
            template: template.to_string(),
            root: root.clone().unwrap_or_else(|| DEFAULT_ROOT.to_string()),
            limits: SlotLimits {
                cpu_millis,
                memory_bytes,
                pids: pids.filter(|p| *p > 0),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reaches_the_level_or_is_named() {
        let settings = CgroupSettings {
            cpu: Some(CpuQuantity::Quantity("500m".into())),
            memory: Some(MemoryQuantity::Quantity("1Gi".into())),
            pids: Some(200),
            root: Some("/mnt/cgroup".into()),
        };
        let config = settings.build("slot-${slot}").unwrap();
        assert_eq!(config.template, "slot-${slot}");
        assert_eq!(config.root, "/mnt/cgroup");
        assert_eq!(
            config.limits,
            SlotLimits {
                cpu_millis: Some(500),
                memory_bytes: Some(1 << 30),
                pids: Some(200),
            }
        );
        let bad = CgroupSettings {
            cpu: Some(CpuQuantity::Cpus(-1.0)),
            memory: Some(MemoryQuantity::Quantity("lots".into())),
            pids: Some(0),
            root: Some("relative".into()),
        };
        let e = bad.build("t").unwrap_err().to_string();
        assert!(
            e.starts_with("cpu: ") && e.contains("; memory: ") && e.contains("; root: "),
            "{e}"
        );
    }
}
