//! Cancelling a running job.

use tokio_util::sync::CancellationToken;

mod link;

/// A handle to cancel a job, shared between the job source and the runner.
///
/// - [`JobCancel::cancel`] is GitLab's *canceling* (graceful): the script is stopped,
///   `after_script` still runs, caches and `on_failure` artifacts are still saved, and the job
///   ends failed with `job_canceled`.
/// - [`JobCancel::abort`] is *canceled* (forced): everything is killed, no `after_script`, no
///   uploads; only the file variables are still removed.
#[derive(Debug, Clone, Default)]
pub struct JobCancel {
    graceful: CancellationToken,
    forced: CancellationToken,
}

impl JobCancel {
    /// A handle nothing has fired yet.
    pub fn new() -> JobCancel {
        JobCancel::default()
    }

    /// Graceful cancellation.
    pub fn cancel(&self) {
        self.graceful.cancel();
    }

    /// Forced cancellation.
    pub fn abort(&self) {
        self.forced.cancel();
    }

    /// Whether graceful cancellation was requested.
    pub fn is_canceled(&self) -> bool {
        self.graceful.is_cancelled()
    }

    /// Whether forced cancellation was requested.
    pub fn is_aborted(&self) -> bool {
        self.forced.is_cancelled()
    }

    pub(crate) fn graceful_token(&self) -> &CancellationToken {
        &self.graceful
    }

    pub(crate) fn forced_token(&self) -> &CancellationToken {
        &self.forced
    }
}
