//! flotilla's configuration: a superset of GitLab Runner's `config.toml`.
//!
//! An existing `[[runners]]` entry with `executor = "docker-autoscaler"` or `"instance"` and its
//! `[runners.autoscaler]` table loads unchanged. flotilla's own settings live in clearly named
//! places: the top-level `[flotilla]` table ([`FlotillaConfig`]), `[runners.autoscaler]
//! isolation` ([`IsolationLevel`]), and `executor = "flotilla"`.
//!
//! Loading ([`Config::load`], [`Config::from_str`]):
//! 1. TOML syntax errors are reported with `file:line:col` (all of them, not just the first).
//! 2. Decoding: a value of the wrong type or an undecodable value (a bad duration, an unknown
//!    executor) is an error at its position.
//! 3. Unknown keys: inside `[runners.autoscaler]` (and its sub-tables) and `[flotilla]` they
//!    are errors with a "did you mean" suggestion; anywhere else they are GitLab keys flotilla
//!    does not use (`[session_server]`, `[runners.cache]`, ...) and each is reported once as a
//!    [`Warning`].
//! 4. Normalization: GitLab's "0 means default" values are replaced by the defaults, the
//!    isolation level is filled in, relative paths are made absolute against the
//!    configuration file's directory.
//! 5. Semantic checks (`capacity_per_instance >= 1`, `idle_time >= 1s`, cron periods, time
//!    zones, `privileged = false`, `url`/`token` present, ...): every error is reported; a
//!    `concurrent` that does not match the fleets' size is a warning.
//!
//! The loaded [`Config`] serialises back to TOML with every secret printed as `[REDACTED]`
//! ([`Config::to_redacted_toml`]).

mod autoscaler;
mod connector;
mod count;
pub(crate) mod cron;
mod duration;
mod error;
mod global;
mod listen;
pub mod location;
mod redact;
mod runner;
pub(crate) mod schema;
pub(crate) mod source;
pub mod state_location;
mod validate;

pub use autoscaler::{
    ALWAYS, AutoscalerConfig, DEFAULT_SCALE_THROTTLE_LIMIT, IsolationLevel, IsolationLevels,
    MIN_IDLE_TIME, Policy, ScaleThrottle, StateStorage, VmIsolation,
};
pub use connector::ConnectorSettings;
pub use duration::{DurationError, format_go_duration, parse_go_duration};
pub use error::{ConfigError, Location, Warning};
pub use flotilla_isolate::cgroup::CgroupSettings;
pub use flotilla_isolate::docker::{DockerSettings, PullPolicy};
pub use flotilla_isolate::microvm::settings::MicrovmSettings;
pub use flotilla_isolate::vm::settings::VmSettings;
pub use global::{
    Config, DEFAULT_CHECK_INTERVAL, DEFAULT_CONCURRENT, DEFAULT_SHUTDOWN_TIMEOUT, FlotillaConfig,
    LogFormat, LogLevel,
};
pub use listen::{ListenAddress, ListenHost};
pub use redact::REDACTED;
pub use runner::{
    DEFAULT_SLOT_CGROUP_TEMPLATE, DOCKER_MACHINE_EXECUTORS, Executor, InstanceConfig, RunnerConfig,
    expand_slot,
};

use source::{KeyPath, SourceMap, Target};
use std::path::{Path, PathBuf};
use toml::de::DeTable;
use validate::Severity;

/// A configuration that loaded, with what deserves the operator's attention.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The normalized configuration.
    pub config: Config,
    /// Warnings, in file order: unused GitLab keys, sizing mismatches.
    pub warnings: Vec<Warning>,
}

impl Config {
    /// Reads and loads a configuration file. Messages name the file as given; relative paths
    /// inside it are resolved against its directory.
    pub fn load(path: impl AsRef<Path>) -> Result<Loaded, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        load_text(&text, &path.display().to_string(), &base_dir_of(&absolute))
    }

    /// Loads a configuration from text. `path` names the file in messages, and its directory
    /// is the base for relative paths in the configuration (`key_path`, `state_dir`).
    pub fn from_str(text: &str, path: impl AsRef<Path>) -> Result<Loaded, ConfigError> {
        let path = path.as_ref();
        load_text(text, &path.display().to_string(), &base_dir_of(path))
    }

    /// The configuration as TOML, every secret (`token`, `password`, credential-like keys of
    /// `plugin_config`, environment values) printed as `[REDACTED]`.
    pub fn to_redacted_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string_pretty(self)
    }
}

