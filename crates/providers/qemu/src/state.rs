//! What a VM's directory and process mean for the listing (pure).

use flotilla_fleet::State;
use std::time::Duration;

/// What the provider saw of one VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// Its QEMU process is alive.
    pub alive: bool,
    /// sshd answered on the forwarded port.
    pub ssh_ready: bool,
    /// This provider is starting it right now (its process may not have written its pid).
    pub starting: bool,
    /// Time since it was made.
    pub age: Duration,
}

/// Maps a VM to the state the scaler sees.
///
/// | seen                                   | state                                    |
/// |----------------------------------------|------------------------------------------|
/// | process alive, sshd answers            | `running`                                |
/// | process alive, sshd silent             | `creating`; `timeout` past the startup timeout |
/// | being started by this provider         | `creating`                               |
/// | no live process (it ended, or crashed) | `timeout`: never usable again; the scaler deletes it, and deleting removes its directory |
pub fn vm_state(seen: &Observed, startup_timeout: Duration) -> State {
    match (seen.alive, seen.ssh_ready) {
        (true, true) => State::Running,
        (true, false) if seen.age <= startup_timeout => State::Creating,
        (true, false) => State::Timeout,
        (false, _) if seen.starting => State::Creating,
        (false, _) => State::Timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(alive: bool, ssh_ready: bool, starting: bool, age: u64) -> State {
        vm_state(
            &Observed {
                alive,
                ssh_ready,
                starting,
                age: Duration::from_secs(age),
            },
            Duration::from_secs(60),
        )
    }

    #[test]
    fn mapping() {
        assert_eq!(st(true, true, false, 1), State::Running);
        assert_eq!(st(true, true, false, 1000), State::Running);
        assert_eq!(st(true, false, false, 10), State::Creating);
        assert_eq!(st(true, false, false, 61), State::Timeout);
        assert_eq!(st(false, false, true, 1), State::Creating);
        assert_eq!(st(false, false, false, 1), State::Timeout);
        assert_eq!(
            st(false, true, false, 1),
            State::Timeout,
            "a stale banner counts for nothing"
        );
    }
}
