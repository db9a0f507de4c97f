//! The plugin provider's `plugin_config`, parsed and checked.

use flotilla_fleet::FleetError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The plugin provider's settings: the `plugin_config` table of its instance group.
///
/// ```toml
/// [runners.autoscaler.plugin_config]
/// command = "/usr/local/bin/my-fleet-plugin"   # the plugin executable (absolute path)
/// args = ["--verbose"]
/// env = { AWS_PROFILE = "ci" }                 # added to flotilla's own environment
/// auto_mtls = true                             # go-plugin's AutoMTLS on the connection
/// call_timeout = 30                            # seconds every call may take
/// start_timeout = 10                           # seconds from start to a healthy plugin
/// restart_backoff = 0.5                        # seconds; doubles per failed restart
/// restart_backoff_max = 30
///
/// [runners.autoscaler.plugin_config.config]    # the plugin's own settings, sent in Init
/// name = "fleet-1"
/// ```
///
/// Unknown keys are refused, so a typo does not silently fall back to a default.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSettings {
    /// The plugin executable.
    pub command: PathBuf,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to the environment it inherits from flotilla.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The plugin's own configuration, sent as JSON in `Init` (an empty table by default).
    #[serde(default = "empty_table")]
    pub config: serde_json::Value,
    /// Whether the connection is protected with go-plugin's AutoMTLS (each side makes a
    /// throw-away certificate and accepts only the other's). Off by default, as in
    /// go-plugin; a plugin that cannot do it is spoken to in plain text with a warning.
    #[serde(default)]
    pub auto_mtls: bool,
    /// Seconds every call to the plugin may take, restart included.
    #[serde(default = "default_call_timeout")]
    pub call_timeout: f64,
    /// Seconds from starting the plugin to its handshake line and a healthy service.
    #[serde(default = "default_start_timeout")]
    pub start_timeout: f64,
    /// Seconds before restarting a plugin that failed again soon after a restart; the wait
    /// doubles with each failure in a row. The first restart after a plugin that ran well
    /// is immediate.
    #[serde(default = "default_restart_backoff")]
    pub restart_backoff: f64,
    /// The longest wait between restarts, in seconds.
    #[serde(default = "default_restart_backoff_max")]
    pub restart_backoff_max: f64,
}

// Not derived: `env` and `config` are where a plugin's credentials go.
impl std::fmt::Debug for PluginSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSettings")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("config", &"[REDACTED]")
            .field("auto_mtls", &self.auto_mtls)
            .field("call_timeout", &self.call_timeout)
            .field("start_timeout", &self.start_timeout)
            .field("restart_backoff", &self.restart_backoff)
            .field("restart_backoff_max", &self.restart_backoff_max)
            .finish()
    }
}

fn empty_table() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}
fn default_call_timeout() -> f64 {
    30.0
}
fn default_start_timeout() -> f64 {
    10.0
}
fn default_restart_backoff() -> f64 {
    0.5
}
fn default_restart_backoff_max() -> f64 {
    30.0
}

impl PluginSettings {
    /// Reads and checks `plugin_config`.
    pub fn from_config(value: &serde_json::Value) -> Result<PluginSettings, FleetError> {
        let s: PluginSettings = serde_json::from_value(value.clone())
            .map_err(|e| FleetError::Config(format!("plugin_config: {e}")))?;
        if !s.command.is_absolute() {
            return Err(FleetError::Config(format!(
                "plugin_config.command {:?} must be an absolute path: flotilla does not search \
                 PATH for the program it hands its fleet to",
                s.command
            )));
        }
        if !s.config.is_object() {
            return Err(FleetError::Config(
                "plugin_config.config must be a table".into(),
            ));
        }
        for (name, v) in [
            ("call_timeout", s.call_timeout),
            ("start_timeout", s.start_timeout),
            ("restart_backoff_max", s.restart_backoff_max),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(FleetError::Config(format!(
                    "plugin_config.{name} must be a positive number of seconds, not {v}"
                )));
            }
        }
        if !(s.restart_backoff.is_finite() && s.restart_backoff >= 0.0) {
            return Err(FleetError::Config(format!(
                "plugin_config.restart_backoff must be zero or more seconds, not {}",
                s.restart_backoff
            )));
        }
        Ok(s)
    }

    /// [`PluginSettings::call_timeout`] as a duration.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.call_timeout)
    }

    /// [`PluginSettings::start_timeout`] as a duration.
    pub fn start_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.start_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_a_full_table() {
        let s = PluginSettings::from_config(&json!({"command": "/bin/p"})).unwrap();
        assert_eq!(s.config, json!({}));
        assert!(!s.auto_mtls);
        assert_eq!(s.call_timeout(), Duration::from_secs(30));
        let s = PluginSettings::from_config(&json!({
            "command": "/bin/p", "args": ["-v"], "env": {"A": "1"}, "auto_mtls": true,
            "call_timeout": 2, "start_timeout": 0.5, "restart_backoff": 0,
            "restart_backoff_max": 4, "config": {"name": "x"}
        }))
        .unwrap();
        assert_eq!(s.args, vec!["-v"]);
        assert_eq!(s.start_timeout(), Duration::from_millis(500));
        assert_eq!(s.config, json!({"name": "x"}));
    }

    #[test]
    fn debug_shows_no_credentials() {
        let s = PluginSettings::from_config(&json!({
            "command": "/bin/p", "env": {"CLOUD_SECRET": "env-secret-1"},
            "config": {"token": "config-secret-2"}
        }))
        .unwrap();
        let dbg = format!("{s:?}");
        assert!(dbg.contains("CLOUD_SECRET"), "{dbg}");
        assert!(
            !dbg.contains("env-secret-1") && !dbg.contains("config-secret-2"),
            "{dbg}"
        );
    }

    #[test]
    fn bad_tables_are_refused_with_what_is_wrong() {
        for (value, needle) in [
            (json!({}), "command"),
            (json!({"command": "p"}), "absolute"),
            (json!({"command": "/p", "comand": 1}), "comand"),
            (json!({"command": "/p", "call_timeout": 0}), "call_timeout"),
            (
                json!({"command": "/p", "restart_backoff": -1}),
                "restart_backoff",
            ),
            (json!({"command": "/p", "config": [1]}), "config"),
        ] {
            let e = PluginSettings::from_config(&value).unwrap_err().to_string();
            assert!(e.contains(needle), "{value}: {e}");
        }
    }
}
