//! The top level of `config.toml`: GitLab Runner's global keys, flotilla's own `[flotilla]`
//! table, and the `[[runners]]` list.

use super::duration;
use super::redact;
use super::runner::RunnerConfig;
use flotilla_fleet::Secret;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// GitLab Runner's log levels, read as logrus's `ParseLevel` reads them (any case; `warning`
/// for `warn`), which is what GitLab Runner takes for `log_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum LogLevel {
    /// `trace`.
    Trace,
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `warn`.
    Warn,
    /// `error`.
    Error,
    /// `fatal` (logged as error).
    Fatal,
    /// `panic` (logged as error).
    Panic,
}

impl TryFrom<String> for LogLevel {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "trace" => LogLevel::Trace,
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warn" | "warning" => LogLevel::Warn,
            "error" => LogLevel::Error,
            "fatal" => LogLevel::Fatal,
            "panic" => LogLevel::Panic,
            _ => {
                return Err(format!(
                    "unknown log_level `{s}`; expected trace, debug, info, warn, error, fatal \
                     or panic"
                ));
            }
        })
    }
}

impl LogLevel {
    /// The matching `tracing` filter directive.
    pub fn as_filter(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error | LogLevel::Fatal | LogLevel::Panic => "error",
        }
    }
}

/// GitLab Runner's log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable, with colours on a terminal.
    Runner,
    /// Plain text.
    Text,
    /// One JSON object per line.
    Json,
}

/// The whole configuration file. Unset keys take GitLab Runner's defaults; flotilla's own
/// settings are in [`FlotillaConfig`] (`[flotilla]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Most jobs at once across all runners (default 1).
    #[serde(deserialize_with = "super::count::deserialize")]
    pub concurrent: u32,
    /// How often each runner asks GitLab for jobs (integer seconds or a duration; default 3s,
    /// and 0 means the default, like GitLab).
    #[serde(with = "duration::seconds")]
    pub check_interval: Duration,
    /// How long a graceful shutdown may take (integer seconds or a duration; default 30s, 0
    /// means the default).
    #[serde(with = "duration::seconds")]
    pub shutdown_timeout: Duration,
    /// The log level, unless `--log-level` or `RUST_LOG` says otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    /// The log format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Where `/metrics`, `/debug/health` and the status page are served (GitLab's
    /// `<host>:<port>`; `:9252` is every interface). Unset: not served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen_address: Option<String>,
    /// flotilla extension: `[flotilla]`, settings GitLab Runner does not have.
    pub flotilla: FlotillaConfig,
    /// `[[runners]]`.
    pub runners: Vec<RunnerConfig>,
}

/// The default `concurrent`.
pub const DEFAULT_CONCURRENT: u32 = 1;
/// The default `check_interval`.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(3);
/// The default `shutdown_timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for Config {
    fn default() -> Self {
        Config {
            concurrent: DEFAULT_CONCURRENT,
            check_interval: DEFAULT_CHECK_INTERVAL,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            log_level: None,
            log_format: None,
            listen_address: None,
            flotilla: FlotillaConfig::default(),
            runners: Vec::new(),
        }
    }
}

/// flotilla extension: the `[flotilla]` table. Every key must be known.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FlotillaConfig {
    /// flotilla extension: where the SQLite store (ledgers, minted credentials, job records)
    /// lives. Loading fills it in when unset (`config::state_location`: `FLOTILLA_STATE_DIR`,
    /// an earlier store beside the configuration, `/var/lib/flotilla` as root, the XDG state
    /// home otherwise) and makes a relative path absolute against the configuration file's
    /// directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// flotilla extension: the token the status page asks for. Needed to see the page on a
    /// `listen_address` other than loopback; when set, asked for on loopback too. Printed as
    /// `[REDACTED]`.
    #[serde(
        serialize_with = "redact::secret_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub status_token: Option<Secret<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_defaults() {
        let c = Config::default();
        assert_eq!(c.concurrent, 1);
        assert_eq!(c.check_interval, Duration::from_secs(3));
        assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
        assert!(c.runners.is_empty());
        assert_eq!(c.flotilla, FlotillaConfig::default());
    }

    #[test]
    fn log_levels_map_to_filters() {
        assert_eq!(LogLevel::Fatal.as_filter(), "error");
        assert_eq!(LogLevel::Debug.as_filter(), "debug");
    }

    /// Issue 32 (4): the spellings GitLab Runner takes (logrus `ParseLevel`) load; before,
    /// `warning`, `trace` and capitalised values were load errors.
    #[test]
    fn log_levels_as_gitlab_reads_them() {
        for (written, level) in [
            ("warning", LogLevel::Warn),
            ("Warn", LogLevel::Warn),
            ("trace", LogLevel::Trace),
            ("DEBUG", LogLevel::Debug),
            ("Info", LogLevel::Info),
            ("panic", LogLevel::Panic),
        ] {
            let c: Config = toml::from_str(&format!("log_level = \"{written}\"")).unwrap();
            assert_eq!(c.log_level, Some(level), "{written}");
        }
        let e = toml::from_str::<Config>("log_level = \"loud\"").unwrap_err();
        assert!(e.message().contains("unknown log_level `loud`"), "{e}");
    }
}
