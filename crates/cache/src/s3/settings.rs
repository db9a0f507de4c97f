//! `[runners.cache.s3]` as GitLab Runner reads it (`cacheconfig.CacheS3Config`): the keys, the
//! rules that derive the endpoint, the addressing style, the credentials and the encryption
//! from them, and their validation.
//!
//! `RoleARN`, `UploadRoleARN`, `AssumeRoleMaxConcurrency` and
//! `DisableAssumeRoleCredentialsCaching` are not fields: GitLab hands the build host role
//! credentials for its own upload, and flotilla's manager uploads with its own, so the loader
//! warns about them.

use crate::error::CacheConfigError;
use flotilla_fleet::Secret;
use serde::{Deserialize, Serialize, Serializer};

/// AWS's global endpoint; GitLab treats a `ServerAddress` naming it as no address at all.
const DEFAULT_AWS_ENDPOINT: &str = "https://s3.amazonaws.com";

/// `[runners.cache.s3]`, with GitLab's key names.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct S3Settings {
    /// `ServerAddress`: `host[:port]` of an S3-compatible store; empty for AWS.
    #[serde(
        rename = "ServerAddress",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub server_address: String,
    /// `AccessKey`.
    #[serde(
        rename = "AccessKey",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub access_key: String,
    /// `SecretKey`.
    #[serde(
        rename = "SecretKey",
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted"
    )]
    pub secret_key: Option<Secret<String>>,
    /// `SessionToken`: sent with the access key (temporary credentials).
    #[serde(
        rename = "SessionToken",
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted"
    )]
    pub session_token: Option<Secret<String>>,
    /// `BucketName`.
    #[serde(rename = "BucketName", default)]
    pub bucket_name: String,
    /// `BucketLocation`: the region signed for (`us-east-1` when empty, as GitLab).
    #[serde(
        rename = "BucketLocation",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub bucket_location: String,
    /// `Insecure`: plain HTTP to `ServerAddress`.
    #[serde(rename = "Insecure", default)]
    pub insecure: bool,
    /// `AuthenticationType`: `access-key` or `iam` (any case); derived when empty.
    #[serde(
        rename = "AuthenticationType",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub authentication_type: String,
    /// `ServerSideEncryption`: `S3`/`AES256`, `KMS`/`aws:kms`, `DSSE-KMS`/`aws:kms:dsse`.
    #[serde(
        rename = "ServerSideEncryption",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub server_side_encryption: String,
    /// `ServerSideEncryptionKeyID`: the KMS key of `KMS` and `DSSE-KMS`.
    #[serde(
        rename = "ServerSideEncryptionKeyID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub server_side_encryption_key_id: String,
    /// `DualStack`: AWS's dual-stack endpoints (GitLab's default: on). AWS only.
    #[serde(rename = "DualStack", default, skip_serializing_if = "Option::is_none")]
    pub dual_stack: Option<bool>,
    /// `PathStyle`: `<endpoint>/<bucket>/<object>` rather than `<bucket>.<endpoint>/<object>`;
    /// detected from the address when unset.
    #[serde(rename = "PathStyle", default, skip_serializing_if = "Option::is_none")]
    pub path_style: Option<bool>,
    /// `Accelerate`: S3 Transfer Acceleration. AWS only.
    #[serde(rename = "Accelerate", default)]
    pub accelerate: bool,
}

fn redacted<S: Serializer>(value: &Option<Secret<String>>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        // `Secret`'s Display is the one redaction rule.
        Some(secret) => s.collect_str(secret),
        None => s.serialize_none(),
    }
}

/// Where the credentials come from (`CacheS3Config.AuthType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthType {
    /// `AccessKey` and `SecretKey` (and `SessionToken`).
    AccessKey,
    /// The standard AWS chain: environment, shared files, web identity, instance metadata.
    Iam,
}

/// Server-side encryption of uploaded archives (`CacheS3Config.EncryptionType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encryption {
    /// None asked for.
    None,
    /// `AES256`: S3-managed keys.
    Aes256,
    /// `aws:kms` with the given key.
    Kms(String),
    /// `aws:kms:dsse` with the given key.
    DsseKms(String),
}

