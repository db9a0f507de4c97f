//! The job log as kept for GitLab: every byte emitted, and how much of it GitLab holds.
//! Pure bookkeeping; the uploader does the I/O.

use bytes::Bytes;
use flotilla_job::TraceSummary;

/// The log and the offset up to which GitLab acknowledged it.
#[derive(Debug, Default)]
pub(crate) struct TraceBuffer {
    data: Vec<u8>,
    sent: u64,
    hasher: crc32fast::Hasher,
}

impl TraceBuffer {
    /// Appends emitted bytes.
    pub(crate) fn append(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
        self.hasher.update(bytes);
    }

    /// Bytes emitted so far.
    pub(crate) fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Bytes GitLab holds, as far as we know.
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// Whether GitLab holds everything.
    pub(crate) fn all_sent(&self) -> bool {
        self.sent >= self.len()
    }

    /// The next chunk to send: its offset and at most `max` bytes; `None` when all is sent.
    pub(crate) fn next_chunk(&self, max: usize) -> Option<(u64, Bytes)> {
        if self.all_sent() {
            return None;
        }
        let start = self.sent as usize;
        let end = (start + max.max(1)).min(self.data.len());
        Some((self.sent, Bytes::copy_from_slice(&self.data[start..end])))
    }

    /// GitLab accepted `len` bytes at `offset` (202).
    pub(crate) fn accepted(&mut self, offset: u64, len: u64) {
        if offset == self.sent {
            self.sent = (offset + len).min(self.len());
        }
    }

    /// GitLab said it holds `size` bytes (the `Range` of a 416): continue from there.
    pub(crate) fn server_has(&mut self, size: u64) {
        self.sent = size.min(self.len());
    }

    /// GitLab's copy failed its checksum (412): send everything again.
    pub(crate) fn reset(&mut self) {
        self.sent = 0;
    }

    /// The size and checksum of everything emitted.
    pub(crate) fn summary(&self) -> TraceSummary {
        TraceSummary {
            bytesize: self.len(),
            crc32: self.hasher.clone().finalize(),
            truncated: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TraceBuffer;

    #[test]
    fn chunks_advance_on_acceptance_and_follow_the_servers_range() {
        let mut b = TraceBuffer::default();
        assert!(b.next_chunk(4).is_none());
        b.append(b"hello world");
        let (o, c) = b.next_chunk(4).unwrap();
        assert_eq!((o, &c[..]), (0, &b"hell"[..]));
        b.accepted(0, 4);
        let (o, c) = b.next_chunk(100).unwrap();
        assert_eq!((o, &c[..]), (4, &b"o world"[..]));
        // A stale acknowledgement does not move the offset.
        b.accepted(0, 4);
        assert_eq!(b.sent(), 4);
        // 416: GitLab already has 8 bytes (an earlier answer was lost).
        b.server_has(8);
        assert_eq!(&b.next_chunk(100).unwrap().1[..], b"rld");
        // A server claiming more than was written is clamped.
        b.server_has(1000);
        assert!(b.all_sent() && b.next_chunk(10).is_none());
        b.reset();
        assert_eq!(
            b.next_chunk(100).unwrap(),
            (0, bytes::Bytes::from_static(b"hello world"))
        );
        let s = b.summary();
        assert_eq!(s.bytesize, 11);
        assert_eq!(s.crc32, crc32fast::hash(b"hello world"));
    }
}
