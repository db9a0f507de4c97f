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
