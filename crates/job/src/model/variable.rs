//! Job variables as GitLab sends them (`variables[]` of the payload).

use super::nullable::nullable;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One job variable: `{key, value, public, file, masked, raw}`.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Variable {
    /// The name, exported to the job's shell as an environment variable.
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    /// The value; for a file variable, the file's contents.
    #[serde(deserialize_with = "nullable")]
    pub value: String,
    /// Public variables may be shown; non-public ones are redacted in `Debug`.
    #[serde(deserialize_with = "nullable")]
    pub public: bool,
    /// A file variable: the value is written to a private file and the variable holds its path.
    #[serde(deserialize_with = "nullable")]
    pub file: bool,
    /// The value is replaced by `[MASKED]` wherever it appears in the trace.
    #[serde(deserialize_with = "nullable")]
    pub masked: bool,
    /// A raw value is not expanded (`$VAR` stays literally `$VAR`).
    #[serde(deserialize_with = "nullable")]
    pub raw: bool,
}

impl Variable {
    /// A public, plain (not file, not masked, expanded) variable.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Variable {
        Variable {
            key: key.into(),
            value: value.into(),
            public: true,
            ..Default::default()
        }
    }

    /// Marks the variable as masked (and not public).
    pub fn masked(mut self) -> Variable {
        self.masked = true;
        self.public = false;
        self
    }

    /// Marks the variable as a file variable.
    pub fn file(mut self) -> Variable {
        self.file = true;
        self
    }

    /// Marks the variable as raw (never expanded).
    pub fn raw(mut self) -> Variable {
        self.raw = true;
        self
    }

    /// Whether `key` can be exported by a POSIX shell (`[A-Za-z_][A-Za-z0-9_]*`).
    pub fn has_valid_name(&self) -> bool {
        is_shell_name(&self.key)
    }
}

/// Whether `name` is a valid POSIX shell variable name.
pub fn is_shell_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b == b'_' || b.is_ascii_alphabetic() => {}
        _ => return false,
    }
    bytes.all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

impl fmt::Debug for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value: &dyn fmt::Debug = if self.masked || !self.public {
            &"[REDACTED]"
        } else {
            &self.value
        };
        f.debug_struct("Variable")
            .field("key", &self.key)
            .field("value", value)
            .field("public", &self.public)
            .field("file", &self.file)
            .field("masked", &self.masked)
            .field("raw", &self.raw)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_secret_values() {
        let v = Variable::new("TOKEN", "s3cr3t-value").masked();
        assert!(!format!("{v:?}").contains("s3cr3t"));
        let private = Variable {
            public: false,
            ..Variable::new("P", "private-value")
        };
        assert!(!format!("{private:?}").contains("private-value"));
        let public = Variable::new("P", "shown");
        assert!(format!("{public:?}").contains("shown"));
    }

    #[test]
    fn shell_names() {
        for ok in ["A", "_", "a_1", "CI_JOB_ID"] {
            assert!(is_shell_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A B", "é", "A.B"] {
            assert!(!is_shell_name(bad), "{bad}");
        }
    }
}
