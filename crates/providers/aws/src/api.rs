//! The AWS calls the provider makes, each through the retry policy of [`crate::retry`].
//!
//! One method per API action, named after it, with the AWS API Reference page it follows.
//! Every attempt is counted ([`Api::calls`]), so a test or a benchmark can say how many calls
//! an operation cost.

use crate::error::ApiError;
use crate::retry::{RetryPolicy, classify};
use crate::settings::AwsSettings;
use aws_config::SdkConfig;
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_sdk_autoscaling::config::http::HttpResponse;
use aws_sdk_autoscaling::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_autoscaling::types::AutoScalingGroup;
use aws_sdk_ec2::types::Instance;
use flotilla_fleet::FleetError;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The most records `DescribeAutoScalingInstances` returns in one page (API Reference:
/// `MaxRecords`, default 50, maximum 50), and the most instance ids it takes at once.
pub const PAGE_SIZE: i32 = 50;

/// How long one attempt of a call may take, connecting included.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to the endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One instance of an Auto Scaling group, as `DescribeAutoScalingInstances` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInstance {
    /// The EC2 instance id.
    pub id: String,
    /// The group it belongs to.
    pub group: String,
    /// Its `LifecycleState`.
    pub lifecycle: String,
    /// Its `HealthStatus` (`Healthy` or `Unhealthy`).
    pub health: String,
}

/// Clients of the three APIs, with the retry policy and a count of calls made.
#[derive(Debug)]
pub struct Api {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    instance_connect: aws_sdk_ec2instanceconnect::Client,
    region: String,
    policy: RetryPolicy,
    calls: AtomicU64,
}

/// Loads the shared AWS configuration the way fleeting-plugin-aws does: the standard chain
/// (environment, shared config and credentials files, SSO, web identity, container and
/// instance metadata), with the profile and files `settings` names. Credentials the chain
/// hands out are cached and refreshed by the SDK before they expire, so a role's temporary
/// credentials that run out mid-run are replaced without a failed call.
pub async fn load_config(settings: &AwsSettings) -> SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(profile) = &settings.profile {
        loader = loader.profile_name(profile);
    }
    if settings.config_file.is_some() || settings.credentials_file.is_some() {
        let mut files = EnvConfigFiles::builder()
            .include_default_config_file(settings.config_file.is_none())
            .include_default_credentials_file(settings.credentials_file.is_none());
        if let Some(f) = &settings.config_file {
            files = files.with_file(EnvConfigFileKind::Config, f);
        }
        if let Some(f) = &settings.credentials_file {
            files = files.with_file(EnvConfigFileKind::Credentials, f);
        }
        loader = loader.profile_files(files.build());
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some(region) = &settings.region {
        loader = loader.region(aws_sdk_autoscaling::config::Region::new(region.clone()));
    }
    loader.load().await
}

/// A configuration with fixed credentials, region and endpoint, and nothing read from the
/// environment: for tests against moto's server.
pub fn fixed_config(endpoint_url: &str, region: &str, access_key: &str, secret: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_sdk_autoscaling::config::Region::new(region.to_string()))
        .credentials_provider(aws_sdk_autoscaling::config::SharedCredentialsProvider::new(
            aws_sdk_autoscaling::config::Credentials::new(
                access_key,
                secret,
                None,
                None,
                "flotilla-fixed",
            ),
        ))
        .endpoint_url(endpoint_url)
        .build()
}

