//! `[runners.cache.gcs]` as GitLab Runner reads it (`cacheconfig.CacheGCSConfig`), where its
//! credentials come from (`cache/gcs/credentials_resolver.go`), and their validation.

use crate::error::CacheConfigError;
use flotilla_fleet::Secret;
use serde::{Deserialize, Serialize, Serializer};

/// `[runners.cache.gcs]`, with GitLab's key names.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct GcsSettings {
    /// `AccessID`: the service account's e-mail address.
    #[serde(rename = "AccessID", default, skip_serializing_if = "String::is_empty")]
    pub access_id: String,
    /// `PrivateKey`: its RSA key, PEM.
    #[serde(
        rename = "PrivateKey",
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted"
    )]
    pub private_key: Option<Secret<String>>,
    /// `CredentialsFile`: a service account key file (JSON), read instead of the two above.
    #[serde(
        rename = "CredentialsFile",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub credentials_file: String,
    /// `BucketName`.
    #[serde(rename = "BucketName", default)]
    pub bucket_name: String,
    /// `UniverseDomain`: `storage.<domain>` instead of `storage.googleapis.com`.
    #[serde(
        rename = "UniverseDomain",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub universe_domain: String,
}

fn redacted<S: Serializer>(value: &Option<Secret<String>>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(secret) => s.collect_str(secret),
        None => s.serialize_none(),
    }
}

/// A service account's signing identity: its e-mail address and its key (PEM).
#[derive(Debug, Clone)]
pub struct ServiceAccount {
    /// `client_email`, GitLab's `AccessID`.
    pub email: String,
    /// `private_key`, PEM.
    pub private_key: Secret<String>,
}

/// The fields of a service account key file GitLab Runner reads.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    client_email: String,
    #[serde(default)]
    private_key: String,
}

impl GcsSettings {
    /// `https://storage.<UniverseDomain, else googleapis.com>`.
    pub fn endpoint(&self) -> String {
        match self.universe_domain.trim() {
            "" => "https://storage.googleapis.com".to_string(),
            d => format!("https://storage.{d}"),
        }
    }

    /// The signing identity: the key file when `CredentialsFile` is set (it must be a
    /// `service_account` file, as GitLab Runner requires), else `AccessID` and `PrivateKey`.
    pub fn service_account(&self) -> Result<ServiceAccount, CacheConfigError> {
        if !self.credentials_file.trim().is_empty() {
            let path = self.credentials_file.trim();
            let bad = |why: String| CacheConfigError::GcsCredentials(format!("{path}: {why}"));
            let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
            let file: KeyFile = serde_json::from_str(&text)
                .map_err(|e| bad(format!("not a service account key file: {e}")))?;
            if file.kind != "service_account" {
                return Err(bad(format!(
                    "the file's type is {:?}; GitLab Runner reads \"service_account\" files only",
                    file.kind
                )));
            }
            return Ok(ServiceAccount {
                email: file.client_email,
                private_key: Secret::new(file.private_key),
            });
        }
        match &self.private_key {
            Some(key) if !self.access_id.is_empty() && !key.expose().is_empty() => {
                Ok(ServiceAccount {
                    email: self.access_id.clone(),
                    private_key: key.clone(),
                })
            }
            _ => Err(CacheConfigError::GcsCredentials(
                "give AccessID and PrivateKey, or CredentialsFile: signing with the instance's \
                 own service account (the metadata server and IAM signBlob) is not implemented"
                    .to_string(),
            )),
        }
    }

    /// Checks what can be checked without reading files.
    pub fn validate(&self) -> Result<(), CacheConfigError> {
        if self.bucket_name.trim().is_empty() {
            return Err(CacheConfigError::MissingGcsBucket);
        }
        if self.credentials_file.trim().is_empty() {
            self.service_account()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gcs(text: &str) -> GcsSettings {
        toml::from_str(text).expect("a [runners.cache.gcs] table")
    }

    #[test]
    fn credentials_as_gitlab_resolves_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sa.json");
        std::fs::write(
            &file,
            r#"{"type": "service_account", "client_email": "ci@p.iam.gserviceaccount.com", "private_key": "PEM"}"#,
        )
        .unwrap();
        let from_file = gcs(&format!(
            "BucketName = \"b\"\nAccessID = \"ignored\"\nCredentialsFile = \"{}\"",
            file.display()
        ));
        assert_eq!(
            from_file.service_account().unwrap().email,
            "ci@p.iam.gserviceaccount.com",
            "the file wins over AccessID"
        );
        std::fs::write(&file, r#"{"type": "authorized_user"}"#).unwrap();
        let e = from_file.service_account().unwrap_err().to_string();
        assert!(e.contains("\"authorized_user\""), "{e}");
        let inline = gcs("BucketName = \"b\"\nAccessID = \"a@b\"\nPrivateKey = \"PEM\"");
        assert_eq!(inline.service_account().unwrap().email, "a@b");
        assert!(
            gcs("BucketName = \"b\"").validate().is_err(),
            "no credentials"
        );
        assert!(matches!(
            gcs("AccessID = \"a\"\nPrivateKey = \"k\"").validate(),
            Err(CacheConfigError::MissingGcsBucket)
        ));
    }

    #[test]
    fn the_endpoint_follows_the_universe_domain() {
        assert_eq!(gcs("").endpoint(), "https://storage.googleapis.com");
        assert_eq!(
            gcs("UniverseDomain = \"example.cloud\"").endpoint(),
            "https://storage.example.cloud"
        );
    }

    #[test]
    fn the_key_is_never_printed() {
        let s = gcs("PrivateKey = \"-----BEGIN PRIVATE KEY-----secret\"");
        let printed = toml::to_string(&s).unwrap();
        assert!(!printed.contains("secret"), "{printed}");
    }
}
