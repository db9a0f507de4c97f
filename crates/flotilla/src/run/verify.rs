//! Verifying a runner at start-up without giving up: GitLab Runner's `run` does not verify
//! at all (only `register` and `verify` do, §0 of the protocol reference), so a GitLab that is
//! down, a network that is not up yet, or a runner GitLab refuses or calls orphaned must not
//! stop `flotilla run`. Each failure is logged with what to do about it, and verify is tried
//! again after a backoff that doubles from 1 s up to 60 s, until it succeeds or the manager
//! is stopped. The runner's fleet starts only once GitLab said who the runner is (its id keys
//! the fleet's state).

use flotilla_gitlab::{Client, ClientError, VerifiedRunner};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The first wait after a failed verify.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between verify attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait after the `failures`-th failure in a row (1-based). Pure.
pub(super) fn verify_backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

/// What to tell the operator about a failed verify.
fn advice(e: &ClientError) -> &'static str {
    match e {
        ClientError::InvalidRunnerToken { .. } => {
            "check the runner's `token` (the runner may have been deleted in GitLab)"
        }
        ClientError::RunnerOrphaned { .. } => {
            "the project or group that owned the runner is gone; create the runner again"
        }
        _ => "GitLab may be down or unreachable",
    }
}

/// Verifies the runner until GitLab answers, or `stop` fires (then `None`).
pub(super) async fn verify_until_ok(
    client: &Client,
    runner: &str,
    stop: &CancellationToken,
) -> Option<VerifiedRunner> {
    let mut failures = 0;
    loop {
        let result = tokio::select! {
            () = stop.cancelled() => return None,
            r = client.verify() => r,
        };
        match result {
            Ok(v) => {
                if failures > 0 {
                    tracing::info!(
                        runner,
                        attempts = failures + 1,
                        "GitLab verified the runner"
                    );
                }
                return Some(v);
            }
            Err(e) => {
                failures += 1;
                let wait = verify_backoff(failures);
                tracing::error!(
                    runner,
                    url = %client.base_url(),
                    error = %e,
                    advice = advice(&e),
                    retry_in_s = wait.as_secs(),
                    "verifying the runner with GitLab failed; retrying"
                );
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::verify_backoff;
    use std::time::Duration;

    #[test]
    fn the_backoff_doubles_up_to_a_minute() {
        let secs: Vec<u64> = (1..=9).map(|n| verify_backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(verify_backoff(u32::MAX), Duration::from_secs(60));
    }
}
