//! What the job source needs from the dispatcher: the scaler to reserve and acquire slots,
//! and a way to run a job on an acquired slot.

use async_trait::async_trait;
use flotilla_dispatch::Dispatcher;
use flotilla_job::{JobCancel, JobPayload, JobResult, TraceSink};
use flotilla_scaler::{Acquisition, Scaler};
use std::sync::Arc;

/// Where a job runs, as [`SlotExecutor::route`] says.
#[derive(Default)]
pub struct Route {
    /// Another executor, with its own scaler (instances made for this kind of job, such as
    /// pods sized for it); `None`: the one asked.
    pub executor: Option<Arc<dyn SlotExecutor>>,
    /// Lines for the job's log (what was chosen for it, what it asked that was ignored).
    pub notes: Vec<String>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("elsewhere", &self.executor.is_some())
            .field("notes", &self.notes)
            .finish()
    }
}

/// Runs jobs on slots of one runner's fleet. [`Dispatcher`] is the real one; tests may
/// provide their own.
#[async_trait]
pub trait SlotExecutor: Send + Sync {
    /// The scaler whose slots jobs run on.
    fn scaler(&self) -> &Scaler;

    /// Where `job` runs, asked once the job is received and before its slot is waited for:
    /// here (the default), or on another executor whose scaler the job then reserves on
    /// (its reservation here is given back). `Err(message)`: the job cannot run on this
    /// runner and fails with `message` in its log.
    async fn route(&self, _job: &JobPayload) -> Result<Route, String> {
        Ok(Route::default())
    }

    /// Runs `job` on the slot of `acquisition`, streaming its masked log into `sink`, and
    /// releases the slot when done (whatever happens).
    async fn run(
        &self,
        acquisition: Acquisition,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult;
}

#[async_trait]
impl SlotExecutor for Dispatcher {
    fn scaler(&self) -> &Scaler {
        Dispatcher::scaler(self)
    }

    async fn run(
        &self,
        acquisition: Acquisition,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        Dispatcher::run(self, acquisition, job, sink, cancel).await
    }
}
