//! Where the plugin listens: a unix socket (go-plugin's default on unix) or a TCP port on
//! loopback within `PLUGIN_MIN_PORT..=PLUGIN_MAX_PORT`, wrapped in AutoMTLS when the host
//! asked for it.

use flotilla_plugin_protocol::Network;
use flotilla_plugin_protocol::handshake::{ENV_MAX_PORT, ENV_MIN_PORT, ENV_UNIX_SOCKET_DIR};
use flotilla_plugin_protocol::io::Io;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// A bound listener and the address the handshake line names.
pub(crate) struct Bound {
    listener: Listener,
    /// The socket path or `127.0.0.1:port`.
    pub(crate) address: String,
    /// The socket file, removed when the plugin stops.
    pub(crate) socket: Option<PathBuf>,
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// Binds on `network` as the host's environment says.
pub(crate) async fn bind(network: Network) -> io::Result<Bound> {
    match network {
        Network::Unix => {
            let dir = std::env::var_os(ENV_UNIX_SOCKET_DIR)
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = dir.join(format!("plugin{}-{nanos}.sock", std::process::id()));
            let listener = UnixListener::bind(&path)?;
            Ok(Bound {
                listener: Listener::Unix(listener),
                address: path.to_string_lossy().into_owned(),
                socket: Some(path),
            })
        }
        Network::Tcp => {
            let port = |name: &str| -> io::Result<u16> {
                match std::env::var(name) {
                    Ok(v) if !v.is_empty() => v.parse().map_err(|_| {
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("{name}={v} is not a port"),
                        )
                    }),
                    _ => Ok(0),
                }
            };
            let (min, max) = (port(ENV_MIN_PORT)?, port(ENV_MAX_PORT)?);
            if min > max {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{ENV_MIN_PORT} {min} is above {ENV_MAX_PORT} {max}"),
                ));
            }
            let mut last = None;
            for p in min..=max {
                match TcpListener::bind(("127.0.0.1", p)).await {
                    Ok(listener) => {
                        let address = listener.local_addr()?.to_string();
                        return Ok(Bound {
                            listener: Listener::Tcp(listener),
                            address,
                            socket: None,
                        });
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| io::Error::other("no port to bind")))
        }
    }
}

impl Bound {
    /// The accepted connections, after the TLS handshake when `tls` is set. A connection
    /// whose TLS handshake fails is dropped without stopping the others.
    pub(crate) fn incoming(
        self,
        tls: Option<Arc<rustls_config::ServerConfig>>,
    ) -> ReceiverStream<io::Result<Io>> {
        let (tx, rx) = mpsc::channel(16);
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        tokio::spawn(async move {
            loop {
                let accepted = match &self.listener {
                    Listener::Unix(l) => l.accept().await.map(|(s, _)| Io::new(s)),
                    Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                        let _ = s.set_nodelay(true);
                        Io::new(s)
                    }),
                };
                let conn = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        if tx.send(Err(e)).await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                match &acceptor {
                    None => {
                        if tx.send(Ok(conn)).await.is_err() {
                            return;
                        }
                    }
                    Some(acceptor) => {
                        let acceptor = acceptor.clone();
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            if let Ok(tls) = acceptor.accept(conn).await {
                                let _ = tx.send(Ok(Io::new(tls))).await;
                            }
                        });
                    }
                }
            }
        });
        ReceiverStream::new(rx)
    }
}

/// rustls as tokio-rustls re-exports it.
pub(crate) use tokio_rustls::rustls as rustls_config;
