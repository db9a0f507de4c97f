//! Who holds a lease: a random id per manager process run, and where it runs.

use std::fmt;

/// Who holds a lease: a random id per process run, plus where it runs for the error message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseHolder {
    /// Random, unique per manager process run.
    pub id: String,
    /// The host the manager runs on.
    pub hostname: String,
    /// Its process id.
    pub pid: u32,
}

impl LeaseHolder {
    /// A fresh holder for this process: a random id, this host's name and this pid.
    pub fn this_process() -> Self {
        LeaseHolder {
            id: uuid::Uuid::new_v4().simple().to_string(),
            hostname: hostname(),
            pid: std::process::id(),
        }
    }
}

impl fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the manager with pid {} on {} (holder {})",
            self.pid, self.hostname, self.id
        )
    }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".to_string())
}
