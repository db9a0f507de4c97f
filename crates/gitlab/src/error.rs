//! What the runner API client can fail with. No variant carries a token or a URL with a
//! query string: paths are shown redacted.

/// A runner API call that failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration cannot work (a bad URL, a TLS setup failure).
    #[error("runner API client configuration: {0}")]
    Config(String),
    /// GitLab refused the runner token: the runner was deleted or the token is wrong.
    #[error(
        "GitLab refused the runner token (403 Forbidden on {endpoint}): the runner was deleted \
         or its authentication token is invalid"
    )]
    InvalidRunnerToken {
        /// The endpoint that refused it.
        endpoint: &'static str,
    },
    /// GitLab no longer knows who owns the runner (its project or group was deleted): `422
    /// Runner is orphaned` on verify and job requests (`lib/api/ci/runner.rb`).
    #[error(
        "GitLab says the runner is orphaned (422 on {endpoint}): the project or group that \
         owned it is gone"
    )]
    RunnerOrphaned {
        /// The endpoint that said so.
        endpoint: &'static str,
    },
    /// The request could not be sent or its answer not read, after every retry.
    #[error("{method} {path}: {message} (after {attempts} attempts)")]
    Transport {
        /// The HTTP method.
        method: &'static str,
        /// The path, redacted.
        path: String,
        /// What went wrong (the URL removed).
        message: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// GitLab answered with a status the call cannot use.
    #[error("{method} {path} answered {status}{detail}")]
    Status {
        /// The HTTP method.
        method: &'static str,
        /// The path, redacted.
        path: String,
        /// The status code.
        status: u16,
        /// Extra context (empty or starting with `: `).
        detail: String,
    },
    /// The answer could not be decoded.
    #[error("{method} {path}: decoding the answer: {message}")]
    Decode {
        /// The HTTP method.
        method: &'static str,
        /// The path, redacted.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// The answer was larger than what is read of it (an artifact archive past its
    /// announced size); nothing of it was kept.
    #[error("{method} {path}: the answer is larger than {limit} bytes; refused")]
    TooLarge {
        /// The HTTP method.
        method: &'static str,
        /// The path, redacted.
        path: String,
        /// The most that was to be read.
        limit: u64,
    },
    /// A local file (an artifact archive) could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl ClientError {
    /// The HTTP status, when GitLab answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            ClientError::InvalidRunnerToken { .. } => Some(403),
            ClientError::RunnerOrphaned { .. } => Some(422),
            _ => None,
        }
    }
}

/// A reqwest error's message without the URL it carries (which may hold a pre-signed query).
pub(crate) fn transport_message(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "reading the body failed"
    } else if e.is_request() {
        "sending the request failed"
    } else {
        "request failed"
    };
    let e = e.without_url();
    let mut msg = format!("{kind}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}
