//! `increase(1)` to sshd answering: how long a qemu instance takes to become usable under
//! TCG, with the test VM image (`scripts/build-vm-image.sh`).
//!
//! `cargo bench -p flotilla-provider-qemu --bench boot` (needs QEMU and the kernel; prints a
//! notice and exits otherwise). Reference: the docker provider's `increase(1)` to SSH answering
//! (349 ms, `cargo bench -p flotilla-connect --bench ssh_roundtrip`), and a QEMU microvm's
//! launch to first guest line under TCG (2.5–3.6 s, measured on this kind of machine).

use flotilla_fleet::{InstanceGroup, Settings, State};
use flotilla_provider_qemu::{QemuGroup, QemuSettings};
use flotilla_testkit::infra::{Infra, available};
use flotilla_testkit::vms::{VmGuard, vm_image};
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;

#[tokio::main]
async fn main() {
    if !available(Infra::Qemu) {
        eprintln!("boot bench: QEMU or a kernel is missing; nothing measured");
        return;
    }
    let image = vm_image();
    let dir = tempfile::tempdir().unwrap();
    let _guard = VmGuard::new(dir.path());
    let settings = QemuSettings::from_plugin_config(&serde_json::json!({
        "name": "bench", "disk": image.disk, "kernel": image.kernel, "initrd": image.initrd,
        "vm_dir": dir.path().join("vms"), "memory_mb": 384, "max_lifetime": 600,
        "restrict_network": true,
    }))
    .unwrap();
    let group = QemuGroup::new(settings);
    group.init(&Settings::default()).await.unwrap();
    let mut times = Vec::new();
    for round in 1..=ROUNDS {
        let start = Instant::now();
        assert_eq!(group.increase(1).await.unwrap(), 1);
        let spawned = start.elapsed();
        let id = loop {
            let listing = group.update().await.unwrap();
            if let Some(i) = listing.iter().find(|i| i.state == State::Running) {
                break i.id.clone();
            }
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "no VM answered: {listing:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let ready = start.elapsed();
        println!(
            "round {round}: QEMU answering on QMP after {:.2} s, sshd answering after {:.2} s",
            spawned.as_secs_f64(),
            ready.as_secs_f64()
        );
        times.push(ready);
        assert_eq!(group.decrease(&[id]).await.unwrap().len(), 1);
        while !group
            .update()
            .await
            .unwrap()
            .iter()
            .all(|i| i.state == State::Deleted)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    times.sort();
    println!(
        "increase(1) -> sshd answering, TCG, {ROUNDS} rounds: median {:.2} s (min {:.2} s, max {:.2} s); \
         reference: docker provider 0.35 s, microvm first guest line 2.5-3.6 s",
        times[ROUNDS / 2].as_secs_f64(),
        times[0].as_secs_f64(),
        times[ROUNDS - 1].as_secs_f64()
    );
}
