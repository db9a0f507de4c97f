//! The runner `flotilla exec` uses without `--config`: this host, shell isolation with a slot
//! per core, the `docker` level on this host's own Docker engine for jobs that name an
//! `image:` (images from the engine, never pulled), and the `microvm` level when this host
//! can boot microVMs. Each level found at start; [`HostLevels::describe`] says why a level
//! is missing.

use crate::config::{
    AutoscalerConfig, DockerSettings, IsolationLevel, IsolationLevels, MicrovmSettings, PullPolicy,
    RunnerConfig,
};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What this host offers `flotilla exec` beyond the shell: for each level, `Ok` or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLevels {
    /// The `cgroup` level: root, and cgroups this process can make.
    pub cgroup: Result<(), String>,
    /// The `docker` level: this host's Docker engine answering.
    pub docker: Result<(), String>,
    /// The `microvm` level: QEMU, `qemu-img`, `mke2fs`, a kernel and Docker.
    pub microvm: Result<(), String>,
}

impl HostLevels {
    /// The levels found on this host now.
    pub fn probe() -> HostLevels {
        let missing = microvm_missing();
        let cgroup = cgroups_writable();
        if cgroup.is_ok() {
            // What runs that ended without cleaning up (killed) left.
            remove_exec_cgroups(None);
        }
        HostLevels {
            cgroup,
            docker: docker_answers(),
            microvm: if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("missing {}", missing.join(", ")))
            },
        }
    }

    /// One line for the terminal: the levels offered, and each missing one with its reason.
    pub fn describe(&self) -> String {
        let mut offered = vec!["shell".to_string()];
        let mut missing = Vec::new();
        for (name, found, what) in [
            ("cgroup", &self.cgroup, ""),
            ("docker", &self.docker, " (jobs with an image:)"),
            ("microvm", &self.microvm, ""),
        ] {
            match found {
                Ok(()) => offered.push(format!("{name}{what}")),
                Err(why) => missing.push(format!("{name}: {why}")),
            }
        }
        // The vm level boots a prepared disk image, which only a configuration names.
        missing.push("vm: it needs a prepared disk image ([runners.vm] in a --config)".into());
        format!(
            "this host offers {}; not {}",
            offered.join(", "),
            missing.join("; ")
        )
    }
}

/// Whether this process may make cgroups: root, and a directory made and removed in each
/// hierarchy the level uses (cgroup v2's root, or v1's `cpu`, `memory` and `pids`).
fn cgroups_writable() -> Result<(), String> {
    if !is_root() {
        return Err("not root".into());
    }
    let probe = format!("flotilla-probe-{}", std::process::id());
    let dirs: Vec<std::path::PathBuf> = cgroup_roots().iter().map(|r| r.join(&probe)).collect();
    for dir in &dirs {
        let made = std::fs::create_dir(dir);
        let _ = std::fs::remove_dir(dir);
        if let Err(e) = made {
            return Err(format!("cannot make a cgroup in {}: {e}", dir.display()));
        }
    }
    Ok(())
}

/// The cgroup hierarchies the level uses: cgroup v2's root, or v1's `cpu`, `memory`, `pids`.
fn cgroup_roots() -> Vec<std::path::PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        vec![root.to_path_buf()]
    } else {
        ["cpu", "memory", "pids"]
            .iter()
            .map(|c| root.join(c))
            .collect()
    }
}

/// Removes the slot cgroups of exec runs that are over: this run's own when `this_run` names
/// it, and those of runs whose process is gone. A cgroup that still holds a process is left
/// (`rmdir` refuses it).
pub fn remove_exec_cgroups(this_run: Option<u32>) {
    for root in cgroup_roots() {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("flotilla-exec-")
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let over = this_run == Some(pid) || !Path::new(&format!("/proc/{pid}")).exists();
            if !over {
                continue;
            }
            let dir = entry.path();
            for slot in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if slot.file_name().to_string_lossy().starts_with("slot-") {
                    let _ = std::fs::remove_dir(slot.path());
                }
            }
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// Whether this host's Docker engine answers `GET /_ping` on its socket (`DOCKER_HOST` when
/// it names a unix socket, else `/var/run/docker.sock`), within a second, and the `docker`
/// program is there: the level reaches the engine through `docker system dial-stdio`, as it
/// does on every instance (without it the level waited a minute for the engine, then failed).
fn docker_answers() -> Result<(), String> {
    if !on_path("docker") {
        return Err("missing docker (the command the level reaches the engine through)".into());
    }
    let socket = match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => match host.strip_prefix("unix://") {
            Some(path) => path.to_string(),
            None => {
                return Err(format!(
                    "DOCKER_HOST={host} is not a unix socket; give a --config with [runners.docker] host"
                ));
            }
        },
        _ => "/var/run/docker.sock".to_string(),
    };
    let answer = || -> std::io::Result<String> {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.set_write_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")?;
        let mut reply = String::new();
        stream.take(4096).read_to_string(&mut reply)?;
        Ok(reply)
    };
    match answer() {
        Ok(reply) if reply.starts_with("HTTP/1.") && reply.contains(" 200 ") => Ok(()),
        Ok(reply) => Err(format!(
            "the engine at {socket} answered {:?}",
            reply.lines().next().unwrap_or_default()
        )),
        Err(e) => Err(format!("no Docker engine at {socket} ({e})")),
    }
}

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
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/sbin", "/sbin"].map(PathBuf::from));
    flotilla_connect::local::find_in(dirs, Path::new(program)).is_some()
}

