//! What the job's containers look like (pure): the build container kept alive for stage
//! execs, and one container per service on the job's network.

use super::labels::{JobLabels, Role};
use super::volumes::Volume;
use crate::layout::BuildLayout;
use bollard::models::{ContainerCreateBody, EndpointSettings, HostConfig, NetworkingConfig};
use flotilla_job::model::Image;
use std::collections::HashMap;

/// What keeps the build container running between stage execs (stops at once on `TERM`).
pub const KEEPALIVE: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done";

/// Shells an entrypoint may be.
const SHELLS: [&str; 7] = ["sh", "bash", "ash", "dash", "zsh", "ksh", "mksh"];

/// The entrypoint to set (`None`: keep the image's) and the command that keeps the build
/// container alive, given the job's `entrypoint` override and the image's own entrypoint.
///
/// - no entrypoint (or the override `[""]`): `sh -c KEEPALIVE`;
/// - a shell entrypoint: the keep-alive as its arguments (`-c KEEPALIVE`, or just `KEEPALIVE`
///   when the entrypoint already ends with a `-c`-style flag);
/// - any other entrypoint (a wrapper that ends with `exec "$@"`): `sh -c KEEPALIVE` as its
///   arguments.
pub fn keepalive(
    override_entrypoint: &[String],
    image_entrypoint: &[String],
) -> (Option<Vec<String>>, Vec<String>) {
    let set = (!override_entrypoint.is_empty()).then(|| override_entrypoint.to_vec());
    let effective: Vec<&String> = match &set {
        Some(e) => e.iter().filter(|s| !s.is_empty()).collect(),
        None => image_entrypoint.iter().filter(|s| !s.is_empty()).collect(),
    };
    let plain = || vec!["sh".to_string(), "-c".to_string(), KEEPALIVE.to_string()];
    let Some(first) = effective.first() else {
        return (set, plain());
    };
    let program = first.rsplit('/').next().unwrap_or(first);
    if !SHELLS.contains(&program) {
        return (set, plain());
    }
    let ends_with_c = effective
        .last()
        .filter(|_| effective.len() > 1)
        .is_some_and(|a| a.starts_with('-') && !a.starts_with("--") && a.ends_with('c'));
    if ends_with_c {
        (set, vec![KEEPALIVE.to_string()])
    } else {
        (set, vec!["-c".to_string(), KEEPALIVE.to_string()])
    }
}

/// What the runner's configuration adds to one container of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSettings {
    /// Run with every capability and device (GitLab's `privileged = true`, for this image).
    pub privileged: bool,
    /// Capabilities added and dropped (`cap_add`, `cap_drop`; the build container's).
    pub cap_add: Vec<String>,
    /// See `cap_add`.
    pub cap_drop: Vec<String>,
    /// Security options (`security_opt`, or `services_security_opt` for a service).
    pub security_opt: Vec<String>,
    /// Host devices (`devices`; the build container's).
    pub devices: Vec<super::security::DeviceMapping>,
    /// The user namespace mode (`userns_mode`).
    pub userns_mode: Option<String>,
    /// The cgroup the container's own cgroup is made under (`--cgroup-parent`), absolute.
    pub cgroup_parent: Option<String>,
    /// Binds every container of the job gets (`[runners.docker] volumes`).
    pub binds: Vec<String>,
    /// CPU and memory limits (the build container's `cpus` and `memory`).
    pub limits: super::limits::BuildLimits,
}

impl HostSettings {
    /// `host` with these settings applied.
    fn apply(&self, mut host: HostConfig) -> HostConfig {
        if self.privileged {
            host.privileged = Some(true);
        }
        let list = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        host.cap_add = list(&self.cap_add);
        host.cap_drop = list(&self.cap_drop);
        host.security_opt = list(&self.security_opt);
        host.userns_mode.clone_from(&self.userns_mode);
        if !self.devices.is_empty() {
            host.devices = Some(
                self.devices
                    .iter()
                    .map(|d| bollard::models::DeviceMapping {
                        path_on_host: Some(d.path_on_host.clone()),
                        path_in_container: Some(d.path_in_container.clone()),
                        cgroup_permissions: Some(d.cgroup_permissions.clone()),
                    })
                    .collect(),
            );
        }
        host.cgroup_parent.clone_from(&self.cgroup_parent);
        host.nano_cpus = self.limits.nano_cpus;
        host.memory = self.limits.memory;
        if !self.binds.is_empty() {
            host.binds
                .get_or_insert_with(Vec::new)
                .extend(self.binds.iter().cloned());
        }
        host
    }
}

