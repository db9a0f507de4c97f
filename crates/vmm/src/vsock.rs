//! Hybrid vsock, as Firecracker and Cloud Hypervisor offer it: the host connects to the
//! VMM's unix socket and sends `CONNECT <guest port>\n`; the VMM answers `OK <port>\n`, where
//! the port is the one **assigned to the host end** (Firecracker `docs/vsock.md`, "OK
//! `<assigned_hostside_port>`"; e.g. `OK 1073741824`), not the guest's, or closes the
//! connection when nothing listens on that port in the guest. After the answer the stream
//! is the guest's.

use crate::VmmError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest acknowledgement line accepted (`OK ` and a u32 fit many times over).
const MAX_LINE: usize = 64;

/// Asks the VMM on `stream` for guest port `port` and reads its acknowledgement, byte by
/// byte so that nothing of the guest's own bytes after it is consumed.
pub async fn connect<S>(stream: &mut S, port: u32) -> Result<(), VmmError>
where
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let request = format!("CONNECT {port}");
    let refused = |message: String| VmmError::Refused {
        vmm: "hybrid vsock",
        request: request.clone(),
        message,
    };
    stream
        .write_all(format!("{request}\n").as_bytes())
        .await
        .map_err(|e| refused(format!("sending the request: {e}")))?;
    stream
        .flush()
        .await
        .map_err(|e| refused(format!("sending the request: {e}")))?;
    let mut line = Vec::new();
    loop {
        let mut b = [0u8; 1];
        let n = stream
            .read(&mut b)
            .await
            .map_err(|e| refused(format!("reading the answer: {e}")))?;
        if n == 0 {
            return Err(refused(format!(
                "the VMM closed the connection (nothing listens on vsock port {port} in the guest)"
            )));
        }
        if b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
        if line.len() > MAX_LINE {
            return Err(refused(
                "an answer line too long to be an acknowledgement".into(),
            ));
        }
    }
    let line = String::from_utf8_lossy(&line);
    match line.strip_prefix("OK ") {
        Some(p) if p.trim().parse::<u32>().is_ok() => Ok(()),
        _ => Err(refused(format!(
            "an answer that is not `OK <port>`: {line:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_guests_bytes_after_the_acknowledgement_are_left_alone() {
        let (mut host, mut vmm) = tokio::io::duplex(256);
        let peer = tokio::spawn(async move {
            let mut req = [0u8; 13];
            vmm.read_exact(&mut req).await.unwrap();
            assert_eq!(&req, b"CONNECT 1024\n");
            // The host end's port, as Firecracker assigns it: not the guest's 1024.
            vmm.write_all(b"OK 1073741824\nguest says hi")
                .await
                .unwrap();
        });
        connect(&mut host, 1024).await.unwrap();
        let mut rest = [0u8; 13];
        host.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"guest says hi");
        peer.await.unwrap();
    }

    #[tokio::test]
    async fn nobody_listening_is_an_error_that_says_so() {
        let (mut host, mut vmm) = tokio::io::duplex(256);
        tokio::spawn(async move {
            let mut req = [0u8; 13];
            let _ = vmm.read_exact(&mut req).await;
            drop(vmm);
        });
        let e = connect(&mut host, 1024).await.unwrap_err();
        assert!(
            e.to_string().contains("nothing listens on vsock port 1024"),
            "{e}"
        );
        let (mut host, mut vmm) = tokio::io::duplex(256);
        tokio::spawn(async move {
            let mut req = [0u8; 13];
            let _ = vmm.read_exact(&mut req).await;
            let _ = vmm.write_all(b"ERR no\n").await;
        });
        let e = connect(&mut host, 1024).await.unwrap_err();
        assert!(e.to_string().contains("not `OK <port>`"), "{e}");
    }
}
