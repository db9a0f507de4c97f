//! The `[runners.docker]` keys that shape the job's containers beyond image, privileges and
//! limits, read and applied as GitLab Runner does (`executors/docker/docker.go`:
//! `createHostConfig` for the build container, `createHostConfigForService` for services;
//! `common/config.go`: `GetUlimits`, `GetMemorySwap`, `GetMemoryReservation`,
//! `GetServiceMemory*`, `GetServiceNanoCPUs`).
//!
//! | key | build container | services |
//! |---|---|---|
//! | `dns`, `dns_search`, `extra_hosts`, `runtime`, `shm_size` | yes | yes |
//! | `tmpfs` / `services_tmpfs` | `tmpfs` | `services_tmpfs` |
//! | `sysctls`, `ulimit`, `oom_kill_disable`, `oom_score_adjust`, `group_add`, `ipcmode`, `device_cgroup_rules`, `hostname` | yes | no |
//! | `memory_swap`, `memory_reservation`, `cpuset_cpus`, `cpuset_mems`, `cpu_shares` | yes | no |
//! | `service_memory`, `service_memory_swap`, `service_memory_reservation`, `service_cpus`, `service_cpuset_cpus`, `service_cpu_shares` | no | yes |
//! | `cgroup_parent` / `service_cgroup_parent` (when no slot cgroup is set) | `cgroup_parent` | `service_cgroup_parent` |
//! | `volumes_from`, `links` | yes | no |
//! | `pid_mode`, `volume_driver`, `container_labels` | yes | no |
//! | `gpus` / `service_gpus` | `gpus` | `service_gpus` |
//! | `log_options` (the `json-file` driver always, as GitLab sets it) | yes | yes |

use super::gpus::{self, GpuError};
use super::limits::{LimitError, nano_cpus_of, ram_in_bytes_of};
use bollard::models::{
    ContainerCreateBody, DeviceRequest, HostConfig, HostConfigLogConfig, ResourcesUlimits,
};
use std::collections::HashMap;

/// The keys as written in `config.toml` (GitLab's names and types).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawContainerOptions {
    /// `dns`.
    pub dns: Vec<String>,
    /// `dns_search`.
    pub dns_search: Vec<String>,
    /// `extra_hosts` (`host:ip`).
    pub extra_hosts: Vec<String>,
    /// `runtime`.
    pub runtime: String,
    /// `shm_size` in bytes (0: Docker's default).
    pub shm_size: i64,
    /// `tmpfs`: mount point to options.
    pub tmpfs: HashMap<String, String>,
    /// `services_tmpfs`.
    pub services_tmpfs: HashMap<String, String>,
    /// `sysctls`.
    pub sysctls: HashMap<String, String>,
    /// `ulimit`: name to `soft[:hard]`.
    pub ulimit: HashMap<String, String>,
    /// `oom_kill_disable`.
    pub oom_kill_disable: bool,
    /// `oom_score_adjust`.
    pub oom_score_adjust: i64,
    /// `group_add`.
    pub group_add: Vec<String>,
    /// `ipcmode`.
    pub ipcmode: String,
    /// `device_cgroup_rules`.
    pub device_cgroup_rules: Vec<String>,
    /// `hostname` of the build container.
    pub hostname: String,
    /// `memory_swap`, `memory_reservation` (sizes as `memory`).
    pub memory_swap: String,
    /// See `memory_swap`.
    pub memory_reservation: String,
    /// `cpuset_cpus`, `cpuset_mems`.
    pub cpuset_cpus: String,
    /// See `cpuset_cpus`.
    pub cpuset_mems: String,
    /// `cpu_shares`.
    pub cpu_shares: i64,
    /// `service_memory`, `service_memory_swap`, `service_memory_reservation`.
    pub service_memory: String,
    /// See `service_memory`.
    pub service_memory_swap: String,
    /// See `service_memory`.
    pub service_memory_reservation: String,
    /// `service_cpus` (as `cpus`).
    pub service_cpus: String,
    /// `service_cpuset_cpus`.
    pub service_cpuset_cpus: String,
    /// `service_cpu_shares`.
    pub service_cpu_shares: i64,
    /// `cgroup_parent` of the build container (slot cgroups, when on, come first).
    pub cgroup_parent: String,
    /// `service_cgroup_parent` of the services (the services' slot cgroup comes first).
    pub service_cgroup_parent: String,
    /// `volumes_from`: containers whose volumes the build container mounts.
    pub volumes_from: Vec<String>,
    /// `links`: legacy links of the build container (`container:alias`).
    pub links: Vec<String>,
    /// `pid_mode`: the build container's PID namespace (`host`, `container:<id>`).
    pub pid_mode: String,
    /// `volume_driver`: the driver of the volumes Docker makes for the build container.
    pub volume_driver: String,
    /// `container_labels`: labels of the build container, values expanded with the job's
    /// variables when the container is made.
    pub container_labels: HashMap<String, String>,
    /// `gpus`: the build container's GPUs, as `docker run --gpus` reads them.
    pub gpus: String,
    /// `service_gpus`: the same for each service.
    pub service_gpus: String,
    /// `log_options`: options of the `json-file` log driver of every container.
    pub log_options: HashMap<String, String>,
}

