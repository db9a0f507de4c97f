//! The lifecycle state of one instance, as a provider reports it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The state of an instance in a provider's listing (fleeting's `provider.State`).
///
/// ```text
/// Creating -> Running -> Deleting -> Deleted
///     \-> Timeout (never became usable; the scaler deletes it)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Requested and being created; not usable yet.
    Creating,
    /// Up and usable (the scaler still runs its ready-up hook before offering slots).
    Running,
    /// Being deleted.
    Deleting,
    /// Gone. Providers may report this once before the instance leaves the listing.
    Deleted,
    /// Creation failed or took too long; the instance will never become usable.
    Timeout,
}

impl State {
    /// The lowercase name used in logs, metrics and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Creating => "creating",
            State::Running => "running",
            State::Deleting => "deleting",
            State::Deleted => "deleted",
            State::Timeout => "timeout",
        }
    }

    /// Parses [`State::as_str`]'s output.
    pub fn parse(s: &str) -> Option<State> {
        Some(match s {
            "creating" => State::Creating,
            "running" => State::Running,
            "deleting" => State::Deleting,
            "deleted" => State::Deleted,
            "timeout" => State::Timeout,
            _ => return None,
        })
    }

    /// Whether the instance is still on its way to being usable or usable (it counts towards
    /// the fleet's size and towards `max_instances`).
    pub fn is_live(self) -> bool {
        matches!(self, State::Creating | State::Running)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            State::Creating,
            State::Running,
            State::Deleting,
            State::Deleted,
            State::Timeout,
        ] {
            assert_eq!(State::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(State::parse("suspended"), None);
    }

    #[test]
    fn live_states() {
        assert!(State::Creating.is_live());
        assert!(State::Running.is_live());
        assert!(!State::Deleting.is_live());
        assert!(!State::Deleted.is_live());
        assert!(!State::Timeout.is_live());
    }
}
