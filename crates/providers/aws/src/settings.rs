//! The aws provider's `plugin_config`: GitLab's keys, plus two of flotilla's for tests.

use flotilla_fleet::FleetError;
use serde::Deserialize;
use std::path::PathBuf;

/// `[runners.autoscaler.plugin_config]` of a runner with `plugin = "aws"`.
///
/// The first four keys are fleeting-plugin-aws's, with its meaning (GitLab's docker-autoscaler
/// documentation, "Example: AWS autoscaling for 1 job per instance"): `name` is the Auto
/// Scaling group; `profile`, `config_file` and `credentials_file` choose the shared AWS
/// configuration the standard credential and region chain reads. The region comes from that
/// chain (`AWS_REGION`, the profile's `region`), as it does for the plugin, unless `region`
/// names it here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsSettings {
    /// The Auto Scaling group's name.
    pub name: String,
    /// The shared-config profile (`AWS_PROFILE`, else `default`, when unset).
    #[serde(default)]
    pub profile: Option<String>,
    /// The shared config file (`~/.aws/config` when unset).
    #[serde(default)]
    pub config_file: Option<PathBuf>,
    /// The shared credentials file (`~/.aws/credentials` when unset).
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    /// The group's region, over the standard chain's. fleeting-plugin-aws reads the region
    /// from the chain only, yet public configs set `region` here (for the group they name):
    /// flotilla uses it rather than refuse or drop it.
    #[serde(default)]
    pub region: Option<String>,
    /// flotilla's: one endpoint for every AWS API the provider calls, instead of AWS's. Meant
    /// for tests against moto's server (`http://127.0.0.1:PORT`); `AWS_ENDPOINT_URL` does the
    /// same through the standard chain.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// flotilla's, **for tests only**: the address (`host:port`) every instance's connection
    /// goes to, in place of the addresses EC2 reports. moto's instances are not machines, so
    /// an end-to-end test points their connections at a local container instead. Never set it
    /// for a real group: every instance would be the same machine.
    #[serde(default)]
    pub test_address_override: Option<String>,
}

impl AwsSettings {
    /// Settings for the group `name`, everything else from the standard chain.
    pub fn new(name: impl Into<String>) -> Self {
        AwsSettings {
            name: name.into(),
            ..AwsSettings::default()
        }
    }

    /// Reads `plugin_config`, refusing unknown keys by name.
    pub fn from_plugin_config(value: &serde_json::Value) -> Result<Self, FleetError> {
        let s: AwsSettings = serde_json::from_value(value.clone())
            .map_err(|e| FleetError::Config(format!("aws plugin_config: {e}")))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks what serde cannot: a group name, absolute files, an endpoint URL.
    pub fn validate(&self) -> Result<(), FleetError> {
        let bad = |m: String| Err(FleetError::Config(format!("aws plugin_config: {m}")));
        // AWS API reference, CreateAutoScalingGroup: AutoScalingGroupName is 1 to 255
        // characters.
        if self.name.is_empty() || self.name.len() > 255 {
            return bad(format!(
                "name must name the Auto Scaling group (1 to 255 characters), got {:?}",
                self.name
            ));
        }
        for (key, file) in [
            ("config_file", &self.config_file),
            ("credentials_file", &self.credentials_file),
        ] {
            if let Some(f) = file
                && !f.is_absolute()
            {
                return bad(format!(
                    "{key} must be an absolute path, got {}",
                    f.display()
                ));
            }
        }
        if let Some(url) = &self.endpoint_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return bad(format!(
                "endpoint_url must start with http:// or https://, got {url:?}"
            ));
        }
        if let Some(addr) = &self.test_address_override
            && addr.is_empty()
        {
            return bad("test_address_override must not be empty".into());
        }
        if let Some(region) = &self.region
            && (region.is_empty()
                || !region
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        {
            return bad(format!(
                "region must be an AWS region name such as \"eu-central-1\", got {region:?}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gitlabs_keys_are_read() {
        let s = AwsSettings::from_plugin_config(&json!({
            "name": "my-docker-asg",
            "profile": "default",
            "config_file": "/home/user/.aws/config",
            "credentials_file": "/home/user/.aws/credentials",
        }))
        .unwrap();
        assert_eq!(s.name, "my-docker-asg");
        assert_eq!(s.profile.as_deref(), Some("default"));
        assert_eq!(
            s.credentials_file.as_deref(),
            Some(std::path::Path::new("/home/user/.aws/credentials"))
        );
        assert_eq!(s.endpoint_url, None);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_by_name() {
        let e = AwsSettings::from_plugin_config(&json!({"name": "g", "regoin": "x"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("regoin"), "{e}");
        let e = AwsSettings::from_plugin_config(&json!({"name": ""}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("name must name"), "{e}");
        let e = AwsSettings::from_plugin_config(&json!({"name": "g", "region": "EU Central"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("region must be an AWS region name"), "{e}");
        let e = AwsSettings::from_plugin_config(&json!({"name": "g", "config_file": "rel"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("config_file must be an absolute path"), "{e}");
        let e = AwsSettings::from_plugin_config(&json!({"name": "g", "endpoint_url": "127.0.0.1"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("endpoint_url"), "{e}");
    }
}
