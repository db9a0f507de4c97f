//! Refreshing short-lived credentials.

use crate::ConnectError;
use async_trait::async_trait;
use flotilla_fleet::{ConnectInfo, InstanceGroup};
use std::fmt;
use std::sync::Arc;

/// Where fresh [`ConnectInfo`] comes from when the credentials in hand have expired
/// (`ConnectInfo::expires`). The SSH connector asks it before (re)connecting with expired
/// credentials; an open connection is never torn down for expiry.
#[async_trait]
pub trait CredentialSource: Send + Sync + fmt::Debug {
    /// Fresh connection details for instance `id`.
    async fn refresh(&self, id: &str) -> Result<ConnectInfo, ConnectError>;
}

/// Refreshes through the instance group that made the instance
/// ([`InstanceGroup::connect_info`]).
#[derive(Clone)]
pub struct GroupCredentials(pub Arc<dyn InstanceGroup>);

impl fmt::Debug for GroupCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GroupCredentials")
    }
}

#[async_trait]
impl CredentialSource for GroupCredentials {
    async fn refresh(&self, id: &str) -> Result<ConnectInfo, ConnectError> {
        self.0
            .connect_info(id)
            .await
            .map_err(|e| ConnectError::Credentials(format!("refreshing for {id}: {e}")))
    }
}
