//! Instance isolation: the whole instance for one job (GitLab's `instance` executor).
//!
//! The job runs on the instance itself, with everything the instance's user may do: the
//! Docker daemon, kernel features, shared memory, nested containers (a k3d cluster, say).
//! Nothing confines it, so the fleet gives every job an instance to itself (configuration
//! refuses `capacity_per_instance` above 1 where this level is offered), and with
//! `max_use_count = 1` each instance is deleted after its job: the next job starts on a fresh
//! machine. That is the only arrangement safe for code the fleet's owner does not trust; with
//! instances reused, a job finds what the one before it left on disk (processes it left are
//! still stopped, from the slot's stage record, as with shell isolation).
//!
//! Stages run as with shell isolation (a build directory on the instance, stage records);
//! the difference is the promise about the instance, and what the job's log says of it.

use crate::layout::BuildLayout;
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest, ShellIsolation};
use async_trait::async_trait;
use flotilla_connect::Connector;
use std::sync::Arc;

/// The `instance` isolation level.
#[derive(Debug, Clone, Default)]
pub struct InstanceIsolation {
    /// How stages run and what is stopped between jobs: shell isolation's.
    shell: ShellIsolation,
}

impl InstanceIsolation {
    /// The level, running stages as `shell` does (its builds directory, its stage records).
    pub fn new(shell: ShellIsolation) -> InstanceIsolation {
        InstanceIsolation { shell }
    }
}

#[async_trait]
impl Isolation for InstanceIsolation {
    fn name(&self) -> &'static str {
        "instance"
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
        Ok(Box::new(
            self.shell
                .environment(&req, layout)
                .named("instance", "the whole instance is the job's"),
        ))
    }

    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        self.shell.cleanup_instance(connector, instance_id).await
    }
}