/// The same, checked and in Docker's terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerOptions {
    /// What both the build container and the services get.
    shared: Shared,
    /// The build container's own.
    build: Own,
    /// The services' own.
    services: Own,
    /// The build container's host name.
    hostname: Option<String>,
    /// The build container's extra labels, unexpanded.
    container_labels: HashMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Shared {
    dns: Vec<String>,
    dns_search: Vec<String>,
    extra_hosts: Vec<String>,
    runtime: Option<String>,
    shm_size: Option<i64>,
    log_options: HashMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Own {
    tmpfs: HashMap<String, String>,
    sysctls: HashMap<String, String>,
    ulimits: Vec<ResourcesUlimits>,
    oom_kill_disable: bool,
    oom_score_adj: Option<i64>,
    group_add: Vec<String>,
    ipc_mode: Option<String>,
    device_cgroup_rules: Vec<String>,
    memory: Option<i64>,
    memory_swap: Option<i64>,
    memory_reservation: Option<i64>,
    nano_cpus: Option<i64>,
    cpuset_cpus: Option<String>,
    cpuset_mems: Option<String>,
    cpu_shares: Option<i64>,
    cgroup_parent: Option<String>,
    volumes_from: Vec<String>,
    links: Vec<String>,
    pid_mode: Option<String>,
    volume_driver: Option<String>,
    gpus: Option<DeviceRequest>,
}

/// A key whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A size or CPU count that does not parse.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// An `ulimit` entry that is not `soft` or `soft:hard` numbers, or names no limit Docker
    /// knows.
    #[error("ulimit `{name} = {value}`: {reason}")]
    Ulimit {
        /// The limit's name.
        name: String,
        /// The value as written.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A negative `shm_size`.
    #[error("shm_size {0} is negative")]
    ShmSize(i64),
    /// A GPU request `docker run --gpus` would refuse.
    #[error("{key} {value:?}: {source}")]
    Gpus {
        /// `gpus` or `service_gpus`.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What is wrong.
        source: GpuError,
    },
    /// `log_options` keys GitLab Runner does not allow (`GetLogConfig`: `env` and `labels`
    /// only).
    #[error("invalid log options: only [\"env\" \"labels\"] are allowed, but found: {0}")]
    LogOptions(String),
    /// A label in flotilla's own namespace, which marks what its cleanup may remove.
    #[error("container_labels {0:?}: labels starting with \"flotilla.\" are flotilla's own")]
    Label(String),
}

impl OptionsError {
    /// The `config.toml` key at fault.
    pub fn key(&self) -> &'static str {
        match self {
            OptionsError::Limit(e) => e.key,
            OptionsError::Ulimit { .. } => "ulimit",
            OptionsError::ShmSize(_) => "shm_size",
            OptionsError::Gpus { key, .. } => key,
            OptionsError::Label(_) => "container_labels",
            OptionsError::LogOptions(_) => "log_options",
        }
    }
}

/// The limits Docker's `units.ParseUlimit` knows.
const ULIMITS: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

