//! `[runners.cache]`: the keys every backend shares (`cacheconfig.Config` in GitLab Runner).
//! Each backend's own table is parsed beside its store ([`crate::s3::settings`],
//! [`crate::gcs::settings`], [`crate::azure::settings`]); a table with settings beside another
//! `Type` is said to be unused (`gitlab-runner register` writes the backends' tables empty,
//! which is no setting).

use crate::azure::settings::AzureSettings;
use crate::error::CacheConfigError;
use crate::gcs::settings::GcsSettings;
use crate::s3::settings::S3Settings;
use serde::{Deserialize, Serialize};

/// `[runners.cache]`, with GitLab's key names.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct CacheConfig {
    /// `Type`: `s3`, `gcs` or `azure`; empty keeps the cache on the manager.
    #[serde(rename = "Type", default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// `Path`: a prefix of every object name.
    #[serde(rename = "Path", default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// `Shared`: runners share the project's caches (no `runner/<token>/` part in the name).
    #[serde(rename = "Shared", default)]
    pub shared: bool,
    /// `MaxUploadedArchiveSize`: the largest archive uploaded, in bytes (0: no limit).
    #[serde(rename = "MaxUploadedArchiveSize", default)]
    pub max_uploaded_archive_size: i64,
    /// `[runners.cache.s3]`.
    #[serde(rename = "s3", default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Settings>,
    /// `[runners.cache.gcs]`.
    #[serde(rename = "gcs", default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSettings>,
    /// `[runners.cache.azure]`.
    #[serde(rename = "azure", default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureSettings>,
}

/// The backend a `Type` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheKind {
    /// No `Type`: the cache stays on the manager.
    None,
    /// `s3`.
    S3,
    /// `gcs`.
    Gcs,
    /// `azure`.
    Azure,
    /// A type flotilla has no store for (a name GitLab does not know either, for which it
    /// skips the cache).
    Unsupported(String),
}

impl CacheKind {
    /// The store a `Type` value names. GitLab's factory names are lower case; `S3` is read as
    /// `s3`.
    pub fn from_type(name: &str) -> CacheKind {
        match name.trim().to_ascii_lowercase().as_str() {
            "" => CacheKind::None,
            "s3" | "s3v2" => CacheKind::S3,
            "gcs" | "gcsv2" => CacheKind::Gcs,
            "azure" => CacheKind::Azure,
            other => CacheKind::Unsupported(other.to_string()),
        }
    }
}

impl CacheConfig {
    /// The store `Type` names.
    pub fn kind(&self) -> CacheKind {
        CacheKind::from_type(&self.kind)
    }

    /// The limit on uploaded archives, if any (GitLab ignores zero and negative values).
    pub fn upload_limit(&self) -> Option<u64> {
        u64::try_from(self.max_uploaded_archive_size)
            .ok()
            .filter(|n| *n > 0)
    }

