//! How a container's Docker state maps to an instance state (pure).

use flotilla_fleet::State;
use std::time::Duration;

/// What the provider saw of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed<'a> {
    /// Docker's state word: `created`, `running`, `paused`, `restarting`, `removing`,
    /// `exited`, `dead` (and `stopping` on newer engines).
    pub docker_state: &'a str,
    /// Whether sshd answered on the published port (an SSH banner was read).
    pub ssh_ready: bool,
    /// Time since the container was created.
    pub age: Duration,
}

/// Maps a container to the state the scaler sees.
///
/// | Docker state              | instance state                                             |
/// |---------------------------|------------------------------------------------------------|
/// | `created`, `restarting`   | `creating`; `timeout` once older than the startup timeout   |
/// | `running`                 | `running` once sshd sent its banner; until then `creating`, and `timeout` once older than the startup timeout |
/// | `paused`                  | `running` (it exists and will resume; heartbeats fail meanwhile) |
/// | `removing`                | `deleting`                                                 |
/// | `exited`, `dead`, `stopping` | `timeout`: it will never be usable again, the scaler deletes it |
/// | anything else             | as `created`                                               |
///
/// `exited` is reported as `timeout` rather than `deleted` on purpose: the container still
/// exists and holds resources until it is removed, and `timeout` makes the scaler remove it.
/// Containers that left the listing are reported `deleted` once by the provider itself.
pub fn instance_state(seen: &Observed<'_>, startup_timeout: Duration) -> State {
    let waiting = || {
        if seen.age > startup_timeout {
            State::Timeout
        } else {
            State::Creating
        }
    };
    match seen.docker_state {
        "running" if seen.ssh_ready => State::Running,
        "running" => waiting(),
        "paused" => State::Running,
        "removing" => State::Deleting,
        "exited" | "dead" | "stopping" => State::Timeout,
        _ => waiting(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(docker_state: &str, ssh_ready: bool, age_secs: u64) -> State {
        instance_state(
            &Observed {
                docker_state,
                ssh_ready,
                age: Duration::from_secs(age_secs),
            },
            Duration::from_secs(60),
        )
    }

    #[test]
    fn mapping() {
        assert_eq!(st("created", false, 1), State::Creating);
        assert_eq!(st("created", false, 61), State::Timeout);
        assert_eq!(st("restarting", false, 1), State::Creating);
        assert_eq!(st("running", false, 1), State::Creating);
        assert_eq!(st("running", false, 61), State::Timeout);
        assert_eq!(st("running", true, 1), State::Running);
        assert_eq!(st("running", true, 10_000), State::Running);
        assert_eq!(st("paused", false, 1), State::Running);
        assert_eq!(st("removing", false, 1), State::Deleting);
        assert_eq!(st("exited", true, 1), State::Timeout);
        assert_eq!(st("dead", false, 1), State::Timeout);
        assert_eq!(st("stopping", false, 1), State::Timeout);
        assert_eq!(st("", false, 1), State::Creating);
        assert_eq!(st("something-new", false, 100), State::Timeout);
    }
}
