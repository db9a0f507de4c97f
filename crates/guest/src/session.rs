//! One session with the agent: a dialled stream, a writer task, a reader task routing frames
//! to channels, and the windows that keep either side from flooding the other.

use crate::protocol::{Decoder, Frame, MAX_PAYLOAD, Status, VERSION, WINDOW};
use flotilla_connect::{BoxedStream, ConnectError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

/// What the agent said when the session started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// Its protocol version.
    pub version: u16,
    /// Its own description (kernel release, uptime, pid).
    pub info: String,
}

/// Something that happened on a channel.
pub(crate) enum Event {
    Opened,
    OpenFailed(String),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(Status),
}

struct ChannelEntry {
    events: mpsc::UnboundedSender<Event>,
    /// Output received and not yet acknowledged: the agent may not exceed [`WINDOW`].
    unacked: Arc<AtomicU32>,
    /// Input window: permits are bytes the agent will take.
    input: Arc<Semaphore>,
}

/// A live session.
pub(crate) struct Session {
    name: String,
    out: mpsc::Sender<Vec<u8>>,
    channels: Mutex<HashMap<u32, ChannelEntry>>,
    next: AtomicU32,
    /// Cancelled when the session ends (the stream broke, the agent misbehaved).
    pub(crate) dead: CancellationToken,
    why: Mutex<Option<String>>,
    pub(crate) info: SessionInfo,
}

/// A channel's handle: its events and windows; closes the channel when dropped unless it
/// ended.
pub(crate) struct Channel {
    /// Sending: input, acknowledgements, other frames.
    pub(crate) io: ChannelIo,
    /// Receiving.
    pub(crate) events: Events,
    /// Set once the agent ended the channel (no close needed).
    pub(crate) ended: bool,
}

/// The sending side of a channel.
pub(crate) struct ChannelIo {
    pub(crate) session: Arc<Session>,
    pub(crate) id: u32,
    unacked: Arc<AtomicU32>,
    input: Arc<Semaphore>,
}

/// The receiving side of a channel.
pub(crate) struct Events {
    session: Arc<Session>,
    rx: mpsc::UnboundedReceiver<Event>,
}

