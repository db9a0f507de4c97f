//! Serving a provider as a plugin: go-plugin's side of the process protocol.

use crate::controller::Controller;
use crate::service::{Build, Service};
use crate::{lifeline, listener, stdio};
use flotilla_fleet::{FleetError, InstanceGroup, ProviderConfig};
use flotilla_plugin_protocol::handshake::{
    self, CORE_PROTOCOL_VERSION, ENV_CLIENT_CERT, ENV_PROTOCOL_VERSIONS, HEALTH_SERVICE,
    INSTANCE_GROUP_PROTOCOL_VERSION, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, NOT_STARTED_BY_HOST,
};
use flotilla_plugin_protocol::mtls::{self, Certificate, MtlsError};
use flotilla_plugin_protocol::pb::go_plugin::grpc_controller_server::GrpcControllerServer;
use flotilla_plugin_protocol::pb::go_plugin::grpc_stdio_server::GrpcStdioServer;
use flotilla_plugin_protocol::pb::instance_group::instance_group_server::InstanceGroupServer;
use flotilla_plugin_protocol::{Handshake, Network};
use std::io::Write;
use std::sync::Arc;
use tokio::sync::watch;

/// How a plugin serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// Where to listen: a unix socket (the default) or TCP on loopback.
    pub network: Network,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            network: Network::Unix,
        }
    }
}

/// Why a plugin could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Started without the magic cookie: by hand rather than by flotilla.
    #[error("{NOT_STARTED_BY_HOST}")]
    NotStartedByHost,
    /// The host offered no protocol version this plugin speaks.
    #[error(
        "the host offers InstanceGroup protocol versions {offered:?}; this plugin speaks \
         {INSTANCE_GROUP_PROTOCOL_VERSION}"
    )]
    Version {
        /// What the host offered.
        offered: Vec<u32>,
    },
    /// The listener could not be made.
    #[error("listening: {0}")]
    Listen(#[source] std::io::Error),
    /// AutoMTLS could not be set up.
    #[error("AutoMTLS: {0}")]
    Tls(#[from] MtlsError),
    /// The handshake line or the stdio redirection failed.
    #[error("stdout: {0}")]
    Stdout(#[source] std::io::Error),
    /// The gRPC server failed.
    #[error("serving: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Serves the instance group that `build` makes from flotilla's `Init` until flotilla stops
/// the plugin (`GRPCController.Shutdown`) or goes away. Call it from `main` inside a tokio
/// runtime; exit non-zero when it fails.
pub async fn serve<F>(build: F) -> Result<(), ServeError>
where
    F: Fn(&ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError>
        + Send
        + Sync
        + 'static,
{
    serve_with(build, ServeOptions::default()).await
}

/// [`serve`] with options.
pub async fn serve_with<F>(build: F, options: ServeOptions) -> Result<(), ServeError>
where
    F: Fn(&ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError>
        + Send
        + Sync
        + 'static,
{
    if std::env::var(MAGIC_COOKIE_KEY).ok().as_deref() != Some(MAGIC_COOKIE_VALUE) {
        return Err(ServeError::NotStartedByHost);
    }
    // A host that sends no list speaks version 1 (go-plugin's default for old clients).
    let offered = std::env::var(ENV_PROTOCOL_VERSIONS)
        .map(|v| handshake::parse_versions_env(&v))
        .unwrap_or_else(|_| vec![INSTANCE_GROUP_PROTOCOL_VERSION]);
    if !offered.contains(&INSTANCE_GROUP_PROTOCOL_VERSION) {
        return Err(ServeError::Version { offered });
    }
    lifeline::watch_parent();
    ignore_interrupts();

    let bound = listener::bind(options.network)
        .await
        .map_err(ServeError::Listen)?;
    let (tls, server_cert) = match std::env::var(ENV_CLIENT_CERT) {
        Ok(client_pem) if !client_pem.is_empty() => {
            let own = Certificate::generate()?;
            let config = mtls::server_config(&own, &client_pem)?;
            (Some(Arc::new(config)), Some(own.cert_der.clone()))
        }
        _ => (None, None),
    };
    let line = Handshake {
        core_version: CORE_PROTOCOL_VERSION,
        app_version: INSTANCE_GROUP_PROTOCOL_VERSION,
        network: options.network,
        address: bound.address.clone(),
        protocol: "grpc".into(),
        server_cert,
        multiplex: None,
    };
    let socket = bound.socket.clone();
    let incoming = bound.incoming(tls);

    let (stop, stopping) = watch::channel(false);
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status(HEALTH_SERVICE, tonic_health::ServingStatus::Serving)
        .await;

    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").map_err(ServeError::Stdout)?;
        out.flush().map_err(ServeError::Stdout)?;
    }
    let stdio = stdio::redirect(stopping.clone()).map_err(ServeError::Stdout)?;

    let build: Arc<Build> = Arc::new(build);
    let mut until_stopped = stopping.clone();
    let result = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(GrpcControllerServer::new(Controller { stop }))
        .add_service(GrpcStdioServer::new(stdio))
        .add_service(InstanceGroupServer::new(Service::new(build)))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = until_stopped.wait_for(|s| *s).await;
        })
        .await;
    if let Some(path) = socket {
        let _ = std::fs::remove_file(path);
    }
    result.map_err(ServeError::from)
}

/// go-plugin's plugins ignore SIGINT: a Ctrl-C at the terminal reaches the whole process
/// group, and it is the host that decides when its plugins stop (after
/// `delete_instances_on_shutdown`, say).
fn ignore_interrupts() {
    if let Ok(mut interrupts) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
    {
        tokio::spawn(async move { while interrupts.recv().await.is_some() {} });
    }
}
