//! What this build of flotilla can run, in one place: instance-group providers by plugin
//! name, isolation levels by name, and connectors by the kind a provider asks for.
//!
//! Adding a provider is a crate under `crates/providers/` with a `build` function and one
//! line in [`providers`]; adding an isolation level is a directory under
//! `crates/isolate/src/`, a builder in [`crate::fleet::levels`] and one line in
//! [`isolations`]. Nothing else in the binary names a provider or a level.

use crate::config::IsolationLevel;
use crate::fleet::levels::{self, LevelContext};
use flotilla_dispatch::{ConnectorFactory, LocalConnectors, SshConnectors};
use flotilla_fleet::{ConnectorKind, FleetError, InstanceGroup, ProviderConfig};
use flotilla_isolate::Isolation;
use std::sync::Arc;

/// Builds a provider's instance group from its configuration.
pub type BuildProvider = fn(&ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError>;

/// Builds an isolation level for a runner.
pub type BuildIsolation = fn(&LevelContext<'_>) -> anyhow::Result<Arc<dyn Isolation>>;

/// A provider this build can use.
#[derive(Debug, Clone, Copy)]
pub struct ProviderEntry {
    /// The plugin name in `[runners.autoscaler] plugin`.
    pub name: &'static str,
    /// Builds its group.
    pub build: BuildProvider,
}

/// An isolation level this build can use.
#[derive(Debug, Clone, Copy)]
pub struct IsolationEntry {
    /// The level.
    pub level: IsolationLevel,
    /// Builds it for a runner.
    pub build: BuildIsolation,
}

/// The plugin name of a runner without `[runners.autoscaler]` (or with an empty `plugin`).
pub const DEFAULT_PLUGIN: &str = flotilla_provider_local::PLUGIN;

/// Every provider of this build.
pub fn providers() -> Vec<ProviderEntry> {
    let mut all = vec![ProviderEntry {
        name: flotilla_provider_local::PLUGIN,
        build: flotilla_provider_local::build,
    }];
    #[cfg(feature = "docker")]
    all.push(ProviderEntry {
        name: flotilla_provider_docker::PLUGIN,
        build: flotilla_provider_docker::build,
    });
    all.push(ProviderEntry {
        name: flotilla_provider_static::PLUGIN,
        build: flotilla_provider_static::build,
    });
    all.push(ProviderEntry {
        name: flotilla_provider_qemu::PLUGIN,
        build: flotilla_provider_qemu::build,
    });
    #[cfg(feature = "aws")]
    all.push(ProviderEntry {
        name: flotilla_provider_aws::PLUGIN,
        build: flotilla_provider_aws::build,
    });
    #[cfg(feature = "plugin")]
    all.push(ProviderEntry {
        name: flotilla_provider_plugin::PLUGIN,
        build: flotilla_provider_plugin::build,
    });
    #[cfg(feature = "kubernetes")]
    all.push(ProviderEntry {
        name: flotilla_provider_kubernetes::PLUGIN,
        build: flotilla_provider_kubernetes::build,
    });
    all
}

/// The provider name in a plugin name as GitLab's configs spell it: the binary name
/// (`fleeting-plugin-aws`) or the OCI reference `gitlab-runner fleeting install` takes
/// (`aws:latest`, `gitlab.com/gitlab-org/fleeting/plugins/aws:0.5.0`) name the `aws`
/// provider.
fn gitlab_plugin_name(plugin: &str) -> &str {
    let without_version = match plugin.rsplit_once(':') {
        Some((name, _version)) if !name.contains("://") => name,
        _ => plugin,
    };
    let last = without_version
        .rsplit('/')
        .next()
        .unwrap_or(without_version);
    last.strip_prefix("fleeting-plugin-").unwrap_or(last)
}

/// Every isolation level of this build.
pub fn isolations() -> Vec<IsolationEntry> {
    vec![
        IsolationEntry {
            level: IsolationLevel::Shell,
            build: levels::shell,
        },
        IsolationEntry {
            level: IsolationLevel::Cgroup,
            build: levels::cgroup,
        },
        IsolationEntry {
            level: IsolationLevel::Docker,
            build: levels::docker,
        },
        IsolationEntry {
            level: IsolationLevel::Instance,
            build: levels::instance,
        },
        IsolationEntry {
            level: IsolationLevel::Microvm,
            build: levels::microvm,
        },
        IsolationEntry {
            level: IsolationLevel::Vm,
            build: levels::vm,
        },
    ]
}

/// The provider named `plugin` (empty: [`DEFAULT_PLUGIN`]).
pub fn provider(plugin: &str) -> Result<ProviderEntry, Unavailable> {
    let plugin = if plugin.is_empty() {
        DEFAULT_PLUGIN
    } else {
        plugin
    };
    lookup(plugin, &providers())
}

/// The provider named `plugin` among `all`, or what is missing (with the cargo feature that
/// would bring it).
fn lookup(plugin: &str, all: &[ProviderEntry]) -> Result<ProviderEntry, Unavailable> {
    all.iter()
        .find(|p| p.name == plugin)
        .or_else(|| {
            let short = gitlab_plugin_name(plugin);
            all.iter().find(|p| p.name == short)
        })
        .copied()
        .ok_or_else(|| {
            let short = gitlab_plugin_name(plugin);
            Unavailable {
                what: "plugin",
                name: plugin.to_string(),
                available: all.iter().map(|p| p.name).collect(),
                feature: FEATURE_PROVIDERS
                    .iter()
                    .find(|(name, _)| *name == plugin || *name == short)
                    .map(|(_, feature)| *feature),
            }
        })
}

/// The isolation level `level`.
pub fn isolation(level: IsolationLevel) -> Result<IsolationEntry, Unavailable> {
    let all = isolations();
    all.iter()
        .find(|i| i.level == level)
        .copied()
        .ok_or_else(|| Unavailable {
            what: "isolation",
            name: level.as_str().to_string(),
            available: all.iter().map(|i| i.level.as_str()).collect(),
            feature: None,
        })
}

/// The connectors that reach the instances of `group`, of the kind its provider asked for.
pub fn connectors(kind: ConnectorKind, group: Arc<dyn InstanceGroup>) -> Arc<dyn ConnectorFactory> {
    match kind {
        ConnectorKind::Local => Arc::new(LocalConnectors),
        ConnectorKind::Protocol => Arc::new(SshConnectors::new(group)),
        ConnectorKind::KubeExec => Arc::new(KubeExecConnectors),
    }
}

/// Connectors into pods through the Kubernetes API server (the `kubernetes` provider's
/// `kube-exec`); without the `kubernetes` feature no provider asks for them, and they refuse.
#[derive(Debug, Clone, Copy)]
struct KubeExecConnectors;

impl ConnectorFactory for KubeExecConnectors {
    fn connector(
        &self,
        info: &flotilla_fleet::ConnectInfo,
    ) -> Result<Arc<dyn flotilla_connect::Connector>, flotilla_dispatch::DispatchError> {
        #[cfg(feature = "kubernetes")]
        {
            flotilla_provider_kubernetes::connector(info)
                .map(|c| Arc::new(c) as Arc<dyn flotilla_connect::Connector>)
                .map_err(|source| flotilla_dispatch::DispatchError::Connect {
                    instance: info.id.clone(),
                    source,
                })
        }
        #[cfg(not(feature = "kubernetes"))]
        Err(flotilla_dispatch::DispatchError::UnsupportedProtocol {
            instance: info.id.clone(),
            protocol: "kube-exec (this build has no kubernetes feature)".into(),
        })
    }
}

/// The providers built only with a cargo feature, by plugin name: what a build without it
/// tells a configuration that names one.
const FEATURE_PROVIDERS: &[(&str, &str)] = &[
    ("docker", "docker"),
    ("aws", "aws"),
    ("plugin", "plugin"),
    ("kubernetes", "kubernetes"),
];

/// The cargo features this build was made with: those of the providers it has.
pub fn features() -> Vec<&'static str> {
    let built = providers();
    FEATURE_PROVIDERS
        .iter()
        .filter(|(name, _)| built.iter().any(|p| p.name == *name))
        .map(|(_, feature)| *feature)
        .collect()
}

/// A provider or isolation level this build does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} {name:?} is not available in this build of flotilla (available: {}){}",
    available.join(", "),
    feature
        .map(|f| format!("; it comes with the cargo feature `{f}`: cargo build --release --features {f}"))
        .unwrap_or_default()
)]
pub struct Unavailable {
    /// `plugin` or `isolation`.
    pub what: &'static str,
    /// The name asked for.
    pub name: String,
    /// The names this build has.
    pub available: Vec<&'static str>,
    /// The cargo feature that brings it, when a build with it would have it.
    pub feature: Option<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_plugin_means_this_host() {
        assert_eq!(provider("").unwrap().name, "local");
        assert_eq!(provider("local").unwrap().name, "local");
    }

