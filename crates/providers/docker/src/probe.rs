//! The cheap sshd probe: connect to the published port and read the SSH banner.
//!
//! A TCP connect alone proves nothing here: Docker's userland proxy accepts on the published
//! port even while nothing listens inside the container, then closes. Reading `SSH-` proves
//! that sshd itself answered.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Connecting or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// No banner within the time allowed.
    #[error("no SSH banner within {0:?}")]
    Timeout(Duration),
    /// The peer closed or sent something that is not an SSH banner.
    #[error("not an SSH server (read {0:?})")]
    NotSsh(String),
}

/// Whether sshd answers at `addr`: connects and reads the first bytes of its banner.
pub async fn ssh_banner(addr: SocketAddr, within: Duration) -> Result<(), ProbeError> {
    let probe = async {
        let mut stream = TcpStream::connect(addr).await?;
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

    async fn server(reply: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(reply).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn accepts_an_ssh_banner_only() {
        let ok = server(b"SSH-2.0-OpenSSH_9.2\r\n").await;
        ssh_banner(ok, Duration::from_secs(5)).await.unwrap();
        let closed = server(b"").await;
        assert!(matches!(
            ssh_banner(closed, Duration::from_secs(5)).await,
            Err(ProbeError::NotSsh(_))
        ));
        let http = server(b"HTTP/1.1 400\r\n").await;
        assert!(matches!(
            ssh_banner(http, Duration::from_secs(5)).await,
            Err(ProbeError::NotSsh(_))
        ));
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let r = ssh_banner(addr, Duration::from_millis(100)).await;
        assert!(matches!(r, Err(ProbeError::Timeout(_))), "{r:?}");
        drop(l);
    }
}