impl Encryption {
    /// The `x-amz-server-side-encryption*` headers a `PUT` carries (and signs).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let kms = |kind: &str, key: &str| {
            let mut h = vec![("x-amz-server-side-encryption", kind.to_string())];
            if !key.is_empty() {
                h.push((
                    "x-amz-server-side-encryption-aws-kms-key-id",
                    key.to_string(),
                ));
            }
            h
        };
        match self {
            Encryption::None => Vec::new(),
            Encryption::Aes256 => vec![("x-amz-server-side-encryption", "AES256".into())],
            Encryption::Kms(key) => kms("aws:kms", key),
            Encryption::DsseKms(key) => kms("aws:kms:dsse", key),
        }
    }
}

/// Where a bucket is reached: the scheme and authority, and whether the bucket is a path
/// segment or part of the host name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https` or `http`.
    pub scheme: &'static str,
    /// `host[:port]`, without the bucket.
    pub authority: String,
    /// The bucket is the first path segment.
    pub path_style: bool,
}

impl S3Settings {
    /// `AuthType`: the value written (any case), else access keys when an address and both
    /// keys are set, else IAM. A value GitLab does not know leaves its client on the default
    /// chain too; [`S3Settings::validate`] warns about it.
    pub fn auth_type(&self) -> AuthType {
        match self
            .authentication_type
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "access-key" => AuthType::AccessKey,
            "iam" => AuthType::Iam,
            "" if !self.server_address.is_empty()
                && !self.access_key.is_empty()
                && self
                    .secret_key
                    .as_ref()
                    .is_some_and(|k| !k.expose().is_empty()) =>
            {
                AuthType::AccessKey
            }
            _ => AuthType::Iam,
        }
    }

    /// `EncryptionType`: an unknown value means none (and a warning).
    pub fn encryption(&self) -> Encryption {
        let key = self.server_side_encryption_key_id.clone();
        match self
            .server_side_encryption
            .trim()
            .to_ascii_uppercase()
            .as_str()
        {
            "S3" | "AES256" => Encryption::Aes256,
            "KMS" | "AWS:KMS" => Encryption::Kms(key),
            "DSSE-KMS" | "AWS:KMS:DSSE" => Encryption::DsseKms(key),
            _ => Encryption::None,
        }
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        match self.bucket_location.trim() {
            "" => "us-east-1",
            r => r,
        }
    }

    /// `GetEndpoint`: `http(s)://ServerAddress`, without a port that is the scheme's own;
    /// `None` for AWS (no address, or AWS's global one).
    fn custom_endpoint(&self) -> Option<(&'static str, String)> {
        let address = self.server_address.trim();
        if address.is_empty() {
            return None;
        }
        let scheme = if self.insecure { "http" } else { "https" };
        let authority = match split_port(address) {
            (host, Some(port))
                if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") =>
            {
                host.to_string()
            }
            _ => address.to_string(),
        };
        if format!("{scheme}://{authority}") == DEFAULT_AWS_ENDPOINT {
            return None;
        }
        Some((scheme, authority))
    }

    /// The endpoint of the bucket: the custom one, else AWS's regional endpoint (dual-stack
    /// and accelerated as asked). Path style as written, else detected as minio's
    /// `IsVirtualHostSupported` does: virtual hosts only on AWS, Google and Aliyun, and never
    /// over HTTPS for a bucket with a dot (its name would break the certificate's wildcard).
    pub fn endpoint(&self) -> Endpoint {
        let bucket_dotted = self.bucket_name.contains('.');
        match self.custom_endpoint() {
            Some((scheme, authority)) => {
                let host = split_port(&authority).0.to_ascii_lowercase();
                let virtual_host = !(scheme == "https" && bucket_dotted)
                    && (host.ends_with("amazonaws.com")
                        || host.ends_with("amazonaws.com.cn")
                        || host == "storage.googleapis.com"
                        || host.ends_with(".aliyuncs.com"));
                Endpoint {
                    scheme,
                    authority,
                    path_style: self.path_style.unwrap_or(!virtual_host),
                }
            }
            None => {
                let dual = self.dual_stack.unwrap_or(true);
                let authority = match (self.accelerate, dual) {
                    (true, true) => "s3-accelerate.dualstack.amazonaws.com".to_string(),
                    (true, false) => "s3-accelerate.amazonaws.com".to_string(),
                    (false, true) => format!("s3.dualstack.{}.amazonaws.com", self.region()),
                    (false, false) => format!("s3.{}.amazonaws.com", self.region()),
                };
                Endpoint {
                    scheme: "https",
                    authority,
                    // A bucket that is no DNS label cannot be a virtual host (AWS's rules).
                    path_style: self.path_style.unwrap_or(false) || bucket_dotted,
                }
            }
        }
    }

    /// The URL of `object` in the bucket, its path percent-encoded as S3 signs it (RFC 3986
    /// unreserved characters and `/` kept).
    pub fn object_url(&self, object: &str) -> String {
        let e = self.endpoint();
        let key = encode_path(object);
        if e.path_style {
            format!(
                "{}://{}/{}/{key}",
                e.scheme,
                e.authority,
                encode_path(&self.bucket_name)
            )
        } else {
            format!("{}://{}.{}/{key}", e.scheme, self.bucket_name, e.authority)
        }
    }

    /// Checks the table: errors for what cannot work, warnings for what is read otherwise
    /// than written.
    pub fn validate(&self) -> Result<Vec<String>, CacheConfigError> {
        if self.bucket_name.trim().is_empty() {
            return Err(CacheConfigError::MissingBucket);
        }
        let address = self.server_address.trim();
        if address.contains("://") || address.contains('/') || address.contains(char::is_whitespace)
        {
            return Err(CacheConfigError::BadServerAddress(address.to_string()));
        }
        let mut warnings = Vec::new();
        let auth = self.authentication_type.trim().to_ascii_lowercase();
        if !matches!(auth.as_str(), "" | "access-key" | "iam") {
            warnings.push(format!(
                "AuthenticationType = {:?} is neither \"access-key\" nor \"iam\": the AWS \
                 credential chain is used, as GitLab Runner does",
                self.authentication_type
            ));
        }
        match self.auth_type() {
            AuthType::AccessKey
                if self.access_key.is_empty()
                    || self
                        .secret_key
                        .as_ref()
                        .is_none_or(|k| k.expose().is_empty()) =>
            {
                return Err(CacheConfigError::MissingKeys);
            }
            AuthType::Iam if !cfg!(feature = "iam") => {
                return Err(CacheConfigError::NoCredentialChain);
            }
            _ => {}
        }
        if !self.server_side_encryption.trim().is_empty() && self.encryption() == Encryption::None {
            warnings.push(format!(
                "ServerSideEncryption = {:?} is none of S3, AES256, KMS, aws:kms, DSSE-KMS, \
                 aws:kms:dsse: archives are uploaded unencrypted, as GitLab Runner does",
                self.server_side_encryption
            ));
        }
        if self.custom_endpoint().is_some() && (self.accelerate || self.dual_stack == Some(true)) {
            warnings.push(
                "DualStack and Accelerate apply to AWS's own endpoints only; ServerAddress is \
                 used as written"
                    .to_string(),
            );
        }
        Ok(warnings)
    }
}

