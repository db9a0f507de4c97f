//! The path every byte of the job log takes: masking, then the output limit, then the
//! checksum and byte count, then the sink.

use super::masker::Masker;
use super::sink::TraceSink;
use crate::script::{ANSI_BOLD_RED, ANSI_RESET};

/// GitLab Runner's default `output_limit`: 4 MiB.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 4 * 1024 * 1024;

/// What was emitted: the checksum and size GitLab verifies on the final update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceSummary {
    /// Bytes emitted (after masking, including the limit notice).
    pub bytesize: u64,
    /// CRC-32 (IEEE) of those bytes.
    pub crc32: u32,
    /// Whether output was dropped because of the limit.
    pub truncated: bool,
}

impl TraceSummary {
    /// The checksum as GitLab expects it: `crc32:%08x`.
    pub fn checksum(&self) -> String {
        format!("crc32:{:08x}", self.crc32)
    }
}

/// Masks, limits and checksums the log on its way to a sink.
pub struct TracePipeline<'a> {
    masker: Masker,
    limit: u64,
    hasher: crc32fast::Hasher,
    bytesize: u64,
    truncated: bool,
    sink: &'a mut dyn TraceSink,
    sink_failed: bool,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for TracePipeline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The masker holds the secrets it masks: never printed.
        f.debug_struct("TracePipeline")
            .field("limit", &self.limit)
            .field("bytesize", &self.bytesize)
            .field("truncated", &self.truncated)
            .finish_non_exhaustive()
    }
}

impl<'a> TracePipeline<'a> {
    /// A pipeline into `sink` with this masker and output limit (bytes).
    pub fn new(masker: Masker, limit: u64, sink: &'a mut dyn TraceSink) -> TracePipeline<'a> {
        TracePipeline {
            masker,
            limit,
            hasher: crc32fast::Hasher::new(),
            bytesize: 0,
            truncated: false,
            sink,
            sink_failed: false,
            scratch: Vec::new(),
        }
    }

    /// Feeds raw output.
    pub async fn write(&mut self, bytes: &[u8]) {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        self.masker.push(bytes, &mut out);
        self.emit(&out).await;
        self.scratch = out;
    }

    /// Flushes the masker and the sink and returns what was emitted.
    pub async fn finish(mut self) -> TraceSummary {
        let mut out = Vec::new();
        self.masker.finish(&mut out);
        self.emit(&out).await;
        if !self.sink_failed
            && let Err(e) = self.sink.finish().await
        {
            tracing::warn!(error = %e, "finishing the job log failed");
        }
        TraceSummary {
            bytesize: self.bytesize,
            crc32: self.hasher.finalize(),
            truncated: self.truncated,
        }
    }

    async fn emit(&mut self, masked: &[u8]) {
        if masked.is_empty() || self.truncated {
            return;
        }
        let room = self.limit.saturating_sub(self.bytesize);
        if (masked.len() as u64) <= room {
            self.forward(masked).await;
            return;
        }
        let (head, _) = masked.split_at(room as usize);
        self.forward(head).await;
        let notice = format!(
            "\n{ANSI_BOLD_RED}Job's log exceeded limit of {} bytes.\n\
             Job execution will continue but no more output will be collected.{ANSI_RESET}\n",
            self.limit
        );
        self.forward(notice.as_bytes()).await;
        self.truncated = true;
    }

    async fn forward(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.hasher.update(bytes);
        self.bytesize += bytes.len() as u64;
        if self.sink_failed {
            return;
        }
        if let Err(e) = self.sink.write(bytes).await {
            // The job keeps running; a broken log must not fail it (the checksum still covers
            // everything emitted, so a GitLab sink can detect the gap).
            tracing::warn!(error = %e, "writing the job log failed; further output is dropped");
            self.sink_failed = true;
        }
    }
}

/// The collapsible-section start marker: `section_start:<unix>:<name>[collapsed=true]\r\e[0K`.
pub fn section_start(name: &str, unix: u64, collapsed: bool) -> String {
    let options = if collapsed { "[collapsed=true]" } else { "" };
    format!("section_start:{unix}:{name}{options}\r\x1b[0K")
}

/// The section end marker: `section_end:<unix>:<name>\r\e[0K`.
pub fn section_end(name: &str, unix: u64) -> String {
    format!("section_end:{unix}:{name}\r\x1b[0K")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::BufferSink;

    #[tokio::test]
    async fn checksum_and_size_cover_the_masked_output() {
        let mut sink = BufferSink::new();
        let mut p = TracePipeline::new(Masker::new(&["pw"], &[] as &[&str]), 1000, &mut sink);
        p.write(b"a p").await;
        p.write(b"w b").await;
        let s = p.finish().await;
        assert_eq!(sink.contents(), b"a [MASKED] b");
        assert_eq!(s.bytesize, 12);
        assert_eq!(s.crc32, crc32fast::hash(b"a [MASKED] b"));
        assert_eq!(
            s.checksum(),
            format!("crc32:{:08x}", crc32fast::hash(b"a [MASKED] b"))
        );
        assert!(!s.truncated);
    }

    #[tokio::test]
    async fn output_past_the_limit_is_dropped_with_a_notice() {
        let mut sink = BufferSink::new();
        let mut p = TracePipeline::new(Masker::new(&[] as &[&str], &[] as &[&str]), 10, &mut sink);
        p.write(b"0123456").await;
        p.write(b"789abcdef").await;
        p.write(b"zzz").await;
        let s = p.finish().await;
        let text = sink.text();
        assert!(text.starts_with("0123456789\n"), "{text:?}");
        assert!(
            text.contains("Job's log exceeded limit of 10 bytes."),
            "{text:?}"
        );
        assert!(!text.contains("abc") && !text.contains("zzz"), "{text:?}");
        assert!(s.truncated);
        assert_eq!(s.bytesize, text.len() as u64);
        assert_eq!(s.crc32, crc32fast::hash(text.as_bytes()));
    }

    #[test]
    fn section_markers_have_gitlabs_shape() {
        assert_eq!(
            section_start("get_sources", 1700000000, false),
            "section_start:1700000000:get_sources\r\x1b[0K"
        );
        assert_eq!(
            section_start("step_script", 5, true),
            "section_start:5:step_script[collapsed=true]\r\x1b[0K"
        );
        assert_eq!(section_end("x", 7), "section_end:7:x\r\x1b[0K");
    }
}
