//! The credentials S3 requests are signed with: the access keys of the table, or (with the
//! `iam` feature) the standard AWS chain, kept until five minutes before they expire.

use super::settings::{AuthType, S3Settings};
use crate::error::CacheConfigError;
use aws_credential_types::Credentials;
use flotilla_job::StoreError;
#[cfg(feature = "iam")]
use std::time::Duration;
use std::time::SystemTime;

/// How long before their expiry credentials from the chain are fetched again.
#[cfg(feature = "iam")]
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

/// Where the signing credentials come from.
pub(crate) enum CredentialSource {
    /// The table's `AccessKey`, `SecretKey` and `SessionToken`.
    Static(Credentials),
    /// The standard AWS chain, with the last credentials it gave.
    #[cfg(feature = "iam")]
    Chain {
        chain: aws_config::default_provider::credentials::DefaultCredentialsChain,
        current: tokio::sync::Mutex<Option<Credentials>>,
    },
}

impl std::fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Static(_) => f.write_str("CredentialSource::Static"),
            #[cfg(feature = "iam")]
            CredentialSource::Chain { .. } => f.write_str("CredentialSource::Chain"),
        }
    }
}

impl CredentialSource {
    /// The source `settings` ask for.
    pub(crate) async fn of(settings: &S3Settings) -> Result<CredentialSource, CacheConfigError> {
        match settings.auth_type() {
            AuthType::AccessKey => {
                let secret = settings
                    .secret_key
                    .as_ref()
                    .map(|s| s.expose().clone())
                    .filter(|s| !s.is_empty() && !settings.access_key.is_empty())
                    .ok_or(CacheConfigError::MissingKeys)?;
                Ok(CredentialSource::Static(Credentials::new(
                    settings.access_key.clone(),
                    secret,
                    settings
                        .session_token
                        .as_ref()
                        .map(|t| t.expose().clone())
                        .filter(|t| !t.is_empty()),
                    None,
                    "[runners.cache.s3]",
                )))
            }
            #[cfg(feature = "iam")]
            AuthType::Iam => {
                let chain =
                    aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
                        .region(aws_config::Region::new(settings.region().to_string()))
                        .build()
                        .await;
                Ok(CredentialSource::Chain {
                    chain,
                    current: tokio::sync::Mutex::new(None),
                })
            }
            #[cfg(not(feature = "iam"))]
            AuthType::Iam => Err(CacheConfigError::NoCredentialChain),
        }
    }

    /// Credentials valid at `now` for a while.
    #[cfg_attr(not(feature = "iam"), allow(unused_variables))]
    pub(crate) async fn get(&self, now: SystemTime) -> Result<Credentials, StoreError> {
        match self {
            CredentialSource::Static(c) => Ok(c.clone()),
            #[cfg(feature = "iam")]
            CredentialSource::Chain { chain, current } => {
                use aws_credential_types::provider::ProvideCredentials;
                let mut current = current.lock().await;
                let fresh =
                    |c: &Credentials| c.expiry().is_none_or(|e| e > now + REFRESH_BEFORE_EXPIRY);
                if let Some(c) = current.as_ref().filter(|c| fresh(c)) {
                    return Ok(c.clone());
                }
                let c = chain.provide_credentials().await.map_err(|e| {
                    StoreError::Remote(format!(
                        "no AWS credentials for the cache (AuthenticationType iam): {e}"
                    ))
                })?;
                *current = Some(c.clone());
                Ok(c)
            }
        }
    }
}
