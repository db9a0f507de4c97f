//! The embedded agent, run as a process of this host (`--stdio`), driven through
//! `GuestConnector`: the same code that serves a VM, without the VM.

use flotilla_connect::local::LocalConnector;
use flotilla_connect::{
    BoxedStream, ConnectError, Connector, ConnectorExt, ExecRequest, ExitStatus, ForwardTarget,
};
use flotilla_guest::protocol::{Frame, Status, WINDOW};
use flotilla_guest::{AGENT, Dialer, GuestConnector};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The agent written to a temporary file.
struct Agent {
    _dir: tempfile::TempDir,
    path: String,
}

fn agent() -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flotilla-guest-agent");
    std::fs::write(&path, AGENT).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    Agent {
        path: path.to_string_lossy().into_owned(),
        _dir: dir,
    }
}

/// A connector to a fresh agent process per session; counts the dials.
fn connector(a: &Agent, dials: Arc<AtomicUsize>) -> GuestConnector {
    let line = format!("{} --stdio", a.path);
    let dial: Dialer = Arc::new(move || {
        let line = line.clone();
        let dials = dials.clone();
        Box::pin(async move {
            dials.fetch_add(1, Ordering::SeqCst);
            LocalConnector::new().dial_stdio(&line).await
        })
    });
    GuestConnector::new("test-agent", dial)
}

#[tokio::test]
async fn commands_run_with_separate_output_and_exit_codes() {
    let a = agent();
    let c = connector(&a, Arc::default());
    let out = c.output("echo out; echo err >&2; exit 3").await.unwrap();
    assert_eq!(out.status, ExitStatus::Code(3));
    assert_eq!(out.stdout_str(), "out\n");
    assert_eq!(out.stderr_str(), "err\n");
    let out = c.output("kill -TERM $$").await.unwrap();
    assert_eq!(out.status.signal(), Some("TERM"));
}

#[tokio::test]
async fn the_environment_is_the_base_plus_the_request() {
    let a = agent();
    let c = connector(&a, Arc::default()).with_env(vec![
        ("PATH".into(), std::env::var("PATH").unwrap()),
        ("IMAGE_VAR".into(), "from the image".into()),
    ]);
    // SAFETY: set before the commands start; nothing else reads it.
    unsafe { std::env::set_var("FLOTILLA_TEST_MANAGER_SECRET", "glrt-x") };
    let mut out = Vec::new();
    let status = c
        .exec(
            ExecRequest::new("env | sort")
                .env("JOB_VAR", "it's mine")
                .env("IMAGE_VAR", "overridden")
                .stdout(&mut out),
        )
        .await
        .unwrap();
    assert!(status.success());
    let env = String::from_utf8(out).unwrap();
    assert!(env.contains("JOB_VAR=it's mine\n"), "{env}");
    assert!(env.contains("IMAGE_VAR=overridden\n"), "{env}");
    assert!(!env.contains("FLOTILLA_TEST_MANAGER_SECRET"), "{env}");
    assert!(!env.contains("HOME="), "only what was given: {env}");
}