impl Api {
    /// Clients from `config`, with the SDK's own retries off (ours are in [`Api::call`]).
    pub fn new(config: &SdkConfig, policy: RetryPolicy) -> Result<Api, FleetError> {
        let region = config.region().map(|r| r.to_string()).ok_or_else(|| {
            FleetError::Config(
                "aws: no region: set AWS_REGION, or `region` in the profile's section of \
                     the shared config file"
                    .into(),
            )
        })?;
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .operation_attempt_timeout(ATTEMPT_TIMEOUT)
            .build();
        let retry = aws_config::retry::RetryConfig::disabled();
        let autoscaling = aws_sdk_autoscaling::Client::from_conf(
            aws_sdk_autoscaling::config::Builder::from(config)
                .retry_config(retry.clone())
                .timeout_config(timeouts.clone())
                .build(),
        );
        let ec2 = aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::config::Builder::from(config)
                .retry_config(retry.clone())
                .timeout_config(timeouts.clone())
                .build(),
        );
        let instance_connect = aws_sdk_ec2instanceconnect::Client::from_conf(
            aws_sdk_ec2instanceconnect::config::Builder::from(config)
                .retry_config(retry)
                .timeout_config(timeouts)
                .build(),
        );
        Ok(Api {
            autoscaling,
            ec2,
            instance_connect,
            region,
            policy,
            calls: AtomicU64::new(0),
        })
    }

    /// The region the clients talk to.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// How many API calls (attempts, retries included) were made so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Runs `attempt` until it succeeds or fails in a way [`RetryPolicy`] does not try again.
    async fn call<T, E, F, Fut>(&self, api: &'static str, mut attempt: F) -> Result<T, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let mut failures = 0u32;
        loop {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let err = match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            failures += 1;
            let code = err.code().map(str::to_owned);
            let status = err.raw_response().map(|r| r.status().as_u16());
            let no_response = matches!(
                err,
                SdkError::DispatchFailure(_) | SdkError::TimeoutError(_)
            );
            let class = classify(code.as_deref(), status, no_response);
            let wait = if class.retryable() {
                self.policy.backoff(failures, rand::random::<f64>())
            } else {
                None
            };
            let message = match err.message() {
                Some(m) => m.to_string(),
                None => DisplayErrorContext(&err).to_string(),
            };
            match wait {
                Some(wait) => {
                    tracing::debug!(api, code = ?code, ?class, failures, ?wait, "AWS call failed; trying again");
                    tokio::time::sleep(wait).await;
                }
                None => {
                    return Err(ApiError {
                        api,
                        code,
                        message,
                        class,
                        attempts: failures,
                    });
                }
            }
        }
    }

    /// `DescribeAutoScalingGroups` for one group; `None` when it does not exist.
    /// (API Reference: API_DescribeAutoScalingGroups.)
    pub async fn describe_auto_scaling_group(
        &self,
        name: &str,
    ) -> Result<Option<AutoScalingGroup>, ApiError> {
        let out = self
            .call("DescribeAutoScalingGroups", || {
                self.autoscaling
                    .describe_auto_scaling_groups()
                    .auto_scaling_group_names(name)
                    .send()
            })
            .await?;
        Ok(out
            .auto_scaling_groups()
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(name))
            .cloned())
    }

    /// The names of the group's scaling policies, every page of `DescribePolicies`.
    /// (API Reference: API_DescribePolicies.)
    pub async fn describe_policies(&self, group: &str) -> Result<Vec<String>, ApiError> {
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .call("DescribePolicies", || {
                    self.autoscaling
                        .describe_policies()
                        .auto_scaling_group_name(group)
                        .set_next_token(token.clone())
                        .send()
                })
                .await?;
            names.extend(
                out.scaling_policies()
                    .iter()
                    .filter_map(|p| p.policy_name().map(str::to_owned)),
            );
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => return Ok(names),
            }
        }
    }

    /// Every instance of `group`: `DescribeAutoScalingInstances` paged 50 at a time, as
    /// fleeting-plugin-aws's `Update` does. The action takes no group filter (API Reference:
    /// API_DescribeAutoScalingInstances: `InstanceIds`, `MaxRecords`, `NextToken`), so the
    /// region's instances of every group are paged and this group's kept.
    pub async fn describe_group_instances(
        &self,
        group: &str,
    ) -> Result<Vec<GroupInstance>, ApiError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call("DescribeAutoScalingInstances", || {
                    self.autoscaling
                        .describe_auto_scaling_instances()
                        .max_records(PAGE_SIZE)
                        .set_next_token(token.clone())
                        .send()
                })
                .await?;
            out.extend(
                page.auto_scaling_instances()
                    .iter()
                    .filter_map(group_instance)
                    .filter(|i| i.group == group),
            );
            match page.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => return Ok(out),
            }
        }
    }

    /// `DescribeAutoScalingInstances` for the given ids (50 a call): which group each belongs
    /// to. Ids no group holds are missing from the answer.
    pub async fn describe_instances_groups(
        &self,
        ids: &[String],
    ) -> Result<Vec<GroupInstance>, ApiError> {
        let mut out = Vec::new();
        for chunk in ids.chunks(PAGE_SIZE as usize) {
            let page = self
                .call("DescribeAutoScalingInstances", || {
                    self.autoscaling
                        .describe_auto_scaling_instances()
                        .set_instance_ids(Some(chunk.to_vec()))
                        .max_records(PAGE_SIZE)
                        .send()
                })
                .await?;
            out.extend(
                page.auto_scaling_instances()
                    .iter()
                    .filter_map(group_instance),
            );
        }
        Ok(out)
    }

    /// `SetDesiredCapacity` with `HonorCooldown=false`, as fleeting-plugin-aws's `Increase`
    /// (API Reference: API_SetDesiredCapacity: a cooldown would refuse the change).
    pub async fn set_desired_capacity(&self, group: &str, desired: i32) -> Result<(), ApiError> {
        self.call("SetDesiredCapacity", || {
            self.autoscaling
                .set_desired_capacity()
                .auto_scaling_group_name(group)
                .desired_capacity(desired)
                .honor_cooldown(false)
                .send()
        })
        .await
        .map(drop)
    }

    /// `TerminateInstanceInAutoScalingGroup` with `ShouldDecrementDesiredCapacity=true`, so
    /// that the group does not launch a replacement (API Reference:
    /// API_TerminateInstanceInAutoScalingGroup).
    pub async fn terminate_instance(&self, id: &str) -> Result<(), ApiError> {
        self.call("TerminateInstanceInAutoScalingGroup", || {
            self.autoscaling
                .terminate_instance_in_auto_scaling_group()
                .instance_id(id)
                .should_decrement_desired_capacity(true)
                .send()
        })
        .await
        .map(drop)
    }

    /// `DescribeInstances` for one instance (Amazon EC2 API Reference: API_DescribeInstances);
    /// `None` when EC2 does not know it.
    pub async fn describe_instance(&self, id: &str) -> Result<Option<Instance>, ApiError> {
        let out = match self
            .call("DescribeInstances", || {
                self.ec2.describe_instances().instance_ids(id).send()
            })
            .await
        {
            Ok(out) => out,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(id))
            .cloned())
    }

    /// `GetPasswordData` (Amazon EC2 API Reference: API_GetPasswordData): a Windows
    /// instance's Administrator password, encrypted with its key pair, base64; empty until
    /// Windows has set it.
    pub async fn get_password_data(&self, id: &str) -> Result<String, ApiError> {
        let out = self
            .call("GetPasswordData", || {
                self.ec2.get_password_data().instance_id(id).send()
            })
            .await?;
        Ok(out.password_data().unwrap_or_default().to_string())
    }

    /// `SendSSHPublicKey` (EC2 Instance Connect API Reference: API_SendSSHPublicKey): the key
    /// is accepted by the instance's sshd, for `user`, for 60 seconds.
    pub async fn send_ssh_public_key(
        &self,
        id: &str,
        user: &str,
        public_key: &str,
        availability_zone: Option<&str>,
    ) -> Result<bool, ApiError> {
        let out = self
            .call("SendSSHPublicKey", || {
                self.instance_connect
                    .send_ssh_public_key()
                    .instance_id(id)
                    .instance_os_user(user)
                    .ssh_public_key(public_key)
                    .set_availability_zone(availability_zone.map(str::to_owned))
                    .send()
            })
            .await?;
        Ok(out.success())
    }
}

fn group_instance(
    d: &aws_sdk_autoscaling::types::AutoScalingInstanceDetails,
) -> Option<GroupInstance> {
    Some(GroupInstance {
        id: d.instance_id()?.to_string(),
        group: d.auto_scaling_group_name()?.to_string(),
        lifecycle: d.lifecycle_state().unwrap_or_default().to_string(),
        health: d.health_status().unwrap_or_default().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `region` in `plugin_config` is the region the clients use, over the chain's.
    #[tokio::test]
    async fn the_plugin_configs_region_wins() {
        let mut settings = AwsSettings::new("group");
        settings.region = Some("ap-southeast-2".into());
        let config = load_config(&settings).await;
        assert_eq!(
            config.region().map(ToString::to_string).as_deref(),
            Some("ap-southeast-2")
        );
    }
}
