//! The Azure Blob Storage cache store: `[runners.cache.azure]`, service SAS tokens as GitLab
//! Runner's adapter makes them (`cache/azure/azure.go`), and the store that moves archives
//! with them.

pub mod settings;
pub mod sign;
mod store;

pub use store::AzureCacheStore;
