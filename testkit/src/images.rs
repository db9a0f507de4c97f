//! The offline test images, built (or found) by `scripts/build-images.sh`.
//!
//! Each helper runs the script once per process and caches the image reference it prints
//! (`local/flotilla-instance:<recipe hash>`). The script reuses an image whose recipe did not
//! change, so calling these is cheap after the first build on a machine. Failures panic with the
//! script's stderr: these helpers are for tests only.
//!
//! ```no_run
//! let image = flotilla_testkit::images::instance_image();
//! assert!(image.starts_with("local/flotilla-instance:"));
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The "VM-like" instance image: Debian with sshd (root login by key), dockerd and git. Its
/// init writes `$FLOTILLA_AUTHORIZED_KEY` to root's `authorized_keys`, makes a fresh host key per
/// container and starts an inner dockerd when `FLOTILLA_INNER_DOCKERD=1`.
pub fn instance_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| build("instance")).clone()
}

/// The tiny busybox job image (`/bin/sh` and the busybox applets, nothing else).
pub fn busybox_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| build("busybox")).clone()
}

/// The path of `scripts/build-images.sh` in this workspace.
pub fn build_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("scripts")
        .join("build-images.sh")
}

/// Runs the build script for `what` and returns the reference it printed.
fn build(what: &str) -> String {
    let script = build_script();
    let out = Command::new("bash")
        .arg(&script)
        .arg(what)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {what} failed ({}):\n{stderr}",
        script.display(),
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reference = stdout.lines().rev().find(|l| !l.trim().is_empty());
    match reference {
        Some(r) => r.trim().to_string(),
        None => panic!(
            "{} {what} printed no image reference; stderr:\n{stderr}",
            script.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::{Infra, require};

    #[test]
    fn script_is_found_relative_to_the_crate() {
        assert!(build_script().is_file(), "{}", build_script().display());
    }

    #[test]
    fn infra_images_are_built_once_and_cached() {
        if !require(Infra::Docker) {
            return;
        }
        let busybox = busybox_image();
        assert!(busybox.starts_with("local/flotilla-busybox:"), "{busybox}");
        assert_eq!(busybox_image(), busybox, "cached within the process");
        let instance = instance_image();
        assert!(
            instance.starts_with("local/flotilla-instance:"),
            "{instance}"
        );
        let inspect = Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", &instance])
            .output()
            .unwrap();
        assert!(inspect.status.success(), "the image exists in the engine");
    }
}
