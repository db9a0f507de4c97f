//! The isolation contract.

use crate::IsolateError;
use async_trait::async_trait;
use flotilla_connect::Connector;
use flotilla_job::{Environment, JobPayload};
use std::fmt;
use std::sync::Arc;

/// What an isolation level needs to prepare one job's environment.
#[derive(Clone)]
pub struct PrepareRequest<'a> {
    /// The job.
    pub job: &'a JobPayload,
    /// The instance the job runs on.
    pub instance_id: &'a str,
    /// The slot on that instance (`0..capacity_per_instance`), never held by two jobs at
    /// once: it keys the job's directories and containers.
    pub slot: usize,
    /// How to reach the instance. The same `Arc` is passed for every job on an instance while
    /// its connection is healthy, so levels may key per-instance state by it.
    pub connector: Arc<dyn Connector>,
    /// The base builds directory on the instance (an absolute path, e.g. `/builds`, or a
    /// temporary directory for the local instance).
    pub builds_dir: String,
    /// `[runners.custom_build_dir] enabled` as the runner sets it: whether a job's
    /// `GIT_CLONE_PATH` may name its project directory; unset, each level's default (GitLab's
    /// for the executor it stands for: on for docker, off for the others).
    pub custom_build_dir: Option<bool>,
}

impl fmt::Debug for PrepareRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrepareRequest")
            .field("job", &self.job.id)
            .field("instance_id", &self.instance_id)
            .field("slot", &self.slot)
            .field("connector", &self.connector)
            .field("builds_dir", &self.builds_dir)
            .field("custom_build_dir", &self.custom_build_dir)
            .finish()
    }
}

/// An isolation level: prepares an environment per job. Object-safe; share it as
/// `Arc<dyn Isolation>`.
#[async_trait]
pub trait Isolation: Send + Sync {
    /// The level's name, also the executor name jobs see (`shell`, `docker`).
    fn name(&self) -> &'static str;

    /// Prepares the environment of one job. Heavy work that belongs in the job's log (pulling
    /// images, starting containers) happens later, in the environment's
    /// [`Environment::prepare`]; this step only sets things up to get there and fails when
    /// the instance cannot be reached at all.
    async fn prepare(
        &self,
        req: PrepareRequest<'_>,
    ) -> Result<Box<dyn IsolatedEnvironment>, IsolateError>;

    /// Removes leftovers of jobs on this instance that no environment of this process owns
    /// (containers of a crashed manager or job, found by label). Returns how many things were
    /// removed.
    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        let _ = (connector, instance_id);
        Ok(0)
    }
}

/// A prepared environment that can remove what it made.
#[async_trait]
pub trait IsolatedEnvironment: Environment {
    /// Removes what the environment made (containers, networks, the job's temporary
    /// directory). Call it exactly once, after the job, whatever its outcome.
    async fn cleanup(&self) -> Result<(), IsolateError>;
}
