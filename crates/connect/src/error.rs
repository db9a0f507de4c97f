//! What can go wrong when reaching an instance or running a command on it.

use crate::ExitStatus;
use std::time::Duration;

/// An error from a [`crate::Connector`].
///
/// The variants say *what kind* of failure it was, so callers can decide: retry the
/// connection ([`ConnectError::is_retryable`]), mark the instance unhealthy, or fail the job.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The instance refused our credentials.
    #[error("authentication as {user:?} at {addr} failed: {message}")]
    Auth {
        /// The login user.
        user: String,
        /// The address dialled.
        addr: String,
        /// What failed (never the credentials themselves).
        message: String,
    },
    /// The network failed: connection refused or reset, the connection dropped mid-way.
    #[error("network error talking to {addr}: {message}")]
    Network {
        /// The address dialled.
        addr: String,
        /// What happened.
        message: String,
    },
    /// Something took longer than allowed: connecting, or the peer stopped answering
    /// keepalives.
    #[error("timed out {what} {addr} after {after:?}")]
    Timeout {
        /// What timed out (`connecting to`, `waiting for keepalive replies from`).
        what: &'static str,
        /// The address dialled.
        addr: String,
        /// The limit that was hit.
        after: Duration,
    },
    /// The instance presented a host key other than the one pinned for it: possibly a
    /// man-in-the-middle, possibly a recreated instance under a reused id. Never retried.
    #[error("host key mismatch for {key_id}: pinned {pinned}, presented {presented}")]
    HostKeyMismatch {
        /// The id the key is pinned under (instance id or address).
        key_id: String,
        /// The pinned key's SHA-256 fingerprint.
        pinned: String,
        /// The presented key's SHA-256 fingerprint.
        presented: String,
    },
    /// The remote side refused a request: opening a channel, starting a command, a forward,
    /// or the Docker API refused an exec.
    #[error("the remote side refused {what}: {message}")]
    Remote {
        /// What was refused.
        what: String,
        /// Why, as far as the remote said.
        message: String,
    },
    /// The protocol itself failed (SSH, Docker API): a malformed or unexpected message.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The remote command exited unsuccessfully (from [`ExitStatus::check`]).
    #[error("remote command failed: {0}")]
    Exit(ExitStatus),
    /// The command was cancelled through its token and has been stopped.
    #[error("cancelled")]
    Cancelled,
    /// The request itself is invalid (an environment variable name a shell cannot export).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Credentials were missing, unreadable, or could not be refreshed.
    #[error("credentials: {0}")]
    Credentials(String),
    /// Reading the command's input or writing its output locally failed.
    #[error("{what}: {source}")]
    Io {
        /// Which stream (`stdin`, `stdout`, `stderr`, `spawning the process`).
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The connector cannot do this.
    #[error("{0} is not supported by this connector")]
    Unsupported(&'static str),
}

impl ConnectError {
    /// Whether trying again (on a new connection) may succeed: network failures and timeouts.
    /// Authentication, host-key and request errors will fail the same way again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ConnectError::Network { .. } | ConnectError::Timeout { .. }
        )
    }

    /// Whether this error says the instance itself is unreachable or untrustworthy (the
    /// scaler counts these as failed heartbeats).
    pub fn is_instance_failure(&self) -> bool {
        matches!(
            self,
            ConnectError::Network { .. }
                | ConnectError::Timeout { .. }
                | ConnectError::HostKeyMismatch { .. }
                | ConnectError::Auth { .. }
        )
    }

    pub(crate) fn io(what: &'static str, source: std::io::Error) -> Self {
        ConnectError::Io { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        let net = ConnectError::Network {
            addr: "a".into(),
            message: "refused".into(),
        };
        let timeout = ConnectError::Timeout {
            what: "connecting to",
            addr: "a".into(),
            after: Duration::from_secs(1),
        };
        let auth = ConnectError::Auth {
            user: "root".into(),
            addr: "a".into(),
            message: "denied".into(),
        };
        let hk = ConnectError::HostKeyMismatch {
            key_id: "i".into(),
            pinned: "SHA256:a".into(),
            presented: "SHA256:b".into(),
        };
        assert!(net.is_retryable() && timeout.is_retryable());
        assert!(!auth.is_retryable() && !hk.is_retryable());
        assert!(!ConnectError::Cancelled.is_retryable());
        assert!(hk.is_instance_failure() && net.is_instance_failure());
        assert!(!ConnectError::Cancelled.is_instance_failure());
        assert!(timeout.to_string().contains("connecting to a"), "{timeout}");
    }
}
