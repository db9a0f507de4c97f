//! The Docker API of an instance, reached through a connector.
//!
//! GitLab's docker-autoscaler reaches an instance's daemon by running
//! `docker system dial-stdio` over SSH and speaking HTTP on its stdio; flotilla does the same.
//! [`docker_client`] returns a `bollard::Docker` whose every connection is one
//! [`Connector::dial_stdio`] stream (or one forwarded unix socket), with HTTP/1 upgrades
//! enabled so attach and exec work. Idle connections are kept and reused; the API version is
//! negotiated with the daemon.

use crate::{ConnectError, Connector, ForwardTarget};
use bollard::{BollardRequest, Docker};
use http::header::{HOST, UPGRADE};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::sync::{Arc, Mutex};

/// The command that bridges stdio to the instance's Docker socket.
pub const DIAL_STDIO: &str = "docker system dial-stdio";

/// The host name bollard's requests carry (as GitLab Runner's tunnel does); it shows in error
/// messages only.
const TUNNEL_HOST: &str = "internal.tunnel.invalid";

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;

/// How each Docker API connection is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerRoute {
    /// Run this command (normally [`DIAL_STDIO`]) and speak HTTP on its stdio.
    DialStdio(String),
    /// Forward to this unix socket on the instance (`/var/run/docker.sock`).
    Socket(String),
}

impl Default for DockerRoute {
    fn default() -> Self {
        DockerRoute::DialStdio(DIAL_STDIO.into())
    }
}

/// The request body type bollard uses (named through its public request alias).
trait RequestBody {
    type Body;
}

impl<B> RequestBody for http::Request<B> {
    type Body = B;
}

type Body = <BollardRequest as RequestBody>::Body;

/// Opens HTTP connections to the daemon through a connector and keeps idle ones.
struct Dialer {
    connector: Arc<dyn Connector>,
    route: DockerRoute,
    idle: Mutex<Vec<SendRequest<Body>>>,
}

impl Dialer {
    fn take_idle(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|s| !s.is_closed());
        let pos = idle.iter().position(|s| s.is_ready())?;
        Some(idle.swap_remove(pos))
    }

    fn put_idle(&self, sender: SendRequest<Body>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|s| !s.is_closed());
        if idle.len() < MAX_IDLE {
            idle.push(sender);
        }
    }

    async fn dial(&self) -> Result<SendRequest<Body>, bollard::errors::Error> {
        let stream = match &self.route {
            DockerRoute::DialStdio(command) => self.connector.dial_stdio(command).await,
            DockerRoute::Socket(path) => {
                self.connector
                    .forward(&ForwardTarget::Unix(path.clone()))
                    .await
            }
        }
        .map_err(|e| bollard::errors::Error::IOError {
            err: std::io::Error::other(e),
        })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "docker API connection ended");
            }
        });
        Ok(sender)
    }

    async fn send(
        self: Arc<Self>,
        mut req: BollardRequest,
    ) -> Result<http::Response<Incoming>, bollard::errors::Error> {
        // Origin-form request line and a Host header, as for any HTTP/1.1 server.
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        *req.uri_mut() = path.parse().map_err(http::Error::from)?;
        req.headers_mut()
            .entry(HOST)
            .or_insert(http::HeaderValue::from_static(TUNNEL_HOST));
        let upgrade = req.headers().contains_key(UPGRADE);
        let mut sender = match self.take_idle() {
            Some(s) => s,
            None => self.dial().await?,
        };
        sender.ready().await?;
        let response = sender.send_request(req).await?;
        // An upgraded connection (attach, exec) belongs to its caller from now on.
        if !upgrade {
            self.put_idle(sender);
        }
        Ok(response)
    }
}

/// A Docker client for the daemon reached through `connector` by `route`, with the API
/// version negotiated. `timeout_secs` bounds each API call.
pub async fn docker_client(
    connector: Arc<dyn Connector>,
    route: DockerRoute,
    timeout_secs: u64,
) -> Result<Docker, ConnectError> {
    let dialer = Arc::new(Dialer {
        connector,
        route,
        idle: Mutex::new(Vec::new()),
    });
    let transport = move |req: BollardRequest| dialer.clone().send(req);
    let docker = Docker::connect_with_custom_transport(
        transport,
        Some(format!("http://{TUNNEL_HOST}")),
        timeout_secs,
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| ConnectError::Protocol(format!("docker client: {e}")))?;
    docker
        .negotiate_version()
        .await
        .map_err(|e| ConnectError::Protocol(format!("negotiating the Docker API version: {e}")))
}
