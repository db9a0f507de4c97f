//! What is wrong with a `[runners.cache]` table.

/// A `[runners.cache]` setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheConfigError {
    /// No bucket named.
    #[error("[runners.cache.s3] BucketName is required")]
    MissingBucket,
    /// `ServerAddress` is not a host with an optional port.
    #[error(
        "[runners.cache.s3] ServerAddress {0:?} is not host[:port] (the scheme comes from Insecure)"
    )]
    BadServerAddress(String),
    /// `Path` would leave the bucket's root.
    #[error("[runners.cache] Path {0:?} climbs out of the bucket with `..`")]
    BadPath(String),
    /// Access-key authentication without both keys.
    #[error("[runners.cache.s3] AuthenticationType = \"access-key\" needs AccessKey and SecretKey")]
    MissingKeys,
    /// IAM authentication in a build without the AWS credential chain.
    #[error(
        "[runners.cache.s3] takes its credentials from the AWS chain (AuthenticationType \
         \"iam\", or no AccessKey/SecretKey/ServerAddress), which this build lacks: build \
         flotilla with the `aws` feature (or `full`), or set AccessKey and SecretKey"
    )]
    NoCredentialChain,
    /// No bucket named in `[runners.cache.gcs]`.
    #[error("[runners.cache.gcs] BucketName is required")]
    MissingGcsBucket,
    /// No usable GCS credentials.
    #[error("[runners.cache.gcs] credentials: {0}")]
    GcsCredentials(String),
    /// The GCS key cannot sign.
    #[error("[runners.cache.gcs] {0}")]
    GcsKey(String),
    /// `[runners.cache.azure]` cannot be used.
    #[error("[runners.cache.azure] {0}")]
    Azure(String),
    /// The HTTP client could not be made.
    #[error("the cache's HTTP client: {0}")]
    Client(String),
}
