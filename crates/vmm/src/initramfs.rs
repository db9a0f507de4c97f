//! The guest's initramfs (pure): the agent as `/init`, the kernel modules it loads first
//! (with their dependencies, in order), and `/dev/console`, as a `newc` cpio archive the
//! kernel unpacks (uncompressed: nothing to decompress at boot).

use std::collections::{HashMap, HashSet};

/// The modules a guest needs from a Debian cloud kernel, which builds virtio as modules: the
/// transport of the machine type, the root disk, the agent's port (virtio-serial, or vsock
/// for VMMs without it), veth pairs for services, and the network card when the guest has
/// one. Each module costs boot time under TCG: only what is used.
pub fn wanted_modules(machine: crate::Machine, net: bool, vsock: bool) -> Vec<&'static str> {
    let mut m = match machine {
        crate::Machine::Microvm => vec!["virtio_mmio"],
        crate::Machine::Q35 => vec!["virtio_pci"],
    };
    m.extend(["virtio_blk", "veth"]);
    m.push(if vsock {
        "vmw_vsock_virtio_transport"
    } else {
        "virtio_console"
    });
    if net {
        m.push("virtio_net");
    }
    m
}

fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.trim_end_matches(".ko")
        .trim_end_matches(".ko.xz")
        .trim_end_matches(".ko.zst")
        .replace('-', "_")
}

/// The module files (paths relative to `/lib/modules/<release>`) to load for `wanted`, each
/// after its dependencies, from `modules.dep`. Modules the kernel has built in are not in the
/// file and are skipped; the names of those not found are returned too.
pub fn module_order(modules_dep: &str, wanted: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut deps: HashMap<String, (String, Vec<String>)> = HashMap::new();
    for line in modules_dep.lines() {
        let Some((file, rest)) = line.split_once(':') else {
            continue;
        };
        let file = file.trim();
        deps.insert(
            module_name(file),
            (
                file.to_string(),
                rest.split_whitespace().map(str::to_string).collect(),
            ),
        );
    }
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    let mut missing = Vec::new();
    fn visit(
        name: &str,
        deps: &HashMap<String, (String, Vec<String>)>,
        seen: &mut HashSet<String>,
        order: &mut Vec<String>,
    ) -> bool {
        let Some((file, needs)) = deps.get(name) else {
            return false;
        };
        if !seen.insert(name.to_string()) {
            return true;
        }
        // modules.dep lists every dependency, nearest first; load from the far end.
        for d in needs.iter().rev() {
            visit(&module_name(d), deps, seen, order);
        }
        order.push(file.clone());
        true
    }
    for w in wanted {
        let name = w.replace('-', "_");
        if !visit(&name, &deps, &mut seen, &mut order) {
            missing.push(name);
        }
    }
    (order, missing)
}

/// A `newc` cpio archive being written.
#[derive(Debug, Default)]
pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    /// An empty archive.
    pub fn new() -> Cpio {
        Cpio::default()
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.ino += 1;
        let namesize = name.len() + 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            namesize as u32,
            0,
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// A directory.
    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[], (0, 0));
    }

    /// A regular file with permission bits `perm`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | (perm & 0o7777), data, (0, 0));
    }

    /// A character device.
    pub fn char_device(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, 0o020_000 | (perm & 0o7777), &[], (major, minor));
    }

    /// The finished archive.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        // Whole 512-byte blocks, as cpio(1) writes them.
        while !self.out.len().is_multiple_of(512) {
            self.out.push(0);
        }
        self.out
    }
}

