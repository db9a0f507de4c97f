//! `[runners.cache.azure]` as GitLab Runner reads it (`cacheconfig.CacheAzureConfig`) and its
//! validation.

use crate::error::CacheConfigError;
use flotilla_fleet::Secret;
use serde::{Deserialize, Serialize, Serializer};

/// GitLab Runner's default `StorageDomain`.
pub const DEFAULT_STORAGE_DOMAIN: &str = "blob.core.windows.net";

/// `[runners.cache.azure]`, with GitLab's key names.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct AzureSettings {
    /// `AccountName`: the storage account.
    #[serde(
        rename = "AccountName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub account_name: String,
    /// `AccountKey`: its shared key (base64), which signs the SAS tokens.
    #[serde(
        rename = "AccountKey",
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted"
    )]
    pub account_key: Option<Secret<String>>,
    /// `ContainerName`.
    #[serde(
        rename = "ContainerName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub container_name: String,
    /// `StorageDomain`: `blob.core.windows.net` when empty (other clouds have their own).
    #[serde(
        rename = "StorageDomain",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub storage_domain: String,
}

fn redacted<S: Serializer>(value: &Option<Secret<String>>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(secret) => s.collect_str(secret),
        None => s.serialize_none(),
    }
}

impl AzureSettings {
    /// `https://<AccountName>.<StorageDomain>`.
    pub fn endpoint(&self) -> String {
        let domain = match self.storage_domain.trim() {
            "" => DEFAULT_STORAGE_DOMAIN,
            d => d,
        };
        format!("https://{}.{domain}", self.account_name.trim())
    }

    /// Checks the table: the account, its key and the container are needed.
    pub fn validate(&self) -> Result<(), CacheConfigError> {
        if self.container_name.trim().is_empty() {
            return Err(CacheConfigError::Azure("ContainerName is required".into()));
        }
        if self.account_name.trim().is_empty() {
            return Err(CacheConfigError::Azure("AccountName is required".into()));
        }
        if self
            .account_key
            .as_ref()
            .is_none_or(|k| k.expose().trim().is_empty())
        {
            return Err(CacheConfigError::Azure(
                "AccountKey is required: signing with the instance's managed identity (a user \
                 delegation key) is not implemented"
                    .into(),
            ));
        }
        if let Some(key) = &self.account_key {
            super::sign::decode_key(key.expose())
                .map_err(|e| CacheConfigError::Azure(format!("AccountKey: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn azure(text: &str) -> AzureSettings {
        toml::from_str(text).expect("a [runners.cache.azure] table")
    }

    #[test]
    fn the_endpoint_and_what_is_required() {
        let ok = azure("AccountName = \"acct\"\nAccountKey = \"a2V5\"\nContainerName = \"c\"");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.endpoint(), "https://acct.blob.core.windows.net");
        let sovereign =
            azure("AccountName = \"acct\"\nStorageDomain = \"blob.core.chinacloudapi.cn\"");
        assert_eq!(
            sovereign.endpoint(),
            "https://acct.blob.core.chinacloudapi.cn"
        );
        for (text, said) in [
            ("AccountName = \"a\"\nAccountKey = \"k\"", "ContainerName"),
            ("ContainerName = \"c\"\nAccountKey = \"k\"", "AccountName"),
            (
                "ContainerName = \"c\"\nAccountName = \"a\"",
                "managed identity",
            ),
            (
                "ContainerName = \"c\"\nAccountName = \"a\"\nAccountKey = \"se!cret\"",
                "AccountKey: the Azure account key is not base64",
            ),
        ] {
            let e = azure(text).validate().unwrap_err().to_string();
            assert!(e.contains(said), "{e}");
            assert!(!e.contains("se!cret") && !e.contains('!'), "{e}");
        }
        let printed = toml::to_string(&ok).unwrap();
        assert!(!printed.contains("a2V5"), "{printed}");
    }
}
