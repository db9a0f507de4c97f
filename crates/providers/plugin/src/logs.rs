//! What a plugin says on its way out: its stderr (go-plugin plugins log there, as hclog
//! JSON lines), stray stdout after the handshake, and the `GRPCStdio` stream, all into
//! flotilla's logs.

use std::fmt;
use std::sync::Arc;

/// Where a line of a plugin's output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The process's stderr, read from its pipe (go-plugin's logger writes there).
    Stderr,
    /// The process's stdout after the handshake line.
    Stdout,
    /// The `GRPCStdio` stream's stdout channel.
    StdioStdout,
    /// The `GRPCStdio` stream's stderr channel.
    StdioStderr,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Stderr => "stderr",
            Source::Stdout => "stdout",
            Source::StdioStdout => "stdio.stdout",
            Source::StdioStderr => "stdio.stderr",
        })
    }
}

/// The level of a plugin's line: hclog's `@level` when the line is hclog JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `trace`
    Trace,
    /// `debug`
    Debug,
    /// `info`, and lines that say nothing about their level
    Info,
    /// `warn`
    Warn,
    /// `error`
    Error,
}

/// Receives a plugin's lines. flotilla's is [`TracingLog`]; tests capture the lines.
pub trait PluginLog: Send + Sync + fmt::Debug {
    /// One line (without its newline) from `plugin`.
    fn line(&self, plugin: &str, source: Source, level: Level, text: &str);
}

/// Lines into `tracing`, target `flotilla::plugin`, with the plugin's name and the source.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingLog;

impl PluginLog for TracingLog {
    fn line(&self, plugin: &str, source: Source, level: Level, text: &str) {
        let source = source.to_string();
        match level {
            Level::Trace => {
                tracing::trace!(target: "flotilla::plugin", plugin, source, "{text}");
            }
            Level::Debug => {
                tracing::debug!(target: "flotilla::plugin", plugin, source, "{text}");
            }
            Level::Info => tracing::info!(target: "flotilla::plugin", plugin, source, "{text}"),
            Level::Warn => tracing::warn!(target: "flotilla::plugin", plugin, source, "{text}"),
            Level::Error => {
                tracing::error!(target: "flotilla::plugin", plugin, source, "{text}");
            }
        }
    }
}

/// The default sink.
pub(crate) fn default_log() -> Arc<dyn PluginLog> {
    Arc::new(TracingLog)
}

/// A line's level and text: hclog JSON (`{"@level":"debug","@message":"..."}`) is unwrapped
/// into its level and message (other fields appended as `key=value`); anything else is
/// `default` as it is.
pub(crate) fn classify(line: &str, default: Level) -> (Level, String) {
    let trimmed = line.trim_end();
    if trimmed.starts_with('{')
        && let Ok(serde_json::Value::Object(map)) = serde_json::from_str(trimmed)
        && let Some(message) = map.get("@message").and_then(|m| m.as_str())
    {
        let level = match map.get("@level").and_then(|l| l.as_str()) {
            Some("trace") => Level::Trace,
            Some("debug") => Level::Debug,
            Some("warn") => Level::Warn,
            Some("error") => Level::Error,
            _ => Level::Info,
        };
        let mut text = message.to_string();
        for (k, v) in &map {
            if k.starts_with('@') {
                continue;
            }
            match v {
                serde_json::Value::String(s) => text.push_str(&format!(" {k}={s}")),
                other => text.push_str(&format!(" {k}={other}")),
            }
        }
        return (level, text);
    }
    (default, trimmed.to_string())
}

/// Cuts a byte stream that arrives in chunks into lines.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    partial: Vec<u8>,
}

/// The longest line kept whole; a longer one is cut, so a plugin printing without newlines
/// cannot make flotilla buffer without end.
const MAX_LINE: usize = 64 * 1024;

impl Lines {
    /// The complete lines in `chunk`, after what earlier chunks left unfinished.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in chunk {
            if b == b'\n' {
                out.push(String::from_utf8_lossy(&self.partial).into_owned());
                self.partial.clear();
            } else {
                self.partial.push(b);
                if self.partial.len() >= MAX_LINE {
                    out.push(String::from_utf8_lossy(&self.partial).into_owned());
                    self.partial.clear();
                }
            }
        }
        out
    }

    /// What is left at the end of the stream.
    pub(crate) fn finish(&mut self) -> Option<String> {
        if self.partial.is_empty() {
            None
        } else {
            let rest = String::from_utf8_lossy(&self.partial).into_owned();
            self.partial.clear();
            Some(rest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hclog_lines_keep_their_level_and_fields() {
        // What go-plugin's default logger (hclog, JSONFormat) writes to stderr.
        let line = r#"{"@level":"debug","@message":"plugin address","@timestamp":"2026-11-24T05:00:00.000000Z","address":"/tmp/plugin1","network":"unix"}"#;
        let (level, text) = classify(line, Level::Info);
        assert_eq!(level, Level::Debug);
        assert_eq!(text, "plugin address address=/tmp/plugin1 network=unix");
        assert_eq!(
            classify("plain words\n", Level::Warn),
            (Level::Warn, "plain words".to_string())
        );
        assert_eq!(classify("{not json", Level::Info).0, Level::Info);
    }

    #[test]
    fn chunks_are_cut_into_lines() {
        let mut l = Lines::default();
        assert_eq!(l.push(b"ab"), Vec::<String>::new());
        assert_eq!(l.push(b"c\nde\n\nf"), vec!["abc", "de", ""]);
        assert_eq!(l.finish().as_deref(), Some("f"));
        assert_eq!(l.finish(), None);
        let long = vec![b'x'; MAX_LINE + 1];
        assert_eq!(l.push(&long).len(), 1);
    }
}