impl Drop for Channel {
    fn drop(&mut self) {
        if !self.ended {
            self.io.session.try_send(&Frame::Close {
                channel: self.io.id,
            });
        }
        self.io.session.forget(self.io.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    /// Starts a session over `stream`: says hello and waits (up to `timeout`) for the
    /// agent's acknowledgement, skipping stale bytes before it.
    pub(crate) async fn start(
        name: &str,
        stream: BoxedStream,
        timeout: Duration,
    ) -> Result<Arc<Session>, ConnectError> {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let nonce: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
        let network = |message: String| ConnectError::Network {
            addr: name.to_string(),
            message,
        };
        let handshake = async {
            wr.write_all(&Frame::Hello { nonce }.to_bytes())
                .await
                .map_err(|e| network(format!("saying hello to the agent: {e}")))?;
            wr.flush().await.map_err(|e| network(e.to_string()))?;
            let mut decoder = Decoder::new();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = rd
                    .read(&mut buf)
                    .await
                    .map_err(|e| network(format!("waiting for the agent: {e}")))?;
                if n == 0 {
                    return Err(network(
                        "the agent's stream ended before it answered".into(),
                    ));
                }
                decoder.push(&buf[..n]);
                if decoder.sync(&nonce) {
                    match decoder.next_frame() {
                        Ok(Some(Frame::HelloAck { version, info, .. })) => {
                            return Ok((decoder, SessionInfo { version, info }));
                        }
                        Ok(_) => continue,
                        Err(e) => return Err(ConnectError::Protocol(e.to_string())),
                    }
                }
            }
        };
        let (decoder, info) = tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| ConnectError::Timeout {
                what: "waiting for the agent in",
                addr: name.to_string(),
                after: timeout,
            })??;
        if info.version != VERSION {
            return Err(ConnectError::Protocol(format!(
                "the agent speaks protocol {} and flotilla {VERSION}",
                info.version
            )));
        }
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        let session = Arc::new(Session {
            name: name.to_string(),
            out: tx,
            channels: Mutex::new(HashMap::new()),
            next: AtomicU32::new(1),
            dead: CancellationToken::new(),
            why: Mutex::new(None),
            info,
        });
        let s = session.clone();
        tokio::spawn(async move {
            let dead = s.dead.clone();
            loop {
                let bytes = tokio::select! {
                    b = rx.recv() => b,
                    () = dead.cancelled() => None,
                };
                let Some(bytes) = bytes else { break };
                if let Err(e) = async {
                    wr.write_all(&bytes).await?;
                    wr.flush().await
                }
                .await
                {
                    s.fail(format!("writing to the agent: {e}"));
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        let s = session.clone();
        tokio::spawn(async move {
            let mut decoder = decoder;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                loop {
                    match decoder.next_frame() {
                        Ok(Some(frame)) => {
                            if let Err(why) = s.route(frame) {
                                s.fail(why);
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            s.fail(format!("the agent broke the protocol: {e}"));
                            return;
                        }
                    }
                }
                let n = tokio::select! {
                    r = rd.read(&mut buf) => r,
                    () = s.dead.cancelled() => return,
                };
                match n {
                    Ok(0) => {
                        s.fail("the agent's stream ended".into());
                        return;
                    }
                    Ok(n) => decoder.push(&buf[..n]),
                    Err(e) => {
                        s.fail(format!("reading from the agent: {e}"));
                        return;
                    }
                }
            }
        });
        Ok(session)
    }

    /// Ends the session, remembering why; every channel sees it end.
    pub(crate) fn fail(&self, why: String) {
        {
            let mut w = lock(&self.why);
            if w.is_none() {
                tracing::debug!(agent = %self.name, "session ended: {why}");
                *w = Some(why);
            }
        }
        self.dead.cancel();
        lock(&self.channels).clear();
    }

    /// The error a channel reports once the session is gone.
    pub(crate) fn lost(&self) -> ConnectError {
        ConnectError::Network {
            addr: self.name.clone(),
            message: lock(&self.why)
                .clone()
                .unwrap_or_else(|| "the session with the agent ended".into()),
        }
    }

    fn route(&self, frame: Frame) -> Result<(), String> {
        let ch = frame.channel();
        let channels = lock(&self.channels);
        let Some(entry) = channels.get(&ch) else {
            // A channel closed meanwhile, or stale frames: nothing waits for them.
            return Ok(());
        };
        let event = match frame {
            Frame::Opened { .. } => Event::Opened,
            Frame::OpenFailed { message, .. } => Event::OpenFailed(message),
            Frame::Stdout { data, .. } => {
                self.count(entry, data.len())?;
                Event::Stdout(data)
            }
            Frame::Stderr { data, .. } => {
                self.count(entry, data.len())?;
                Event::Stderr(data)
            }
            Frame::AckIn { bytes, .. } => {
                entry.input.add_permits(bytes as usize);
                return Ok(());
            }
            Frame::Exit { status, .. } => Event::Exit(status),
            other => return Err(format!("the agent sent a host's frame: {other:?}")),
        };
        let _ = entry.events.send(event);
        Ok(())
    }

    fn count(&self, entry: &ChannelEntry, n: usize) -> Result<(), String> {
        let now = entry.unacked.fetch_add(n as u32, Ordering::SeqCst) + n as u32;
        if now > WINDOW {
            return Err(format!(
                "the agent overran a channel's window ({now} > {WINDOW} bytes)"
            ));
        }
        Ok(())
    }

    /// Registers a new channel.
    pub(crate) fn channel(self: &Arc<Self>) -> Result<Channel, ConnectError> {
        if self.dead.is_cancelled() {
            return Err(self.lost());
        }
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        let unacked = Arc::new(AtomicU32::new(0));
        let input = Arc::new(Semaphore::new(WINDOW as usize));
        lock(&self.channels).insert(
            id,
            ChannelEntry {
                events: tx,
                unacked: unacked.clone(),
                input: input.clone(),
            },
        );
        Ok(Channel {
            io: ChannelIo {
                session: self.clone(),
                id,
                unacked,
                input,
            },
            events: Events {
                session: self.clone(),
                rx,
            },
            ended: false,
        })
    }

    fn forget(&self, id: u32) {
        lock(&self.channels).remove(&id);
    }

    /// Queues a frame.
    pub(crate) async fn send(&self, frame: &Frame) -> Result<(), ConnectError> {
        tokio::select! {
            r = self.out.send(frame.to_bytes()) => r.map_err(|_| self.lost()),
            () = self.dead.cancelled() => Err(self.lost()),
        }
    }

    /// Queues a frame without waiting (from `Drop`); dropped when the queue is full or the
    /// session is gone.
    fn try_send(&self, frame: &Frame) {
        let _ = self.out.try_send(frame.to_bytes());
    }
}

impl ChannelIo {
    /// Queues a frame of this channel's session.
    pub(crate) async fn send(&self, frame: &Frame) -> Result<(), ConnectError> {
        self.session.send(frame).await
    }

    /// Acknowledges `n` bytes of output written to their destination.
    pub(crate) async fn ack(&self, n: usize) -> Result<(), ConnectError> {
        self.unacked.fetch_sub(n as u32, Ordering::SeqCst);
        self.session
            .send(&Frame::AckOut {
                channel: self.id,
                bytes: n as u32,
            })
            .await
    }

    /// Sends input, within the window, in frames of at most [`MAX_PAYLOAD`] bytes.
    pub(crate) async fn input(&self, mut data: &[u8]) -> Result<(), ConnectError> {
        while !data.is_empty() {
            let n = data.len().min(MAX_PAYLOAD).min(WINDOW as usize / 4);
            let permits = tokio::select! {
                p = self.input.acquire_many(n as u32) => p,
                () = self.session.dead.cancelled() => return Err(self.session.lost()),
            };
            permits.map_err(|_| self.session.lost())?.forget();
            self.session
                .send(&Frame::Stdin {
                    channel: self.id,
                    data: data[..n].to_vec(),
                })
                .await?;
            data = &data[n..];
        }
        Ok(())
    }
}

impl Events {
    /// The next event; `Err` when the session ended.
    pub(crate) async fn next(&mut self) -> Result<Event, ConnectError> {
        tokio::select! {
            biased;
            e = self.rx.recv() => e.ok_or_else(|| self.session.lost()),
            () = self.session.dead.cancelled() => {
                // Events already routed still count.
                match self.rx.try_recv() {
                    Ok(e) => Ok(e),
                    Err(_) => Err(self.session.lost()),
                }
            }
        }
    }
}

impl Channel {
    /// Waits until the agent opened the channel.
    pub(crate) async fn opened(&mut self, what: &str) -> Result<(), ConnectError> {
        match self.events.next().await? {
            Event::Opened => Ok(()),
            Event::OpenFailed(message) => {
                self.ended = true;
                Err(ConnectError::Remote {
                    what: what.to_string(),
                    message,
                })
            }
            _ => Err(ConnectError::Protocol(
                "the agent answered an open with something else".into(),
            )),
        }
    }
}
