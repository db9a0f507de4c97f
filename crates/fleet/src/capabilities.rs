//! What a provider's instances are, and how flotilla may use them.

use serde::{Deserialize, Serialize};

/// How flotilla reaches a provider's instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectorKind {
    /// Commands run as processes of the host flotilla runs on: the instance *is* that host.
    Local,
    /// Over the network, with the protocol each instance's [`crate::ConnectInfo`] names
    /// (SSH; WinRM is named but not spoken yet).
    #[default]
    Protocol,
}

/// The facts about a provider that callers would otherwise guess from its name: whether its
/// one instance is this host, whether instances found in the group may be adopted, and how
/// instances are reached. A provider states them in its [`crate::ProviderInfo`]; the binary
/// builds the fleet from them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    /// The group is the host flotilla runs on, as its only instance: jobs' builds live in
    /// flotilla's own state directory, and a runner that sets no autoscaler gets one slot per
    /// core.
    pub single_host: bool,
    /// Instances the group holds that flotilla has no record of (it did not create them, or
    /// its state was lost) may be adopted and used. Otherwise they are someone else's and
    /// are left alone.
    pub adopts_preexisting: bool,
    /// How instances are reached.
    pub connector: ConnectorKind,
}

impl Capabilities {
    /// This host as the group's only instance, reached with local processes.
    pub fn this_host() -> Capabilities {
        Capabilities {
            single_host: true,
            adopts_preexisting: true,
            connector: ConnectorKind::Local,
        }
    }

    /// Machines reached over the network with the protocol their connection details name.
    pub fn remote() -> Capabilities {
        Capabilities::default()
    }

    /// Whether a new or adopted instance must be seen to answer before its slots are
    /// offered: a machine across the network may be running but not yet accept connections.
    pub fn needs_reachability_check(&self) -> bool {
        self.connector != ConnectorKind::Local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_remote_instances_need_a_reachability_check() {
        assert!(!Capabilities::this_host().needs_reachability_check());
        assert!(Capabilities::remote().needs_reachability_check());
    }

    #[test]
    fn an_unstated_capability_means_a_remote_group() {
        let c: Capabilities = serde_json::from_str("{}").unwrap();
        assert_eq!(c, Capabilities::remote());
        assert!(!c.single_host && !c.adopts_preexisting);
    }
}
