//! Crash-safe SQLite persistence of the scaler ledgers and job records.
