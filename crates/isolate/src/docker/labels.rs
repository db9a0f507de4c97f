//! The labels and names of a job's containers and network (pure).
//!
//! Everything docker isolation makes carries `flotilla.managed=true`, the manager's
//! `flotilla.owner`, the job's `flotilla.job` and `flotilla.slot`, the environment's unique
//! `flotilla.env`, the manager process that made it (`flotilla.manager.host` and
//! `flotilla.manager.pid`), and (containers) a `flotilla.role`. Cleanup finds things by these
//! labels, so whatever a crash left behind is still found; [`sweepable`] decides what a sweep
//! may remove.

use std::collections::HashMap;

/// Marks what flotilla made.
pub const MANAGED: &str = "flotilla.managed";
/// The manager (configured owner name) that made it.
pub const OWNER: &str = "flotilla.owner";
/// The job's id.
pub const JOB: &str = "flotilla.job";
/// The slot on the instance.
pub const SLOT: &str = "flotilla.slot";
/// The environment's unique id (one per job run).
pub const ENV: &str = "flotilla.env";
/// `build` or `service`.
pub const ROLE: &str = "flotilla.role";
/// The host name of the manager process that made it.
pub const MANAGER_HOST: &str = "flotilla.manager.host";
/// The pid of the manager process that made it.
pub const MANAGER_PID: &str = "flotilla.manager.pid";

/// The manager process that makes things: its host name and pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    /// The host name.
    pub host: String,
    /// The pid.
    pub pid: u32,
}

impl Manager {
    /// This process.
    pub fn current() -> Manager {
        static CURRENT: std::sync::OnceLock<Manager> = std::sync::OnceLock::new();
        CURRENT
            .get_or_init(|| Manager {
                host: nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                pid: std::process::id(),
            })
            .clone()
    }
}

/// Whether a sweep by `me` may remove a thing with these labels: not when the environment is
/// live in this process (`live`), not when another manager process on this host made it and
/// is still running (`alive`); otherwise (our own leftover, a dead process's, one from another
/// host under our owner name) yes.
pub fn sweepable(
    labels: &HashMap<String, String>,
    me: &Manager,
    live: &dyn Fn(&str) -> bool,
    alive: &dyn Fn(u32) -> bool,
) -> bool {
    if labels.get(ENV).is_some_and(|e| live(e)) {
        return false;
    }
    let host = labels.get(MANAGER_HOST);
    let pid = labels.get(MANAGER_PID).and_then(|p| p.parse::<u32>().ok());
    match (host, pid) {
        (Some(h), Some(p)) if *h == me.host && p != me.pid => !alive(p),
        _ => true,
    }
}

/// What a container is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The job's build container.
    Build,
    /// The service with this index in `services[]`.
    Service(usize),
    /// The helper container ([`super::helper`]).
    Helper,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Build => "build",
            Role::Service(_) => "service",
            Role::Helper => "helper",
        }
    }
}

/// The identity of one job's environment on an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLabels {
    /// The manager's owner name.
    pub owner: String,
    /// The job id.
    pub job_id: i64,
    /// The slot.
    pub slot: usize,
    /// The environment's unique id.
    pub env_id: String,
    /// The manager process making it.
    pub manager: Manager,
}

impl JobLabels {
    /// The labels of a network (`role == None`) or a container.
    pub fn labels(&self, role: Option<Role>) -> HashMap<String, String> {
        let mut m = HashMap::from([
            (MANAGED.to_string(), "true".to_string()),
            (OWNER.to_string(), self.owner.clone()),
            (JOB.to_string(), self.job_id.to_string()),
            (SLOT.to_string(), self.slot.to_string()),
            (ENV.to_string(), self.env_id.clone()),
            (MANAGER_HOST.to_string(), self.manager.host.clone()),
            (MANAGER_PID.to_string(), self.manager.pid.to_string()),
        ]);
        if let Some(r) = role {
            m.insert(ROLE.to_string(), r.label().to_string());
        }
        m
    }