/// The embedded default runner: [`RunnerConfig::embedded_default`] (shell isolation, a slot
/// per core), with the levels `host` offers: `docker` for jobs that name an image and no
/// level (images from this host's engine, never pulled), `microvm` for jobs that ask for it
/// with `FLOTILLA_ISOLATION`.
pub fn runner(host: &HostLevels) -> RunnerConfig {
    let mut runner = RunnerConfig::embedded_default();
    let mut levels = vec![IsolationLevel::Shell];
    if host.cgroup.is_ok() {
        levels.push(IsolationLevel::Cgroup);
        // A cgroup per slot of this process: runs side by side keep their jobs apart, and
        // the level's sweep of its own slots leaves the other runs' alone.
        runner.slot_cgroup_template =
            format!("flotilla-exec-{}/slot-${{slot}}", std::process::id());
    }
    if host.docker.is_ok() {
        levels.push(IsolationLevel::Docker);
        runner.docker = Some(DockerSettings {
            // A local run uses what this host has: a missing image fails the job with the
            // `docker pull` to run, instead of reaching a registry.
            pull_policy: vec![PullPolicy::Never],
            ..DockerSettings::default()
        });
    }
    if host.microvm.is_ok() {
        levels.push(IsolationLevel::Microvm);
        runner.microvm = Some(MicrovmSettings {
            // Root keeps the level's files where a runner would; anyone else in their cache.
            state_dir: (!is_root()).then(user_state_dir).flatten(),
            // Off: a /dev/kvm that opens may still not run guests (nested virtualisation
            // off), and TCG works everywhere; a configuration turns KVM on.
            // The only instance is this host: its snapshots need no carrying.
            snapshot_store: Some(false),
            ..MicrovmSettings::default()
        });
    }
    if levels.len() > 1 {
        runner.autoscaler = Some(AutoscalerConfig {
            isolation: IsolationLevels::new(levels),
            image_isolation: host.docker.is_ok().then_some(IsolationLevel::Docker),
            // As without an autoscaler: one slot per core of this host.
            capacity_per_instance: u32::try_from(super::default_slots()).unwrap_or(1),
            ..AutoscalerConfig::default()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn host(docker: bool, microvm: bool) -> HostLevels {
        let found = |ok: bool| {
            if ok {
                Ok(())
            } else {
                Err("missing".to_string())
            }
        };
        HostLevels {
            cgroup: found(false),
            docker: found(docker),
            microvm: found(microvm),
        }
    }

    #[test]
    fn levels_follow_what_the_host_has_with_a_slot_per_core() {
        let plain = runner(&host(false, false));
        assert_eq!(plain.isolation_levels().all(), [IsolationLevel::Shell]);
        assert!(plain.docker.is_none() && plain.image_isolation().is_none());
        let vm = runner(&host(false, true));
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
        // Docker: jobs with an image go there, with images from this host only.
        let all = runner(&host(true, true));
        assert_eq!(
            all.isolation_levels().all(),
            [
                IsolationLevel::Shell,
                IsolationLevel::Docker,
                IsolationLevel::Microvm
            ]
        );
        assert_eq!(all.isolation(), IsolationLevel::Shell);
        assert_eq!(all.image_isolation(), Some(IsolationLevel::Docker));
        assert_eq!(all.docker.unwrap().pull_policy, [PullPolicy::Never]);
        assert_eq!(
            host(true, false).describe(),
            "this host offers shell, docker (jobs with an image:); not cgroup: missing; \
             microvm: missing; vm: it needs a prepared disk image ([runners.vm] in a --config)"
        );
    }

    #[test]
    fn programs_are_found_on_the_path() {
        assert!(on_path("sh"));
        assert!(!on_path("no-such-program-flotilla"));
    }
}
