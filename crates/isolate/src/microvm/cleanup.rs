//! What the VM levels (`microvm`, `vm`) leave behind: VMs and their directories, found by the
//! slot directories of this runner's owner name under the level's state directory.

use crate::IsolateError;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_vmm::Vmm;
use flotilla_vmm::qemu::Qemu;

/// Kills every VM whose directory under `vms` starts with `prefix` (this runner's slots) on
/// the instance and removes its directory (what a manager that died left); returns how many
/// VMs were still running.
pub(crate) async fn sweep(
    connector: &dyn Connector,
    instance_id: &str,
    vms: &str,
    prefix: &str,
    qemu: &Qemu,
) -> Result<usize, IsolateError> {
    let out = connector
        .output(&format!("ls -1 {} 2>/dev/null || true", quote(vms)))
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance_id.to_string(),
            source,
        })?;
    let mut killed = 0;
    for name in out
        .stdout_str()
        .lines()
        .filter(|n| n.starts_with(prefix) && !n.contains('/'))
    {
        let dir = format!("{vms}/{name}");
        if qemu
            .kill_dir(connector, &dir)
            .await
            .map_err(|e| IsolateError::Cleanup {
                instance: instance_id.to_string(),
                message: format!("killing the VM in {dir}: {e}"),
            })?
        {
            killed += 1;
        }
        remove_dir(connector, instance_id, &dir).await?;
    }
    if killed > 0 {
        tracing::warn!(
            instance = instance_id,
            vms = killed,
            "killed VMs an earlier manager left"
        );
    }
    Ok(killed)
}

/// The ids of the processes that named VMs `<shared>.pid<pid>-slot-*` under `vms` on the
/// instance and are no longer running there (`/proc/<pid>` is gone).
pub(crate) async fn gone_processes(
    connector: &dyn Connector,
    instance_id: &str,
    vms: &str,
    shared: &str,
) -> Result<Vec<u32>, IsolateError> {
    let out = connector
        .output(&format!("ls -1 {} 2>/dev/null || true", quote(vms)))
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance_id.to_string(),
            source,
        })?;
    let mut pids: Vec<u32> = out
        .stdout_str()
        .lines()
        .filter_map(|name| {
            let rest = name.strip_prefix(shared)?.strip_prefix(".pid")?;
            let (pid, _) = rest.split_once("-slot-")?;
            pid.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| pid.parse().ok())?
        })
        .filter(|pid| *pid != std::process::id())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let mut gone = Vec::new();
    for pid in pids {
        let alive = connector
            .output(&format!("test -d /proc/{pid}"))
            .await
            .map_err(|source| IsolateError::Connect {
                instance: instance_id.to_string(),
                source,
            })?;
        if !alive.status.success() {
            gone.push(pid);
        }
    }
    Ok(gone)
}

/// Removes `dir` on the instance.
pub(crate) async fn remove_dir(
    connector: &dyn Connector,
    instance: &str,
    dir: &str,
) -> Result<(), IsolateError> {
    let out = connector
        .output(&format!("rm -rf {}", quote(dir)))
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(IsolateError::Cleanup {
            instance: instance.to_string(),
            message: format!("removing {dir}: {}", out.stderr_str().trim()),
        });
    }
    Ok(())
}
