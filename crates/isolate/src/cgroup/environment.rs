//! A job's slot cgroup: what the `cgroup` level adds to a shell environment.

use super::limits::SlotLimits;
use super::script::{CgroupVersion, LimitEvents, Prepared, SlotCgroup};
use crate::command::helper_command;
use crate::confinement::Confinement;
use crate::exec::env_error;
use crate::quantity::show_memory;
use async_trait::async_trait;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_job::EnvError;
use std::sync::OnceLock;

/// One job's slot cgroup.
#[derive(Debug)]
pub(crate) struct JobCgroup {
    /// Where it is.
    pub(crate) cgroup: SlotCgroup,
    /// The slot, for messages.
    pub(crate) slot: usize,
    /// The job's limits (the slot's, lowered where the job asked).
    pub(crate) limits: SlotLimits,
    /// Warnings about the job's limit requests, for its log.
    pub(crate) warnings: Vec<String>,
    /// The instance's cgroup version, learnt when the cgroup is readied.
    pub(crate) version: OnceLock<CgroupVersion>,
}

impl JobCgroup {
    fn version(&self) -> CgroupVersion {
        // Stages run only after `prepare` succeeded, which sets it; v2 is the safe guess
        // for a caller that did not (its joins fail loudly on a v1 instance).
        *self.version.get().unwrap_or(&CgroupVersion::V2)
    }
}

#[async_trait]
impl Confinement for JobCgroup {
    fn level(&self) -> &'static str {
        "cgroup"
    }

    async fn prepare(&self, connector: &dyn Connector) -> Result<Vec<String>, EnvError> {
        let what = "readying the slot's cgroup";
        let out = connector
            .output(&helper_command(&self.cgroup.prepare_command(&self.limits)))
            .await
            .map_err(|e| env_error(what, e))?;
        let (true, Some(prepared)) = (out.status.success(), Prepared::parse(&out.stdout_str()))
        else {
            let why = out.stderr_str();
            let why = why.trim();
            return Err(EnvError::System(format!(
                "cgroup isolation cannot use the cgroup {} below {}: {}",
                self.cgroup.path,
                self.cgroup.root,
                if why.is_empty() {
                    format!("the script ended with {}", out.status)
                } else {
                    why.to_string()
                }
            )));
        };
        let _ = self.version.set(prepared.version);
        let mut lines = vec![format!(
            "the slot's cgroup {} (cgroup {}): {}",
            self.cgroup.path,
            match prepared.version {
                CgroupVersion::V1 => "v1",
                CgroupVersion::V2 => "v2",
            },
            self.limits
        )];
        if prepared.stopped > 0 {
            tracing::warn!(
                slot = self.slot,
                processes = prepared.stopped,
                "stopped processes an earlier job left in the slot's cgroup"
            );
            lines.push(format!(
                "WARNING: stopped {} process(es) an earlier job left in this slot's cgroup",
                prepared.stopped
            ));
        }
        lines.extend(self.warnings.iter().map(|w| format!("WARNING: {w}")));
        Ok(lines)
    }

    fn confine(&self, line: &str) -> String {
        self.cgroup.joined(self.version(), line)
    }

    async fn explain_failure(&self, connector: &dyn Connector) -> Option<String> {
        let out = connector
            .output(&helper_command(&self.cgroup.events_command(self.version())))
            .await
            .ok()?;
        let events = LimitEvents::parse(&out.stdout_str());
        let mut said = Vec::new();
        if events.oom_kills > 0 {
            said.push(format!(
                "killed: memory limit {} of slot {}",
                self.limits
                    .memory_bytes
                    .map_or_else(|| "(inherited)".to_string(), show_memory),
                self.slot
            ));
        }
        if events.pids_max > 0 {
            said.push(format!(
                "the process limit of slot {} ({}) refused {} fork(s)",
                self.slot,
                self.limits
                    .pids
                    .map_or_else(|| "inherited".to_string(), |p| p.to_string()),
                events.pids_max
            ));
        }
        (!said.is_empty()).then(|| said.join("; "))
    }

    fn release_command(&self) -> String {
        self.cgroup.kill_command(self.version())
    }
}
