//! A cloneable `AsyncWrite` handle feeding the job log in order: the stdout and stderr of a
//! stage and the runner's own messages all go through one channel.

use bytes::Bytes;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

/// The writing end of the log channel.
#[derive(Debug, Clone)]
pub struct TraceWriter {
    tx: PollSender<Bytes>,
}

/// The reading end of the log channel.
#[derive(Debug)]
pub struct TraceReader {
    rx: mpsc::Receiver<Bytes>,
}

/// A log channel holding at most `capacity` chunks in flight (writers wait when it is full).
pub fn trace_channel(capacity: usize) -> (TraceWriter, TraceReader) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (
        TraceWriter {
            tx: PollSender::new(tx),
        },
        TraceReader { rx },
    )
}

impl TraceWriter {
    /// Sends bytes (a runner message). Silently dropped when the reader is gone.
    pub async fn send(&self, bytes: impl Into<Bytes>) {
        if let Some(tx) = self.tx.get_ref() {
            let _ = tx.send(bytes.into()).await;
        }
    }
}

impl TraceReader {
    /// The next chunk; `None` once every writer is dropped.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }
}

impl AsyncWrite for TraceWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "the job log is closed");
        ready!(self.tx.poll_reserve(cx)).map_err(|_| closed())?;
        self.tx
            .send_item(Bytes::copy_from_slice(buf))
            .map_err(|_| closed())?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn writers_share_one_ordered_channel() {
        let (w, mut r) = trace_channel(4);
        let mut a = w.clone();
        a.write_all(b"one ").await.unwrap();
        w.send(&b"two "[..]).await;
        a.write_all(b"three").await.unwrap();
        drop((a, w));
        let mut all = Vec::new();
        while let Some(b) = r.recv().await {
            all.extend_from_slice(&b);
        }
        assert_eq!(all, b"one two three");
    }
}
