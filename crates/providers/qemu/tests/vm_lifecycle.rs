//! The qemu provider under TCG with the test VM image: a VM started by `increase`, reached
//! over SSH with the group's key, found again by a new provider over the same directory (a
//! flotilla restart), ended by `decrease` with nothing left behind: no process, no directory,
//! no disk overlay.

use flotilla_connect::ConnectorExt;
use flotilla_connect::ssh::SshConnector;
use flotilla_fleet::{FleetError, InstanceGroup, InstanceStatus, Settings, State};
use flotilla_provider_qemu::{QemuGroup, QemuSettings};
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::vms::{VmGuard, running_vms, vm_image};
use std::time::{Duration, Instant};

fn group(dir: &std::path::Path) -> QemuGroup {
    let image = vm_image();
    QemuGroup::new(
        QemuSettings::from_plugin_config(&serde_json::json!({
            "name": "lifecycle", "disk": image.disk, "kernel": image.kernel,
            "initrd": image.initrd, "vm_dir": dir.join("vms"), "key_file": dir.join("key"),
            "memory_mb": 384, "max_size": 1, "max_lifetime": 900, "restrict_network": true,
        }))
        .unwrap(),
    )
}

/// The logs of every VM under `dir`, for failure messages.
fn logs(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for vm in std::fs::read_dir(dir.join("vms"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for log in ["qemu.log", "console.log"] {
            let text = std::fs::read_to_string(vm.path().join(log)).unwrap_or_default();
            out.push_str(&format!("--- {}/{log}\n{text}\n", vm.path().display()));
        }
    }
    out
}

async fn wait_running(g: &QemuGroup, dir: &std::path::Path) -> String {
    let start = Instant::now();
    loop {
        let listing = g.update().await.unwrap();
        if let Some(i) = listing.iter().find(|i| i.state == State::Running) {
            return i.id.clone();
        }
        assert!(
            listing.iter().all(|i| i.state == State::Creating),
            "{listing:?}\n{}",
            logs(dir)
        );
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no VM answered: {listing:?}\n{}",
            logs(dir)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_qemu_vm_started_found_again_and_ended() {
    if !require(Infra::Qemu) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _guard = VmGuard::new(dir.path());
    let g = group(dir.path());
    let info = g.init(&Settings::default()).await.unwrap();
    assert_eq!(info.id, "qemu/lifecycle");
    assert!(info.capabilities.adopts_preexisting);
    assert!(info.capabilities.can_retire_instances());

    assert_eq!(g.increase(3).await.unwrap(), 1, "max_size bounds it");
    assert_eq!(running_vms(dir.path()).len(), 1);
    let id = wait_running(&g, dir.path()).await;
    g.heartbeat(&id).await.unwrap();

    let connector = SshConnector::new(g.connect_info(&id).await.unwrap());
    let out = connector
        .output("hostname; echo written > /root/mark; cat /root/mark; id -u")
        .await
        .unwrap();
    assert!(out.status.success(), "{}", out.stderr_str());
    assert_eq!(out.stdout_str(), format!("{id}\nwritten\n0\n"));

    // A restart: a new provider over the same directory and key finds the VM, running, and
    // still reaches it (the base disk was not written: the file is in the VM's overlay).
    let again = group(dir.path());
    again.init(&Settings::default()).await.unwrap();
    assert_eq!(
        again.update().await.unwrap(),
        vec![InstanceStatus::new(id.clone(), State::Running)]
    );
    let connector = SshConnector::new(again.connect_info(&id).await.unwrap());
    let out = connector.output("cat /root/mark").await.unwrap();
    assert_eq!(out.stdout_str(), "written\n");
    assert_eq!(again.increase(1).await.unwrap(), 0, "the group is full");

    // Ended: no process, no directory; listed as deleted once, then not at all.
    assert_eq!(
        again.decrease(std::slice::from_ref(&id)).await.unwrap(),
        std::slice::from_ref(&id)
    );
    assert!(running_vms(dir.path()).is_empty());
    assert!(!dir.path().join("vms").join(&id).exists());
    assert_eq!(
        again.update().await.unwrap(),
        vec![InstanceStatus::new(id.clone(), State::Deleted)]
    );
    assert!(again.update().await.unwrap().is_empty());
    assert!(matches!(
        again.heartbeat(&id).await,
        Err(FleetError::InstanceNotFound(_))
    ));
    // Deleting again counts as done; another group's (or nobody's) name is refused.
    assert_eq!(
        again.decrease(std::slice::from_ref(&id)).await.unwrap(),
        [id]
    );
}
