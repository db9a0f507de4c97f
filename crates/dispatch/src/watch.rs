//! A connector that counts the instance failures it sees, so the dispatcher can tell the
//! scaler and replace the connector.

use async_trait::async_trait;
use flotilla_connect::{
    BoxedStream, ConnectError, Connector, ExecRequest, ExitStatus, ForwardTarget,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Wraps a connector and counts errors that mean the instance is unreachable or
/// untrustworthy ([`ConnectError::is_instance_failure`]).
#[derive(Debug)]
pub struct WatchedConnector {
    inner: Arc<dyn Connector>,
    failures: AtomicU64,
    /// The instance's internal and external addresses, as its connection details gave them.
    addresses: (String, String),
}

impl WatchedConnector {
    /// Watches `inner`.
    pub fn new(inner: Arc<dyn Connector>) -> WatchedConnector {
        WatchedConnector {
            inner,
            failures: AtomicU64::new(0),
            addresses: (String::new(), String::new()),
        }
    }

    /// The same, knowing the instance's `internal` and `external` addresses.
    #[must_use]
    pub fn with_addresses(mut self, internal: &str, external: &str) -> WatchedConnector {
        self.addresses = (internal.to_string(), external.to_string());
        self
    }

    /// The instance's internal and external addresses (empty when unknown).
    pub fn addresses(&self) -> (&str, &str) {
        (&self.addresses.0, &self.addresses.1)
    }

    /// Instance failures seen so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn observe<T>(&self, r: Result<T, ConnectError>) -> Result<T, ConnectError> {
        if let Err(e) = &r
            && e.is_instance_failure()
        {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

#[async_trait]
impl Connector for WatchedConnector {
    async fn exec(&self, request: ExecRequest<'_>) -> Result<ExitStatus, ConnectError> {
        self.observe(self.inner.exec(request).await)
    }

    async fn dial_stdio(&self, command: &str) -> Result<BoxedStream, ConnectError> {
        self.observe(self.inner.dial_stdio(command).await)
    }

    async fn forward(&self, target: &ForwardTarget) -> Result<BoxedStream, ConnectError> {
        self.observe(self.inner.forward(target).await)
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    fn is_this_process(&self) -> bool {
        self.inner.is_this_process()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Failing(ConnectError);

    #[async_trait]
    impl Connector for Failing {
        async fn exec(&self, _r: ExecRequest<'_>) -> Result<ExitStatus, ConnectError> {
            Err(match &self.0 {
                ConnectError::Network { addr, message } => ConnectError::Network {
                    addr: addr.clone(),
                    message: message.clone(),
                },
                _ => ConnectError::Cancelled,
            })
        }
        async fn dial_stdio(&self, _c: &str) -> Result<BoxedStream, ConnectError> {
            Err(ConnectError::Unsupported("dial_stdio"))
        }
        async fn forward(&self, _t: &ForwardTarget) -> Result<BoxedStream, ConnectError> {
            Err(ConnectError::Unsupported("forward"))
        }
    }

    #[tokio::test]
    async fn only_instance_failures_are_counted() {
        let w = WatchedConnector::new(Arc::new(Failing(ConnectError::Network {
            addr: "a".into(),
            message: "reset".into(),
        })));
        assert!(w.exec(ExecRequest::new("true")).await.is_err());
        assert_eq!(w.failures(), 1);
        assert!(w.dial_stdio("x").await.is_err());
        assert_eq!(w.failures(), 1, "unsupported is not the instance's fault");
        let c = WatchedConnector::new(Arc::new(Failing(ConnectError::Cancelled)));
        assert!(c.exec(ExecRequest::new("true")).await.is_err());
        assert_eq!(c.failures(), 0);
    }
}
