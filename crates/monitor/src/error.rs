//! What can go wrong in the monitor.

use crate::metrics::MetricsError;

/// A monitor error.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// The Prometheus library refused a metric.
    #[error("metrics: {0}")]
    Metrics(#[source] prometheus::Error),
    /// A runner's series could not be registered (two runners with the same token and name).
    #[error(transparent)]
    Register(MetricsError),
    /// The exposition was not UTF-8.
    #[error("encoding the metrics: {0}")]
    Encoding(String),
    /// The listen address does not parse or resolve.
    #[error("listen_address {address:?}: {why}")]
    Address {
        /// The address as configured.
        address: String,
        /// Why it cannot be used.
        why: String,
    },
    /// Binding the listener failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}
