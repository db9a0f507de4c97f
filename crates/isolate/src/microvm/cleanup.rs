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
    let names = vm_dirs(connector, instance_id, vms).await?;
    let leftovers: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with(prefix))
        .collect();
    kill_all(connector, instance_id, vms, &leftovers, qemu).await
}

/// As [`sweep`], for VMs named per process (`<shared>.pid<N>-slot-*`): this process's own
/// (`<shared>.pid<me>-slot-`) and those of processes no longer running on the instance.
pub(crate) async fn sweep_per_process(
    connector: &dyn Connector,
    instance_id: &str,
    vms: &str,
    shared: &str,
    qemu: &Qemu,
) -> Result<usize, IsolateError> {
    let me = std::process::id();
    let names = vm_dirs(connector, instance_id, vms).await?;
    let owned: Vec<(&str, u32)> = names
        .iter()
        .filter_map(|name| Some((name.as_str(), owner_pid(name, shared)?)))
        .collect();
    let mut others: Vec<u32> = owned
        .iter()
        .map(|(_, pid)| *pid)
        .filter(|p| *p != me)
        .collect();
    others.sort_unstable();
    others.dedup();
    let gone = gone_processes(connector, instance_id, &others).await?;
    let leftovers: Vec<&str> = owned
        .iter()
        .filter(|(_, pid)| *pid == me || gone.contains(pid))
        .map(|(name, _)| *name)
        .collect();
    kill_all(connector, instance_id, vms, &leftovers, qemu).await
}

/// The process id in a per-process VM directory name `<shared>.pid<N>-slot-<M>`.
fn owner_pid(name: &str, shared: &str) -> Option<u32> {
    let rest = name.strip_prefix(shared)?.strip_prefix(".pid")?;
    let (pid, _) = rest.split_once("-slot-")?;
    pid.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| pid.parse().ok())?
}

/// The directory names under `vms` on the instance.
async fn vm_dirs(
    connector: &dyn Connector,
    instance_id: &str,
    vms: &str,
) -> Result<Vec<String>, IsolateError> {
    let out = connector
        .output(&format!("ls -1 {} 2>/dev/null || true", quote(vms)))
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance_id.to_string(),
            source,
        })?;
    Ok(out
        .stdout_str()
        .lines()
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .map(str::to_string)
        .collect())
}

/// Those of `pids` that no longer run on the instance (`/proc/<pid>` is gone), asked in one
/// command.
async fn gone_processes(
    connector: &dyn Connector,
    instance_id: &str,
    pids: &[u32],
) -> Result<Vec<u32>, IsolateError> {
    if pids.is_empty() {
        return Ok(Vec::new());
    }
    let list = pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let out = connector
        .output(&format!(
            "for p in {list}; do [ -d /proc/$p ] || echo $p; done"
        ))
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance_id.to_string(),
            source,
        })?;
    Ok(out
        .stdout_str()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// Kills the VM of each of `names` under `vms` and removes its directory.
async fn kill_all(
    connector: &dyn Connector,
    instance_id: &str,
    vms: &str,
    names: &[&str],
    qemu: &Qemu,
) -> Result<usize, IsolateError> {
    let mut killed = 0;
    for name in names {
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

#[cfg(test)]
mod owner_tests {
    use super::owner_pid;

    #[test]
    fn per_process_names_carry_their_process() {
        assert_eq!(
            owner_pid("flotilla-ci.pid42-slot-0", "flotilla-ci"),
            Some(42)
        );
        assert_eq!(owner_pid("flotilla-ci.2024-slot-0", "flotilla-ci"), None);
        assert_eq!(owner_pid("flotilla-ci-slot-0", "flotilla-ci"), None);
        assert_eq!(owner_pid("flotilla-ci.pid4x-slot-0", "flotilla-ci"), None);
    }
}
