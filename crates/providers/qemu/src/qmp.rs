//! Just enough of QEMU's machine protocol (QMP) to ask a VM how it is and to end it.
//!
//! QMP is JSON lines over the VM's unix socket: QEMU greets with `{"QMP": ...}`, the client
//! sends `{"execute": "qmp_capabilities"}` to leave negotiation, then commands; replies are
//! `{"return": ...}` or `{"error": ...}`, and `{"event": ...}` lines may come in between
//! (QEMU's `docs/interop/qmp-spec.txt`).

use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Why a QMP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// The socket could not be reached or broke.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// QEMU did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// QEMU answered with an error, or with something that is not QMP.
    #[error("{0}")]
    Protocol(String),
}

/// Runs `command` (without arguments) on the VM whose QMP socket is `socket` and returns its
/// `return` value. `quit` counts as answered when QEMU closes the socket instead.
pub async fn execute(socket: &Path, command: &str, within: Duration) -> Result<Value, QmpError> {
    let exchange = async {
        let stream = UnixStream::connect(socket).await?;
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let greeting = next_reply(&mut lines, true).await?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol(format!(
                "not a QMP greeting: {greeting}"
            )));
        }
        write
            .write_all(b"{\"execute\":\"qmp_capabilities\"}\n")
            .await?;
        next_reply(&mut lines, false).await?;
        write
            .write_all(format!("{{\"execute\":{}}}\n", Value::from(command)).as_bytes())
            .await?;
        match next_reply(&mut lines, false).await {
            Err(QmpError::Protocol(m)) if command == "quit" && m == CLOSED => Ok(Value::Null),
            other => other,
        }
    };
    match tokio::time::timeout(within, exchange).await {
        Ok(r) => r,
        Err(_) => Err(QmpError::Timeout(within)),
    }
}

const CLOSED: &str = "QEMU closed the socket";

/// The next line that is not an event: the greeting, or a command's reply (its `return`).
async fn next_reply(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    greeting: bool,
) -> Result<Value, QmpError> {
    loop {
        let Some(line) = lines.next_line().await? else {
            return Err(QmpError::Protocol(CLOSED.into()));
        };
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| QmpError::Protocol(format!("not JSON ({e}): {line}")))?;
        if v.get("event").is_some() {
            continue;
        }
        if greeting {
            return Ok(v);
        }
        if let Some(r) = v.get("return") {
            return Ok(r.clone());
        }
        if let Some(e) = v.get("error") {
            return Err(QmpError::Protocol(format!("QEMU refused: {e}")));
        }
        return Err(QmpError::Protocol(format!("unexpected reply: {line}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    /// A QMP peer that greets, accepts capabilities, sends an event, then answers `reply`.
    async fn peer(socket: &Path, reply: &'static str) {
        let l = UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut lines = BufReader::new(r).lines();
            w.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n")
                .await
                .unwrap();
            let caps = lines.next_line().await.unwrap().unwrap();
            assert!(caps.contains("qmp_capabilities"));
            w.write_all(b"{\"return\": {}}\n").await.unwrap();
            let _cmd = lines.next_line().await.unwrap().unwrap();
            w.write_all(b"{\"event\": \"RESUME\", \"timestamp\": {}}\n")
                .await
                .unwrap();
            if !reply.is_empty() {
                w.write_all(reply.as_bytes()).await.unwrap();
            }
        });
    }

    #[tokio::test]
    async fn a_reply_after_an_event() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("q.sock");
        peer(
            &sock,
            "{\"return\": {\"status\": \"running\", \"running\": true}}\n",
        )
        .await;
        let r = execute(&sock, "query-status", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(r["status"], "running");
    }

    #[tokio::test]
    async fn errors_and_quit() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("e.sock");
        peer(&sock, "{\"error\": {\"class\": \"CommandNotFound\"}}\n").await;
        let e = execute(&sock, "nope", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("CommandNotFound"), "{e}");
        let sock = dir.path().join("q.sock");
        peer(&sock, "").await;
        assert_eq!(
            execute(&sock, "quit", Duration::from_secs(5))
                .await
                .unwrap(),
            Value::Null,
            "closing the socket answers quit"
        );
        assert!(matches!(
            execute(
                &dir.path().join("absent.sock"),
                "quit",
                Duration::from_secs(5)
            )
            .await,
            Err(QmpError::Io(_))
        ));
    }
}
