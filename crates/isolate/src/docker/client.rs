//! One Docker API client per instance, reused by every job there: its idle dial-stdio
//! connections stay warm, so a job does not pay for starting `docker system dial-stdio` on
//! each request.

use super::DockerIsolationConfig;
use crate::IsolateError;
use bollard::Docker;
use flotilla_connect::docker_api::docker_client;
use flotilla_connect::{Connector, ExecRequest};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The thin pointer of a connector, to tell connectors apart.
fn identity(c: &Arc<dyn Connector>) -> *const () {
    Arc::as_ptr(c) as *const ()
}

struct Cached {
    connector: Arc<dyn Connector>,
    docker: Docker,
    helper: HelperBase,
}

/// What every helper container on one instance starts from, found once per connection by the
/// first job that needs it ([`super::helper`]: the instance's system paths, the empty root
/// imported); concurrent jobs wait for that one.
pub(crate) type HelperBase = Arc<tokio::sync::OnceCell<Vec<String>>>;

/// Clients by instance id.
#[derive(Default)]
pub(crate) struct Clients {
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Cached>>>>>,
}

impl Clients {
    /// The client for `instance` through `connector`: the cached one when it was made through
    /// the same connector, else a new one (a new connector means the old one failed).
    pub(crate) async fn get(
        &self,
        instance: &str,
        connector: &Arc<dyn Connector>,
        config: &DockerIsolationConfig,
    ) -> Result<Docker, IsolateError> {
        Ok(self.get_with_helper(instance, connector, config).await?.0)
    }

    /// [`Self::get`], with the instance's [`HelperBase`] (new with a new client).
    pub(crate) async fn get_with_helper(
        &self,
        instance: &str,
        connector: &Arc<dyn Connector>,
        config: &DockerIsolationConfig,
    ) -> Result<(Docker, HelperBase), IsolateError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            // Forget clients whose connector nobody but the cache (and the client's own
            // dialer) holds any more: their instance is gone or was reconnected.
            slots.retain(|id, s| {
                id == instance
                    || s.try_lock()
                        .map(|c| {
                            c.as_ref()
                                .is_some_and(|c| Arc::strong_count(&c.connector) > 2)
                        })
                        .unwrap_or(true)
            });
            slots.entry(instance.to_string()).or_default().clone()
        };
        let mut cached = slot.lock().await;
        if let Some(c) = cached.as_ref()
            && identity(&c.connector) == identity(connector)
        {
            return Ok((c.docker.clone(), c.helper.clone()));
        }
        let docker = connect(instance, connector, config).await?;
        let helper = HelperBase::default();
        *cached = Some(Cached {
            connector: connector.clone(),
            docker: docker.clone(),
            helper: helper.clone(),
        });
        Ok((docker, helper))
    }
}

/// Connects to the instance's daemon, waiting up to `daemon_wait` for it to come up; fails at
/// once when the instance itself cannot be reached.
async fn connect(
    instance: &str,
    connector: &Arc<dyn Connector>,
    config: &DockerIsolationConfig,
) -> Result<Docker, IsolateError> {
    let deadline = tokio::time::Instant::now() + config.daemon_wait;
    loop {
        let error = match docker_client(
            connector.clone(),
            config.route.clone(),
            config.api_timeout_secs,
        )
        .await
        {
            Ok(docker) => return Ok(docker),
            Err(e) if e.is_instance_failure() => {
                return Err(IsolateError::Connect {
                    instance: instance.to_string(),
                    source: e,
                });
            }
            Err(e) => e,
        };
        // Is it the daemon or the instance? Only the daemon is worth waiting for.
        if let Err(e) = connector.exec(ExecRequest::new("true")).await
            && e.is_instance_failure()
        {
            return Err(IsolateError::Connect {
                instance: instance.to_string(),
                source: e,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(IsolateError::Docker {
                instance: instance.to_string(),
                what: format!(
                    "connecting (waited {}s for the daemon)",
                    config.daemon_wait.as_secs()
                ),
                message: error.to_string(),
            });
        }
        tracing::debug!(%instance, error = %error, "the Docker daemon does not answer yet");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether a Docker API error is a 404 (the thing is already gone).
pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}
