//! Connectors: how flotilla reaches an instance (ssh, docker exec, local process).
