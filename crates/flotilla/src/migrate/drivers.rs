//! `MachineDriver` and `MachineOptions` as a provider: the fleeting plugin GitLab names for
//! the same cloud (GitLab Runner `docs/executors/docker_autoscaler.md`: `aws`,
//! `googlecloud`, `azure`, each with the `plugin_config` keys shown there), or flotilla's
//! docker provider for trying a migrated configuration on one machine.
//!
//! Docker Machine creates each VM itself from its options; fleeting plugins scale an
//! instance group (an AWS autoscaling group, a GCP managed instance group, an Azure scale
//! set) whose template holds the VM's shape. So most options move to that template, not to
//! flotilla's configuration; each is reported with where it goes. Option values that may be
//! secret are never printed.

/// Which provider the migrated runner uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// The fleeting plugin matching the driver.
    Matching,
    /// flotilla's docker provider with this instance image (for a local trial).
    Docker {
        /// The instance image (`scripts/build-images.sh instance` builds one).
        image: Option<String>,
    },
}

/// What the options became.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProviderPlan {
    /// `plugin`.
    pub(crate) plugin: String,
    /// `[runners.autoscaler.plugin_config]`, in order.
    pub(crate) plugin_config: Vec<(String, toml_edit::Value)>,
    /// `[runners.autoscaler.connector_config]`, in order.
    pub(crate) connector: Vec<(String, toml_edit::Value)>,
    /// Per option (index into `MachineOptions`): carried to where, or why not.
    pub(crate) options: Vec<OptionOutcome>,
    /// What the operator must still do.
    pub(crate) todo: Vec<String>,
    /// Whether the driver line itself was carried (false: no matching provider).
    pub(crate) driver_matched: bool,
}

/// What happened to one `MachineOptions` entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OptionOutcome {
    /// Became this key.
    Carried(String),
    /// Not carried, for this reason.
    Dropped(String),
}

/// The text a placeholder starts with; `flotilla migrate` lists each in its to-do list.
pub const PLACEHOLDER: &str = "REPLACE-ME";

/// Whether an option's value may be a secret (never printed).
pub(crate) fn is_secret_option(name: &str) -> bool {
    ["key", "secret", "password", "token", "credential"]
        .iter()
        .any(|w| name.contains(w))
        && !name.ends_with("keypath")
        && !name.ends_with("keypair-name")
        && !name.ends_with("kms-key")
}

/// Splits `name=value` (or a bare flag, `name` meaning true).
pub(crate) fn split_option(option: &str) -> (&str, Option<&str>) {
    match option.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (option.trim(), None),
    }
}

/// Plans the provider for `driver` with `options`; `runner_name` names a docker group.
pub(crate) fn plan(
    driver: Option<&str>,
    options: &[String],
    target: &Target,
    runner_name: &str,
    max_instances: u32,
) -> ProviderPlan {
    let mut p = ProviderPlan::default();
    match target {
        Target::Docker { image } => {
            docker(&mut p, image.as_deref(), runner_name, max_instances);
            p.driver_matched = true;
            for o in options {
                let (name, _) = split_option(o);
                p.options.push(OptionOutcome::Dropped(format!(
                    "the docker provider runs instances as local containers; `{name}` \
                     describes a {} VM",
                    driver.unwrap_or("Docker Machine")
                )));
            }
            return p;
        }
        Target::Matching => {}
    }
    let cloud = match driver {
        Some("amazonec2") => Some(Cloud::Aws),
        Some("google") => Some(Cloud::Google),
        Some("azure") => Some(Cloud::Azure),
        _ => None,
    };
    match cloud {
        Some(Cloud::Aws) => {
            p.plugin = "aws".into();
            p.plugin_config.push((
                "name".into(),
                format!("{PLACEHOLDER}: the AWS autoscaling group's name").into(),
            ));
            p.todo.push(
                "create an AWS autoscaling group with a launch template holding what the \
                 MachineOptions described (instance type, AMI, subnets, security group, \
                 spot settings), then put its name in plugin_config.name (scaling policy \
                 none, scale-in protection on, AZRebalance suspended); flotilla's aws \
                 provider (cargo feature `aws`) scales it as GitLab's fleeting-plugin-aws"
                    .into(),
            );
        }
        Some(Cloud::Google) => {
            p.plugin = "googlecloud".into();
            p.plugin_config.push((
                "name".into(),
                format!("{PLACEHOLDER}: the managed instance group's name").into(),
            ));
            p.todo.push(
                "create a GCP managed instance group from an instance template holding what \
                 the MachineOptions described, then put its name in plugin_config.name; \
                 flotilla has no googlecloud provider yet (GitLab's \
                 fleeting-plugin-googlecloud)"
                    .into(),
            );
        }
        Some(Cloud::Azure) => {
            p.plugin = "azure".into();
            p.plugin_config.push((
                "name".into(),
                format!("{PLACEHOLDER}: the virtual machine scale set's name").into(),
            ));
            p.todo.push(
                "create an Azure virtual machine scale set holding what the MachineOptions \
                 described, then put its name in plugin_config.name; flotilla has no azure \
                 provider yet (GitLab's fleeting-plugin-azure)"
                    .into(),
            );
        }
        None => {
            p.plugin = format!(
                "{PLACEHOLDER}: a provider for what Docker Machine's `{}` driver created",
                driver.unwrap_or("(unset)")
            );
            p.todo.push(format!(
                "choose a provider: no fleeting plugin GitLab documents matches Docker \
                 Machine's `{}` driver (flotilla's: docker, local; GitLab's: aws, \
                 googlecloud, azure)",
                driver.unwrap_or("(unset)")
            ));
        }
    }
    p.driver_matched = cloud.is_some();
    for o in options {
        let (name, value) = split_option(o);
        let outcome = match cloud {
            Some(c) => c.option(name, value, &mut p),
            None => OptionOutcome::Dropped(format!(
                "no provider matches the `{}` driver",
                driver.unwrap_or("(unset)")
            )),
        };
        p.options.push(outcome);
    }
    p
}

