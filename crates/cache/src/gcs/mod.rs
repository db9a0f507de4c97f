//! The GCS cache store: `[runners.cache.gcs]`, V2 signed URLs as GitLab Runner makes them
//! (`cache/gcs/adapter.go` through `storage.SignedURL`, whose default scheme is V2), and the
//! store that moves archives with them.

pub mod settings;
pub mod sign;
mod store;

pub use store::GcsCacheStore;