/// Parses, decodes, normalizes and checks `text`; `file` names it in messages, `base_dir` is
/// where relative paths inside it are resolved.
fn load_text(text: &str, file: &str, base_dir: &Path) -> Result<Loaded, ConfigError> {
    let (root, syntax_errors) = DeTable::parse_recoverable(text);
    let map = SourceMap::new(file, text, root);
    if !syntax_errors.is_empty() {
        let errors = syntax_errors
            .iter()
            .map(|e| ConfigError::Syntax {
                location: map.location_of_offset(e.span().map_or(0, |s| s.start)),
                message: e.message().to_string(),
            })
            .collect();
        return Err(
            ConfigError::from_list(errors).unwrap_or_else(|| ConfigError::Syntax {
                location: map.location_of_offset(0),
                message: "unparsable".into(),
            }),
        );
    }

    let mut ignored: Vec<KeyPath> = Vec::new();
    let decoded: Result<Config, toml::de::Error> = toml::Deserializer::parse(text)
        .and_then(|de| serde_ignored::deserialize(de, |p| ignored.push(KeyPath::from_ignored(&p))));

    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for path in &ignored {
        classify_unknown(&map, path, &mut errors, &mut warnings);
    }
    let mut config = match decoded {
        Ok(config) => config,
        Err(e) => {
            errors.push(ConfigError::Decode {
                location: map.location_of_offset(e.span().map_or(0, |s| s.start)),
                message: e.message().to_string(),
            });
            return Err(
                ConfigError::from_list(errors).unwrap_or_else(|| ConfigError::Decode {
                    location: map.location_of_offset(0),
                    message: "undecodable".into(),
                }),
            );
        }
    };

    if let Some(message) = normalize(&mut config, base_dir) {
        warnings.push(Warning {
            location: map.location_of_offset(0),
            message,
        });
    }
    for finding in validate::validate(&config) {
        let location = map.locate(&finding.path, finding.target);
        match finding.severity {
            Severity::Error => errors.push(ConfigError::Invalid {
                location,
                message: finding.message,
            }),
            Severity::Warning => warnings.push(Warning {
                location,
                message: finding.message,
            }),
        }
    }

    if let Some(error) = ConfigError::from_list(errors) {
        return Err(error);
    }
    warnings.sort_by_key(|w| (w.location.line, w.location.column));
    Ok(Loaded { config, warnings })
}

