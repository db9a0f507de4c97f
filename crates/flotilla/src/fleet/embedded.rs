//! The runner `flotilla exec` uses without `--config`: this host, shell isolation with a slot
//! per core, and the `microvm` level too when this host can boot microVMs.

use crate::config::{
    AutoscalerConfig, IsolationLevel, IsolationLevels, MicrovmConfig, RunnerConfig,
};
use std::path::Path;

/// What this host has for the `microvm` level: QEMU, a kernel under `/boot`, `qemu-img`,
/// `mke2fs` and Docker (which holds the job images the VMs boot from). The names of what
/// is missing; empty when the level can be offered.
pub fn microvm_missing() -> Vec<&'static str> {
    let mut missing: Vec<&'static str> = ["qemu-system-x86_64", "qemu-img", "mke2fs", "docker"]
        .into_iter()
        .filter(|p| !on_path(p))
        .collect();
    let kernel = std::fs::read_dir("/boot")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"));
    if !kernel {
        missing.push("a kernel (/boot/vmlinuz-*)");
    }
    missing
}

/// Whether `program` is an executable file in a directory of `PATH` (or `/sbin`, where
/// `mke2fs` lives on Debian).
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin"])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .any(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The embedded default runner: [`RunnerConfig::embedded_default`] (shell isolation, a slot
/// per core), offering `microvm` as a second level when `microvm` is true. Jobs choose it
/// with `FLOTILLA_ISOLATION: microvm`.
pub fn runner(microvm: bool) -> RunnerConfig {
    let mut runner = RunnerConfig::embedded_default();
    if microvm {
        let levels = IsolationLevels::new(vec![IsolationLevel::Shell, IsolationLevel::Microvm]);
        runner.autoscaler = Some(AutoscalerConfig {
            isolation: levels,
            // As without an autoscaler: one slot per core of this host.
            capacity_per_instance: u32::try_from(super::default_slots()).unwrap_or(1),
            ..AutoscalerConfig::default()
        });
        runner.microvm = Some(MicrovmConfig {
            // Root keeps the level's files where a runner would; anyone else in their cache.
            state_dir: (!is_root()).then(user_state_dir).flatten(),
            // Off: a /dev/kvm that opens may still not run guests (nested virtualisation
            // off), and TCG works everywhere; a configuration turns KVM on.
            // The only instance is this host: its snapshots need no carrying.
            snapshot_store: Some(false),
            ..MicrovmConfig::default()
        });
    }
    runner
}

/// Whether this process runs as root (`/proc/self` belongs to the effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `$XDG_CACHE_HOME/flotilla/microvm`, else `~/.cache/flotilla/microvm`.
fn user_state_dir() -> Option<String> {
    let cache = std::env::var("XDG_CACHE_HOME")
        .ok()
        .filter(|d| d.starts_with('/'))
        .or_else(|| {
            std::env::var("HOME")
                .ok()
                .filter(|d| d.starts_with('/'))
                .map(|h| format!("{h}/.cache"))
        })?;
    Some(format!("{cache}/flotilla/microvm"))
}

/// The embedded default runner for this host: with `microvm` when [`microvm_missing`] finds
/// nothing missing.
pub fn runner_for_this_host() -> RunnerConfig {
    let missing = microvm_missing();
    if !missing.is_empty() {
        tracing::debug!(
            missing = missing.join(", "),
            "the embedded default offers no microvm level"
        );
    }
    runner(missing.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microvm_is_a_second_level_with_a_slot_per_core() {
        let plain = runner(false);
        assert_eq!(plain.isolation_levels().all(), [IsolationLevel::Shell]);
        let vm = runner(true);
        assert_eq!(
            vm.isolation_levels().all(),
            [IsolationLevel::Shell, IsolationLevel::Microvm]
        );
        assert_eq!(vm.isolation(), IsolationLevel::Shell);
        let a = vm.autoscaler.unwrap();
        assert_eq!(
            a.capacity_per_instance as usize,
            crate::fleet::default_slots()
        );
        assert_eq!(a.plugin, AutoscalerConfig::default().plugin);
    }

    #[test]
    fn programs_are_found_on_the_path() {
        assert!(on_path("sh"));
        assert!(!on_path("no-such-program-flotilla"));
    }
}
