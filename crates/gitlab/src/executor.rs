//! What the job source needs from the dispatcher: the scaler to reserve and acquire slots,
//! and a way to run a job on an acquired slot.

use async_trait::async_trait;
use flotilla_dispatch::Dispatcher;
use flotilla_job::{JobCancel, JobPayload, JobResult, TraceSink};
use flotilla_scaler::{Acquisition, Scaler};

/// Runs jobs on slots of one runner's fleet. [`Dispatcher`] is the real one; tests may
/// provide their own.
#[async_trait]
pub trait SlotExecutor: Send + Sync {
    /// The scaler whose slots jobs run on.
    fn scaler(&self) -> &Scaler;

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