/// `host[:port]` split as Go's `net.SplitHostPort` does (`[v6]:port` for IPv6); no port when
/// there is none, or when an IPv6 address is written bare.
fn split_port(address: &str) -> (&str, Option<&str>) {
    if let Some(rest) = address.strip_prefix('[') {
        return match rest.split_once("]:") {
            Some((host, port)) => (&address[..host.len() + 2], Some(port)),
            None => (address, None),
        };
    }
    match address.split_once(':') {
        Some((host, port)) if !port.contains(':') => (host, Some(port)),
        _ => (address, None),
    }
}

/// Percent-encodes an object path as S3's canonical URI has it.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(text: &str) -> S3Settings {
        toml::from_str(text).expect("a [runners.cache.s3] table")
    }

    /// `CacheS3Config.AuthType` and its table in `cacheconfig`'s tests.
    #[test]
    fn credentials_as_gitlab_chooses_them() {
        let keys = "AccessKey = \"a\"\nSecretKey = \"b\"\n";
        assert_eq!(
            s3(&format!("ServerAddress = \"minio:9000\"\n{keys}")).auth_type(),
            AuthType::AccessKey
        );
        assert_eq!(s3(keys).auth_type(), AuthType::Iam, "no address: IAM");
        assert_eq!(
            s3("ServerAddress = \"minio:9000\"").auth_type(),
            AuthType::Iam
        );
        assert_eq!(
            s3(&format!(
                "AuthenticationType = \"IAM\"\nServerAddress = \"m\"\n{keys}"
            ))
            .auth_type(),
            AuthType::Iam
        );
        assert_eq!(
            s3("AuthenticationType = \"Access-Key\"").auth_type(),
            AuthType::AccessKey
        );
    }

    #[test]
    fn encryption_names_as_gitlab_reads_them() {
        assert_eq!(s3("").encryption(), Encryption::None);
        assert_eq!(
            s3("ServerSideEncryption = \"s3\"").encryption(),
            Encryption::Aes256
        );
        assert_eq!(
            s3("ServerSideEncryption = \"aws:kms\"\nServerSideEncryptionKeyID = \"k\"")
                .encryption(),
            Encryption::Kms("k".into())
        );
        assert_eq!(
            s3("ServerSideEncryption = \"DSSE-KMS\"").encryption(),
            Encryption::DsseKms(String::new())
        );
        assert_eq!(
            s3("ServerSideEncryption = \"rot13\"").encryption(),
            Encryption::None
        );
    }

    /// `GetEndpoint` and `PathStyleEnabled`, with the cases of GitLab Runner's
    /// `TestS3Config_PathStyleEnabled`/`TestCacheS3Config_GetEndpoint`.
    #[test]
    fn endpoints_and_addressing_as_gitlab_derives_them() {
        let url = |t: &str| s3(&format!("BucketName = \"b\"\n{t}")).object_url("p/o");
        assert_eq!(
            url("ServerAddress = \"minio.example.com:9000\""),
            "https://minio.example.com:9000/b/p/o"
        );
        assert_eq!(
            url("ServerAddress = \"minio.example.com:443\""),
            "https://minio.example.com/b/p/o"
        );
        assert_eq!(
            url("ServerAddress = \"minio.example.com:80\"\nInsecure = true"),
            "http://minio.example.com/b/p/o"
        );
        assert_eq!(
            url("ServerAddress = \"s3.eu-west-1.amazonaws.com\""),
            "https://b.s3.eu-west-1.amazonaws.com/p/o"
        );
        assert_eq!(
            url("ServerAddress = \"storage.googleapis.com\""),
            "https://b.storage.googleapis.com/p/o"
        );
        assert_eq!(
            url("ServerAddress = \"s3.amazonaws.com\"\nBucketLocation = \"eu-central-1\""),
            "https://b.s3.dualstack.eu-central-1.amazonaws.com/p/o",
            "AWS's global address is no custom endpoint"
        );
        assert_eq!(
            url("DualStack = false"),
            "https://b.s3.us-east-1.amazonaws.com/p/o"
        );
        assert_eq!(
            url("Accelerate = true\nDualStack = false"),
            "https://b.s3-accelerate.amazonaws.com/p/o"
        );
        assert_eq!(
            url("ServerAddress = \"minio:9000\"\nPathStyle = false"),
            "https://b.minio:9000/p/o"
        );
        assert_eq!(
            s3("BucketName = \"my.bucket\"\nDualStack = false").object_url("k"),
            "https://s3.us-east-1.amazonaws.com/my.bucket/k"
        );
        assert_eq!(
            s3("BucketName = \"b\"\nServerAddress = \"[::1]:9000\"\nInsecure = true")
                .object_url("a b"),
            "http://[::1]:9000/b/a%20b"
        );
    }

    #[test]
    fn validation_refuses_what_cannot_work() {
        assert!(matches!(
            s3("ServerAddress = \"m:9000\"").validate(),
            Err(CacheConfigError::MissingBucket)
        ));
        assert!(matches!(
            s3("BucketName = \"b\"\nServerAddress = \"https://m:9000\"").validate(),
            Err(CacheConfigError::BadServerAddress(_))
        ));
        assert!(matches!(
            s3("BucketName = \"b\"\nAuthenticationType = \"access-key\"\nAccessKey = \"a\"")
                .validate(),
            Err(CacheConfigError::MissingKeys)
        ));
        let warned = s3(
            "BucketName = \"b\"\nServerAddress = \"m\"\nAccessKey = \"a\"\nSecretKey = \"s\"\nServerSideEncryption = \"rot13\"",
        )
        .validate()
        .expect("warned");
        assert!(warned[0].contains("rot13"), "{warned:?}");
    }

    #[test]
    fn secrets_are_never_printed() {
        let s = s3("SecretKey = \"hunter2\"\nSessionToken = \"tok\"\nBucketName = \"b\"");
        let printed = toml::to_string(&s).unwrap();
        assert!(
            !printed.contains("hunter2") && !printed.contains("tok\""),
            "{printed}"
        );
        assert!(printed.contains("SecretKey = \"[REDACTED]\""), "{printed}");
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
