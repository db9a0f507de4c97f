//! What can go wrong with a VMM.

use flotilla_connect::ConnectError;

/// An error from a VMM backend.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// The instance could not be reached or a command on it could not run.
    #[error("{what}: {source}")]
    Connect {
        /// What was being done.
        what: String,
        /// The connector's error.
        #[source]
        source: ConnectError,
    },
    /// A command on the instance failed.
    #[error("{what} failed ({status}): {stderr}")]
    Command {
        /// What was being done.
        what: String,
        /// How it ended.
        status: flotilla_connect::ExitStatus,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// The VMM refused a request or answered with an error.
    #[error("{vmm} refused {request}: {message}")]
    Refused {
        /// Which VMM.
        vmm: &'static str,
        /// The request.
        request: String,
        /// Its error message.
        message: String,
    },
    /// A call to the VMM's REST API (Firecracker, Cloud Hypervisor) answered with an error
    /// status: which call, the status, and the API's own message (Firecracker's
    /// `fault_message`, Cloud Hypervisor's chain of error messages).
    #[error("{vmm} API call {call} failed with HTTP {status}: {message}")]
    Api {
        /// Which VMM.
        vmm: &'static str,
        /// The call (`PUT /boot-source`).
        call: String,
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// The VMM's API answered something this client does not understand.
    #[error("{vmm} API: {0}", vmm = .1)]
    Protocol(String, &'static str),
    /// Something did not happen in time.
    #[error("timed out after {after:?} {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The limit.
        after: std::time::Duration,
    },
    /// The VM described cannot be made by this backend (a feature it lacks).
    #[error("{0}")]
    Unsupported(String),
    /// The host lacks something the VM needs (QEMU, a kernel, its modules).
    #[error("{0}")]
    Missing(String),
}

impl VmmError {
    pub(crate) fn connect(what: impl Into<String>, source: ConnectError) -> VmmError {
        VmmError::Connect {
            what: what.into(),
            source,
        }
    }

    /// Whether the instance itself could not be reached.
    pub fn is_instance_failure(&self) -> bool {
        matches!(self, VmmError::Connect { source, .. } if source.is_instance_failure())
    }
}