/// The guest's initramfs: `agent` as `/init`, `modules` (file name, contents, in load order)
/// under `/lib/modules` with `/modules.order` listing them.
pub fn guest_initramfs(agent: &[u8], modules: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut c = Cpio::new();
    for d in ["dev", "proc", "sys", "newroot", "lib", "lib/modules"] {
        c.dir(d);
    }
    c.char_device("dev/console", 0o600, 5, 1);
    c.file("init", 0o755, agent);
    let mut order = String::new();
    for (name, data) in modules {
        let base = name.rsplit('/').next().unwrap_or(name);
        let path = format!("lib/modules/{base}");
        c.file(&path, 0o644, data);
        order.push('/');
        order.push_str(&path);
        order.push('\n');
    }
    c.file("modules.order", 0o644, order.as_bytes());
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of Debian 12's cloud kernel (6.1.0-56-cloud-amd64) `modules.dep`.
    const DEP: &str = "\
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/veth.ko:
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
";

    #[test]
    fn dependencies_load_first_and_once() {
        let (order, missing) = module_order(
            DEP,
            &["virtio_mmio", "virtio_blk", "virtio-net", "veth", "ext4"],
        );
        let names: Vec<String> = order.iter().map(|f| module_name(f)).collect();
        assert_eq!(
            names,
            [
                "virtio_ring",
                "virtio",
                "virtio_mmio",
                "virtio_blk",
                "failover",
                "net_failover",
                "virtio_net",
                "veth"
            ]
        );
        assert_eq!(missing, ["ext4"], "built in (or absent): skipped, named");
    }

    #[test]
    fn the_archive_is_newc_that_cpio_reads() {
        let img = guest_initramfs(
            b"#!agent",
            &[("kernel/drivers/net/veth.ko".into(), b"\x7fELF".to_vec())],
        );
        assert_eq!(img.len() % 512, 0);
        assert!(img.starts_with(b"070701"));
        // GNU cpio (an independent reader), when present, lists what we wrote.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("initrd");
        std::fs::write(&path, &img).unwrap();
        let Ok(out) = std::process::Command::new("cpio")
            .args(["-t", "-v", "-F"])
            .arg(&path)
            .output()
        else {
            eprintln!("cpio(1) is not installed; only the structure was checked");
            return;
        };
        let list = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for name in [
            "init",
            "dev/console",
            "lib/modules/veth.ko",
            "modules.order",
        ] {
            assert!(list.contains(name), "{name} missing from:\n{list}");
        }
        assert!(
            list.contains("crw-------"),
            "the console is a device:\n{list}"
        );
        assert!(list.contains("-rwxr-xr-x"), "init is executable:\n{list}");
    }
}

/// What [`ensure`] made or found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The initramfs on the instance.
    pub path: String,
    /// Wanted modules the kernel has built in or lacks (not loaded).
    pub missing: Vec<String>,
}

/// The initramfs for `kernel`'s guests of this kind on the instance, under `dir`: found by a
/// name that hashes everything in it (the agent, the kernel release, the module list), or
/// made from the instance's modules and uploaded.
pub async fn ensure(
    host: &dyn flotilla_connect::Connector,
    dir: &str,
    kernel: &crate::kernel::Kernel,
    agent: &[u8],
    wanted: &[&str],
) -> Result<Prepared, crate::VmmError> {
    use sha2::Digest;
    let modules_dir = kernel.modules_dir();
    let dep = crate::host::read(host, &format!("{modules_dir}/modules.dep"))
        .await
        .map_err(|e| {
            crate::VmmError::Missing(format!(
                "the modules of kernel {} ({modules_dir}): {e}",
                kernel.release
            ))
        })?;
    let (order, missing) = module_order(&String::from_utf8_lossy(&dep), wanted);
    let mut h = sha2::Sha256::new();
    h.update(agent);
    h.update(kernel.release.as_bytes());
    for m in &order {
        h.update(m.as_bytes());
        h.update([0]);
    }
    let name = hex::encode(h.finalize());
    let path = format!("{dir}/initrd-{}.img", &name[..24]);
    let exists = crate::host::run(
        host,
        "looking for the initramfs",
        &format!(
            "[ -f {} ] && echo yes || true",
            flotilla_shell::quote(&path)
        ),
    )
    .await?;
    if exists.trim() != "yes" {
        let mut modules = Vec::new();
        for m in &order {
            let data = crate::host::read(host, &format!("{modules_dir}/{m}")).await?;
            modules.push((m.clone(), data));
        }
        crate::host::write(host, &path, guest_initramfs(agent, &modules)).await?;
    }
    Ok(Prepared { path, missing })
}