fn trimmed(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn size(key: &'static str, s: &str) -> Result<Option<i64>, OptionsError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    Ok(Some(ram_in_bytes_of(key, s)?))
}

fn cpus(key: &'static str, s: &str) -> Result<Option<i64>, OptionsError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    Ok(Some(nano_cpus_of(key, s)?))
}

fn ulimits(map: &HashMap<String, String>) -> Result<Vec<ResourcesUlimits>, OptionsError> {
    let mut out = Vec::new();
    let mut names: Vec<&String> = map.keys().collect();
    names.sort();
    for name in names {
        let value = &map[name];
        let err = |reason| OptionsError::Ulimit {
            name: name.clone(),
            value: value.clone(),
            reason,
        };
        if !ULIMITS.contains(&name.as_str()) {
            return Err(err("not a limit Docker knows"));
        }
        let (soft, hard) = match value.split_once(':') {
            Some((s, h)) => (s, h),
            None => (value.as_str(), value.as_str()),
        };
        let soft: i64 = soft.trim().parse().map_err(|_| err("not a number"))?;
        let hard: i64 = hard.trim().parse().map_err(|_| err("not a number"))?;
        if soft > hard {
            return Err(err("the soft limit is above the hard one"));
        }
        out.push(ResourcesUlimits {
            name: Some(name.clone()),
            soft: Some(soft),
            hard: Some(hard),
        });
    }
    Ok(out)
}

impl ContainerOptions {
    /// Checks `raw` and turns it into Docker's terms.
    pub fn parse(raw: &RawContainerOptions) -> Result<ContainerOptions, OptionsError> {
        if raw.shm_size < 0 {
            return Err(OptionsError::ShmSize(raw.shm_size));
        }
        let gpu = |key: &'static str, value: &str| {
            gpus::parse(value).map_err(|source| OptionsError::Gpus {
                key,
                value: value.to_string(),
                source,
            })
        };
        let mut unknown: Vec<&String> = raw
            .log_options
            .keys()
            .filter(|k| !matches!(k.as_str(), "env" | "labels"))
            .collect();
        if !unknown.is_empty() {
            unknown.sort();
            let quoted: Vec<String> = unknown.iter().map(|k| format!("{k:?}")).collect();
            return Err(OptionsError::LogOptions(format!("[{}]", quoted.join(" "))));
        }
        let mut labels: Vec<&String> = raw.container_labels.keys().collect();
        labels.sort();
        if let Some(own) = labels.iter().find(|k| k.starts_with("flotilla.")) {
            return Err(OptionsError::Label((*own).clone()));
        }
        Ok(ContainerOptions {
            shared: Shared {
                dns: raw.dns.clone(),
                dns_search: raw.dns_search.clone(),
                extra_hosts: raw.extra_hosts.clone(),
                runtime: trimmed(&raw.runtime),
                shm_size: (raw.shm_size > 0).then_some(raw.shm_size),
                log_options: raw.log_options.clone(),
            },
            build: Own {
                tmpfs: raw.tmpfs.clone(),
                sysctls: raw.sysctls.clone(),
                ulimits: ulimits(&raw.ulimit)?,
                oom_kill_disable: raw.oom_kill_disable,
                oom_score_adj: (raw.oom_score_adjust != 0).then_some(raw.oom_score_adjust),
                group_add: raw.group_add.clone(),
                ipc_mode: trimmed(&raw.ipcmode),
                device_cgroup_rules: raw.device_cgroup_rules.clone(),
                memory: None,
                memory_swap: size("memory_swap", &raw.memory_swap)?,
                memory_reservation: size("memory_reservation", &raw.memory_reservation)?,
                nano_cpus: None,
                cpuset_cpus: trimmed(&raw.cpuset_cpus),
                cpuset_mems: trimmed(&raw.cpuset_mems),
                cpu_shares: (raw.cpu_shares != 0).then_some(raw.cpu_shares),
                cgroup_parent: trimmed(&raw.cgroup_parent),
                volumes_from: raw.volumes_from.clone(),
                links: raw.links.clone(),
                pid_mode: trimmed(&raw.pid_mode),
                volume_driver: trimmed(&raw.volume_driver),
                gpus: gpu("gpus", &raw.gpus)?,
            },
            services: Own {
                tmpfs: raw.services_tmpfs.clone(),
                memory: size("service_memory", &raw.service_memory)?,
                memory_swap: size("service_memory_swap", &raw.service_memory_swap)?,
                memory_reservation: size(
                    "service_memory_reservation",
                    &raw.service_memory_reservation,
                )?,
                nano_cpus: cpus("service_cpus", &raw.service_cpus)?,
                cpuset_cpus: trimmed(&raw.service_cpuset_cpus),
                cpu_shares: (raw.service_cpu_shares != 0).then_some(raw.service_cpu_shares),
                cgroup_parent: trimmed(&raw.service_cgroup_parent),
                gpus: gpu("service_gpus", &raw.service_gpus)?,
                ..Own::default()
            },
            hostname: trimmed(&raw.hostname),
            container_labels: raw.container_labels.clone(),
        })
    }

    /// The extra labels of the job's containers (`container_labels`), each value expanded with
    /// `expand` (the job's variables, as GitLab's `prepareContainerLabels`).
    pub fn container_labels(&self, expand: impl Fn(&str) -> String) -> HashMap<String, String> {
        self.container_labels
            .iter()
            .map(|(k, v)| (k.clone(), expand(v)))
            .collect()
    }

    /// A service container's extra labels: the build container's, and each again under
    /// `com.gitlab.gitlab-runner.`, as GitLab Runner's `createServiceContainerConfig` adds them
    /// for compatibility.
    pub fn service_labels(labels: &HashMap<String, String>) -> HashMap<String, String> {
        labels
            .iter()
            .flat_map(|(k, v)| {
                [
                    (k.clone(), v.clone()),
                    (format!("com.gitlab.gitlab-runner.{k}"), v.clone()),
                ]
            })
            .collect()
    }

    /// The driver of the volumes made for the build container (`volume_driver`).
    pub fn volume_driver(&self) -> Option<&str> {
        self.build.volume_driver.as_deref()
    }

    /// The build container's `body` with what it gets.
    pub fn build(&self, mut body: ContainerCreateBody) -> ContainerCreateBody {
        let host = body.host_config.take().unwrap_or_default();
        body.host_config = Some(self.shared.apply(self.build.apply(host)));
        if let Some(name) = &self.hostname {
            body.hostname = Some(name.clone());
        }
        body
    }

    /// A service container's `body` with what it gets.
    pub fn service(&self, mut body: ContainerCreateBody) -> ContainerCreateBody {
        let host = body.host_config.take().unwrap_or_default();
        body.host_config = Some(self.shared.apply(self.services.apply(host)));
        body
    }
}

