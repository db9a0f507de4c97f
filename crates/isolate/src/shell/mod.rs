//! Shell isolation: a build directory per slot on the instance, every stage run by the
//! instance's shell over the connector.
//!
//! Both places ([`flotilla_job::Place::Build`] and [`flotilla_job::Place::Helper`]) are the
//! instance's shell. The project is checked out at `<builds_dir>/<slot>/<project path>`
//! ([`crate::layout`]), so concurrent jobs on one instance never share a directory. Cleaning up
//! removes the job's temporary directory (file variables) and, when the job asked with
//! `FF_ENABLE_JOB_CLEANUP`, its project directory; otherwise the checkout stays for the next
//! job's `fetch`.
//!
//! A slot is never shared, not even with what a dead manager's job left running: every stage
//! records its process group in the slot's stage record, and cleaning up after a job kills
//! every group recorded there ([`crate::stage_record::stomp_slot_command`]) in the same round trip
//! that removes its directories, as GitLab Runner's shell executor kills a job's process
//! group when it ends. Preparing a job repeats the stomp (one more round trip) unless this
//! process cleaned the slot up itself after its last job: a slot is only ever dirty after a
//! manager died or a cleanup failed. With
//! [`ShellIsolation::with_builds_dir`], [`Isolation::cleanup_instance`] also stops, on an
//! instance met for the first time, the stages of every slot that another manager process
//! recorded.

mod cleanup;
mod environment;

pub(crate) use cleanup::stopped_count;
pub use environment::{SLOT_CGROUP_VARIABLE, ShellEnvironment};

use crate::layout::{BuildLayout, stage_records_dir};
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest};
use async_trait::async_trait;
pub(crate) use environment::CleanSlots;
use flotilla_connect::Connector;
use std::sync::Arc;

/// The `shell` isolation level.
#[derive(Debug, Clone, Default)]
pub struct ShellIsolation {
    /// Where the stage records of every slot are, for [`Isolation::cleanup_instance`].
    records_dir: Option<String>,
    /// Slots (`(instance, stage record)`) this process cleaned up after their last job,
    /// stomp included: their next job needs no stomp. Shared by clones.
    clean: CleanSlots,
    /// GitLab's `slot_cgroup_template`, when `use_slot_cgroups` is on: jobs are told their
    /// slot's cgroup in `GITLAB_RUNNER_SLOT_CGROUP` (it is the administrator's; this level
    /// does not make or use it).
    slot_cgroup_template: Option<String>,
}

impl ShellIsolation {
    /// The shell level.
    pub fn new() -> ShellIsolation {
        ShellIsolation::default()
    }

    /// Lets [`Isolation::cleanup_instance`] stop, in every slot of an instance under
    /// `builds_dir` (the dispatcher's base builds directory), the stages that another manager
    /// process recorded: what jobs of a manager killed with `kill -9` left running. Without
    /// it only each slot's next job stops them. Fails for a builds directory that is not
    /// absolute.
    pub fn with_builds_dir(mut self, builds_dir: &str) -> Result<ShellIsolation, IsolateError> {
        self.records_dir =
            Some(stage_records_dir(builds_dir).map_err(IsolateError::Configuration)?);
        Ok(self)
    }

    /// The environment of the job `req` describes, at `layout`.
    pub(crate) fn environment(
        &self,
        req: &PrepareRequest<'_>,
        layout: BuildLayout,
    ) -> ShellEnvironment {
        let slot_cgroup = self
            .slot_cgroup_template
            .as_ref()
            .map(|t| crate::cgroup::expand_template(t, req.slot));
        ShellEnvironment::unconfined(req, layout, self.clean.clone()).with_slot_cgroup(slot_cgroup)
    }

    /// Tells every job its slot's cgroup (`template` with the slot filled in) in
    /// `GITLAB_RUNNER_SLOT_CGROUP`, as GitLab's instance executor does with
    /// `use_slot_cgroups`.
    pub fn with_slot_cgroup_template(mut self, template: &str) -> ShellIsolation {
        self.slot_cgroup_template = Some(template.to_string());
        self
    }
}

#[async_trait]
impl Isolation for ShellIsolation {
    fn name(&self) -> &'static str {
        "shell"
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
        Ok(Box::new(self.environment(&req, layout)))
    }

    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        match &self.records_dir {
            Some(dir) => cleanup::sweep(&*connector, instance_id, dir).await,
            None => Ok(0),
        }
    }
}