/// The directory relative paths in the configuration are resolved against.
fn base_dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Sorts an ignored key into an error (strict tables) or a warning (GitLab keys flotilla does
/// not use).
fn classify_unknown(
    map: &SourceMap<'_>,
    path: &KeyPath,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) {
    let location = map.locate(path, Target::Key);
    let Some((parent, key)) = path.split_last_key() else {
        // An ignored array element: not produced by our types; report it as unused.
        warnings.push(Warning {
            location,
            message: format!("`{path}` is not used by flotilla; ignored"),
        });
        return;
    };
    let table = schema::table_at(&parent);
    let known: &[&str] = table.as_ref().map_or(&[], |t| t.keys);
    let strict = table
        .as_ref()
        .map_or_else(|| schema::is_strict_area(path), |t| t.strict);
    if strict {
        let suggestion = schema::suggest(key, known)
            .or_else(|| misplaced_policy_key(&parent, key))
            .or_else(|| {
                // flotilla once read it there; GitLab reads it at the top level.
                (parent.table_name() == "flotilla" && key == "listen_address")
                    .then(|| "listen_address at the top level (GitLab's key)".to_string())
            });
        errors.push(ConfigError::UnknownKey {
            location,
            key: key.to_string(),
            table: parent.table_name(),
            suggestion,
        });
        return;
    }
    let table_name = parent.table_name();
    let place = if table_name.is_empty() {
        "at the top level".to_string()
    } else {
        format!("in [{table_name}]")
    };
    let mut message = format!("`{key}` {place} is not used by flotilla; ignored");
    if let Some(why) = schema::unused_reason(&table_name, key) {
        message.push_str(&format!(" ({why})"));
    } else if let Some(s) = schema::suggest(key, known) {
        message.push_str(&format!(" (did you mean `{s}`?)"));
    }
    warnings.push(Warning { location, message });
}

/// A policy key written directly in `[runners.autoscaler]` (a docker-machine habit).
fn misplaced_policy_key(parent: &KeyPath, key: &str) -> Option<String> {
    let policy = parent.key("policy").index(0);
    let is_policy_key = schema::table_at(&policy).is_some_and(|t| t.keys.contains(&key));
    let is_autoscaler = parent.keys().collect::<Vec<_>>() == ["runners", "autoscaler"];
    (is_autoscaler && is_policy_key).then(|| format!("[[runners.autoscaler.policy]] {key}"))
}

/// Replaces GitLab's "0 means default" values with the defaults, fills in the isolation level,
/// the state directory ([`state_location`]) and makes relative paths absolute against
/// `base_dir`. Returns what to say of the state directory, if anything.
fn normalize(config: &mut Config, base_dir: &Path) -> Option<String> {
    if config.check_interval.is_zero() {
        config.check_interval = DEFAULT_CHECK_INTERVAL;
    }
    if config.shutdown_timeout.is_zero() {
        config.shutdown_timeout = DEFAULT_SHUTDOWN_TIMEOUT;
    }
    // GitLab Runner: an empty listen_address serves nothing.
    if config
        .listen_address
        .as_deref()
        .is_some_and(|a| a.trim().is_empty())
    {
        config.listen_address = None;
    }
    let resolve = |p: &Path| -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base_dir.join(p)
        }
    };
    let mut state_note = None;
    config.flotilla.state_dir = Some(match config.flotilla.state_dir.as_deref() {
        Some(dir) => resolve(dir),
        None => {
            let (dir, reason, default) = state_location::for_process(base_dir);
            if reason == state_location::Reason::Earlier && dir != default {
                state_note = Some(format!(
                    "state_dir is not set: using {}, where earlier flotilla versions kept the \
                     state, as a store is there (the default is now {}); set state_dir to say \
                     which",
                    dir.display(),
                    default.display()
                ));
            }
            dir
        }
    });
    for runner in &mut config.runners {
        if runner.request_concurrency == 0 {
            runner.request_concurrency = 1;
        }
        if let Some(dir) = runner.cache_dir.take() {
            runner.cache_dir = Some(resolve(&dir));
        }
        let isolation = runner.isolation_levels();
        let Some(a) = runner.autoscaler.as_mut() else {
            continue;
        };
        a.isolation = Some(isolation);
        for connector in [
            &mut a.connector_config,
            &mut a.vm_isolation.connector_config,
        ] {
            if let Some(key) = connector.key_path.take() {
                connector.key_path = Some(resolve(&key));
            }
        }
        if let Some(dir) = a.state_storage.dir.take() {
            a.state_storage.dir = Some(resolve(&dir));
        }
    }
    state_note
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MINIMAL: &str = r#"
concurrent = 2
check_interval = 0
shutdown_timeout = 0

[[runners]]
  name = "a"
  url = "https://gitlab.example.com"
  token = "glrt-secret-token"
  executor = "docker-autoscaler"
  request_concurrency = 0
  [runners.autoscaler]
    plugin = "aws"
    max_instances = 2
    [runners.autoscaler.connector_config]
      key_path = "keys/id_ed25519"
