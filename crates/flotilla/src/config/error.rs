//! What can be wrong with a configuration file, and where.

use std::fmt;
use std::path::PathBuf;

/// A place in a configuration file: the file as named by the caller, and a 1-based line and
/// column (the column counts characters, not bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file, as the caller named it.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Something in the configuration that works but is probably not what the author wanted: a
/// GitLab key flotilla does not use, a sizing mismatch. Displayed as `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Where it is.
    pub location: Location,
    /// What it is.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Why a configuration could not be loaded. Every variant that refers to the file's content
/// carries a [`Location`], and its `Display` starts with `file:line:col: `.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read configuration: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{location}: TOML syntax error: {message}")]
    Syntax {
        /// Where the parser gave up.
        location: Location,
        /// The parser's description.
        message: String,
    },
    /// A value has the wrong type or cannot be decoded (a bad duration, an unknown executor).
    #[error("{location}: {message}")]
    Decode {
        /// The offending value.
        location: Location,
        /// What is wrong with it.
        message: String,
    },
    /// A key flotilla does not know inside a table where every key must be known
    /// (`[runners.autoscaler]` and its sub-tables, `[flotilla]`).
    #[error(
        "{location}: unknown key `{key}` in [{table}]{}",
        suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    UnknownKey {
        /// Where the key is.
        location: Location,
        /// The key as written.
        key: String,
        /// The table it is in, e.g. `runners.autoscaler`.
        table: String,
        /// The closest known key, when one is close.
        suggestion: Option<String>,
    },
    /// The configuration decodes but breaks a rule (`capacity_per_instance = 0`, a bad cron
    /// period, an unknown time zone, `privileged = true`, a runner without a token).
    #[error("{location}: {message}")]
    Invalid {
        /// The offending key or value (or the enclosing table when a key is missing).
        location: Location,
        /// The rule that was broken.
        message: String,
    },
    /// A `key_path` in a `connector_config` could not be read.
    #[error("{}: cannot read connector key_path: {error}", path.display())]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// The I/O error (in the message, not a source: the message would say it twice).
        error: std::io::Error,
    },
    /// Several of the above; each one is listed on its own line.
    #[error("{}", join_lines(errors))]
    Multiple {
        /// The errors, in file order where known.
        errors: Vec<ConfigError>,
    },
}

fn join_lines(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The individual errors: the members of [`ConfigError::Multiple`] (flattened), or this
    /// error alone.
    pub fn errors(&self) -> Vec<&ConfigError> {
        match self {
            ConfigError::Multiple { errors } => errors.iter().flat_map(|e| e.errors()).collect(),
            other => vec![other],
        }
    }

    /// Where in the file this error is, if it is about the file's content.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Syntax { location, .. }
            | ConfigError::Decode { location, .. }
            | ConfigError::UnknownKey { location, .. }
            | ConfigError::Invalid { location, .. } => Some(location),
            ConfigError::Read { .. }
            | ConfigError::KeyFile { .. }
            | ConfigError::Multiple { .. } => None,
        }
    }

    /// One error as itself, several as [`ConfigError::Multiple`] sorted by position; `None`
    /// when the list is empty.
    pub(crate) fn from_list(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        errors.sort_by_key(|e| e.location().map(|l| (l.line, l.column)));
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Multiple { errors }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(line: usize, column: usize) -> Location {
        Location {
            file: "config.toml".into(),
            line,
            column,
        }
    }

    #[test]
    fn unknown_key_display_with_and_without_suggestion() {
        let e = ConfigError::UnknownKey {
            location: loc(12, 5),
            key: "capacity_per_instanse".into(),
            table: "runners.autoscaler".into(),
            suggestion: Some("capacity_per_instance".into()),
        };
        assert_eq!(
            e.to_string(),
            "config.toml:12:5: unknown key `capacity_per_instanse` in [runners.autoscaler]; \
             did you mean `capacity_per_instance`?"
        );
        let e = ConfigError::UnknownKey {
            location: loc(1, 1),
            key: "zzz".into(),
            table: "flotilla".into(),
            suggestion: None,
        };
        assert_eq!(
            e.to_string(),
            "config.toml:1:1: unknown key `zzz` in [flotilla]"
        );
    }

    #[test]
    fn from_list_sorts_and_flattens() {
        let a = ConfigError::Invalid {
            location: loc(9, 1),
            message: "b".into(),
        };
        let b = ConfigError::Invalid {
            location: loc(2, 3),
            message: "a".into(),
        };
        assert!(ConfigError::from_list(vec![]).is_none());
        let one = ConfigError::from_list(vec![ConfigError::Invalid {
            location: loc(1, 1),
            message: "x".into(),
        }]);
        assert!(matches!(one, Some(ConfigError::Invalid { .. })));
        let many = ConfigError::from_list(vec![a, b]).unwrap();
        let lines: Vec<String> = many.errors().iter().map(|e| e.to_string()).collect();
        assert_eq!(lines, vec!["config.toml:2:3: a", "config.toml:9:1: b"]);
        assert_eq!(many.to_string(), "config.toml:2:3: a\nconfig.toml:9:1: b");
    }
}
