//! The cheap sshd probe: connect and read the SSH banner.
//!
//! A TCP connect alone proves nothing: a port forwarder (Docker's userland proxy, QEMU's
//! user-mode `hostfwd`) accepts on the host side even while nothing listens behind it, then
//! closes. Reading `SSH-` proves that sshd itself answered.

use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Resolving, connecting or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// No banner within the time allowed.
    #[error("no SSH banner within {0:?}")]
    Timeout(Duration),
    /// The peer closed or sent something that is not an SSH banner.
    #[error("not an SSH server (read {0:?})")]
    NotSsh(String),
}

/// Whether sshd answers at `host`:`port` (a name or an address): connects and reads the first
/// bytes of its banner, all within `within`.
pub async fn ssh_banner(host: &str, port: u16, within: Duration) -> Result<(), ProbeError> {
    let probe = async {
        let mut stream = TcpStream::connect((host, port)).await?;
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            let n = stream.read(&mut buf[got..]).await?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if &buf[..got] == b"SSH-" {
            Ok(())
        } else {
            Err(ProbeError::NotSsh(
                String::from_utf8_lossy(&buf[..got]).into_owned(),
            ))
        }
    };
    match tokio::time::timeout(within, probe).await {
        Ok(r) => r,
        Err(_) => Err(ProbeError::Timeout(within)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn server(reply: &'static [u8]) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(reply).await;
            }
        });
        port
    }

    #[tokio::test]
    async fn accepts_an_ssh_banner_only() {
        let within = Duration::from_secs(5);
        let ok = server(b"SSH-2.0-OpenSSH_9.2\r\n").await;
        ssh_banner("127.0.0.1", ok, within).await.unwrap();
        ssh_banner("localhost", ok, within).await.unwrap();
        let closed = server(b"").await;
        assert!(matches!(
            ssh_banner("127.0.0.1", closed, within).await,
            Err(ProbeError::NotSsh(_))
        ));
        let http = server(b"HTTP/1.1 400\r\n").await;
        assert!(matches!(
            ssh_banner("127.0.0.1", http, within).await,
            Err(ProbeError::NotSsh(_))
        ));
    }

    #[tokio::test]
    async fn a_silent_server_times_out_and_a_closed_port_fails() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let r = ssh_banner("127.0.0.1", port, Duration::from_millis(100)).await;
        assert!(matches!(r, Err(ProbeError::Timeout(_))), "{r:?}");
        drop(l);
        let r = ssh_banner("127.0.0.1", port, Duration::from_secs(5)).await;
        assert!(matches!(r, Err(ProbeError::Io(_))), "{r:?}");
    }
}
