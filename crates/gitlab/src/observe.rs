//! Facts about the runner API calls, for metrics: which endpoint, which method, which
//! status, how long. GitLab Runner records the same ones (`network/api_requests_collector.go`:
//! one observation per call, retries included in its duration; calls that got no HTTP
//! answer are not recorded).

use std::time::Duration;

/// The runner API endpoints, named as GitLab Runner's `apiEndpoint` constants
/// (`network/api_requests_collector.go`) where it has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /api/v4/runners/verify` (GitLab Runner does not record it; flotilla does).
    Verify,
    /// `POST /api/v4/jobs/request`.
    RequestJob,
    /// `PUT /api/v4/jobs/:id`.
    UpdateJob,
    /// `PATCH /api/v4/jobs/:id/trace`.
    PatchTrace,
    /// The artifacts API (up and down).
    Artifacts,
    /// Anything else.
    Other,
}

impl Endpoint {
    /// The label value (`request_job`, `update_job`, `patch_trace`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Verify => "verify",
            Endpoint::RequestJob => "request_job",
            Endpoint::UpdateJob => "update_job",
            Endpoint::PatchTrace => "patch_trace",
            Endpoint::Artifacts => "artifacts",
            Endpoint::Other => "other",
        }
    }

    /// The endpoint of a call to `path` (`/api/v4/...`) with `method`.
    pub fn of(method: &str, path: &str) -> Endpoint {
        let Some(rest) = path.strip_prefix("/api/v4/") else {
            return Endpoint::Other;
        };
        if rest == "runners/verify" {
            Endpoint::Verify
        } else if rest == "jobs/request" {
            Endpoint::RequestJob
        } else if rest.starts_with("jobs/") && rest.ends_with("/trace") && method == "PATCH" {
            Endpoint::PatchTrace
        } else if rest.starts_with("jobs/") && rest.contains("/artifacts") {
            Endpoint::Artifacts
        } else if rest.starts_with("jobs/") && method == "PUT" && !rest[5..].contains('/') {
            Endpoint::UpdateJob
        } else {
            Endpoint::Other
        }
    }
}

/// Told about every runner API call that got an HTTP answer.
pub trait ApiObserver: Send + Sync {
    /// A call to `endpoint` with `method` ended with `status` after `duration` (every
    /// attempt and the waits between them included).
    fn request_done(
        &self,
        endpoint: Endpoint,
        method: &'static str,
        status: u16,
        duration: Duration,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_by_path() {
        assert_eq!(
            Endpoint::of("POST", "/api/v4/jobs/request"),
            Endpoint::RequestJob
        );
        assert_eq!(Endpoint::of("PUT", "/api/v4/jobs/42"), Endpoint::UpdateJob);
        assert_eq!(
            Endpoint::of("PATCH", "/api/v4/jobs/42/trace"),
            Endpoint::PatchTrace
        );
        assert_eq!(
            Endpoint::of("POST", "/api/v4/jobs/42/artifacts"),
            Endpoint::Artifacts
        );
        assert_eq!(
            Endpoint::of("GET", "/api/v4/jobs/42/artifacts"),
            Endpoint::Artifacts
        );
        assert_eq!(
            Endpoint::of("POST", "/api/v4/runners/verify"),
            Endpoint::Verify
        );
        assert_eq!(Endpoint::of("GET", "/elsewhere"), Endpoint::Other);
        assert_eq!(Endpoint::RequestJob.as_str(), "request_job");
    }
}