    #[test]
    fn an_unknown_plugin_is_refused_with_what_this_build_has() {
        let e = provider("gce").unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("plugin \"gce\" is not available"),
            "{text}"
        );
        assert!(e.available.contains(&"local"), "{text}");
        assert!(e.available.contains(&"static"), "{text}");
        assert!(e.available.contains(&"qemu"), "{text}");
        #[cfg(feature = "docker")]
        assert!(e.available.contains(&"docker"), "{text}");
    }

    #[test]
    fn the_features_are_those_of_the_providers_built() {
        assert_eq!(features().contains(&"docker"), cfg!(feature = "docker"));
        assert_eq!(features().contains(&"aws"), cfg!(feature = "aws"));
        assert_eq!(
            features().contains(&"kubernetes"),
            cfg!(feature = "kubernetes")
        );
        assert_eq!(features().contains(&"plugin"), cfg!(feature = "plugin"));
    }

    #[test]
    fn a_provider_of_another_build_names_its_feature() {
        // A build with the local provider only.
        let local = providers()
            .into_iter()
            .filter(|p| p.name == "local")
            .collect::<Vec<_>>();
        for name in ["aws", "fleeting-plugin-aws", "aws:latest"] {
            let e = lookup(name, &local).unwrap_err();
            assert_eq!(e.feature, Some("aws"), "{name}");
            let text = e.to_string();
            assert!(
                text.contains("cargo feature `aws`: cargo build --release --features aws"),
                "{text}"
            );
        }
        assert_eq!(
            lookup("kubernetes", &local).unwrap_err().feature,
            Some("kubernetes")
        );
        assert_eq!(lookup("gce", &local).unwrap_err().feature, None);
    }

    #[test]
    fn gitlabs_plugin_names_select_the_provider_they_name() {
        assert_eq!(gitlab_plugin_name("fleeting-plugin-aws"), "aws");
        assert_eq!(gitlab_plugin_name("aws:latest"), "aws");
        assert_eq!(
            gitlab_plugin_name("gitlab.com/gitlab-org/fleeting/plugins/aws:0.5.0"),
            "aws"
        );
        assert_eq!(gitlab_plugin_name("static"), "static");
        assert_eq!(provider("fleeting-plugin-static").unwrap().name, "static");
        #[cfg(feature = "aws")]
        for name in ["aws", "fleeting-plugin-aws", "aws:latest", "aws:0.5.0"] {
            assert_eq!(provider(name).unwrap().name, "aws", "{name}");
        }
        #[cfg(not(feature = "aws"))]
        assert_eq!(
            provider("fleeting-plugin-aws").unwrap_err().name,
            "fleeting-plugin-aws"
        );
    }

    #[test]
    fn every_name_is_registered_once() {
        let mut names: Vec<_> = providers().iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), providers().len());
        let levels = isolations();
        for (i, a) in levels.iter().enumerate() {
            assert!(
                levels[i + 1..].iter().all(|b| b.level != a.level),
                "{}",
                a.level
            );
        }
    }

    #[test]
    fn every_level_is_registered() {
        for level in [
            IsolationLevel::Shell,
            IsolationLevel::Cgroup,
            IsolationLevel::Docker,
            IsolationLevel::Instance,
            IsolationLevel::Microvm,
            IsolationLevel::Vm,
        ] {
            assert_eq!(isolation(level).unwrap().level, level);
        }
    }
}