/// The bind that gives a job's containers its slot directory: at the slot directory's path, the
/// instance's `<slot_dir>/.project-<project id>`, the job's project's own. A job never sees
/// what another project's jobs left on the slot (GitLab gives each project its own builds
/// volume for the same reason), and the next job of the same project on the slot finds its
/// checkout again (`GIT_STRATEGY=fetch`). GitLab project paths never start with a dot, so the
/// name meets no project's.
pub fn slot_bind(slot_dir: &str, project_id: i64) -> String {
    let slot = slot_dir.trim_end_matches('/');
    format!("{slot}/.project-{project_id}:{slot}")
}

/// The binds that give a job's containers its directories: the [`slot_bind`], and when the
/// job's `GIT_CLONE_PATH` put its project outside the slot directory, first the whole builds
/// directory from the instance's `<slot_dir>/.project-<id>.builds`, the project's own on this
/// slot, as GitLab mounts a per-project builds volume at the builds directory. Docker mounts
/// the slot's bind inside it. Not when one of the runner's `volumes` is mounted at the builds
/// directory already (Docker refuses two mounts at one place; GitLab's builds directory is
/// then the operator's, shared) or the builds directory is `/`.
pub fn job_binds(layout: &BuildLayout, project_id: i64, volumes: &[Volume]) -> Vec<String> {
    let slot = layout.slot_dir.trim_end_matches('/');
    let slot_bind = slot_bind(slot, project_id);
    let builds = layout.paths.builds_dir.trim_end_matches('/');
    let covered = volumes
        .iter()
        .any(|v| v.destination().trim_end_matches('/') == builds);
    if layout.paths.project_dir.starts_with(&format!("{slot}/")) || builds.is_empty() || covered {
        return vec![slot_bind];
    }
    vec![
        format!("{slot}/.project-{project_id}.builds:{builds}"),
        slot_bind,
    ]
}

