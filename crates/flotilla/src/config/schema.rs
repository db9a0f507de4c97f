//! Which keys each table knows, which tables are strict about unknown keys, and the "did you
//! mean" suggestion for a misspelt key.
//!
//! The key lists come from the serde derives themselves (see [`fields_of`]), so they cannot
//! drift from the structs.

use super::autoscaler::{AutoscalerConfig, Policy, ScaleThrottle, StateStorage, VmIsolation};
use super::connector::ConnectorSettings;
use super::global::{Config, FlotillaConfig};
use super::runner::{InstanceConfig, RunnerConfig};
use super::source::KeyPath;
use flotilla_isolate::docker::DockerSettings;
use serde::de::{self, DeserializeOwned, Visitor};
use std::fmt;

/// The keys a derived struct accepts, as serde's derive passes them to `deserialize_struct`.
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The introspector always fails after recording the field list.
    let _ = T::deserialize(Introspector(&mut fields));
    fields
}

struct Introspector<'a>(&'a mut &'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("introspection only")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for Introspector<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// What is known about a table of the configuration.
pub(crate) struct TableSchema {
    /// Its keys.
    pub(crate) keys: &'static [&'static str],
    /// Whether an unknown key in it is an error (flotilla's and the autoscaler's tables) rather
    /// than a warning (GitLab tables with keys flotilla does not use).
    pub(crate) strict: bool,
}

/// The schema of the table at `path` (indices ignored), or `None` for a place that is not one
/// of flotilla's tables.
pub(crate) fn table_at(path: &KeyPath) -> Option<TableSchema> {
    let keys: Vec<&str> = path.keys().collect();
    let (keys, strict): (&'static [&'static str], bool) = match keys.as_slice() {
        [] => (fields_of::<Config>(), false),
        ["flotilla"] => (fields_of::<FlotillaConfig>(), true),
        ["runners"] => (fields_of::<RunnerConfig>(), false),
        ["runners", "docker"] => (fields_of::<DockerSettings>(), false),
        ["runners", "cache"] => (fields_of::<flotilla_cache::CacheConfig>(), false),
        ["runners", "cache", "s3"] => (
            fields_of::<flotilla_cache::s3::settings::S3Settings>(),
            false,
        ),
        ["runners", "cache", "gcs"] => (
            fields_of::<flotilla_cache::gcs::settings::GcsSettings>(),
            false,
        ),
        ["runners", "cache", "azure"] => (
            fields_of::<flotilla_cache::azure::settings::AzureSettings>(),
            false,
        ),
        ["runners", "instance"] => (fields_of::<InstanceConfig>(), false),
        ["runners", "autoscaler"] => (fields_of::<AutoscalerConfig>(), true),
        ["runners", "autoscaler", "connector_config"]
        | ["runners", "autoscaler", "vm_isolation", "connector_config"] => {
            (fields_of::<ConnectorSettings>(), true)
        }
        ["runners", "autoscaler", "scale_throttle"] => (fields_of::<ScaleThrottle>(), true),
        ["runners", "autoscaler", "state_storage"] => (fields_of::<StateStorage>(), true),
        ["runners", "autoscaler", "policy"] => (fields_of::<Policy>(), true),
        ["runners", "autoscaler", "vm_isolation"] => (fields_of::<VmIsolation>(), true),
        _ => return None,
    };
    Some(TableSchema { keys, strict })
}

/// Whether a key anywhere under `path` falls under a strict table: `[flotilla]` and everything
/// under `[runners.autoscaler]`.
pub(crate) fn is_strict_area(path: &KeyPath) -> bool {
    let keys: Vec<&str> = path.keys().collect();
    matches!(
        keys.as_slice(),
        ["flotilla", ..] | ["runners", "autoscaler", ..]
    )
}

/// The known key closest to `unknown`, if it is close enough to be a likely typo: at most
/// two edits (insertions, deletions, substitutions, transpositions) away, or a quarter of the
/// key's length for long keys, and starting with the same letter (GitLab's `services` is two
/// edits from `devices` and no typo of it). Ties go to the higher Jaro-Winkler similarity.
pub(crate) fn suggest(unknown: &str, known: &[&str]) -> Option<String> {
    let first = unknown.chars().next();
    known
        .iter()
        .filter(|k| k.chars().next() == first)
        .map(|k| (strsim::damerau_levenshtein(unknown, k), *k))
        .filter(|(distance, k)| *distance <= (k.len() / 4).max(2))
        .min_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                strsim::jaro_winkler(unknown, b.1).total_cmp(&strsim::jaro_winkler(unknown, a.1))
            })
        })
        .map(|(_, k)| k.to_string())
}

