//! What can go wrong preparing or cleaning up an isolated environment.

use flotilla_connect::ConnectError;

/// An error from an [`crate::Isolation`] or an [`crate::IsolatedEnvironment`].
#[derive(Debug, thiserror::Error)]
pub enum IsolateError {
    /// The instance could not be reached or refused a command.
    #[error("reaching instance {instance}: {source}")]
    Connect {
        /// The instance.
        instance: String,
        /// What the connector said.
        #[source]
        source: ConnectError,
    },
    /// The instance's Docker daemon did not answer or refused a request.
    #[error("Docker daemon on instance {instance}: {what}: {message}")]
    Docker {
        /// The instance.
        instance: String,
        /// What was being done.
        what: String,
        /// What the daemon (or the way to it) said.
        message: String,
    },
    /// The request or the configuration cannot work (a relative builds directory, say).
    #[error("invalid isolation setup: {0}")]
    Configuration(String),
    /// The job asks for what the runner does not allow (a `GIT_CLONE_PATH` without
    /// `custom_build_dir`): it fails with GitLab's runner configuration error, in GitLab's words.
    #[error("{0}")]
    JobRefused(String),
    /// Cleaning up left something behind.
    #[error("cleaning up on instance {instance}: {message}")]
    Cleanup {
        /// The instance.
        instance: String,
        /// What was left and why.
        message: String,
    },
}

impl From<crate::layout::LayoutError> for IsolateError {
    fn from(e: crate::layout::LayoutError) -> Self {
        match e {
            crate::layout::LayoutError::Setup(m) => IsolateError::Configuration(m),
            crate::layout::LayoutError::Refused(m) => IsolateError::JobRefused(m),
        }
    }
}

impl IsolateError {
    /// Whether the error says the instance itself is unreachable or untrustworthy (the
    /// dispatcher reports these to the scaler).
    pub fn is_instance_failure(&self) -> bool {
        matches!(self, IsolateError::Connect { source, .. } if source.is_instance_failure())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connection_failures_count_against_the_instance() {
        let net = IsolateError::Connect {
            instance: "i".into(),
            source: ConnectError::Network {
                addr: "a".into(),
                message: "reset".into(),
            },
        };
        assert!(net.is_instance_failure());
        assert!(net.to_string().contains("instance i"), "{net}");
        let refused = IsolateError::Connect {
            instance: "i".into(),
            source: ConnectError::Cancelled,
        };
        assert!(!refused.is_instance_failure());
        assert!(!IsolateError::Configuration("x".into()).is_instance_failure());
    }
}