#[tokio::test]
async fn input_streams_in_and_output_streams_out_within_the_windows() {
    let a = agent();
    let c = connector(&a, Arc::default());
    // 3 MB in: far more than a window, so it must wait for acknowledgements.
    let data = vec![b'x'; 3 * 1024 * 1024];
    let mut reader: &[u8] = &data;
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
    assert_eq!(String::from_utf8(out).unwrap().trim(), "3145728");
    // 5 MB out, into a slow writer: the agent must wait for acknowledgements (it would
    // break the session if it overran the window).
    let (mut w, mut r) = tokio::io::duplex(1024);
    let reader = tokio::spawn(async move {
        let mut total = 0usize;
        let mut buf = vec![0u8; 700];
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                break total;
            }
            total += n;
            if total % (1024 * 1024) < 700 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let status = c
        .exec(ExecRequest::new("head -c 5000000 /dev/zero").stdout(&mut w))
        .await
        .unwrap();
    drop(w);
    assert!(status.success());
    assert_eq!(reader.await.unwrap(), 5_000_000);
}

#[tokio::test]
async fn cancelling_kills_the_whole_process_group() {
    let a = agent();
    let c = connector(&a, Arc::default());
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let cancel = CancellationToken::new();
    let line = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let run = c.exec(ExecRequest::new(line).cancel(cancel.clone()));
    let stop = async {
        for _ in 0..200 {
            if pidfile.exists() && std::fs::read_to_string(&pidfile).unwrap().ends_with('\n') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    };
    let (r, ()) = tokio::join!(run, stop);
    assert!(matches!(r, Err(ConnectError::Cancelled)), "{r:?}");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut gone = false;
    for _ in 0..200 {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        if !alive {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gone, "the background sleep {pid} survived the cancellation");
}

#[tokio::test]
async fn many_commands_share_one_session() {
    let a = agent();
    let dials = Arc::new(AtomicUsize::new(0));
    let c = Arc::new(connector(&a, dials.clone()));
    let runs = (0..12).map(|i| {
        let c = c.clone();
        async move { c.output(&format!("echo {i}")).await.unwrap().stdout_str() }
    });
    let outs = futures::future::join_all(runs).await;
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o, &format!("{i}\n"));
    }
    assert_eq!(dials.load(Ordering::SeqCst), 1);
    // A broken session is replaced on the next call.
    c.disconnect().await;
    assert_eq!(
        c.output("echo again").await.unwrap().stdout_str(),
        "again\n"
    );
    assert_eq!(dials.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn dial_stdio_and_forward_are_streams() {
    let a = agent();
    let c = connector(&a, Arc::default());
    let mut s = c.dial_stdio("tr a-z A-Z").await.unwrap();
    s.write_all(b"hello through the agent").await.unwrap();
    s.shutdown().await.unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).await.unwrap();
    assert_eq!(got, "HELLO THROUGH THE AGENT");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4];
        sock.read_exact(&mut buf).await.unwrap();
        sock.write_all(format!("got {}", String::from_utf8_lossy(&buf)).as_bytes())
            .await
            .unwrap();
    });
    let mut s = c
        .forward(&ForwardTarget::Tcp {
            host: "127.0.0.1".into(),
            port,
        })
        .await
        .unwrap();
    s.write_all(b"ping").await.unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).await.unwrap();
    assert_eq!(got, "got ping");
    server.await.unwrap();

    let e = c
        .forward(&ForwardTarget::Unix("/nonexistent/flotilla.sock".into()))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ConnectError::Remote { .. }), "{e}");
}