/// Why flotilla does not use the GitLab key `key` of the table `table` (`""` for the top level,
/// `runners`, `runners.docker`), when there is more to say than that it is unused. One list for
/// `config check`'s warnings and `migrate`'s report; docs/configuration.md says the same.
pub(crate) fn unused_reason(table: &str, key: &str) -> Option<&'static str> {
    Some(match (table, key) {
        ("", "session_server") => "interactive web terminals are not supported",
        ("", "sentry_dsn") => "flotilla does not report errors to Sentry",
        (
            "runners.cache.s3",
            "RoleARN"
            | "UploadRoleARN"
            | "AssumeRoleMaxConcurrency"
            | "DisableAssumeRoleCredentialsCaching",
        ) => {
            "GitLab Runner gives the build host a role's credentials for its upload; \
             flotilla's manager moves the archive with its own credentials"
        }
        ("runners", "token_obtained_at" | "token_expires_at") => {
            "flotilla does not rotate runner authentication tokens: the token is used until \
             GitLab refuses it (`flotilla verify` says when)"
        }
        ("runners.docker", "tls_verify" | "tls_cert_path") => {
            "flotilla reaches the instance's dockerd through its connector, not over TCP"
        }
        (
            "runners.docker",
            "helper_image" | "helper_image_flavor" | "helper_image_autoset_arch_and_os",
        ) => "the helper container runs the instance's own programs; no helper image is pulled",
        ("runners.docker", "network_mtu" | "enable_ipv6") => {
            "the job's own network is made with Docker's defaults"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lists_come_from_the_derives() {
        let keys = fields_of::<AutoscalerConfig>();
        for k in [
            "plugin",
            "capacity_per_instance",
            "instance_life_duration_buckets",
            "plugin_config",
            "policy",
            "isolation",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        assert!(fields_of::<Policy>().contains(&"preemptive_mode"));
        assert!(fields_of::<FlotillaConfig>().contains(&"state_dir"));
        assert!(fields_of::<RunnerConfig>().contains(&"executor"));
    }

    #[test]
    fn strictness_by_place() {
        let autoscaler = KeyPath::root().key("runners").index(0).key("autoscaler");
        assert!(table_at(&autoscaler).unwrap().strict);
        assert!(table_at(&autoscaler.key("policy").index(2)).unwrap().strict);
        assert!(table_at(&KeyPath::root().key("flotilla")).unwrap().strict);
        assert!(!table_at(&KeyPath::root()).unwrap().strict);
        assert!(
            !table_at(&KeyPath::root().key("runners").index(0).key("docker"))
                .unwrap()
                .strict
        );
        assert!(table_at(&KeyPath::root().key("session_server")).is_none());
        assert!(is_strict_area(&autoscaler.key("whatever").key("deeper")));
        assert!(!is_strict_area(
            &KeyPath::root().key("runners").index(0).key("cache")
        ));
    }

    #[test]
    fn suggestions_only_when_close() {
        let known = fields_of::<AutoscalerConfig>();
        assert_eq!(
            suggest("capacity_per_instanse", known).as_deref(),
            Some("capacity_per_instance")
        );
        assert_eq!(
            suggest("max_instance", known).as_deref(),
            Some("max_instances")
        );
        assert_eq!(suggest("pluginn", known).as_deref(), Some("plugin"));
        assert_eq!(suggest("idle_count", known), None);
        assert_eq!(suggest("zzz", known), None);
        let runner = fields_of::<RunnerConfig>();
        // Real GitLab keys that merely share a prefix with one of ours are not typos.
        assert_eq!(suggest("token_obtained_at", runner), None);
        assert_eq!(
            suggest("imgae", fields_of::<DockerSettings>()).as_deref(),
            Some("image")
        );
        assert_eq!(suggest("mac_address", fields_of::<DockerSettings>()), None);
        assert_eq!(suggest("volume_keep", fields_of::<DockerSettings>()), None);
    }
}
