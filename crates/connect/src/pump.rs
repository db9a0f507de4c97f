//! Moving a command's input and output with bounded buffers.

use crate::{ConnectError, OutputSink, Stdin};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The size of the one buffer each pump uses: output is copied in chunks of at most this
/// many bytes, and a pump never holds more.
pub const PUMP_BUFFER: usize = 32 * 1024;

/// Feeds `stdin` into `w`, then shuts `w` down so the command sees end-of-file.
///
/// If the command stops reading (the write fails), feeding ends quietly: that is the
/// command's business. A failure to *read* the source is an error.
pub async fn feed_stdin<W: AsyncWrite + Unpin + ?Sized>(
    stdin: Stdin<'_>,
    w: &mut W,
) -> Result<(), ConnectError> {
    match stdin {
        Stdin::Null => {}
        Stdin::Bytes(b) => {
            if w.write_all(&b).await.is_err() {
                return Ok(());
            }
        }
        Stdin::Reader(r) => {
            let mut buf = vec![0u8; PUMP_BUFFER];
            loop {
                let n = r
                    .read(&mut buf)
                    .await
                    .map_err(|e| ConnectError::io("reading stdin", e))?;
                if n == 0 {
                    break;
                }
                if w.write_all(&buf[..n]).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
    let _ = w.flush().await;
    let _ = w.shutdown().await;
    Ok(())
}

/// Copies `r` into `sink` until end-of-file (discarding when there is no sink); returns the
/// number of bytes copied. A failing sink is an error (`what` names it).
pub async fn drain<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    mut sink: Option<OutputSink<'_>>,
    what: &'static str,
) -> Result<u64, ConnectError> {
    let mut buf = vec![0u8; PUMP_BUFFER];
    let mut total = 0u64;
    loop {
        let n = r
            .read(&mut buf)
            .await
            .map_err(|e| ConnectError::io(what, e))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if let Some(s) = sink.as_mut() {
            s.write_all(&buf[..n])
                .await
                .map_err(|e| ConnectError::io(what, e))?;
        }
    }
    if let Some(s) = sink.as_mut() {
        s.flush().await.map_err(|e| ConnectError::io(what, e))?;
    }
    Ok(total)
}

/// Writes one chunk of output to an optional sink.
pub async fn write_out(
    sink: &mut Option<OutputSink<'_>>,
    data: &[u8],
    what: &'static str,
) -> Result<(), ConnectError> {
    if let Some(s) = sink.as_mut() {
        s.write_all(data)
            .await
            .map_err(|e| ConnectError::io(what, e))?;
    }
    Ok(())
}

/// Flushes an optional sink.
pub async fn flush_out(
    sink: &mut Option<OutputSink<'_>>,
    what: &'static str,
) -> Result<(), ConnectError> {
    if let Some(s) = sink.as_mut() {
        s.flush().await.map_err(|e| ConnectError::io(what, e))?;
    }
    Ok(())
}
