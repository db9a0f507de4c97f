//! go-plugin's `GRPCController`: the host asks the plugin to stop.

use flotilla_plugin_protocol::pb::go_plugin::{Empty, grpc_controller_server::GrpcController};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// Sets the stop signal the server waits on.
pub(crate) struct Controller {
    pub(crate) stop: watch::Sender<bool>,
}

#[tonic::async_trait]
impl GrpcController for Controller {
    async fn shutdown(&self, _request: Request<Empty>) -> Result<Response<Empty>, Status> {
        // Unlike go-plugin, which stops its server before answering (the host sees
        // UNAVAILABLE), the server stops gracefully, so this answer still goes out.
        self.stop.send_replace(true);
        Ok(Response::new(Empty {}))
    }
}
