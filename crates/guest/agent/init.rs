//! The agent as the guest's first process: from the initramfs to the job's root file system,
//! then serving the host.
//!
//! The kernel command line says what to do (`flotilla.*` words):
//! - `flotilla.bare=1`: print one line and power off (the bare boot the benchmark compares
//!   with);
//! - `flotilla.root=/dev/vda` (default) or `serial:NAME` (the disk of that serial, see
//!   [`crate::disks`]), `flotilla.rootfstype=ext4`: the root file system;
//! - `flotilla.vsock=PORT`: serve on vsock instead of the virtio-serial port
//!   [`crate::protocol::PORT_NAME`];
//! - `flotilla.ip=A.B.C.D/N`, `flotilla.gw=...`, `flotilla.dns=...`: `eth0`'s address;
//! - `flotilla.hostname=NAME`.
//!
//! Modules listed in `/modules.order` of the initramfs are loaded first (the cloud kernel
//! builds virtio-mmio, virtio-blk and virtio-console as modules).

use crate::serve::{self, ListenLink, PortLink};
use crate::{disks, net, reaper, sys};
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "flotilla-agent: {line}");
    let _ = out.flush();
}

/// Stops the machine after a failure the host must see (on the console).
fn fatal(line: &str) -> ! {
    say(&format!("fatal: {line}"));
    sys::power_off();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn cmdline() -> HashMap<String, String> {
    std::fs::read_to_string("/proc/cmdline")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("flotilla."))
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (w.to_string(), "1".to_string()),
        })
        .collect()
}

fn mount_or_die(src: &str, target: &str, fstype: &str, flags: std::os::raw::c_ulong, data: &str) {
    let _ = std::fs::create_dir_all(target);
    if let Err(e) = sys::mount_fs(src, target, fstype, flags, data) {
        fatal(&format!("mounting {fstype} at {target}: {e}"));
    }
}

fn load_modules() {
    let Ok(order) = std::fs::read_to_string("/modules.order") else {
        return;
    };
    for m in order.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match std::fs::File::open(m) {
            Ok(f) => {
                if let Err(e) = sys::load_module(f.as_raw_fd())
                    && e.raw_os_error() != Some(17)
                {
                    say(&format!("loading {m}: {e}"));
                }
            }
            Err(e) => say(&format!("module {m}: {e}")),
        }
    }
}

