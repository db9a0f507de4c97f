//! The status port under a client that does not play fair: headers sent a byte at a time,
//! connections held open and idle, more connections than it serves. Each is closed by its
//! limit, and a well-behaved request is still answered.

use flotilla_monitor::Monitor;
use flotilla_monitor::server::{self, Access, ConnectionLimits};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 4,
    header_timeout: Duration::from_millis(500),
    lifetime: Duration::from_secs(3),
};

async fn start() -> (std::net::SocketAddr, CancellationToken) {
    let listener = server::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr;
    let stop = CancellationToken::new();
    let monitor = Monitor::new(1, "test").unwrap();
    tokio::spawn(server::serve_with(
        listener,
        monitor,
        Access::Open,
        LIMITS,
        stop.clone(),
    ));
    (addr, stop)
}

/// How long until the server closes `stream` (reads until end of stream), at most `within`.
async fn closed_after(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(
            within.saturating_sub(start.elapsed()),
            stream.read(&mut buf),
        )
        .await
        {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

async fn health(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /debug/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .expect("answered")
        .unwrap();
    out
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let (addr, _stop) = start().await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    // Half a request line, then nothing more: a slowloris client.
    slow.write_all(b"GET /metr").await.unwrap();
    let closed = closed_after(&mut slow, Duration::from_secs(3)).await;
    let closed = closed.expect("a connection whose headers never end is closed");
    assert!(closed < Duration::from_secs(2), "{closed:?}");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let (addr, _stop) = start().await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /debug/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Answered, then kept alive and idle: the wait for the next request's headers ends it,
    // or at the latest its lifetime.
    let closed = closed_after(&mut idle, Duration::from_secs(8)).await;
    let closed = closed.expect("an idle kept-alive connection is closed");
    assert!(closed < Duration::from_secs(5), "{closed:?}");
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_and_service_goes_on() {
    let (addr, _stop) = start().await;
    let mut held = Vec::new();
    for _ in 0..LIMITS.max_connections {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /debug/health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "each of the first connections is served");
        held.push(s);
    }
    let mut extra = TcpStream::connect(addr).await.unwrap();
    // At once: not by the header timeout (500 ms), which would close it as well.
    let closed = closed_after(&mut extra, Duration::from_millis(250)).await;
    assert!(
        closed.is_some(),
        "one connection past the limit is closed at once"
    );
    drop(held);
    // The slots come back as the held connections close.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let answer = tokio::time::timeout(Duration::from_secs(1), health(addr)).await;
        match answer {
            Ok(text) if text.starts_with("HTTP/1.1 200") => break,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("no answer after the held connections closed: {other:?}"),
        }
    }
}