"#;

    #[test]
    fn the_microvm_table_is_checked() {
        let with = |table: &str| {
            let text = MINIMAL.replace(
                "    plugin = \"aws\"\n",
                "    plugin = \"aws\"\n    isolation = [\"docker\", \"microvm\"]\n",
            ) + "  [runners.microvm]\n"
                + table;
            Config::from_str(&text, "/etc/gitlab-runner/config.toml")
        };
        let loaded = with("    memory = \"256Mi\"\n    cpus = 2\n    network = false\n").unwrap();
        let m = loaded.config.runners[0].microvm.clone().unwrap();
        assert_eq!(m.memory.and_then(|q| q.bytes()), Some(256 << 20));
        assert_eq!((m.cpus, m.network), (Some(2), Some(false)));
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        for bad in [
            "    memory = \"16Mi\"\n",
            "    cpus = 0\n",
            "    state_dir = \"relative\"\n",
            "    memroy = \"1Gi\"\n",
        ] {
            assert!(with(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn isolation_is_one_level_or_a_list_with_the_default_first() {
        let with = |value: &str| {
            let text = MINIMAL.replace(
                "    plugin = \"aws\"\n",
                &format!("    plugin = \"aws\"\n    isolation = {value}\n"),
            );
            Config::from_str(&text, "/etc/gitlab-runner/config.toml")
        };
        let c = with("\"cgroup\"").unwrap().config;
        assert_eq!(c.runners[0].isolation(), IsolationLevel::Cgroup);
        let c = with("[\"docker\", \"cgroup\", \"microvm\"]")
            .unwrap()
            .config;
        let levels = c.runners[0].isolation_levels();
        assert_eq!(
            levels.all(),
            [
                IsolationLevel::Docker,
                IsolationLevel::Cgroup,
                IsolationLevel::Microvm
            ]
        );
        assert_eq!(levels.to_string(), "docker, cgroup, microvm");
        for bad in [
            "[]",
            "[\"docker\", \"docker\"]",
            "\"container\"",
            "[\"shell\", 3]",
        ] {
            let e = with(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} was accepted"));
            let text = e.errors()[0].to_string();
            assert!(text.contains("isolation"), "{bad}: {text}");
        }
    }

    /// `image_isolation` names a level of `isolation`, or the configuration is refused there.
    #[test]
    fn image_isolation_is_one_of_the_offered_levels() {
        let with = |levels: &str, image: &str| {
            let text = MINIMAL.replace(
                "    plugin = \"aws\"\n",
                &format!(
                    "    plugin = \"aws\"\n    isolation = {levels}\n    image_isolation = {image}\n"
                ),
            );
            Config::from_str(&text, "/etc/gitlab-runner/config.toml")
        };
        let c = with("[\"shell\", \"docker\"]", "\"docker\"")
            .unwrap()
            .config;
        assert_eq!(c.runners[0].image_isolation(), Some(IsolationLevel::Docker));
        let e = with("[\"shell\", \"cgroup\"]", "\"docker\"").unwrap_err();
        let text = e.errors()[0].to_string();
        assert!(
            text.contains("image_isolation = docker is not one of the levels this runner offers"),
            "{text}"
        );
    }

    #[test]
    fn normalizes_zero_defaults_isolation_and_paths() {
        let loaded = Config::from_str(MINIMAL, "/etc/gitlab-runner/config.toml").unwrap();
        let c = loaded.config;
        assert_eq!(c.check_interval, Duration::from_secs(3));
        assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
        // The state directory this process's user gets (state_location's own tests pin each
        // case), not one read from the file.
        assert_eq!(
            c.flotilla.state_dir,
            Some(state_location::for_process(Path::new("/etc/gitlab-runner")).0)
        );
        let r = &c.runners[0];
        assert_eq!(r.request_concurrency, 1);
        let a = r.autoscaler.as_ref().unwrap();
        assert_eq!(a.isolation, Some(IsolationLevel::Docker.into()));
        assert_eq!(
            a.connector_config.key_path.as_deref(),
            Some(Path::new("/etc/gitlab-runner/keys/id_ed25519"))
        );
        assert_eq!(a.state_storage.dir, None);
        assert_eq!(loaded.warnings, vec![]);
    }

    #[test]
    fn redacted_output_reloads_to_the_same_config() {
        let loaded = Config::from_str(MINIMAL, "/etc/gitlab-runner/config.toml").unwrap();
        let text = loaded.config.to_redacted_toml().unwrap();
        assert!(!text.contains("glrt-secret-token"), "{text}");
        assert!(text.contains("token = \"[REDACTED]\""), "{text}");
        let again = Config::from_str(&text, "/etc/gitlab-runner/config.toml").unwrap();
        let mut expected = loaded.config.clone();
        expected.runners[0].token = Some(flotilla_fleet::Secret::new(REDACTED.to_string()));
        assert_eq!(again.config, expected);
        assert_eq!(again.warnings, vec![]);
    }

    #[test]
    fn a_password_in_the_runner_url_is_not_printed() {
        let text = MINIMAL.replacen("https://", "https://deploy:hunter2@", 1);
        assert!(text.contains("hunter2"), "the fixture has a url");
        let loaded = Config::from_str(&text, "/etc/gitlab-runner/config.toml").unwrap();
        assert!(
            loaded.config.runners[0]
                .url
                .as_deref()
                .unwrap()
                .contains("hunter2")
        );
        let printed = loaded.config.to_redacted_toml().unwrap();
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(!printed.contains("deploy"), "{printed}");
        assert!(printed.contains("url = \"https://"), "{printed}");
    }

    #[test]
    fn syntax_errors_are_all_reported() {
        let text = "concurrent = \n[[runners]]\nname = \"x\nexecutor = \"shell\"\n";
        let e = Config::from_str(text, "c.toml").unwrap_err();
        let all = e.errors();
        assert!(!all.is_empty());
        assert!(all.iter().all(|e| matches!(e, ConfigError::Syntax { .. })));
        assert!(e.to_string().starts_with("c.toml:1:"), "{e}");
    }

    #[test]
    fn relative_file_name_resolves_against_dot() {
        let loaded = Config::from_str("", "config.toml").unwrap();
        assert_eq!(
            loaded.config.flotilla.state_dir,
            Some(state_location::for_process(Path::new(".")).0)
        );
        assert!(loaded.config.runners.is_empty());
    }
}
