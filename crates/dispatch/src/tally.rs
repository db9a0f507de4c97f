//! A sink in front of the job source's sink that checksums everything the job's trace
//! receives, the dispatcher's own lines included, and holds back `finish` until the
//! dispatcher has written its last line.

use async_trait::async_trait;
use flotilla_job::{TraceError, TraceSink, TraceSummary};

/// Counts and checksums what passes; `finish` is deferred to [`Tally::complete`].
pub(crate) struct Tally<'a> {
    inner: &'a mut dyn TraceSink,
    hasher: crc32fast::Hasher,
    bytes: u64,
    broken: bool,
}

impl<'a> Tally<'a> {
    pub(crate) fn new(inner: &'a mut dyn TraceSink) -> Tally<'a> {
        Tally {
            inner,
            hasher: crc32fast::Hasher::new(),
            bytes: 0,
            broken: false,
        }
    }

    /// Everything emitted so far, with `truncated` as the job runner reported it.
    pub(crate) fn summary(&self, truncated: bool) -> TraceSummary {
        TraceSummary {
            bytesize: self.bytes,
            crc32: self.hasher.clone().finalize(),
            truncated,
        }
    }

    /// Writes the dispatcher's own (already masked) bytes.
    pub(crate) async fn emit(&mut self, bytes: &[u8]) {
        // `write` never fails: a broken sink is remembered and skipped.
        let _ = self.write(bytes).await;
    }

    /// Finishes the job source's sink.
    pub(crate) async fn complete(&mut self) {
        if self.broken {
            return;
        }
        if let Err(e) = self.inner.finish().await {
            tracing::warn!(error = %e, "finishing the job log failed");
        }
    }
}

#[async_trait]
impl TraceSink for Tally<'_> {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        if self.broken {
            return Ok(());
        }
        if let Err(e) = self.inner.write(bytes).await {
            // Like the runner's own pipeline: keep counting what is emitted (so the
            // checksum reveals the gap to the source), drop the rest.
            tracing::warn!(error = %e, "writing the job log failed; further output is dropped");
            self.broken = true;
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<(), TraceError> {
        // Deferred: the dispatcher may still add lines after the runner is done.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_job::BufferSink;

    #[tokio::test]
    async fn the_summary_covers_every_byte_passed_on() {
        let mut buf = BufferSink::new();
        let mut t = Tally::new(&mut buf);
        t.write(b"hello ").await.unwrap();
        t.emit(b"world").await;
        t.finish().await.unwrap();
        t.complete().await;
        let s = t.summary(true);
        assert_eq!(s.bytesize, 11);
        assert_eq!(s.crc32, crc32fast::hash(b"hello world"));
        assert!(s.truncated);
        assert_eq!(buf.text(), "hello world");
    }
}
