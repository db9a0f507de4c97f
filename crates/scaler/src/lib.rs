//! The scaler: slot and instance ledgers, the pure desired() decision, and the async driver (taskscaler's job).
