//! A fake Kubernetes API server on 127.0.0.1, backed by the real Docker engine (feature
//! `fake-kube`).
//!
//! Written from the Kubernetes API reference and the API server's and kubelet's sources (each
//! file names the ones it follows) and judged by a real `kubectl` (`tests/fake_kube_kubectl.rs`).
//! It serves what the `kubernetes` provider and `kube-exec` connector use, and what kubectl
//! needs for `create -f`, `get`, `delete` and `exec`:
//! - discovery: `/version`, `/api`, `/apis`, `/api/v1` (legacy documents);
//! - pods: create (`generateName` too), get, list and watch with label and field selectors,
//!   delete; `Status` errors for 400, 404, 405, 409 and 422 ([`status`]);
//! - events of pods (scheduling, start, failures), listed by field selector;
//! - exec over WebSocket `v5.channel.k8s.io` and `v4.channel.k8s.io`, mapped to Docker exec;
//! - port-forward over WebSocket `v4.channel.k8s.io`, a TCP relay to the pod's container.
//!
//! A pod is a container (see [`pods`] for the mapping), labelled
//! `flotilla.fake-kube=<server id>`; dropping the [`FakeKube`] removes its containers (and
//! only them). No authentication: the kubeconfig it writes has a token that is not checked.
//!
//! Not served: SPDY (kubectl before 1.31 for exec; `kubectl port-forward`, which tunnels SPDY
//! in WebSocket), Tables, aggregated discovery, patch/update, every other resource.

mod objects;
mod pods;
mod selector;
mod server;
mod status;
mod stream;

pub use pods::SERVER_LABEL;

use bollard::Docker;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A running fake API server. Dropping it stops it and removes its pods' containers.
#[derive(Debug)]
pub struct FakeKube {
    addr: SocketAddr,
    store: Arc<pods::Store>,
    stop: CancellationToken,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeKube {
    /// Starts a server on a free port of 127.0.0.1 and writes a kubeconfig for it.
    pub async fn start() -> std::io::Result<FakeKube> {
        // The engine here speaks an older API than bollard's default: negotiate.
        let docker = Docker::connect_with_local_defaults()
            .map_err(std::io::Error::other)?
            .negotiate_version()
            .await
            .map_err(std::io::Error::other)?;
        let id = format!("{:08x}", rand::random::<u32>());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(pods::Store::new(id, docker));
        let stop = CancellationToken::new();
        tokio::spawn(server::serve(listener, store.clone(), stop.clone()));
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text(addr))?;
        Ok(FakeKube {
            addr,
            store,
            stop,
            kubeconfig,
            _dir: dir,
        })
    }

    /// The server's URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig file naming this server as the current context (namespace `default`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The label (`key=value`) on every container of this server.
    pub fn container_label(&self) -> String {
        format!("{SERVER_LABEL}={}", self.store.id)
    }

    /// From now on, new pods stay `Pending` with `PodScheduled` false for `reason` (e.g.
    /// `Unschedulable`) and `message`, and a `FailedScheduling` event; `None` lets them run.
    pub fn hold_pending(&self, hold: Option<(&str, &str)>) {
        *self.store.hold.lock().unwrap_or_else(|e| e.into_inner()) =
            hold.map(|(reason, message)| pods::Hold {
                reason: reason.into(),
                message: message.into(),
            });
    }

    /// Drops every open exec connection at once, without a status or a close frame, as a
    /// lost connection between client, API server and node would.
    pub fn sever_streams(&self) {
        self.store.sever.notify_waiters();
    }

    /// The Docker container backing the running pod `namespace/name`.
    pub fn container_of(&self, namespace: &str, name: &str) -> Option<String> {
        self.store.container(namespace, name)
    }

    /// Every request served so far, as `METHOD /path`.
    pub fn requests(&self) -> Vec<String> {
        self.store
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.stop.cancel();
        crate::containers::remove_labelled(&self.container_label());
    }
}

fn kubeconfig_text(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: http://{addr}
users:
- name: fake
  user:
    token: fake-token-not-checked
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: default
current-context: fake
"
    )
}