/// The build container: the job's image kept alive, `job_binds` (see [`job_binds`]), on the
/// job's network when there is one.
pub fn build_container(
    image: &Image,
    image_entrypoint: &[String],
    user: &str,
    job_binds: &[String],
    network: Option<&str>,
    labels: &JobLabels,
    settings: &HostSettings,
) -> ContainerCreateBody {
    let (entrypoint, cmd) = keepalive(&image.entrypoint, image_entrypoint);
    ContainerCreateBody {
        image: Some(image.name.clone()),
        entrypoint,
        cmd: Some(cmd),
        user: (!user.is_empty()).then(|| user.to_string()),
        labels: Some(labels.labels(Some(Role::Build))),
        tty: Some(false),
        open_stdin: Some(false),
        host_config: Some(settings.apply(HostConfig {
            binds: Some(job_binds.to_vec()),
            network_mode: network.map(str::to_string),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// A service container: its own network namespace on the job's network, reachable by its
/// aliases, with its own command, entrypoint and variables.
pub fn service_container(
    service: &Image,
    index: usize,
    env: Vec<String>,
    network: &str,
    labels: &JobLabels,
    settings: &HostSettings,
) -> ContainerCreateBody {
    let user = service
        .executor_opts
        .docker
        .as_ref()
        .map(|d| d.user.clone())
        .unwrap_or_default();
    ContainerCreateBody {
        image: Some(service.name.clone()),
        cmd: (!service.command.is_empty()).then(|| service.command.clone()),
        entrypoint: (!service.entrypoint.is_empty()).then(|| service.entrypoint.clone()),
        env: Some(env),
        user: (!user.is_empty()).then_some(user),
        labels: Some(labels.labels(Some(Role::Service(index)))),
        host_config: Some(settings.apply(HostConfig {
            network_mode: Some(network.to_string()),
            ..Default::default()
        })),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.to_string(),
                EndpointSettings {
                    aliases: Some(service.aliases()),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_build_container_is_kept_alive_whatever_its_entrypoint() {
        let plain = v(&["sh", "-c", KEEPALIVE]);
        assert_eq!(keepalive(&[], &[]), (None, plain.clone()));
        assert_eq!(
            keepalive(&[], &v(&["/bin/sh", "-c"])),
            (None, v(&[KEEPALIVE]))
        );
        assert_eq!(
            keepalive(&[], &v(&["/usr/bin/bash"])),
            (None, v(&["-c", KEEPALIVE]))
        );
        assert_eq!(
            keepalive(&[], &v(&["docker-entrypoint.sh"])),
            (None, plain.clone())
        );
        // The job's override wins; `[""]` clears the image's entrypoint.
        assert_eq!(
            keepalive(&v(&[""]), &v(&["redis-server"])),
            (Some(v(&[""])), plain.clone())
        );
        assert_eq!(
            keepalive(&v(&["/bin/ash", "-lc"]), &[]),
            (Some(v(&["/bin/ash", "-lc"])), v(&[KEEPALIVE]))
        );
    }

    fn labels() -> JobLabels {
        JobLabels {
            owner: "o".into(),
            job_id: 5,
            slot: 1,
            env_id: "abcdef0123".into(),
            manager: super::super::labels::Manager {
                host: "h".into(),
                pid: 1,
            },
        }
    }

    #[test]
    fn each_project_has_its_own_slot_directory() {
        assert_eq!(slot_bind("/builds/1", 7), "/builds/1/.project-7:/builds/1");
        assert_eq!(slot_bind("/builds/1/", 8), "/builds/1/.project-8:/builds/1");
    }

    /// A `GIT_CLONE_PATH` outside the slot directory gets the whole builds directory, the
    /// project's own on the slot; one inside it needs only the slot's.
    #[test]
    fn a_custom_project_directory_gets_a_builds_directory_of_its_own() {
        use flotilla_job::{JobPayload, Variable};
        let mut job = JobPayload::default();
        job.job_info.project_id = 7;
        job.job_info.project_full_path = "g/p".into();
        let plain = BuildLayout::new("/builds", 2, &job, true).unwrap();
        assert_eq!(
            job_binds(&plain, 7, &[]),
            ["/builds/2/.project-7:/builds/2"]
        );
        job.variables
            .push(Variable::new("GIT_CLONE_PATH", "$CI_BUILDS_DIR/go/src/p"));
        let custom = BuildLayout::new("/builds", 2, &job, true).unwrap();
        assert_eq!(
            job_binds(&custom, 7, &[]),
            [
                "/builds/2/.project-7.builds:/builds",
                "/builds/2/.project-7:/builds/2"
            ]
        );
        // The operator's own volume at the builds directory: it is the builds directory.
        let theirs = [Volume::parse("/srv/builds:/builds").unwrap()];
        assert_eq!(
            job_binds(&custom, 7, &theirs),
            ["/builds/2/.project-7:/builds/2"]
        );
        job.variables
            .push(Variable::new("GIT_CLONE_PATH", "/builds/2/elsewhere"));
        let inside = BuildLayout::new("/builds", 2, &job, true).unwrap();
        assert_eq!(
            job_binds(&inside, 7, &[]),
            ["/builds/2/.project-7:/builds/2"]
        );
    }

    #[test]
    fn the_build_container_sees_the_slot_directory_at_the_same_path() {
        let image = Image {
            name: "busybox:1".into(),
            ..Default::default()
        };
        let plain = HostSettings::default();
        let b = build_container(
            &image,
            &[],
            "1000",
            &["/builds/1/.project-7:/builds/1".to_string()],
            Some("net"),
            &labels(),
            &plain,
        );
        assert_eq!(b.image.as_deref(), Some("busybox:1"));
        assert_eq!(b.user.as_deref(), Some("1000"));
        let host = b.host_config.unwrap();
        assert_eq!(host.binds.unwrap(), vec!["/builds/1/.project-7:/builds/1"]);
        assert_eq!(host.network_mode.as_deref(), Some("net"));
        assert_eq!((host.privileged, host.cgroup_parent), (None, None));
        assert_eq!(b.labels.unwrap()["flotilla.role"], "build");
        let b = build_container(
            &image,
            &[],
            "",
            &["/b/0".to_string()],
            None,
            &labels(),
            &plain,
        );
        assert!(b.user.is_none() && b.host_config.unwrap().network_mode.is_none());
    }

    /// GitLab's `privileged = true` and slot cgroups reach every container of the job; the
    /// cgroup parent is absolute (a relative one splits the controllers on Docker 20.10 with
    /// cgroupfs: isolation-and-providers.md §1).
    #[test]
    fn privileged_and_the_slot_cgroup_reach_build_and_service_containers() {
        let image = Image {
            name: "docker:24-dind".into(),
            ..Default::default()
        };
        let settings = HostSettings {
            privileged: true,
            cgroup_parent: Some("/gitlab-runner/slot-3".into()),
            binds: vec!["vol:/certs/client".into()],
            ..HostSettings::default()
        };
        let bind = [slot_bind("/b/3", 1)];
        let b = build_container(&image, &[], "", &bind, Some("n"), &labels(), &settings);
        let s = service_container(&image, 0, vec![], "n", &labels(), &settings);
        let (bh, sh) = (b.host_config.unwrap(), s.host_config.unwrap());
        assert_eq!(
            bh.binds.clone().unwrap(),
            vec!["/b/3/.project-1:/b/3", "vol:/certs/client"],
            "the slot directory, then the volumes"
        );
        assert_eq!(sh.binds.clone().unwrap(), vec!["vol:/certs/client"]);
        // cpus and memory are the build container's (services have keys of their own).
        let limited = HostSettings {
            limits: crate::docker::limits::BuildLimits {
                nano_cpus: Some(500_000_000),
                memory: Some(64 << 20),
            },
            ..settings.clone()
        };
        let b = build_container(
            &image,
            &[],
            "",
            &["/b/3".to_string()],
            Some("n"),
            &labels(),
            &limited,
        );
        let bh2 = b.host_config.unwrap();
        assert_eq!(
            (bh2.nano_cpus, bh2.memory),
            (Some(500_000_000), Some(64 << 20))
        );
        assert_eq!((sh.nano_cpus, sh.memory), (None, None));
        for host in [bh, sh] {
            assert_eq!(host.privileged, Some(true));
            assert_eq!(host.cgroup_parent.as_deref(), Some("/gitlab-runner/slot-3"));
        }
    }

    #[test]
    fn capabilities_security_options_devices_and_userns_reach_the_container() {
        let image = Image {
            name: "alpine".into(),
            ..Default::default()
        };
        let settings = HostSettings {
            cap_add: v(&["NET_ADMIN"]),
            cap_drop: v(&["NET_RAW", "MKNOD"]),
            security_opt: v(&["no-new-privileges"]),
            devices: vec![crate::docker::security::DeviceMapping::parse("/dev/fuse").unwrap()],
            userns_mode: Some("host".into()),
            ..HostSettings::default()
        };
        let host = build_container(
            &image,
            &[],
            "",
            &["/b/3".to_string()],
            None,
            &labels(),
            &settings,
        )
        .host_config
        .unwrap();
        assert_eq!(host.cap_add, Some(v(&["NET_ADMIN"])));
        assert_eq!(host.cap_drop, Some(v(&["NET_RAW", "MKNOD"])));
        assert_eq!(host.security_opt, Some(v(&["no-new-privileges"])));
        assert_eq!(host.userns_mode.as_deref(), Some("host"));
        let device = &host.devices.unwrap()[0];
        assert_eq!(
            (
                device.path_on_host.as_deref(),
                device.path_in_container.as_deref(),
                device.cgroup_permissions.as_deref()
            ),
            (Some("/dev/fuse"), Some("/dev/fuse"), Some("rwm"))
        );
        // Nothing is set where nothing is configured.
        let plain = build_container(
            &image,
            &[],
            "",
            &["/b/3".to_string()],
            None,
            &labels(),
            &HostSettings::default(),
        )
        .host_config
        .unwrap();
        assert_eq!(
            (
                plain.cap_add,
                plain.cap_drop,
                plain.security_opt,
                plain.devices,
                plain.userns_mode
            ),
            (None, None, None, None, None)
        );
    }

    #[test]
    fn services_get_their_aliases_command_and_variables() {
        let service = Image {
            name: "registry/group/redis:7".into(),
            command: v(&["redis-server", "--port", "6380"]),
            ..Default::default()
        };
        let s = service_container(
            &service,
            2,
            v(&["A=1"]),
            "net",
            &labels(),
            &HostSettings::default(),
        );
        assert_eq!(s.cmd.unwrap(), v(&["redis-server", "--port", "6380"]));
        assert!(s.entrypoint.is_none());
        assert_eq!(s.env.unwrap(), v(&["A=1"]));
        assert_eq!(s.host_config.unwrap().network_mode.as_deref(), Some("net"));
        let endpoints = s.networking_config.unwrap().endpoints_config.unwrap();
        assert_eq!(
            endpoints["net"].aliases.clone().unwrap(),
            v(&["registry__group__redis", "registry-group-redis"])
        );
        assert_eq!(s.labels.unwrap()["flotilla.role"], "service");
    }
}