    /// A filter selecting exactly this environment's containers or networks.
    pub fn env_filter(&self) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_string(),
            vec![format!("{MANAGED}=true"), format!("{ENV}={}", self.env_id)],
        )])
    }

    /// The common prefix of this environment's names.
    fn prefix(&self) -> String {
        let short: String = self.env_id.chars().take(8).collect();
        format!("flotilla-job-{}-slot-{}-{short}", self.job_id, self.slot)
    }

    /// The container name for `role`.
    pub fn container_name(&self, role: Role) -> String {
        match role {
            Role::Build => format!("{}-build", self.prefix()),
            Role::Service(i) => format!("{}-svc-{i}", self.prefix()),
            Role::Helper => format!("{}-helper", self.prefix()),
        }
    }

    /// The per-job network's name.
    pub fn network_name(&self) -> String {
        format!("{}-net", self.prefix())
    }
}

/// A filter selecting every job container or network of `owner` (environment label present).
pub fn owner_filter(owner: &str) -> HashMap<String, Vec<String>> {
    HashMap::from([(
        "label".to_string(),
        vec![
            format!("{MANAGED}=true"),
            format!("{OWNER}={owner}"),
            ENV.to_string(),
        ],
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_names_identify_the_environment() {
        let l = JobLabels {
            owner: "runner-1".into(),
            job_id: 77,
            slot: 3,
            env_id: "0123456789abcdef".into(),
            manager: Manager {
                host: "h".into(),
                pid: 42,
            },
        };
        let c = l.labels(Some(Role::Service(1)));
        assert_eq!(c[MANAGED], "true");
        assert_eq!(c[OWNER], "runner-1");
        assert_eq!(c[JOB], "77");
        assert_eq!(c[SLOT], "3");
        assert_eq!(c[ENV], "0123456789abcdef");
        assert_eq!(c[ROLE], "service");
        assert_eq!(c[MANAGER_HOST], "h");
        assert_eq!(c[MANAGER_PID], "42");
        assert!(!l.labels(None).contains_key(ROLE));
        assert_eq!(
            l.container_name(Role::Build),
            "flotilla-job-77-slot-3-01234567-build"
        );
        assert_eq!(
            l.container_name(Role::Service(2)),
            "flotilla-job-77-slot-3-01234567-svc-2"
        );
        assert_eq!(l.network_name(), "flotilla-job-77-slot-3-01234567-net");
        assert_eq!(
            l.env_filter()["label"],
            vec!["flotilla.managed=true", "flotilla.env=0123456789abcdef"]
        );
        assert_eq!(
            owner_filter("o")["label"],
            vec!["flotilla.managed=true", "flotilla.owner=o", "flotilla.env"]
        );
    }

    #[test]
    fn sweeps_spare_live_environments_and_running_managers() {
        let me = Manager {
            host: "here".into(),
            pid: 10,
        };
        let labels = |host: &str, pid: &str| {
            HashMap::from([
                (ENV.to_string(), "e1".to_string()),
                (MANAGER_HOST.to_string(), host.to_string()),
                (MANAGER_PID.to_string(), pid.to_string()),
            ])
        };
        let none_live = |_: &str| false;
        let all_alive = |_: u32| true;
        let none_alive = |_: u32| false;
        // Ours and not live: a leftover.
        assert!(sweepable(
            &labels("here", "10"),
            &me,
            &none_live,
            &all_alive
        ));
        // Ours and live: never.
        assert!(!sweepable(
            &labels("here", "10"),
            &me,
            &|e| e == "e1",
            &none_alive
        ));
        // Another process here: only once it is gone.
        assert!(!sweepable(
            &labels("here", "11"),
            &me,
            &none_live,
            &all_alive
        ));
        assert!(sweepable(
            &labels("here", "11"),
            &me,
            &none_live,
            &none_alive
        ));
        // Another host (same owner) or no manager labels: a leftover.
        assert!(sweepable(
            &labels("there", "11"),
            &me,
            &none_live,
            &all_alive
        ));
        assert!(sweepable(&HashMap::new(), &me, &none_live, &all_alive));
    }
}
