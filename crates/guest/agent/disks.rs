//! Disks named by what the VMM says of them rather than by their order.
//!
//! A microVM's virtio-mmio devices are not found by the kernel in the order QEMU was given
//! them, so `/dev/vdb` need not be the second disk. The host gives every disk a serial number
//! (`serial=vdN` on its virtio-blk device) and names disks `serial:vdN`; the kernel shows the
//! serial in `/sys/block/<dev>/serial`.

use std::time::{Duration, Instant};

/// The device node `spec` names: a path as given, or the disk whose serial is `NAME` for
/// `serial:NAME`. Waits up to `limit` for the device to appear (modules load, devices probe).
pub fn resolve(spec: &str, limit: Duration) -> std::io::Result<String> {
    let start = Instant::now();
    loop {
        let found = match spec.strip_prefix("serial:") {
            Some(serial) => by_serial(serial),
            None => std::path::Path::new(spec).exists().then(|| spec.to_string()),
        };
        if let Some(dev) = found.filter(|d| std::path::Path::new(d).exists()) {
            return Ok(dev);
        }
        if start.elapsed() >= limit {
            return Err(std::io::Error::other(format!("no disk {spec}")));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The device node of the block device whose serial is `serial`.
fn by_serial(serial: &str) -> Option<String> {
    for e in std::fs::read_dir("/sys/block").ok()?.flatten() {
        let s = std::fs::read_to_string(e.path().join("serial")).unwrap_or_default();
        if s.trim() == serial {
            return Some(format!("/dev/{}", e.file_name().to_string_lossy()));
        }
    }
    None
}
