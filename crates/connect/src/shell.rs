//! Building POSIX shell command lines (pure).

use crate::ConnectError;

pub use flotilla_shell::{is_valid_env_name, join, quote};

/// Checks every variable name.
pub fn check_env(env: &[(String, String)]) -> Result<(), ConnectError> {
    match env.iter().find(|(k, _)| !is_valid_env_name(k)) {
        Some((k, _)) => Err(ConnectError::InvalidRequest(format!(
            "environment variable name {k:?} is not a shell identifier"
        ))),
        None => Ok(()),
    }
}

/// `command` preceded by a prologue exporting `env`: `export A='1' B='2'` on its own line.
///
/// This is how the SSH connector passes variables: it does not depend on sshd's `AcceptEnv`.
/// The values travel inside the command line, so other users of the instance could see them in
/// the process list while the shell starts; pass secrets in the stdin script instead.
pub fn with_env(command: &str, env: &[(String, String)]) -> Result<String, ConnectError> {
    check_env(env)?;
    if env.is_empty() {
        return Ok(command.to_string());
    }
    let mut line = String::from("export");
    for (k, v) in env {
        line.push(' ');
        line.push_str(k);
        line.push('=');
        line.push_str(&quote(v));
    }
    line.push('\n');
    line.push_str(command);
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(line: &str) -> String {
        let out = Command::new("sh").arg("-c").arg(line).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn env_prologue_exports_exact_values() {
        let env = vec![
            ("A".to_string(), "x y".to_string()),
            ("B".to_string(), "it's $A".to_string()),
        ];
        let line = with_env("printf '%s|%s' \"$A\" \"$B\"", &env).unwrap();
        assert_eq!(sh(&line), "x y|it's $A");
        assert_eq!(with_env("true", &[]).unwrap(), "true");
        let bad = vec![("A B".to_string(), String::new())];
        assert!(matches!(
            with_env("true", &bad),
            Err(ConnectError::InvalidRequest(_))
        ));
    }
}
