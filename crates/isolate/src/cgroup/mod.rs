//! Cgroup isolation: shell isolation plus a cgroup per slot, so that jobs sharing an
//! instance cannot starve each other.
//!
//! Every stage of the job on slot N runs inside slot N's cgroup (its shell moves itself in
//! before it starts the stage), with the slot's CPU, memory and process limits, lowered where
//! the job asks ([`limits`]). The cgroup is made (and, on cgroup v2, its controllers enabled)
//! by flotilla when the job is prepared, which GitLab Runner leaves to the administrator; it
//! says plainly when it cannot and why. Before the job, whatever an earlier job left in the
//! slot's cgroup is killed and the cgroup is made anew, so its limit events count this job's
//! only: a stage that fails after the kernel enforced a limit gets a line saying so in its log
//! ("killed: memory limit 512 MiB of slot 2"). After the job, everything still in the cgroup is
//! killed, however it was started. The first time an instance is met, the slot cgroups of
//! every slot are emptied ([`Isolation::cleanup_instance`]): what a manager that died left.
//!
//! Paths follow GitLab's `slot_cgroup_template` (default `gitlab-runner/slot-${slot}`), below
//! `/sys/fs/cgroup` on v2 and below each of `/sys/fs/cgroup/{cpu,memory,pids}` on v1.

mod cleanup;
mod environment;
pub mod limits;
pub mod script;
pub mod settings;

pub use limits::SlotLimits;
pub use settings::CgroupSettings;

use crate::layout::BuildLayout;
use crate::shell::ShellEnvironment;
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest};
use async_trait::async_trait;
use environment::JobCgroup;
use flotilla_connect::Connector;
use script::SlotCgroup;
use std::sync::{Arc, OnceLock};

/// GitLab's default `slot_cgroup_template`.
pub const DEFAULT_TEMPLATE: &str = "gitlab-runner/slot-${slot}";

/// Where cgroup file systems are mounted on an instance.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

/// `template` with `${slot}` (or `$slot`) replaced by `slot`.
pub fn expand_template(template: &str, slot: usize) -> String {
    template
        .replace("${slot}", &slot.to_string())
        .replace("$slot", &slot.to_string())
}

/// Checks a slot cgroup template: a relative path (a leading `/` is dropped) of letters,
/// digits and `._@:-`, with `${slot}` in it, and no `..`.
pub fn check_template(template: &str) -> Result<String, String> {
    let t = template.trim().trim_start_matches('/');
    if t.is_empty() {
        return Err("the slot cgroup template is empty".into());
    }
    let plain = t.replace("${slot}", "0").replace("$slot", "0");
    if plain
        .chars()
        .any(|c| !(c.is_ascii_alphanumeric() || "._@:-/".contains(c)))
    {
        return Err(format!(
            "the slot cgroup template {template:?} may hold only letters, digits, `._@:-/` and ${{slot}}"
        ));
    }
    if plain
        .split('/')
        .any(|c| c == ".." || c == "." || c.is_empty())
    {
        return Err(format!(
            "the slot cgroup template {template:?} must be a plain relative path"
        ));
    }
    if !t.contains("${slot}") && !t.contains("$slot") {
        return Err(format!(
            "the slot cgroup template {template:?} has no ${{slot}}: every slot would share one cgroup"
        ));
    }
    Ok(t.to_string())
}

/// The `cgroup` level's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupConfig {
    /// The slot's cgroup path (GitLab's `slot_cgroup_template`), checked with
    /// [`check_template`].
    pub template: String,
    /// Where the cgroup file systems are ([`DEFAULT_ROOT`]).
    pub root: String,
    /// The most each slot may use.
    pub limits: SlotLimits,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            template: DEFAULT_TEMPLATE.into(),
            root: DEFAULT_ROOT.into(),
            limits: SlotLimits::default(),
        }
    }
}

/// The `cgroup` isolation level.
#[derive(Debug, Clone)]
pub struct CgroupIsolation {
    config: CgroupConfig,
}

impl CgroupIsolation {
    /// The level with `config`; fails for a template [`check_template`] refuses or a root
    /// that is not absolute.
    pub fn new(mut config: CgroupConfig) -> Result<CgroupIsolation, IsolateError> {
        config.template = check_template(&config.template).map_err(IsolateError::Configuration)?;
        if !config.root.starts_with('/') || config.root.split('/').any(|c| c == "..") {
            return Err(IsolateError::Configuration(format!(
                "the cgroup root {:?} must be an absolute path",
                config.root
            )));
        }
        Ok(CgroupIsolation { config })
    }

    /// The configuration.
    pub fn config(&self) -> &CgroupConfig {
        &self.config
    }
}

#[async_trait]
impl Isolation for CgroupIsolation {
    fn name(&self) -> &'static str {
        "cgroup"
    }

    async fn prepare(
        &self,
        req: PrepareRequest<'_>,
    ) -> Result<Box<dyn IsolatedEnvironment>, IsolateError> {
        let layout = BuildLayout::new(
            &req.builds_dir,
            req.slot,
            req.job,
            req.custom_build_dir.unwrap_or(false),
        )?;
        let (limits, warnings) = self.config.limits.for_job(req.job);
        let path = expand_template(&self.config.template, req.slot);
        let cgroup = JobCgroup {
            cgroup: SlotCgroup {
                root: self.config.root.clone(),
                path: path.clone(),
            },
            slot: req.slot,
            limits,
            warnings,
            version: OnceLock::new(),
        };
        Ok(Box::new(
            ShellEnvironment::confined(&req, layout, Arc::new(cgroup)).with_slot_cgroup(Some(path)),
        ))
    }

    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        cleanup::sweep(&*connector, instance_id, &self.config).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand_both_spellings() {
        assert_eq!(expand_template(DEFAULT_TEMPLATE, 3), "gitlab-runner/slot-3");
        assert_eq!(
            expand_template("runner-slot-$slot.slice", 0),
            "runner-slot-0.slice"
        );
    }

    #[test]
    fn templates_are_plain_relative_paths_with_the_slot() {
        assert_eq!(
            check_template("/gitlab-runner/slot-${slot}").unwrap(),
            "gitlab-runner/slot-${slot}"
        );
        for bad in [
            "",
            "../escape/${slot}",
            "a//b-${slot}",
            "slot; rm -rf /${slot}",
            "gitlab-runner/all",
        ] {
            assert!(check_template(bad).is_err(), "{bad:?}");
        }
        assert!(
            CgroupIsolation::new(CgroupConfig {
                root: "relative".into(),
                ..CgroupConfig::default()
            })
            .is_err()
        );
    }
}
