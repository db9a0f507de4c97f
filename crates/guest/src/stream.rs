//! A channel as a byte stream (`dial_stdio`, `forward`, terminals): a task moves bytes
//! between one end of an in-memory pipe and the channel, within the windows.

use crate::protocol::{Frame, Status};
use crate::session::{Channel, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, oneshot};

/// How much the in-memory pipe holds in each direction.
const PIPE: usize = 64 * 1024;

/// Starts moving bytes between the returned stream and `channel`; `resize` carries terminal
/// sizes, `status` receives how the command ended (dropped for sockets).
pub(crate) fn pump(
    mut ch: Channel,
    what: String,
    mut resize: Option<mpsc::Receiver<(u16, u16)>>,
    status: Option<oneshot::Sender<Status>>,
) -> DuplexStream {
    let (user, mine) = tokio::io::duplex(PIPE);
    tokio::spawn(async move {
        let (mut rd, mut wr) = tokio::io::split(mine);
        let mut buf = vec![0u8; 32 * 1024];
        let mut input_open = true;
        let mut status = status;
        loop {
            tokio::select! {
                ev = ch.events.next() => match ev {
                    Ok(Event::Stdout(d)) => {
                        if wr.write_all(&d).await.is_err() || ch.io.ack(d.len()).await.is_err() {
                            break;
                        }
                    }
                    Ok(Event::Stderr(d)) => {
                        tracing::debug!(%what, "stderr: {}", String::from_utf8_lossy(&d).trim_end());
                        if ch.io.ack(d.len()).await.is_err() {
                            break;
                        }
                    }
                    Ok(Event::Exit(s)) => {
                        ch.ended = true;
                        if let Some(tx) = status.take() {
                            let _ = tx.send(s);
                        }
                        let _ = wr.shutdown().await;
                        break;
                    }
                    Ok(Event::Opened | Event::OpenFailed(_)) | Err(_) => break,
                },
                n = rd.read(&mut buf), if input_open => match n {
                    Ok(0) | Err(_) => {
                        input_open = false;
                        if ch.io.send(&Frame::StdinEof { channel: ch.io.id }).await.is_err() {
                            break;
                        }
                    }
                    Ok(n) => {
                        if ch.io.input(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                },
                size = async {
                    match resize.as_mut() {
                        Some(r) => r.recv().await,
                        None => std::future::pending().await,
                    }
                } => match size {
                    Some((rows, cols)) => {
                        let f = Frame::Resize { channel: ch.io.id, rows, cols };
                        if ch.io.send(&f).await.is_err() {
                            break;
                        }
                    }
                    None => resize = None,
                },
            }
        }
        let _ = wr.shutdown().await;
        // Dropping the channel closes it in the agent if it has not ended.
        drop(ch);
    });
    user
}
