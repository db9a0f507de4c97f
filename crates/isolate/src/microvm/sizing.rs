//! A job's VM size (pure): the level's vCPUs and memory, lowered where the job asks with
//! GitLab's Kubernetes overwrite variables (`KUBERNETES_CPU_LIMIT`, `KUBERNETES_MEMORY_LIMIT`),
//! as the `cgroup` level reads them. A job never gets more than the level gives: a larger
//! request is not applied, and the job's log says so.

use crate::cgroup::limits::{CPU_LIMIT_VARIABLE, MEMORY_LIMIT_VARIABLE};
use crate::quantity::{parse_cpu, parse_memory};
use flotilla_job::JobPayload;

/// The least memory a VM boots with, in MiB.
pub const MIN_MEMORY_MIB: u32 = 64;

/// The VM a job gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmSize {
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
}

/// `most`, lowered by `job`'s requests; with warnings for requests not applied.
pub fn for_job(most: VmSize, job: &JobPayload) -> (VmSize, Vec<String>) {
    let asked = |key: &str| {
        job.variables
            .iter()
            .rev()
            .find(|v| v.key == key)
            .map(|v| v.value.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let mut size = most;
    let mut warnings = Vec::new();
    if let Some(text) = asked(CPU_LIMIT_VARIABLE) {
        match parse_cpu(&text).filter(|m| *m > 0) {
            // Whole vCPUs: a fraction of one still needs one.
            Some(millis) => {
                let vcpus = u32::try_from(millis.div_ceil(1000)).unwrap_or(u32::MAX);
                if vcpus <= most.vcpus {
                    size.vcpus = vcpus;
                } else {
                    warnings.push(format!(
                        "{CPU_LIMIT_VARIABLE}={text} is more than this runner's microVMs have \
                         ({} vCPU): not applied",
                        most.vcpus
                    ));
                }
            }
            None => warnings.push(format!(
                "{CPU_LIMIT_VARIABLE}={text:?} is not a CPU quantity: not applied"
            )),
        }
    }
    if let Some(text) = asked(MEMORY_LIMIT_VARIABLE) {
        match parse_memory(&text) {
            Some(bytes) => {
                let mib = u32::try_from(bytes >> 20).unwrap_or(u32::MAX);
                if mib > most.memory_mib {
                    warnings.push(format!(
                        "{MEMORY_LIMIT_VARIABLE}={text} is more than this runner's microVMs \
                         have ({} MiB): not applied",
                        most.memory_mib
                    ));
                } else if mib < MIN_MEMORY_MIB {
                    warnings.push(format!(
                        "{MEMORY_LIMIT_VARIABLE}={text} is less than a microVM boots with \
                         ({MIN_MEMORY_MIB} MiB): not applied"
                    ));
                } else {
                    size.memory_mib = mib;
                }
            }
            None => warnings.push(format!(
                "{MEMORY_LIMIT_VARIABLE}={text:?} is not a memory quantity: not applied"
            )),
        }
    }
    (size, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_job::Variable;

    fn job(vars: &[(&str, &str)]) -> JobPayload {
        JobPayload {
            variables: vars.iter().map(|(k, v)| Variable::new(*k, *v)).collect(),
            ..Default::default()
        }
    }

    const MOST: VmSize = VmSize {
        vcpus: 2,
        memory_mib: 1024,
    };

    #[test]
    fn a_job_lowers_its_vm_and_never_raises_it() {
        assert_eq!(for_job(MOST, &job(&[])), (MOST, vec![]));
        let (s, w) = for_job(
            MOST,
            &job(&[
                (CPU_LIMIT_VARIABLE, "500m"),
                (MEMORY_LIMIT_VARIABLE, "256Mi"),
            ]),
        );
        assert_eq!(
            s,
            VmSize {
                vcpus: 1,
                memory_mib: 256
            }
        );
        assert!(w.is_empty(), "{w:?}");
        let (s, w) = for_job(
            MOST,
            &job(&[(CPU_LIMIT_VARIABLE, "4"), (MEMORY_LIMIT_VARIABLE, "2Gi")]),
        );
        assert_eq!(s, MOST);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("not applied"), "{w:?}");
        let (s, w) = for_job(
            MOST,
            &job(&[
                (CPU_LIMIT_VARIABLE, "lots"),
                (MEMORY_LIMIT_VARIABLE, "16Mi"),
            ]),
        );
        assert_eq!(s, MOST);
        assert_eq!(w.len(), 2, "{w:?}");
    }
}
