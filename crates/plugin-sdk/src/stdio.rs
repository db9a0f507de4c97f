//! go-plugin's `GRPCStdio`: the plugin's own stdout and stderr, sent to the host.
//!
//! As go-plugin's `Serve` does, file descriptors 1 and 2 are replaced by pipes once the
//! handshake line is out, so whatever the plugin (or a library it uses) prints reaches the
//! host's logs instead of a terminal nobody watches. The host reads the stream for the
//! plugin's whole life; until it does, writes wait (as they do in go-plugin).

use flotilla_plugin_protocol::pb::go_plugin::{
    StdioData, grpc_stdio_server::GrpcStdio, stdio_data,
};
use futures::StreamExt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, RawFd};
use std::pin::Pin;
use std::sync::Mutex;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status};

/// How many chunks wait for the host before the plugin's writes block.
const BACKLOG: usize = 64;

/// The receiving end of the redirected stdout and stderr.
pub(crate) struct Stdio {
    chunks: Mutex<Option<mpsc::Receiver<StdioData>>>,
    stopping: watch::Receiver<bool>,
}

/// Replaces fds 1 and 2 by pipes read into one stream of chunks. Call it after the
/// handshake line is flushed: that line must reach the host's pipe, not the stream.
pub(crate) fn redirect(stopping: watch::Receiver<bool>) -> io::Result<Stdio> {
    let (tx, rx) = mpsc::channel(BACKLOG);
    for (fd, channel) in [
        (libc::STDOUT_FILENO, stdio_data::Channel::Stdout),
        (libc::STDERR_FILENO, stdio_data::Channel::Stderr),
    ] {
        let reader = pipe_over(fd)?;
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("plugin-{}", channel.as_str_name().to_lowercase()))
            .spawn(move || pump(reader, channel, &tx))?;
    }
    Ok(Stdio {
        chunks: Mutex::new(Some(rx)),
        stopping,
    })
}

/// A pipe whose write end now is `fd`; returns the read end.
fn pipe_over(fd: RawFd) -> io::Result<File> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are descriptors pipe2 just returned; dup2 makes `fd` a copy of the write
    // end (without O_CLOEXEC), after which the original write end is closed.
    unsafe {
        if libc::dup2(fds[1], fd) < 0 {
            let e = io::Error::last_os_error();
            libc::close(fds[0]);
            libc::close(fds[1]);
            return Err(e);
        }
        libc::close(fds[1]);
        Ok(File::from_raw_fd(fds[0]))
    }
}

fn pump(mut reader: File, channel: stdio_data::Channel, tx: &mpsc::Sender<StdioData>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let chunk = StdioData {
                    channel: channel as i32,
                    data: buf[..n].to_vec(),
                };
                if tx.blocking_send(chunk).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

type ChunkStream = Pin<Box<dyn futures::Stream<Item = Result<StdioData, Status>> + Send>>;

#[tonic::async_trait]
impl GrpcStdio for Stdio {
    type StreamStdioStream = ChunkStream;

    async fn stream_stdio(
        &self,
        _request: Request<()>,
    ) -> Result<Response<Self::StreamStdioStream>, Status> {
        let chunks = self
            .chunks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Status::failed_precondition("stdio is already being streamed"))?;
        // The stream ends when the plugin stops: a graceful stop waits for open streams.
        let mut stopping = self.stopping.clone();
        let stop = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        let stream = tokio_stream::wrappers::ReceiverStream::new(chunks)
            .map(Ok)
            .take_until(stop);
        Ok(Response::new(Box::pin(stream)))
    }
}
