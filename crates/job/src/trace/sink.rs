//! Where the (masked) job log goes: the `TraceSink` trait and local sinks.

use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;

/// A sink that failed.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Writing to a local file or stream failed.
    #[error("writing the job log to {target}: {source}")]
    Io {
        /// What was written to.
        target: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A remote sink refused the log.
    #[error("the job log was refused: {0}")]
    Rejected(String),
}

/// Receives the job log in order, as it is produced. Everything a sink receives has already
/// been masked and limited.
#[async_trait]
pub trait TraceSink: Send {
    /// The next bytes of the log.
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError>;

    /// The log is complete; flush whatever is buffered.
    async fn finish(&mut self) -> Result<(), TraceError> {
        Ok(())
    }
}

/// Writes the log to this process's stdout, optionally starting every line with a prefix
/// (e.g. the job name, for `flotilla exec` running several jobs).
#[derive(Debug, Default)]
pub struct TerminalSink {
    prefix: Vec<u8>,
    at_line_start: bool,
    /// When set, the log is rendered for reading (sections, `\r`, colours) line by line.
    renderer: Option<super::render::LineRenderer>,
}

impl TerminalSink {
    /// A sink writing the log unchanged.
    pub fn new() -> TerminalSink {
        TerminalSink {
            prefix: Vec::new(),
            at_line_start: true,
            renderer: None,
        }
    }

    /// A sink starting every line with `prefix`.
    pub fn with_prefix(prefix: impl Into<String>) -> TerminalSink {
        TerminalSink {
            prefix: prefix.into().into_bytes(),
            at_line_start: true,
            renderer: None,
        }
    }

    /// A sink writing whole lines rendered for reading ([`super::render::LineRenderer`]):
    /// section markers out, `prefix` on every line, colours only when `color`.
    pub fn rendered(prefix: impl Into<String>, color: bool) -> TerminalSink {
        TerminalSink {
            prefix: Vec::new(),
            at_line_start: true,
            renderer: Some(super::render::LineRenderer::new(prefix, color)),
        }
    }

    /// The bytes to write for `bytes` (pure: adds the prefix at line starts).
    fn render(&mut self, bytes: &[u8]) -> Vec<u8> {
        if let Some(renderer) = &mut self.renderer {
            return renderer.push(bytes);
        }
        if self.prefix.is_empty() {
            return bytes.to_vec();
        }
        let mut out = Vec::with_capacity(bytes.len() + self.prefix.len());
        for &b in bytes {
            if self.at_line_start {
                out.extend_from_slice(&self.prefix);
                self.at_line_start = false;
            }
            out.push(b);
            if b == b'\n' {
                self.at_line_start = true;
            }
        }
        out
    }
}

#[async_trait]
impl TraceSink for TerminalSink {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        let out = self.render(bytes);
        let mut stdout = tokio::io::stdout();
        let io = |source| TraceError::Io {
            target: "stdout".into(),
            source,
        };
        stdout.write_all(&out).await.map_err(io)?;
        stdout.flush().await.map_err(io)
    }

    async fn finish(&mut self) -> Result<(), TraceError> {
        let Some(renderer) = &mut self.renderer else {
            return Ok(());
        };
        let rest = renderer.flush();
        let mut stdout = tokio::io::stdout();
        let io = |source| TraceError::Io {
            target: "stdout".into(),
            source,
        };
        stdout.write_all(&rest).await.map_err(io)?;
        stdout.flush().await.map_err(io)
    }
}

/// Appends the log to a file (created if missing).
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    file: tokio::fs::File,
}

impl FileSink {
    /// Opens (creating or appending to) `path`.
    pub async fn create(path: impl AsRef<Path>) -> Result<FileSink, TraceError> {
        let path = path.as_ref().to_path_buf();
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await
            .map_err(|source| TraceError::Io {
                target: path.display().to_string(),
                source,
            })?;
        Ok(FileSink { path, file })
    }

    fn io(&self, source: std::io::Error) -> TraceError {
        TraceError::Io {
            target: self.path.display().to_string(),
            source,
        }
    }
}

#[async_trait]
impl TraceSink for FileSink {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        let r = self.file.write_all(bytes).await;
        r.map_err(|e| self.io(e))
    }

    async fn finish(&mut self) -> Result<(), TraceError> {
        let r = self.file.flush().await;
        r.map_err(|e| self.io(e))?;
        let r = self.file.sync_data().await;
        r.map_err(|e| self.io(e))
    }
}

/// Keeps the log in memory, shared with whoever holds a clone (tests, status pages).
#[derive(Debug, Clone, Default)]
pub struct BufferSink {
    buf: Arc<Mutex<Vec<u8>>>,
}

impl BufferSink {
    /// An empty buffer.
    pub fn new() -> BufferSink {
        BufferSink::default()
    }

    /// A copy of everything written so far.
    pub fn contents(&self) -> Vec<u8> {
        self.buf.lock().map(|b| b.clone()).unwrap_or_default()
    }

    /// Everything written so far, as (lossy) UTF-8.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.contents()).into_owned()
    }
}

#[async_trait]
impl TraceSink for BufferSink {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        match self.buf.lock() {
            Ok(mut b) => {
                b.extend_from_slice(bytes);
                Ok(())
            }
            Err(_) => Err(TraceError::Rejected("the buffer's lock is poisoned".into())),
        }
    }
}

#[async_trait]
impl<T: TraceSink + ?Sized> TraceSink for Box<T> {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        (**self).write(bytes).await
    }

    async fn finish(&mut self) -> Result<(), TraceError> {
        (**self).finish().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_prefix_starts_every_line() {
        let mut t = TerminalSink::with_prefix("[job] ");
        let mut out = t.render(b"one\ntw");
        out.extend(t.render(b"o\n\nthree"));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[job] one\n[job] two\n[job] \n[job] three"
        );
    }

    #[tokio::test]
    async fn file_sink_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.log");
        let mut f = FileSink::create(&path).await.unwrap();
        f.write(b"hello ").await.unwrap();
        f.write(b"world").await.unwrap();
        f.finish().await.unwrap();
        let mut f = FileSink::create(&path).await.unwrap();
        f.write(b"!").await.unwrap();
        f.finish().await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world!");
    }
}
