//! The InstanceGroup gRPC service over a provider built by the plugin's author.

use flotilla_fleet::{FleetError, InstanceGroup, ProviderConfig, Settings};
use flotilla_plugin_protocol::convert;
use flotilla_plugin_protocol::pb::instance_group as pb;
use flotilla_plugin_protocol::status::to_status;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use tonic::{Request, Response, Status};

/// Builds the plugin's instance group from the configuration flotilla sends in `Init`: the
/// same signature as a provider crate's `build` function, so an in-process provider can be
/// served as a plugin unchanged.
pub type Build =
    dyn Fn(&ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> + Send + Sync;

/// The service: the group exists once `Init` has built and initialised it.
pub(crate) struct Service {
    build: Arc<Build>,
    group: RwLock<Option<Arc<dyn InstanceGroup>>>,
}

impl Service {
    pub(crate) fn new(build: Arc<Build>) -> Service {
        Service {
            build,
            group: RwLock::new(None),
        }
    }

    fn group(&self) -> Result<Arc<dyn InstanceGroup>, Status> {
        self.group
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| to_status(&FleetError::NotInitialized))
    }
}

fn invalid(e: &convert::ConvertError) -> Status {
    Status::invalid_argument(e.to_string())
}

#[tonic::async_trait]
impl pb::instance_group_server::InstanceGroup for Service {
    async fn init(
        &self,
        request: Request<pb::InitRequest>,
    ) -> Result<Response<pb::InitResponse>, Status> {
        let r = request.into_inner();
        let plugin_config: serde_json::Value = if r.config_json.is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_str(&r.config_json).map_err(|e| {
                Status::invalid_argument(format!("the configuration is not JSON: {e}"))
            })?
        };
        let connector =
            convert::connector_from_pb(r.connector.unwrap_or_default()).map_err(|e| invalid(&e))?;
        let state_dir = (!r.state_dir.is_empty()).then(|| PathBuf::from(&r.state_dir));
        let config = ProviderConfig {
            plugin_config: &plugin_config,
            runner_name: &r.runner_name,
            state_dir: state_dir.as_deref(),
        };
        let group = (self.build)(&config).map_err(|e| to_status(&e))?;
        let info = group
            .init(&Settings { connector })
            .await
            .map_err(|e| to_status(&e))?;
        // A second Init (the host retrying one it saw fail) replaces the group.
        *self.group.write().unwrap_or_else(|e| e.into_inner()) = Some(group);
        Ok(Response::new(pb::InitResponse {
            info: Some(convert::info_to_pb(&info)),
        }))
    }

    async fn update(
        &self,
        _request: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateResponse>, Status> {
        let list = self.group()?.update().await.map_err(|e| to_status(&e))?;
        Ok(Response::new(convert::listing_to_pb(&list)))
    }

    async fn increase(
        &self,
        request: Request<pb::IncreaseRequest>,
    ) -> Result<Response<pb::IncreaseResponse>, Status> {
        let n = usize::try_from(request.into_inner().n)
            .map_err(|_| Status::invalid_argument("n does not fit this machine's size"))?;
        let requested = self.group()?.increase(n).await.map_err(|e| to_status(&e))?;
        Ok(Response::new(pb::IncreaseResponse {
            requested: requested as u64,
        }))
    }

    async fn decrease(
        &self,
        request: Request<pb::DecreaseRequest>,
    ) -> Result<Response<pb::DecreaseResponse>, Status> {
        let ids = request.into_inner().ids;
        let done = self
            .group()?
            .decrease(&ids)
            .await
            .map_err(|e| to_status(&e))?;
        Ok(Response::new(pb::DecreaseResponse { ids: done }))
    }

    async fn connect_info(
        &self,
        request: Request<pb::ConnectInfoRequest>,
    ) -> Result<Response<pb::ConnectInfoResponse>, Status> {
        let id = request.into_inner().id;
        let info = self
            .group()?
            .connect_info(&id)
            .await
            .map_err(|e| to_status(&e))?;
        Ok(Response::new(convert::connect_info_to_pb(&info)))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let id = request.into_inner().id;
        self.group()?
            .heartbeat(&id)
            .await
            .map_err(|e| to_status(&e))?;
        Ok(Response::new(pb::HeartbeatResponse {}))
    }

    async fn shutdown(
        &self,
        _request: Request<pb::ShutdownRequest>,
    ) -> Result<Response<pb::ShutdownResponse>, Status> {
        // Shutting down a plugin that was never initialised has nothing to release.
        let group = self.group.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(group) = group {
            group.shutdown().await.map_err(|e| to_status(&e))?;
        }
        Ok(Response::new(pb::ShutdownResponse {}))
    }
}