fn wait_for(path: &str, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if std::path::Path::new(path).exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// The device node of the virtio-serial port named `name`.
fn port_device(name: &str) -> Option<String> {
    let entries = std::fs::read_dir("/sys/class/virtio-ports").ok()?;
    for e in entries.flatten() {
        let n = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
        if n.trim() == name {
            return Some(format!("/dev/{}", e.file_name().to_string_lossy()));
        }
    }
    None
}

/// Moves into the mounted root at `/newroot` as `switch_root` does.
fn switch_root() {
    for d in ["dev", "proc", "sys"] {
        let target = format!("/newroot/{d}");
        let _ = std::fs::create_dir_all(&target);
        if let Err(e) = sys::mount_fs(&format!("/{d}"), &target, "", sys::MS_MOVE, "") {
            fatal(&format!("moving /{d}: {e}"));
        }
    }
    if let Err(e) = std::env::set_current_dir("/newroot")
        .and_then(|()| sys::mount_fs(".", "/", "", sys::MS_MOVE, ""))
        .and_then(|()| sys::change_root("."))
    {
        fatal(&format!("switching to the root file system: {e}"));
    }
}

fn extra_mounts() {
    let nosuid_nodev = sys::MS_NOSUID | sys::MS_NODEV;
    let _ = std::fs::create_dir_all("/dev/pts");
    let _ = sys::mount_fs(
        "devpts",
        "/dev/pts",
        "devpts",
        sys::MS_NOSUID | sys::MS_NOEXEC,
        "gid=5,mode=620,ptmxmode=666",
    );
    let _ = std::fs::create_dir_all("/dev/shm");
    let _ = sys::mount_fs("shm", "/dev/shm", "tmpfs", nosuid_nodev, "mode=1777");
    let _ = std::fs::create_dir_all("/run");
    let _ = sys::mount_fs("run", "/run", "tmpfs", nosuid_nodev, "mode=755");
    let _ = std::fs::create_dir_all("/sys/fs/cgroup");
    let _ = sys::mount_fs("cgroup2", "/sys/fs/cgroup", "cgroup2", nosuid_nodev, "");
    if !std::path::Path::new("/tmp").exists() {
        let _ = std::fs::create_dir("/tmp");
    }
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions("/tmp", std::fs::Permissions::from_mode(0o1777));
    // /dev/ptmx is where openpty looks; devtmpfs's node works too, the devpts one is
    // the instance mounted above.
    if !std::path::Path::new("/dev/ptmx").exists() {
        let _ = std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx");
    }
}

fn network(args: &HashMap<String, String>) {
    if let Err(e) = net::up("lo") {
        say(&format!("loopback: {e}"));
    }
    let Some(ip) = args.get("ip") else {
        return;
    };
    let r = net::address("eth0", ip).and_then(|()| net::up("eth0"));
    if let Err(e) = r {
        say(&format!("eth0: {e}"));
        return;
    }
    if let Some(gw) = args.get("gw")
        && let Err(e) = net::default_route(gw)
    {
        say(&format!("default route: {e}"));
    }
    if let Some(dns) = args.get("dns")
        && std::path::Path::new("/etc").is_dir()
    {
        let _ = std::fs::remove_file("/etc/resolv.conf");
        let _ = std::fs::write("/etc/resolv.conf", format!("nameserver {dns}\n"));
    }
}

/// PID 1.
pub fn run() -> ! {
    reaper::start();
    for d in ["/dev", "/proc", "/sys"] {
        let _ = std::fs::create_dir_all(d);
    }
    let _ = sys::mount_fs("devtmpfs", "/dev", "devtmpfs", sys::MS_NOSUID, "mode=0755");
    mount_or_die("proc", "/proc", "proc", sys::MS_NOSUID | sys::MS_NODEV, "");
    let args = cmdline();
    if args.contains_key("bare") {
        say("bare boot");
        sys::power_off();
    }
    mount_or_die("sysfs", "/sys", "sysfs", sys::MS_NOSUID | sys::MS_NODEV, "");
    load_modules();
    let root = args
        .get("root")
        .cloned()
        .unwrap_or_else(|| "/dev/vda".into());
    let fstype = args
        .get("rootfstype")
        .cloned()
        .unwrap_or_else(|| "ext4".into());
    let root = match disks::resolve(&root, Duration::from_secs(10)) {
        Ok(dev) => dev,
        Err(e) => fatal(&format!("the root device: {e}")),
    };
    mount_or_die(&root, "/newroot", &fstype, 0, "");
    switch_root();
    extra_mounts();
    if let Some(h) = args.get("hostname") {
        let _ = sys::set_hostname(h);
    }
    network(&args);
    let link: Box<dyn serve::Link> = match args.get("vsock").and_then(|p| p.parse::<u32>().ok()) {
        Some(port) => match ListenLink::vsock(port) {
            Ok(l) => Box::new(l),
            Err(e) => fatal(&format!("listening on vsock port {port}: {e}")),
        },
        None => {
            let name = crate::protocol::PORT_NAME;
            let start = Instant::now();
            let dev = loop {
                if let Some(d) = port_device(name) {
                    break d;
                }
                if start.elapsed() > Duration::from_secs(10) {
                    fatal(&format!("no virtio-serial port named {name}"));
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            if !wait_for(&dev, Duration::from_secs(5)) {
                fatal(&format!("no device node {dev}"));
            }
            match PortLink::open(&dev) {
                Ok(l) => Box::new(l),
                Err(e) => fatal(&format!("opening {dev}: {e}")),
            }
        }
    };
    say("ready");
    serve::serve(link);
    fatal("the host link ended");
}
