//! What a level adds around the stages of a job that run on the instance itself: a cgroup
//! that limits them, say. Shell isolation runs stages unconfined; the `cgroup` level runs
//! the same environment with a confinement.

use async_trait::async_trait;
use flotilla_connect::Connector;
use flotilla_job::EnvError;
use std::fmt;

/// Limits put around a job's stages on the instance.
#[async_trait]
pub(crate) trait Confinement: Send + Sync + fmt::Debug {
    /// The level's name (`cgroup`).
    fn level(&self) -> &'static str;

    /// Readies the confinement for the job (stopping whatever an earlier job left in it);
    /// returns what the job's log should say about it.
    async fn prepare(&self, connector: &dyn Connector) -> Result<Vec<String>, EnvError>;

    /// The command line that runs `line` (which starts a stage's shell) inside the
    /// confinement.
    fn confine(&self, line: &str) -> String;

    /// After a stage failed: how the confinement's limits took part, for the job's log
    /// (`killed: memory limit 512 MiB of slot 2`); `None` when they did not.
    async fn explain_failure(&self, connector: &dyn Connector) -> Option<String>;

    /// A helper command (`sh -c` syntax) that stops everything the job left in the
    /// confinement and releases it; its last line is how many processes it stopped.
    fn release_command(&self) -> String;
}