/// The docker provider's `plugin_config` (flotilla's `crates/providers/docker`
/// `DockerSettings`): a group named after the runner, the instance image, an inner dockerd
/// for the docker isolation level.
fn docker(p: &mut ProviderPlan, image: Option<&str>, runner_name: &str, max_instances: u32) {
    p.plugin = "docker".into();
    let name: String = runner_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = if name.trim_matches('-').is_empty() {
        "migrated".to_string()
    } else {
        name
    };
    p.plugin_config.push(("name".into(), name.into()));
    match image {
        Some(i) => p.plugin_config.push(("image".into(), i.into())),
        None => {
            p.plugin_config.push((
                "image".into(),
                format!("{PLACEHOLDER}: an instance image running sshd and dockerd").into(),
            ));
            p.todo.push(
                "set plugin_config.image to an instance image with sshd and dockerd \
                 (`scripts/build-images.sh instance` builds one), or pass --docker-image"
                    .into(),
            );
        }
    }
    p.plugin_config
        .push(("inner_dockerd".into(), toml_edit::Value::from(true)));
    if max_instances > 0 {
        p.plugin_config.push((
            "max_size".into(),
            toml_edit::Value::from(i64::from(max_instances)),
        ));
    }
}

#[derive(Debug, Clone, Copy)]
enum Cloud {
    Aws,
    Google,
    Azure,
}

impl Cloud {
    /// One option of this cloud's driver (GitLab's fork of Docker Machine, `docs/drivers/`).
    fn option(self, name: &str, value: Option<&str>, p: &mut ProviderPlan) -> OptionOutcome {
        let value_str = value.unwrap_or("true");
        let truthy = !matches!(value_str, "false" | "0" | "no");
        // Options every driver takes: the Docker engine on the VM.
        if name.starts_with("engine-") {
            return OptionOutcome::Dropped(
                "the Docker daemon's settings belong in the instance image \
                 (/etc/docker/daemon.json, e.g. registry-mirrors)"
                    .into(),
            );
        }
        let (username, keypath, private_ip): (&[&str], &[&str], &[&str]) = match self {
            Cloud::Aws => (
                &["amazonec2-ssh-user"],
                &["amazonec2-ssh-keypath"],
                &[
                    "amazonec2-use-private-address",
                    "amazonec2-private-address-only",
                ],
            ),
            Cloud::Google => (&["google-username"], &[], &["google-use-internal-ip"]),
            Cloud::Azure => (&["azure-ssh-user"], &[], &["azure-use-private-ip"]),
        };
        if username.contains(&name) {
            set(&mut p.connector, "username", value_str.into());
            return OptionOutcome::Carried("connector_config.username".into());
        }
        if keypath.contains(&name) {
            set(&mut p.connector, "key_path", value_str.into());
            set(
                &mut p.connector,
                "use_static_credentials",
                toml_edit::Value::from(true),
            );
            return OptionOutcome::Carried(
                "connector_config.key_path (with use_static_credentials)".into(),
            );
        }
        if private_ip.contains(&name) {
            // Docker Machine talked to the VM on its private address: so does the connector.
            set(
                &mut p.connector,
                "use_external_addr",
                toml_edit::Value::from(!truthy),
            );
            return OptionOutcome::Carried("connector_config.use_external_addr".into());
        }
        match (self, name) {
            (Cloud::Google, "google-project") => {
                set(&mut p.plugin_config, "project", value_str.into());
                OptionOutcome::Carried("plugin_config.project".into())
            }
            (Cloud::Google, "google-zone") => {
                set(&mut p.plugin_config, "zone", value_str.into());
                OptionOutcome::Carried("plugin_config.zone".into())
            }
            (Cloud::Azure, "azure-subscription-id") => {
                set(&mut p.plugin_config, "subscription_id", value_str.into());
                OptionOutcome::Carried("plugin_config.subscription_id".into())
            }
            (Cloud::Azure, "azure-resource-group") => {
                set(
                    &mut p.plugin_config,
                    "resource_group_name",
                    value_str.into(),
                );
                OptionOutcome::Carried("plugin_config.resource_group_name".into())
            }
            (Cloud::Aws, "amazonec2-access-key" | "amazonec2-secret-key") => {
                OptionOutcome::Dropped(
                    "credentials go in the AWS credentials file the plugin reads \
                     (plugin_config.credentials_file, default ~/.aws/credentials); the \
                     value is not printed"
                        .into(),
                )
            }
            (Cloud::Aws, "amazonec2-region") => {
                // The aws provider takes the group's region in plugin_config, over the
                // standard chain's (fleeting-plugin-aws reads it from the chain only).
                set(&mut p.plugin_config, "region", value_str.into());
                OptionOutcome::Carried("plugin_config.region".into())
            }
            (Cloud::Aws, _) => OptionOutcome::Dropped(format!(
                "belongs to the autoscaling group or its launch template ({})",
                aws_place(name)
            )),
            (Cloud::Google, _) => OptionOutcome::Dropped(
                "belongs to the managed instance group's instance template".into(),
            ),
            (Cloud::Azure, _) => {
                OptionOutcome::Dropped("belongs to the virtual machine scale set".into())
            }
        }
    }
}

