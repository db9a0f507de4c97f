//! The S3 cache store: `[runners.cache.s3]`, presigned URLs, and the store that moves
//! archives with them.

mod credentials;
pub mod presign;
pub mod settings;
mod store;

pub use store::S3CacheStore;