    /// Checks the table: an error for what cannot work, and what to warn about (a type
    /// flotilla has no store for, values it reads otherwise than written).
    pub fn validate(&self) -> Result<Vec<String>, CacheConfigError> {
        if self.path.split('/').any(|s| s == "..") {
            return Err(CacheConfigError::BadPath(self.path.clone()));
        }
        let mut warnings = Vec::new();
        match self.kind() {
            CacheKind::None => {}
            CacheKind::S3 => match &self.s3 {
                Some(s3) => warnings.extend(s3.validate()?),
                // GitLab Runner logs "missing S3 configuration" at each job and caches
                // nothing remotely; the job runs.
                None => warnings.push(
                    "Type = \"s3\" without a [runners.cache.s3] table: no distributed cache \
                     (GitLab Runner caches nothing remotely either); each runner keeps its job \
                     cache on the manager"
                        .to_string(),
                ),
            },
            CacheKind::Gcs => match &self.gcs {
                Some(gcs) => gcs.validate()?,
                None => warnings.push(
                    "Type = \"gcs\" without a [runners.cache.gcs] table: no distributed cache \
                     (GitLab Runner caches nothing remotely either); each runner keeps its job \
                     cache on the manager"
                        .to_string(),
                ),
            },
            CacheKind::Azure => match &self.azure {
                Some(azure) => azure.validate()?,
                None => warnings.push(
                    "Type = \"azure\" without a [runners.cache.azure] table: no distributed \
                     cache (GitLab Runner caches nothing remotely either); each runner keeps its \
                     job cache on the manager"
                        .to_string(),
                ),
            },
            CacheKind::Unsupported(kind) => warnings.push(format!(
                "Type = {kind:?}: flotilla has no {kind} cache store yet; each runner keeps its \
                 job cache on the manager, in <state_dir>/cache/<runner>"
            )),
        }
        let kind = self.kind();
        let gcs_set = self
            .gcs
            .as_ref()
            .is_some_and(|g| *g != GcsSettings::default());
        for (table, set, used) in [
            ("gcs", gcs_set, kind == CacheKind::Gcs),
            (
                "azure",
                self.azure
                    .as_ref()
                    .is_some_and(|a| *a != AzureSettings::default()),
                kind == CacheKind::Azure,
            ),
        ] {
            if set && !used {
                warnings.push(format!(
                    "[runners.cache.{table}] is not used: Type is {:?} (GitLab Runner reads \
                     only the table Type names)",
                    self.kind
                ));
            }
        }
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> CacheConfig {
        toml::from_str(text).expect("a [runners.cache] table")
    }

    #[test]
    fn type_names_a_backend() {
        assert_eq!(parse("").kind(), CacheKind::None);
        assert_eq!(parse("Type = \"s3\"").kind(), CacheKind::S3);
        assert_eq!(parse("Type = \"S3\"").kind(), CacheKind::S3);
        assert_eq!(parse("Type = \"gcs\"").kind(), CacheKind::Gcs);
        assert_eq!(parse("Type = \"azure\"").kind(), CacheKind::Azure);
        assert_eq!(
            parse("Type = \"swift\"").kind(),
            CacheKind::Unsupported("swift".into())
        );
    }

    #[test]
    fn validation_says_what_is_wrong() {
        let warned = parse("Type = \"s3\"")
            .validate()
            .expect("warned, not refused");
        assert!(
            warned[0].contains("without a [runners.cache.s3]"),
            "{warned:?}"
        );
        assert!(matches!(
            parse("Type = \"s3\"\n[s3]\nServerAddress = \"minio:9000\"\nAccessKey = \"a\"\nSecretKey = \"b\"").validate(),
            Err(CacheConfigError::MissingBucket)
        ));
        assert!(matches!(
            parse("Path = \"a/../..\"").validate(),
            Err(CacheConfigError::BadPath(_))
        ));
        let warned = parse("Type = \"swift\"")
            .validate()
            .expect("warned, not refused");
        assert!(warned[0].contains("no swift cache store"), "{warned:?}");
        assert!(matches!(
            parse("Type = \"azure\"\n[azure]\nAccountName = \"a\"").validate(),
            Err(CacheConfigError::Azure(_))
        ));
        // `register`'s empty tables are no setting; a filled one beside another Type is said.
        assert!(parse("[gcs]\n[azure]").validate().unwrap().is_empty());
        let warned = parse(
            "Type = \"s3\"\n[s3]\nBucketName = \"b\"\nAccessKey = \"a\"\nSecretKey = \"s\"\n\
             ServerAddress = \"m\"\n[gcs]\nBucketName = \"g\"",
        )
        .validate()
        .unwrap();
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(
            warned[0].contains("[runners.cache.gcs] is not used"),
            "{warned:?}"
        );
    }

    #[test]
    fn only_a_positive_size_limits_uploads() {
        assert_eq!(parse("MaxUploadedArchiveSize = 0").upload_limit(), None);
        assert_eq!(parse("MaxUploadedArchiveSize = -5").upload_limit(), None);
        assert_eq!(
            parse("MaxUploadedArchiveSize = 1024").upload_limit(),
            Some(1024)
        );
    }
}
