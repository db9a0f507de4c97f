//! HTTP/1.1 over a unix socket on the instance: the transport of Firecracker's and Cloud
//! Hypervisor's REST APIs. Each call opens its own stream through the instance's connector
//! ([`Connector::forward`]), so a VMM that drops idle connections costs nothing and no
//! connection task outlives its call.

use crate::VmmError;
use flotilla_connect::{Connector, ForwardTarget};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// A REST API served on a unix socket of the instance.
#[derive(Clone)]
pub(crate) struct RestClient {
    host: Arc<dyn Connector>,
    socket: String,
    vmm: &'static str,
    timeout: Duration,
    /// Reads the VMM's message out of an error answer's body.
    error_message: fn(&[u8]) -> String,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestClient")
            .field("vmm", &self.vmm)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// An answer: its status and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl RestClient {
    /// A client of the API on `socket`; `error_message` reads the VMM's message out of the
    /// body of an answer that is not 2xx.
    pub(crate) fn new(
        host: Arc<dyn Connector>,
        socket: String,
        vmm: &'static str,
        timeout: Duration,
        error_message: fn(&[u8]) -> String,
    ) -> RestClient {
        RestClient {
            host,
            socket,
            vmm,
            timeout,
            error_message,
        }
    }

    /// Sends `method path` with `body` as JSON (none: an empty body) and returns the body of
    /// a 2xx answer; any other status is [`VmmError::Api`] with the VMM's message.
    pub(crate) async fn call<T: Serialize>(
        &self,
        method: &str,
        path: &str,
        body: Option<&T>,
    ) -> Result<Vec<u8>, VmmError> {
        let what = format!("{method} {path}");
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| self.protocol(format!("encoding {what}: {e}")))?;
        let answer = tokio::time::timeout(self.timeout, self.call_inner(method, path, body, &what))
            .await
            .map_err(|_| VmmError::Timeout {
                what: format!("waiting for {}'s answer to {what}", self.vmm),
                after: self.timeout,
            })??;
        if (200..300).contains(&answer.status) {
            return Ok(answer.body);
        }
        Err(VmmError::Api {
            vmm: self.vmm,
            call: what,
            status: answer.status,
            message: (self.error_message)(&answer.body),
        })
    }

    async fn call_inner(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        what: &str,
    ) -> Result<Answer, VmmError> {
        let stream = self
            .host
            .forward(&ForwardTarget::Unix(self.socket.clone()))
            .await
            .map_err(|e| {
                VmmError::connect(format!("connecting to {}'s API socket", self.vmm), e)
            })?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut send, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(io)
            .await
            .map_err(|e| self.protocol(format!("{what}: HTTP handshake: {e}")))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let has_body = body.is_some();
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("http://localhost{path}"))
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::ACCEPT, "application/json");
        if has_body {
            req = req.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.protocol(format!("{what}: building the request: {e}")))?;
        let answer = async {
            let resp = send
                .send_request(req)
                .await
                .map_err(|e| self.protocol(format!("{what}: {e}")))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| self.protocol(format!("{what}: reading the answer: {e}")))?
                .to_bytes()
                .to_vec();
            Ok(Answer { status, body })
        }
        .await;
        driver.abort();
        answer
    }

    fn protocol(&self, msg: String) -> VmmError {
        VmmError::Protocol(msg, self.vmm)
    }
}
