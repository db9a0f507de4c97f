//! What a saved VM is on the instance, and starting a VM from one: the machine it was taken
//! of, in a directory of its own, each disk continuing in a qcow2 layer of its own over the
//! snapshot's (so any number of VMs may start from one snapshot at once).

use super::MicrovmConfig;
use super::shipping::boot_file;
use super::snapshot::Scope;
use flotilla_connect::Connector;
use flotilla_job::EnvError;
use flotilla_vmm::qemu::Qemu;
use flotilla_vmm::{Disk, SnapshotFiles, Vm, VmSpec, Vmm, disk};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What a snapshot keeps besides the VM's state and disks (`meta.json`): the machine it must
/// be restored into, the guest's base environment, the image it came from, and where the
/// job's files were.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotMeta {
    /// The machine, as it was booted.
    pub(crate) spec: VmSpec,
    /// The guest's base environment (the image's `ENV`, `PATH`, `HOME`).
    pub(crate) env: Vec<(String, String)>,
    /// The job's image.
    pub(crate) image: String,
    /// The job's project directory in the VM (absent in snapshots of older versions).
    #[serde(default)]
    pub(crate) project_dir: Option<String>,
    /// The snapshot's own id, new at each save: tells copies of one key apart.
    #[serde(default)]
    pub(crate) id: Option<String>,
    /// The GitLab project whose job took it; only that project's jobs restore it.
    #[serde(default)]
    pub(crate) project: Option<String>,
    /// Whether that job's ref was protected; only jobs of refs alike restore it.
    #[serde(default)]
    pub(crate) protected: Option<bool>,
    /// When it was saved (the manager's clock, milliseconds since the epoch).
    #[serde(default)]
    pub(crate) saved_at_ms: Option<u64>,
}

/// Starts a VM from snapshot `key` of `config`'s state directory on the instance `host`
/// reaches, in `dir` (which exists and is empty). With `scope`, a snapshot taken out of it
/// (another project's, or on a ref protected otherwise) is refused.
pub(crate) async fn restore(
    host: Arc<dyn Connector>,
    qemu: &Qemu,
    config: &MicrovmConfig,
    instance: &str,
    key: &str,
    dir: &str,
    scope: Option<&Scope>,
) -> Result<(Box<dyn Vm>, SnapshotMeta), EnvError> {
    let snap = SnapshotFiles {
        dir: format!("{}/{key}", config.snapshots_dir()),
    };
    let meta = flotilla_vmm::host::read(&*host, &format!("{}/meta.json", snap.dir))
        .await
        .map_err(|_| EnvError::System(format!("no snapshot {key:?} on instance {instance}")))?;
    let meta: SnapshotMeta = serde_json::from_slice(&meta)
        .map_err(|e| EnvError::System(format!("the snapshot {key:?} is unreadable: {e}")))?;
    if let Some(scope) = scope
        && (meta.project.as_deref() != Some(scope.project.as_str())
            || meta.protected != Some(scope.protected))
    {
        return Err(EnvError::System(format!(
            "snapshot {key:?} on instance {instance} was taken by a job of another project, \
             on a ref protected otherwise, or by an older flotilla that did not record it; a \
             job restores only snapshots of its {scope}"
        )));
    }
    // Every disk (the job's root, then one per service) continues in a layer of its own.
    let mut disks = Vec::new();
    for i in 0..meta.spec.disks.len() {
        let top = format!("{dir}/disk-{i}.qcow2");
        disk::overlay(&*host, &top, &snap.disk(i), "qcow2", None)
            .await
            .map_err(|e| {
                EnvError::System(format!("making the VM's disk over the snapshot's: {e}"))
            })?;
        disks.push(Disk {
            path: top,
            format: "qcow2".into(),
            read_only: false,
        });
    }
    let mut spec = meta.spec.relocated(dir, disks);
    spec.kernel = boot_file(&snap.dir, &spec.kernel);
    spec.initrd = boot_file(&snap.dir, &spec.initrd);
    let vm = qemu
        .restore(host, spec, &snap)
        .await
        .map_err(|e| EnvError::System(format!("restoring snapshot {key:?}: {e}")))?;
    Ok((vm, meta))
}
