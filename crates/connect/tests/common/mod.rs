//! Shared fixtures of the connector tests: a docker fleet of instance containers (cleaned up
//! even when a test fails) and a conformance suite every connector must pass.
#![allow(dead_code)]

use flotilla_connect::ssh::{SshConnector, SshOptions};
use flotilla_connect::{ConnectError, Connector, ConnectorExt, ExecRequest, ExitStatus};
use flotilla_fleet::{ConnectInfo, InstanceGroup, Settings, State};
use flotilla_provider_docker::{DockerGroup, DockerSettings, GROUP_LABEL};
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Removes every container carrying a label when dropped, even when the test failed.
pub(crate) use flotilla_testkit::containers::LabelGuard as Cleanup;

/// Runs the docker CLI; panics on failure.
pub(crate) fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A docker instance group of `n` running instances of the offline instance image.
pub(crate) struct Fleet {
    pub group: Arc<DockerGroup>,
    pub ids: Vec<String>,
    pub name: String,
    _cleanup: Cleanup,
}

/// Starts a fleet named after `tag` (and this process) and waits until every instance
/// answers SSH.
pub(crate) async fn fleet(tag: &str, n: usize, inner_dockerd: bool) -> Fleet {
    let name = format!("c{}-{tag}", std::process::id());
    let cleanup = Cleanup::new(format!("{GROUP_LABEL}={name}"));
    let mut settings = DockerSettings::new(&name, flotilla_testkit::images::instance_image());
    settings.inner_dockerd = inner_dockerd;
    let group = Arc::new(DockerGroup::new(settings).unwrap());
    group.init(&Settings::default()).await.unwrap();
    if n > 0 {
        assert_eq!(group.increase(n).await.unwrap(), n);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let ids = loop {
        let listing = group.update().await.unwrap();
        let running: Vec<String> = listing
            .iter()
            .filter(|s| s.state == State::Running)
            .map(|s| s.id.clone())
            .collect();
        if running.len() == n {
            break running;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "instances did not come up: {listing:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    Fleet {
        group,
        ids,
        name,
        _cleanup: cleanup,
    }
}

impl Fleet {
    /// Connection details of instance `i`.
    pub(crate) async fn info(&self, i: usize) -> ConnectInfo {
        self.group.connect_info(&self.ids[i]).await.unwrap()
    }

    /// An SSH connector to instance `i` with default options.
    pub(crate) async fn ssh(&self, i: usize) -> SshConnector {
        SshConnector::new(self.info(i).await)
    }

    /// An SSH connector to instance `i` with a short keepalive.
    pub(crate) async fn ssh_with_keepalive(
        &self,
        i: usize,
        keepalive: Duration,
        max: usize,
    ) -> SshConnector {
        let mut info = self.info(i).await;
        info.config.keepalive = keepalive;
        SshConnector::new(info).with_options(SshOptions {
            keepalive_max: max,
            ..Default::default()
        })
    }
}

/// A sink that counts what it receives, remembers its largest write, and now and then makes
/// the writer wait (a slow consumer: backpressure must hold the producer back).
#[derive(Default)]
pub(crate) struct CountingSink {
    pub total: u64,
    pub writes: u64,
    pub max_write: usize,
    pub slow_every: u64,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl CountingSink {
    pub(crate) fn slow(every: u64) -> Self {
        CountingSink {
            slow_every: every,
            ..Default::default()
        }
    }
}

impl AsyncWrite for CountingSink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(s) = self.sleep.as_mut() {
            std::task::ready!(s.as_mut().poll(cx));
            self.sleep = None;
        }
        self.total += buf.len() as u64;
        self.writes += 1;
        self.max_write = self.max_write.max(buf.len());
        if self.slow_every > 0 && self.writes.is_multiple_of(self.slow_every) {
            self.sleep = Some(Box::pin(tokio::time::sleep(Duration::from_millis(1))));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A reader producing `remaining` bytes of a repeating pattern, generated on the fly.
pub(crate) struct PatternReader {
    pub remaining: u64,
    offset: u64,
}

impl PatternReader {
    pub(crate) fn new(len: u64) -> Self {
        PatternReader {
            remaining: len,
            offset: 0,
        }
    }
}

impl AsyncRead for PatternReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = (buf.remaining() as u64).min(self.remaining) as usize;
        let start = self.offset;
        let bytes: Vec<u8> = (0..n as u64)
            .map(|i| b'a' + ((start + i) % 26) as u8)
            .collect();
        buf.put_slice(&bytes);
        self.remaining -= n as u64;
        self.offset += n as u64;
        Poll::Ready(Ok(()))
    }
}

/// A sink that notifies once the first byte arrives (to cancel a command after it started).
pub(crate) struct StartedSink {
    pub started: Arc<Notify>,
    pub data: Vec<u8>,
}

impl AsyncWrite for StartedSink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.data.extend_from_slice(buf);
        self.started.notify_one();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Generous bound on anything a test waits for; exceeding it fails the test.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

pub(crate) async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {PATIENCE:?}: it hangs"))
}

/// What every connector must do. `signals`: whether the connector reports signals as such
/// (docker exec reports `128 + n` exit codes instead).
pub(crate) mod conformance {
    use super::*;

    /// stdout and stderr arrive separately; environment variables are exported verbatim.
    pub(crate) async fn output_and_env(c: &dyn Connector) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let status = c
            .exec(
                ExecRequest::new(r#"echo "out:$A"; echo "err:$B" >&2; printf '%s' "$C""#)
                    .env("A", "one two")
                    .env("B", "it's \"quoted\" $HOME")
                    .env("C", "line1\nline2")
                    .stdout(&mut out)
                    .stderr(&mut err),
            )
            .await
            .unwrap();
        assert_eq!(status, ExitStatus::Code(0));
        assert_eq!(String::from_utf8(out).unwrap(), "out:one two\nline1\nline2");
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "err:it's \"quoted\" $HOME\n"
        );
        let bad = c
            .exec(ExecRequest::new("true").env("NOT VALID", "x"))
            .await
            .unwrap_err();
        assert!(matches!(bad, ConnectError::InvalidRequest(_)), "{bad}");
    }

    /// A script on stdin (how stage scripts run) and a large stream through stdin.
    pub(crate) async fn stdin(c: &dyn Connector, shell: &str) {
        let mut out = Vec::new();
        let status = c
            .exec(
                ExecRequest::new(shell)
                    .stdin_bytes("x=41\necho $((x + 1))\nexit 5\n")
                    .stdout(&mut out),
            )
            .await
            .unwrap();
        assert_eq!(status, ExitStatus::Code(5));
        assert_eq!(out, b"42\n");

        let len = 8 * 1024 * 1024 + 13;
        let mut reader = PatternReader::new(len);
        let mut out = Vec::new();
        let status = c
            .exec(
                ExecRequest::new("wc -c")
                    .stdin_reader(&mut reader)
                    .stdout(&mut out),
            )
            .await
            .unwrap();
        assert!(status.success());
        assert_eq!(String::from_utf8(out).unwrap().trim(), len.to_string());

        // A command that ignores its input still finishes.
        let mut reader = PatternReader::new(64 * 1024 * 1024);
        let status = c
            .exec(ExecRequest::new("exit 0").stdin_reader(&mut reader))
            .await
            .unwrap();
        assert!(status.success());
    }

    /// Exit codes, and signals where the connector can report them.
    pub(crate) async fn exit_statuses(c: &dyn Connector, signals: bool) {
        for code in [0, 1, 3, 127] {
            let out = c.output(&format!("exit {code}")).await.unwrap();
            assert_eq!(out.status, ExitStatus::Code(code));
        }
        let out = c.output("kill -TERM $$").await.unwrap();
        if signals {
            assert_eq!(out.status.signal(), Some("TERM"), "{:?}", out.status);
            assert!(!out.status.success());
        } else {
            assert_eq!(out.status, ExitStatus::Code(128 + 15));
        }
        let err = c.output("exit 2").await.unwrap().checked().unwrap_err();
        assert!(matches!(err, ConnectError::Exit(ExitStatus::Code(2))));
    }

    /// Output is streamed as it is produced, with bounded chunks, and counted exactly.
    pub(crate) async fn streaming(c: &dyn Connector, bytes: u64) {
        let mut sink = CountingSink::slow(16);
        let mut err = Vec::new();
        let status = c
            .exec(
                ExecRequest::new(format!("head -c {bytes} /dev/zero; echo done >&2"))
                    .stdout(&mut sink)
                    .stderr(&mut err),
            )
            .await
            .unwrap();
        assert!(status.success());
        assert_eq!(sink.total, bytes);
        assert_eq!(err, b"done\n");
        assert!(sink.writes > 1, "streamed in chunks");
    }

    /// Cancelling stops the command and everything it started, promptly.
    pub(crate) async fn cancellation(c: &dyn Connector, marker: &str) {
        let token = CancellationToken::new();
        let started = Arc::new(Notify::new());
        let mut sink = StartedSink {
            started: started.clone(),
            data: Vec::new(),
        };
        // Two background loops whose command lines carry the marker, then wait for them.
        let cmd = format!(
            "sh -c 'while :; do sleep 1; done' {marker} & sh -c 'while :; do sleep 1; done' {marker} & echo started; wait"
        );
        let exec = c.exec(
            ExecRequest::new(cmd)
                .stdout(&mut sink)
                .cancel(token.clone()),
        );
        let ps = r#"for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f"; echo; done 2>/dev/null"#;
        let cancel = async {
            started.notified().await;
            let before = c.output(ps).await.unwrap().stdout_str();
            let child = format!("done {marker}");
            assert_eq!(
                before.matches(&child).count(),
                2,
                "both children run:\n{before}"
            );
            token.cancel();
        };
        let (r, ()) = within("a cancelled command", async { tokio::join!(exec, cancel) }).await;
        assert!(matches!(r, Err(ConnectError::Cancelled)), "{r:?}");
        // Its children are gone too (the whole process group was killed).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let after = c.output(ps).await.unwrap().stdout_str();
            if !after.contains(marker) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the cancelled command's children survive:\n{after}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A token cancelled beforehand runs nothing.
        let pre = CancellationToken::new();
        pre.cancel();
        let r = c.exec(ExecRequest::new("true").cancel(pre)).await;
        assert!(matches!(r, Err(ConnectError::Cancelled)), "{r:?}");
    }

    /// `dial_stdio` carries bytes both ways and ends with the command.
    pub(crate) async fn dial_stdio(c: &dyn Connector) {
        let mut s = c.dial_stdio("cat").await.unwrap();
        s.write_all(b"ping\n").await.unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping\n");
        s.write_all(b"more").await.unwrap();
        s.shutdown().await.unwrap();
        let mut rest = Vec::new();
        within("reading to end", s.read_to_end(&mut rest))
            .await
            .unwrap();
        assert_eq!(rest, b"more");

        let mut s = c.dial_stdio("echo hello; echo noise >&2").await.unwrap();
        let mut all = String::new();
        within("reading to end", s.read_to_string(&mut all))
            .await
            .unwrap();
        assert_eq!(all, "hello\n", "stderr is not part of the stream");
    }
}