/// `Some(v)` for a non-empty `v`.
fn non_empty<T>(v: &[T]) -> Option<Vec<T>>
where
    T: Clone,
{
    (!v.is_empty()).then(|| v.to_vec())
}

impl Shared {
    fn apply(&self, mut host: HostConfig) -> HostConfig {
        host.dns = non_empty(&self.dns).or(host.dns);
        host.dns_search = non_empty(&self.dns_search).or(host.dns_search);
        host.extra_hosts = non_empty(&self.extra_hosts).or(host.extra_hosts);
        host.runtime = self.runtime.clone().or(host.runtime);
        host.shm_size = self.shm_size.or(host.shm_size);
        // GitLab always names the json-file driver (its log reading needs it), with the
        // operator's options.
        host.log_config = Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: (!self.log_options.is_empty()).then(|| self.log_options.clone()),
        });
        host
    }
}

impl Own {
    fn apply(&self, mut host: HostConfig) -> HostConfig {
        if !self.tmpfs.is_empty() {
            host.tmpfs = Some(self.tmpfs.clone());
        }
        if !self.sysctls.is_empty() {
            host.sysctls = Some(self.sysctls.clone());
        }
        host.ulimits = non_empty(&self.ulimits).or(host.ulimits);
        if self.oom_kill_disable {
            host.oom_kill_disable = Some(true);
        }
        host.oom_score_adj = self.oom_score_adj.or(host.oom_score_adj);
        host.group_add = non_empty(&self.group_add).or(host.group_add);
        host.ipc_mode = self.ipc_mode.clone().or(host.ipc_mode);
        host.device_cgroup_rules =
            non_empty(&self.device_cgroup_rules).or(host.device_cgroup_rules);
        host.memory = self.memory.or(host.memory);
        host.memory_swap = self.memory_swap.or(host.memory_swap);
        host.memory_reservation = self.memory_reservation.or(host.memory_reservation);
        host.nano_cpus = self.nano_cpus.or(host.nano_cpus);
        host.cpuset_cpus = self.cpuset_cpus.clone().or(host.cpuset_cpus);
        host.cpuset_mems = self.cpuset_mems.clone().or(host.cpuset_mems);
        host.cpu_shares = self.cpu_shares.or(host.cpu_shares);
        // A slot cgroup set before wins, as GitLab's `getCgroupParent` prefers the slot's path.
        host.cgroup_parent = host.cgroup_parent.or_else(|| self.cgroup_parent.clone());
        host.volumes_from = non_empty(&self.volumes_from).or(host.volumes_from);
        host.links = non_empty(&self.links).or(host.links);
        host.pid_mode = self.pid_mode.clone().or(host.pid_mode);
        host.volume_driver = self.volume_driver.clone().or(host.volume_driver);
        if let Some(gpus) = &self.gpus {
            host.device_requests
                .get_or_insert_with(Vec::new)
                .push(gpus.clone());
        }
        host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawContainerOptions {
        RawContainerOptions {
            dns: vec!["10.0.0.2".into()],
            extra_hosts: vec!["gitlab.example:10.0.0.3".into()],
            shm_size: 268_435_456,
            tmpfs: HashMap::from([("/scratch".into(), "rw,size=64m".into())]),
            services_tmpfs: HashMap::from([("/var/lib/db".into(), "rw".into())]),
            sysctls: HashMap::from([("net.ipv4.ip_forward".into(), "1".into())]),
            ulimit: HashMap::from([
                ("nofile".into(), "1024:2048".into()),
                ("rtprio".into(), "99".into()),
            ]),
            oom_kill_disable: true,
            memory_swap: "1g".into(),
            cpu_shares: 512,
            service_memory: "256m".into(),
            service_cpus: "0.5".into(),
            hostname: "builder".into(),
            cgroup_parent: "/ci/build".into(),
            service_cgroup_parent: "/ci/services".into(),
            volumes_from: vec!["data-container:ro".into()],
            links: vec!["legacy-db:db".into()],
            ..RawContainerOptions::default()
        }
    }

    #[test]
    fn the_build_container_and_the_services_each_get_theirs() {
        let o = ContainerOptions::parse(&raw()).unwrap();
        let body = o.build(ContainerCreateBody::default());
        assert_eq!(body.hostname.as_deref(), Some("builder"));
        let b = body.host_config.unwrap();
        assert_eq!(b.dns.as_deref(), Some(&["10.0.0.2".to_string()][..]));
        assert_eq!(b.shm_size, Some(268_435_456));
        assert_eq!(b.tmpfs.unwrap()["/scratch"], "rw,size=64m");
        assert_eq!(b.sysctls.unwrap()["net.ipv4.ip_forward"], "1");
        let u = b.ulimits.unwrap();
        assert_eq!(
            (u[0].name.as_deref(), u[0].soft, u[0].hard),
            (Some("nofile"), Some(1024), Some(2048))
        );
        assert_eq!((u[1].soft, u[1].hard), (Some(99), Some(99)));
        assert_eq!(b.oom_kill_disable, Some(true));
        assert_eq!(b.memory_swap, Some(1 << 30));
        assert_eq!(b.cpu_shares, Some(512));
        assert_eq!(b.memory, None, "service_memory is the services'");
        assert_eq!(b.cgroup_parent.as_deref(), Some("/ci/build"));
        assert_eq!(b.volumes_from.unwrap(), ["data-container:ro"]);
        assert_eq!(b.links.unwrap(), ["legacy-db:db"]);
        let service = o.service(ContainerCreateBody::default());
        assert!(service.hostname.is_none());
        let s = service.host_config.unwrap();
        assert_eq!(s.extra_hosts.unwrap(), ["gitlab.example:10.0.0.3"]);
        assert_eq!(s.shm_size, Some(268_435_456));
        assert_eq!(s.tmpfs.unwrap().keys().collect::<Vec<_>>(), ["/var/lib/db"]);
        assert_eq!(s.memory, Some(256 << 20));
        assert_eq!(s.nano_cpus, Some(500_000_000));
        assert!(s.sysctls.is_none() && s.ulimits.is_none() && s.oom_kill_disable.is_none());
        assert_eq!(s.cgroup_parent.as_deref(), Some("/ci/services"));
        assert!(s.volumes_from.is_none() && s.links.is_none());
        // A slot cgroup set before wins.
        let slot = o.build(ContainerCreateBody {
            host_config: Some(HostConfig {
                cgroup_parent: Some("/gitlab-runner/slot-1".into()),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        });
        assert_eq!(
            slot.host_config.unwrap().cgroup_parent.as_deref(),
            Some("/gitlab-runner/slot-1")
        );
    }

    #[test]
    fn nothing_set_changes_nothing_but_the_log_driver() {
        let o = ContainerOptions::parse(&RawContainerOptions::default()).unwrap();
        let with_host = || ContainerCreateBody {
            host_config: Some(HostConfig::default()),
            ..ContainerCreateBody::default()
        };
        // GitLab names the json-file driver on every container, options or not.
        let json_file = ContainerCreateBody {
            host_config: Some(HostConfig {
                log_config: Some(HostConfigLogConfig {
                    typ: Some("json-file".into()),
                    config: None,
                }),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        assert_eq!(o.build(with_host()), json_file);
        assert_eq!(o.service(with_host()), json_file);
        assert!(o.container_labels(str::to_string).is_empty());
        assert_eq!(o.volume_driver(), None);
    }

    /// `pid_mode`, `volume_driver`, `gpus`, `container_labels` are the build container's,
    /// `service_gpus` the services', `log_options` everyone's.
    #[test]
    fn the_keys_of_the_build_container_and_of_every_container() {
        let o = ContainerOptions::parse(&RawContainerOptions {
            pid_mode: "host".into(),
            volume_driver: "local".into(),
            gpus: "all".into(),
            service_gpus: "\"device=1\"".into(),
            container_labels: HashMap::from([("team".into(), "$CI_PROJECT_NAME".into())]),
            log_options: HashMap::from([("labels".into(), "team".into())]),
            ..RawContainerOptions::default()
        })
        .unwrap();
        let b = o.build(ContainerCreateBody::default()).host_config.unwrap();
        assert_eq!(b.pid_mode.as_deref(), Some("host"));
        assert_eq!(b.volume_driver.as_deref(), Some("local"));
        assert_eq!(b.device_requests.unwrap()[0].count, Some(-1));
        let log = b.log_config.unwrap();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        assert_eq!(log.config.unwrap()["labels"], "team");
        let s = o
            .service(ContainerCreateBody::default())
            .host_config
            .unwrap();
        assert!(s.pid_mode.is_none() && s.volume_driver.is_none());
        assert_eq!(
            s.device_requests.unwrap()[0].device_ids.as_deref(),
            Some(&["1".to_string()][..])
        );
        assert_eq!(s.log_config.unwrap().config.unwrap()["labels"], "team");
        let labels = o.container_labels(|v| v.replace("$CI_PROJECT_NAME", "web"));
        assert_eq!(labels["team"], "web");
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let bad = |f: fn(&mut RawContainerOptions)| {
            let mut r = RawContainerOptions::default();
            f(&mut r);
            ContainerOptions::parse(&r).unwrap_err().to_string()
        };
        assert!(
            bad(|r| r.ulimit = HashMap::from([("nofiles".into(), "1".into())]))
                .contains("ulimit `nofiles = 1`: not a limit Docker knows")
        );
        assert!(
            bad(|r| r.service_gpus = "count=some".into())
                .starts_with("service_gpus \"count=some\": count must be an integer")
        );
        assert!(
            bad(|r| r.container_labels = HashMap::from([("flotilla.owner".into(), "x".into())]))
                .contains("flotilla's own")
        );
        assert_eq!(
            bad(|r| r.log_options = HashMap::from([
                ("max-size".into(), "10m".into()),
                ("env".into(), "A".into()),
                ("labels-regex".into(), "x".into()),
            ])),
            "invalid log options: only [\"env\" \"labels\"] are allowed, but found: \
             [\"labels-regex\" \"max-size\"]"
        );
        assert!(
            bad(|r| r.ulimit = HashMap::from([("nofile".into(), "2:1".into())]))
                .contains("soft limit is above")
        );
        assert!(
            bad(|r| r.ulimit = HashMap::from([("nofile".into(), "x".into())]))
                .contains("not a number")
        );
        assert!(bad(|r| r.memory_swap = "lots".into()).contains("memory_swap `lots`"));
        assert!(bad(|r| r.service_cpus = "two".into()).contains("service_cpus `two`"));
        assert!(bad(|r| r.shm_size = -1).contains("shm_size -1 is negative"));
    }
}
