//! What the dispatcher's own steps can fail with.

use flotilla_connect::ConnectError;

/// An error building a connector.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The instance speaks a protocol this factory cannot connect with.
    #[error("instance {instance} speaks {protocol}, which this connector factory cannot reach")]
    UnsupportedProtocol {
        /// The instance.
        instance: String,
        /// Its protocol.
        protocol: String,
    },
    /// The connector could not be set up.
    #[error("connecting to instance {instance}: {source}")]
    Connect {
        /// The instance.
        instance: String,
        /// Why.
        #[source]
        source: ConnectError,
    },
}