#[tokio::test]
async fn terminals_are_terminals_and_can_be_resized() {
    let a = agent();
    let c = connector(&a, Arc::default());
    let mut t = c
        .terminal("tty; stty size; read x; stty size", &[], None, 24, 80)
        .await
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 256];
    while !seen.contains("24 80") {
        let n = t.stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "ended early: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("/dev/pts/"), "{seen:?}");
    t.resize.send((50, 132)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    t.stream.write_all(b"go\r").await.unwrap();
    let mut rest = String::new();
    let _ = t.stream.read_to_string(&mut rest).await;
    assert!(rest.contains("50 132"), "{rest:?}");
    assert_eq!(t.status.await.unwrap(), ExitStatus::Code(0));
}

#[tokio::test]
async fn builtins_and_failures_to_start() {
    let a = agent();
    let c = connector(&a, Arc::default());
    assert_eq!(c.builtin(&["ping"]).await.unwrap(), "pong\n");
    let e = c.builtin(&["no-such-builtin"]).await.unwrap_err();
    assert!(e.to_string().contains("unknown builtin"), "{e}");
    // A program that does not exist: the agent says so and keeps serving.
    let spec =
        flotilla_guest::protocol::OpenSpec::new(flotilla_guest::protocol::Target::Argv(vec![
            "/nonexistent/program".into(),
        ]));
    let e = c.exec_spec(spec, ExecRequest::new("")).await.unwrap_err();
    assert!(matches!(e, ConnectError::Remote { .. }), "{e}");
    assert_eq!(
        c.output("echo still").await.unwrap().stdout_str(),
        "still\n"
    );
}

/// A stream that yields `prefix` before the real one's bytes.
struct Prefixed {
    prefix: Vec<u8>,
    inner: BoxedStream,
}

impl tokio::io::AsyncRead for Prefixed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining()).min(7);
            let chunk: Vec<u8> = self.prefix.drain(..n).collect();
            buf.put_slice(&chunk);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Prefixed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        b: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn stale_bytes_before_the_answer_are_skipped() {
    // What a VM restored from a snapshot may still send: half a frame of the session before,
    // and an acknowledgement of someone else's hello.
    let a = agent();
    let line = format!("{} --stdio", a.path);
    let dial: Dialer = Arc::new(move || {
        let line = line.clone();
        Box::pin(async move {
            let inner = LocalConnector::new().dial_stdio(&line).await?;
            let mut prefix = Frame::Stdout {
                channel: 9,
                data: vec![b'z'; 40],
            }
            .to_bytes()[..20]
                .to_vec();
            prefix.extend(
                Frame::HelloAck {
                    nonce: [0xAA; 16],
                    version: flotilla_guest::protocol::VERSION,
                    info: "old".into(),
                }
                .to_bytes(),
            );
            Ok(Box::new(Prefixed { prefix, inner }) as BoxedStream)
        })
    });
    let c = GuestConnector::new("stale", dial);
    let info = c.connect().await.unwrap();
    assert!(info.info.starts_with("linux"), "{info:?}");
    assert_eq!(
        c.output("echo fresh").await.unwrap().stdout_str(),
        "fresh\n"
    );
}

#[tokio::test]
async fn an_agent_that_overruns_its_window_loses_its_session() {
    // A misbehaving agent, played by the test: it answers, opens the channel, and then
    // sends more output than the window allows without waiting for acknowledgements.
    let (host_end, mut agent_end) = tokio::io::duplex(8 * 1024 * 1024);
    let host_end = Arc::new(std::sync::Mutex::new(Some(host_end)));
    let dial: Dialer = Arc::new(move || {
        let s = host_end.lock().unwrap().take();
        Box::pin(async move {
            s.map(|s| Box::new(s) as BoxedStream)
                .ok_or(ConnectError::Unsupported("a second dial"))
        })
    });
    let fake = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        let mut dec = flotilla_guest::protocol::Decoder::new();
        let mut opened = None;
        while opened.is_none() {
            let n = agent_end.read(&mut buf).await.unwrap();
            dec.push(&buf[..n]);
            while let Some(f) = dec.next_frame().unwrap() {
                match f {
                    Frame::Hello { nonce } => agent_end
                        .write_all(
                            &Frame::HelloAck {
                                nonce,
                                version: flotilla_guest::protocol::VERSION,
                                info: "rogue".into(),
                            }
                            .to_bytes(),
                        )
                        .await
                        .unwrap(),
                    Frame::Open { channel, .. } => opened = Some(channel),
                    _ => {}
                }
            }
        }
        let channel = opened.unwrap();
        agent_end
            .write_all(&Frame::Opened { channel }.to_bytes())
            .await
            .unwrap();
        let chunk = vec![b'x'; 32 * 1024];
        for _ in 0..(WINDOW as usize / chunk.len() + 2) {
            let f = Frame::Stdout {
                channel,
                data: chunk.clone(),
            };
            if agent_end.write_all(&f.to_bytes()).await.is_err() {
                break;
            }
        }
        let _ = agent_end
            .write_all(
                &Frame::Exit {
                    channel,
                    status: Status::Code(0),
                }
                .to_bytes(),
            )
            .await;
        agent_end
    });
    let c = GuestConnector::new("rogue", dial);
    // A sink that never drains: nothing is acknowledged.
    let (mut w, _r) = tokio::io::duplex(16);
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        c.exec(ExecRequest::new("flood").stdout(&mut w)),
    )
    .await
    .expect("the overrun must end the command, not hang it");
    let e = r.unwrap_err();
    assert!(e.to_string().contains("overran"), "{e}");
    drop(fake);
}
