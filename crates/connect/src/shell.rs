//! Building POSIX shell command lines (pure).

use crate::ConnectError;

/// Quotes `s` as one POSIX shell word: `'…'`, with embedded single quotes as `'\''`.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Joins words into a command line, quoting each.
pub fn join<I: IntoIterator<Item = S>, S: AsRef<str>>(words: I) -> String {
    words
        .into_iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `name` can be exported by a POSIX shell (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

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
    fn quoting_survives_a_real_shell() {
        for s in [
            "plain",
            "",
            "with space",
            "it's",
            "$HOME `id` \"x\" \\",
            "a\nb",
            "*?[]",
        ] {
            assert_eq!(sh(&format!("printf %s {}", quote(s))), s, "{s:?}");
        }
        assert_eq!(quote("safe-1.2/x"), "safe-1.2/x");
        assert_eq!(
            sh(&format!("printf '%s|' {}", join(["a b", "c"]))),
            "a b|c|"
        );
    }

    #[test]
    fn env_names() {
        assert!(is_valid_env_name("CI_JOB_ID"));
        assert!(is_valid_env_name("_x1"));
        assert!(!is_valid_env_name("1X"));
        assert!(!is_valid_env_name("A-B"));
        assert!(!is_valid_env_name(""));
        assert!(!is_valid_env_name("A=B"));
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
