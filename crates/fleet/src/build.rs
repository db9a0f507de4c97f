//! What a provider is built from when the configuration names it.

use std::path::{Path, PathBuf};

/// A provider's configuration as the runner gives it: its `plugin_config` table and the
/// facts about the runner that serve as defaults.
#[derive(Debug, Clone, Copy)]
pub struct ProviderConfig<'a> {
    /// `[runners.autoscaler.plugin_config]`, as JSON (an empty object when not set).
    pub plugin_config: &'a serde_json::Value,
    /// The runner's name: the group's name unless `plugin_config` names one.
    pub runner_name: &'a str,
    /// Where the provider may keep what must survive a restart (a generated key, say);
    /// `None` for a throw-away fleet, which keeps nothing.
    pub state_dir: Option<&'a Path>,
}

impl ProviderConfig<'_> {
    /// `<state_dir>/<kind>/<runner name>.<extension>`, the runner's name made safe for a
    /// file name; `None` without a state directory.
    pub fn state_file(&self, kind: &str, extension: &str) -> Option<PathBuf> {
        let dir = self.state_dir?;
        Some(
            dir.join(kind)
                .join(format!("{}.{extension}", safe_file_name(self.runner_name))),
        )
    }
}

/// `name` with every character but ASCII letters, digits, `-` and `_` replaced by `_`, so
/// that a runner's name can be part of a file name.
pub fn safe_file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_are_named_after_the_runner_made_safe() {
        let value = serde_json::json!({});
        let mut config = ProviderConfig {
            plugin_config: &value,
            runner_name: "docker fleet/1",
            state_dir: Some(Path::new("/var/lib/flotilla")),
        };
        assert_eq!(
            config.state_file("keys", "key").unwrap(),
            Path::new("/var/lib/flotilla/keys/docker_fleet_1.key")
        );
        config.state_dir = None;
        assert_eq!(config.state_file("keys", "key"), None);
    }
}