/// Where an amazonec2 option goes in AWS.
fn aws_place(name: &str) -> &'static str {
    match name {
        "amazonec2-instance-type" => "instance type",
        "amazonec2-ami" => "AMI",
        "amazonec2-vpc-id" | "amazonec2-subnet-id" | "amazonec2-zone" => {
            "the group's subnets and availability zones"
        }
        "amazonec2-security-group" => "security groups",
        "amazonec2-request-spot-instance" | "amazonec2-spot-price" => {
            "the group's mixed instances policy (spot)"
        }
        "amazonec2-root-size" | "amazonec2-volume-type" | "amazonec2-volume-encrypted" => {
            "block devices"
        }
        "amazonec2-iam-instance-profile" => "IAM instance profile",
        "amazonec2-tags" => "tags",
        "amazonec2-userdata" => "user data",
        "amazonec2-keypair-name" => "key pair",
        _ => "launch template settings",
    }
}

/// Sets `key` in an ordered table, replacing an earlier value.
fn set(table: &mut Vec<(String, toml_edit::Value)>, key: &str, value: toml_edit::Value) {
    match table.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => table.push((key.to_string(), value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn aws_options_go_to_the_connector_or_the_group() {
        let p = plan(
            Some("amazonec2"),
            &opts(&[
                "amazonec2-secret-key=s3cr3t",
                "amazonec2-ssh-user=ubuntu",
                "amazonec2-use-private-address=true",
                "amazonec2-instance-type=m5.large",
                "engine-registry-mirror=https://mirror.example",
            ]),
            &Target::Matching,
            "r",
            10,
        );
        assert_eq!(p.plugin, "aws");
        assert!(p.driver_matched);
        let c: Vec<String> = p
            .connector
            .iter()
            .map(|(k, v)| format!("{k}={}", v.to_string().trim()))
            .collect();
        assert_eq!(c, ["username=\"ubuntu\"", "use_external_addr=false"]);
        assert!(matches!(&p.options[0], OptionOutcome::Dropped(w) if w.contains("not printed")));
        assert!(matches!(&p.options[3], OptionOutcome::Dropped(w) if w.contains("instance type")));
        assert!(matches!(&p.options[4], OptionOutcome::Dropped(w) if w.contains("daemon.json")));
        assert!(p.todo[0].contains("autoscaling group"));
        assert!(is_secret_option("amazonec2-secret-key"));
        assert!(!is_secret_option("amazonec2-ssh-keypath"));
    }

    #[test]
    fn google_and_azure_keep_what_their_plugins_read() {
        let p = plan(
            Some("google"),
            &opts(&["google-project=proj", "google-zone=europe-west1-b"]),
            &Target::Matching,
            "r",
            0,
        );
        assert_eq!(p.plugin, "googlecloud");
        let keys: Vec<&str> = p.plugin_config.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["name", "project", "zone"]);
        let p = plan(
            Some("azure"),
            &opts(&["azure-subscription-id=abc", "azure-resource-group=rg"]),
            &Target::Matching,
            "r",
            0,
        );
        let keys: Vec<&str> = p.plugin_config.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["name", "subscription_id", "resource_group_name"]);
    }

    #[test]
    fn unknown_drivers_and_the_docker_target() {
        let p = plan(
            Some("digitalocean"),
            &opts(&["digitalocean-size=s-1"]),
            &Target::Matching,
            "r",
            0,
        );
        assert!(!p.driver_matched);
        assert!(p.plugin.starts_with(PLACEHOLDER));
        let p = plan(
            Some("amazonec2"),
            &opts(&["amazonec2-instance-type=m5.large"]),
            &Target::Docker {
                image: Some("local/instance:1".into()),
            },
            "my runner!",
            4,
        );
        assert_eq!(p.plugin, "docker");
        assert_eq!(p.plugin_config[0].1.as_str(), Some("my-runner-"));
        assert!(p.todo.is_empty());
        assert!(matches!(&p.options[0], OptionOutcome::Dropped(_)));
    }
}
