//! Request and answer bodies of the runner API (GitLab Runner's `common/network.go`).

use super::features::Info;
use serde::{Deserialize, Serialize};

/// `POST /api/v4/runners/verify` body.
#[derive(Debug, Serialize)]
pub(crate) struct VerifyRequest<'a> {
    pub token: &'a str,
    pub system_id: &'a str,
    pub info: &'a Info,
}

/// `POST /api/v4/runners/verify` answer (newer GitLab; older ones answer plain text).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct VerifyResponse {
    pub id: i64,
    pub token_expires_at: Option<String>,
}

/// `POST /api/v4/jobs/request` body.
#[derive(Debug, Serialize)]
pub(crate) struct JobRequest<'a> {
    pub token: &'a str,
    pub system_id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub last_update: &'a str,
    pub info: &'a Info,
}

/// The trace's size and checksum, as GitLab verifies them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceOutput {
    /// `crc32:%08x` of every byte of the trace.
    pub checksum: String,
    /// The trace's size in bytes.
    pub bytesize: u64,
}

/// `PUT /api/v4/jobs/:id` body.
#[derive(Debug, Clone, Serialize)]
pub struct UpdateJobRequest<'a> {
    /// Who is updating.
    pub info: &'a Info,
    /// The job token (also sent as `JOB-TOKEN`).
    pub token: &'a str,
    /// `pending`, `running`, `success` or `failed`.
    pub state: &'a str,
    /// Why it failed (only with `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<&'a str>,
    /// The trace checksum (deprecated duplicate of `output.checksum`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// The trace's checksum and size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<TraceOutput>,
    /// The script's exit code (for `allow_failure:exit_codes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}
