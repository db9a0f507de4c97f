//! What every VM the levels boot needs from its instance: the kernel and an initramfs whose
//! `/init` is flotilla's agent, found or made once per instance and manager process.

use flotilla_connect::Connector;
use flotilla_guest::AGENT;
use flotilla_job::EnvError;
use flotilla_vmm::{Machine, initramfs, kernel};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The kernel and initramfs paths found on each instance, by instance id and machine: found
/// once per manager process (the initramfs is named by a hash of what is in it, so a path
/// found stays right).
pub(crate) type BootCache = Arc<Mutex<HashMap<(String, Machine), (String, String)>>>;

/// What to look for.
pub(crate) struct BootWanted<'a> {
    /// The kernel asked for (`None`: the newest under `/boot`, cloud kernels first).
    pub(crate) kernel: Option<&'a str>,
    /// Where initramfs images are cached on the instance.
    pub(crate) boot_dir: &'a str,
    /// The machine (its bus decides the modules).
    pub(crate) machine: Machine,
    /// Whether the guest has a network card.
    pub(crate) network: bool,
}

/// The kernel and initramfs (paths on the instance `host` reaches) for `wanted`.
pub(crate) async fn boot_pieces(
    host: &dyn Connector,
    instance: &str,
    wanted: &BootWanted<'_>,
    cache: &BootCache,
) -> Result<(String, String), EnvError> {
    let key = (instance.to_string(), wanted.machine);
    if let Some(found) = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned()
    {
        return Ok(found);
    }
    let k = kernel::find(host, wanted.kernel)
        .await
        .map_err(|e| EnvError::System(format!("finding the guest kernel: {e}")))?;
    let modules = initramfs::wanted_modules(wanted.machine, wanted.network, false);
    let initrd = initramfs::ensure(host, wanted.boot_dir, &k, AGENT, &modules)
        .await
        .map_err(|e| EnvError::System(format!("making the guest's initramfs: {e}")))?;
    let found = (k.path, initrd.path);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, found.clone());
    Ok(found)
}

/// QEMU's user-mode network: the guest's address, its gateway and DNS server.
const USER_NET: [&str; 3] = ["10.0.2.15/24", "10.0.2.2", "10.0.2.3"];

/// The agent's words on the kernel command line for a VM of `owner`'s slot `slot` whose root
/// is its first disk: its host name, the root, and with `network` the user-mode network's
/// addresses.
pub(crate) fn agent_words(owner: &str, slot: usize, network: bool) -> Vec<String> {
    let mut words = vec![
        format!("flotilla.hostname={owner}-slot-{slot}"),
        "flotilla.root=serial:vd0".to_string(),
        "flotilla.rootfstype=ext4".to_string(),
    ];
    if network {
        words.push(format!("flotilla.ip={}", USER_NET[0]));
        words.push(format!("flotilla.gw={}", USER_NET[1]));
        words.push(format!("flotilla.dns={}", USER_NET[2]));
    }
    words
}

/// The error for a VM (`what`) whose agent never answered, with the last lines of its
/// console (`<dir>/console.log` on the instance).
pub(crate) async fn not_up(
    host: &dyn Connector,
    dir: &str,
    what: &str,
    e: impl std::fmt::Display,
) -> EnvError {
    let console = flotilla_vmm::host::read(host, &format!("{dir}/console.log"))
        .await
        .unwrap_or_default();
    let console = String::from_utf8_lossy(&console);
    let tail: Vec<&str> = console.lines().rev().take(15).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    EnvError::System(format!(
        "the {what} did not come up: {e}; its console ends with:\n{}",
        tail.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_found_by_serial_and_the_network_only_when_asked() {
        let w = agent_words("r1", 2, false);
        assert_eq!(
            w,
            [
                "flotilla.hostname=r1-slot-2",
                "flotilla.root=serial:vd0",
                "flotilla.rootfstype=ext4"
            ]
        );
        assert!(agent_words("r1", 2, true).contains(&"flotilla.gw=10.0.2.2".to_string()));
    }
}
