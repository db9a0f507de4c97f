//! What a provider says about itself and about how to reach one of its instances.

use crate::{Capabilities, ConnectorConfig};
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

/// A provider's id for one instance (a container id, a cloud instance id, a host name).
pub type InstanceId = String;

/// What a provider says about itself when initialised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ProviderInfo {
    /// A stable id of the instance group, such as `docker/<group name>` or
    /// `aws/<region>/<asg>`. flotilla keys its state by it.
    pub id: String,
    /// The most instances the group can hold (`usize::MAX` when unbounded).
    pub max_size: usize,
    /// The provider's version.
    pub version: String,
    /// Free-form build information.
    pub build_info: String,
    /// What its instances are and how they may be used.
    pub capabilities: Capabilities,
}

/// Settings handed to [`crate::InstanceGroup::init`]: the user's connector hints.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Settings {
    /// How instances are expected to be connected to.
    pub connector: ConnectorConfig,
}

/// Everything needed to connect to one instance.
///
/// A provider starts from the user's [`ConnectorConfig`] (so user overrides win) and fills in
/// the addresses, the OS and architecture it knows, and any credentials it minted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectInfo {
    /// Protocol, user and credentials.
    pub config: ConnectorConfig,
    /// The instance's id.
    pub id: InstanceId,
    /// The address reachable from outside the instance's network (`host:port` or `host`).
    pub external_addr: String,
    /// The address reachable inside the instance's network.
    pub internal_addr: String,
    /// When the credentials stop working; `None` if they do not expire.
    pub expires: Option<SystemTime>,
}

impl ConnectInfo {
    /// The address to dial: the external one when `use_external_addr` is set (or when the
    /// internal one is empty), otherwise the internal one.
    pub fn dial_addr(&self) -> &str {
        if (self.config.use_external_addr && !self.external_addr.is_empty())
            || self.internal_addr.is_empty()
        {
            &self.external_addr
        } else {
            &self.internal_addr
        }
    }

    /// Whether the credentials have expired (or will within `margin`) at `now`.
    pub fn expired(&self, now: SystemTime, margin: std::time::Duration) -> bool {
        match self.expires {
            Some(at) => now + margin >= at,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn info() -> ConnectInfo {
        ConnectInfo {
            config: ConnectorConfig::default(),
            id: "i-1".into(),
            external_addr: "203.0.113.7:22".into(),
            internal_addr: "10.0.0.7:22".into(),
            expires: None,
        }
    }

    #[test]
    fn dial_addr_prefers_internal_unless_told() {
        let mut i = info();
        assert_eq!(i.dial_addr(), "10.0.0.7:22");
        i.config.use_external_addr = true;
        assert_eq!(i.dial_addr(), "203.0.113.7:22");
        i.config.use_external_addr = false;
        i.internal_addr.clear();
        assert_eq!(i.dial_addr(), "203.0.113.7:22");
    }

    #[test]
    fn expiry() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut i = info();
        assert!(!i.expired(now, Duration::from_secs(5)));
        i.expires = Some(now + Duration::from_secs(60));
        assert!(!i.expired(now, Duration::from_secs(5)));
        assert!(i.expired(now + Duration::from_secs(56), Duration::from_secs(5)));
    }
}
