//! Running one piece of a job under its limits: the job deadline, a stage timeout, graceful
//! and forced cancellation.

use super::cancel::JobCancel;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why a piece of work was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Forced cancellation.
    Aborted,
    /// Graceful cancellation.
    Canceled,
    /// The job's deadline passed.
    JobTimeout,
    /// The stage's own timeout passed.
    StageTimeout(Duration),
}

/// What may stop a piece of work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Forced cancellation stops it.
    pub forced: bool,
    /// Graceful cancellation stops it.
    pub graceful: bool,
    /// The job deadline, if it applies.
    pub deadline: Option<Instant>,
    /// The stage's own timeout.
    pub timeout: Option<Duration>,
}

const FAR: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Runs the future `start` builds; if a limit fires first, fires the token it was given,
/// lets it wind down for at most `grace`, and reports why it was stopped.
pub(crate) async fn guarded<T, F>(
    cancel: &JobCancel,
    limits: Limits,
    grace: Duration,
    start: impl FnOnce(CancellationToken) -> F,
) -> Result<T, Stop>
where
    F: Future<Output = T>,
{
    let token = CancellationToken::new();
    let work = start(token.clone());
    tokio::pin!(work);
    let deadline =
        tokio::time::sleep_until(limits.deadline.unwrap_or_else(|| Instant::now() + FAR));
    let timeout = tokio::time::sleep(limits.timeout.unwrap_or(FAR));
    let stop = tokio::select! {
        biased;
        out = &mut work => return Ok(out),
        () = cancel.forced_token().cancelled(), if limits.forced => Stop::Aborted,
        () = cancel.graceful_token().cancelled(), if limits.graceful => Stop::Canceled,
        () = deadline, if limits.deadline.is_some() => Stop::JobTimeout,
        () = timeout, if limits.timeout.is_some() => Stop::StageTimeout(limits.timeout.unwrap_or(FAR)),
    };
    token.cancel();
    let _ = tokio::time::timeout(grace, &mut work).await;
    Err(stop)
}
