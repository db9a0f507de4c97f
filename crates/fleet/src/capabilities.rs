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
    /// Commands and ports through the Kubernetes API server (exec and port-forward
    /// subresources): the `kubernetes` provider's pods.
    KubeExec,
}

/// The facts about a provider that callers would otherwise guess from its name: whether its
/// one instance is this host, whether instances found in the group may be adopted, how
/// instances are reached, whether they are lent from a fixed pool, and how many slots one
/// may run. A provider states them in its [`crate::ProviderInfo`]; the binary
/// builds the fleet from them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    /// The group is the host flotilla runs on, as its only instance: jobs' builds live in
    /// flotilla's own state directory, and a runner that sets no autoscaler gets as many slots
    /// as its `limit`, else `concurrent`, allows (one per core under `flotilla exec`).
    pub single_host: bool,
    /// Instances the group holds that flotilla has no record of (it did not create them, or
    /// its state was lost) may be adopted and used. Otherwise they are someone else's and
    /// are left alone.
    pub adopts_preexisting: bool,
    /// How instances are reached.
    pub connector: ConnectorKind,
    /// The group lends machines from a fixed pool instead of making them: `increase` takes
    /// machines out of the pool and `decrease` gives them back, and none is ever created or
    /// destroyed. An instance of such a group cannot be retired and replaced by a fresh one,
    /// so `max_use_count` is refused for it.
    pub fixed_pool: bool,
    /// The most job slots one instance may run, when the provider knows a limit (the
    /// smallest per-host cap of a static pool). A fleet runs at most this many slots on
    /// each instance, whatever `capacity_per_instance` says.
    pub max_slots_per_instance: Option<usize>,
}

impl Capabilities {
    /// This host as the group's only instance, reached with local processes.
    pub fn this_host() -> Capabilities {
        Capabilities {
            single_host: true,
            adopts_preexisting: true,
            connector: ConnectorKind::Local,
            ..Capabilities::default()
        }
    }

    /// Machines reached over the network with the protocol their connection details name.
    pub fn remote() -> Capabilities {
        Capabilities::default()
    }

    /// Whether `max_use_count` (retire an instance after that many jobs) can be honoured:
    /// only where a retired instance is really gone and replaced (not this host, not a
    /// machine lent from a fixed pool).
    pub fn can_retire_instances(&self) -> bool {
        !self.fixed_pool && !self.single_host
    }

    /// Whether `decrease` can take an instance away at all: not where the one instance is
    /// the host flotilla runs on. (A fixed pool's machines are given back, which is a
    /// removal from the group.)
    pub fn can_delete_instances(&self) -> bool {
        !self.single_host
    }

    /// The slots each instance runs when the fleet asks for `capacity_per_instance`: never
    /// more than the provider's per-instance limit, and at least one.
    pub fn slots_per_instance(&self, capacity_per_instance: usize) -> usize {
        let wanted = capacity_per_instance.max(1);
        match self.max_slots_per_instance {
            Some(limit) => wanted.min(limit.max(1)),
            None => wanted,
        }
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
        assert!(c.can_retire_instances());
        assert_eq!(c.max_slots_per_instance, None);
    }

    #[test]
    fn only_replaceable_instances_can_be_retired() {
        let pool = Capabilities {
            fixed_pool: true,
            ..Capabilities::remote()
        };
        assert!(!pool.can_retire_instances());
        assert!(pool.can_delete_instances(), "a pool's hosts are given back");
        // This host can be neither replaced nor taken away.
        assert!(!Capabilities::this_host().can_retire_instances());
        assert!(!Capabilities::this_host().can_delete_instances());
        assert!(Capabilities::remote().can_retire_instances());
        assert!(Capabilities::remote().can_delete_instances());
    }

    #[test]
    fn the_per_instance_limit_caps_the_slots() {
        let mut c = Capabilities::remote();
        assert_eq!(c.slots_per_instance(4), 4);
        assert_eq!(c.slots_per_instance(0), 1);
        c.max_slots_per_instance = Some(2);
        assert_eq!(c.slots_per_instance(4), 2);
        assert_eq!(c.slots_per_instance(1), 1);
        c.max_slots_per_instance = Some(0);
        assert_eq!(c.slots_per_instance(4), 1, "never below one slot");
    }
}
