//! The agent's own operations ([`crate::protocol::Target::Builtin`]): things a job image
//! may have no program for.
//!
//! - `ping`: answers `pong` (a round trip).
//! - `sync`: flushes file systems.
//! - `service-netns NAME N`: a network namespace for service `N` linked to the VM (see
//!   [`crate::net::service_namespace`]); prints the service's address.
//! - `mount DEVICE DIR FSTYPE [ro]`: mounts a file system, making `DIR`; `DEVICE` may be
//!   `serial:NAME` (see [`crate::disks`]).
//! - `poweroff`: flushes and powers the VM off.

use crate::{disks, net, sys};

/// Runs a builtin: its exit code and its output (stdout on success, stderr on failure).
pub fn run(args: &[String]) -> (i32, String) {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r: std::io::Result<String> = match a.as_slice() {
        ["ping"] => Ok("pong\n".into()),
        ["sync"] => {
            sys::sync_all();
            Ok(String::new())
        }
        ["service-netns", name, n] => match n.parse::<u8>() {
            Ok(n) => net::service_namespace(name, n).map(|ip| format!("{ip}\n")),
            Err(_) => Err(std::io::Error::other(format!("bad service number {n}"))),
        },
        ["mount", dev, dir, fstype, rest @ ..] => {
            let flags = if rest.contains(&"ro") {
                sys::MS_RDONLY
            } else {
                0
            };
            let dev = if dev.starts_with("serial:") {
                disks::resolve(dev, std::time::Duration::from_secs(5))
            } else {
                Ok(dev.to_string())
            };
            dev.and_then(|dev| {
                std::fs::create_dir_all(dir)?;
                sys::mount_fs(&dev, dir, fstype, flags, "")
            })
                .map(|()| String::new())
        }
        ["poweroff"] => {
            sys::power_off();
            Ok(String::new())
        }
        _ => Err(std::io::Error::other(format!("unknown builtin {a:?}"))),
    };
    match r {
        Ok(out) => (0, out),
        Err(e) => (1, format!("{e}\n")),
    }
}
