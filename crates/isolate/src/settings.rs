//! What every level's settings share: a level's table (`[runners.docker]`, `[runners.cgroup]`,
//! ...) is read into the level's own settings type (`docker::settings`, `cgroup::settings`,
//! ...), whose `build` checks every value and makes the level's configuration. A value that
//! cannot be used is a [`SettingError`] naming its place inside the table, so the binary can
//! point at the line; `build` reports all of them at once, never only the first.

use std::fmt;

/// One step of a key path inside a level's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySegment {
    /// A key.
    Key(String),
    /// An entry of a list.
    Index(usize),
}

/// One value of a level's table that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// Where it is, from the table (`volumes`, `0`).
    pub at: Vec<KeySegment>,
    /// What is wrong with it.
    pub message: String,
}

impl SettingError {
    /// A problem with `key` of the table.
    pub fn new(key: &str, message: impl fmt::Display) -> SettingError {
        SettingError {
            at: vec![KeySegment::Key(key.to_string())],
            message: message.to_string(),
        }
    }

    /// The same problem, one step deeper: entry `index`.
    #[must_use]
    pub fn index(mut self, index: usize) -> SettingError {
        self.at.push(KeySegment::Index(index));
        self
    }

    /// The same problem, one step deeper: `key`.
    #[must_use]
    pub fn key(mut self, key: &str) -> SettingError {
        self.at.push(KeySegment::Key(key.to_string()));
        self
    }
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.at.iter().enumerate() {
            match step {
                KeySegment::Key(k) if i == 0 => write!(f, "{k}")?,
                KeySegment::Key(k) => write!(f, ".{k}")?,
                KeySegment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        write!(f, ": {}", self.message)
    }
}

/// Every value of a level's table that cannot be used.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
pub struct SettingErrors(pub Vec<SettingError>);

impl fmt::Display for SettingErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl SettingErrors {
    /// Keeps `result`'s value, or its error as found at `at`.
    pub fn check<T, E: fmt::Display>(
        &mut self,
        result: Result<T, E>,
        at: impl FnOnce(String) -> SettingError,
    ) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.push(at(e.to_string()));
                None
            }
        }
    }

    /// Adds one problem.
    pub fn push(&mut self, e: SettingError) {
        self.0.push(e);
    }

    /// `value` when nothing was found wrong.
    pub fn or<T>(self, value: impl FnOnce() -> T) -> Result<T, SettingErrors> {
        if self.0.is_empty() {
            Ok(value())
        } else {
            Err(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_reads_as_the_table_writes_it() {
        let e = SettingError::new("services_devices", "bad")
            .key("postgres:*")
            .index(1);
        assert_eq!(e.to_string(), "services_devices.postgres:*[1]: bad");
        let all = SettingErrors(vec![SettingError::new("cpus", "x"), e]);
        assert_eq!(
            all.to_string(),
            "cpus: x; services_devices.postgres:*[1]: bad"
        );
    }
}
