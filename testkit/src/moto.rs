//! moto's standalone server on loopback, the judge of the aws provider's tests, and a proxy
//! in front of it that answers chosen calls with AWS's throttling errors.
//!
//! moto (`moto[server,ec2,autoscaling]` from PyPI, installed by `scripts/setup.d/aws.sh`)
//! serves the Auto Scaling, EC2 and EC2 Instance Connect APIs. It tells the services apart by
//! the credential scope of the request's `Authorization` header, and checks no signature, so
//! the set-up calls here (a launch template, an Auto Scaling group) are plain form posts in
//! the AWS query protocol with a made-up SigV4 header.
//!
//! ```no_run
//! # async fn t() {
//! if !flotilla_testkit::infra::require(flotilla_testkit::infra::Infra::Moto) {
//!     return;
//! }
//! let moto = flotilla_testkit::moto::Moto::start().await.unwrap();
//! moto.create_group(&flotilla_testkit::moto::GroupSpec::new("ci", 10)).await.unwrap();
//! # }
//! ```

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The region the tests use.
pub const REGION: &str = "us-east-1";
/// moto's default account accepts any access key; these are what the tests send.
pub const ACCESS_KEY: &str = "testing";
/// The secret that goes with [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "testing";
/// A Linux AMI of moto's built-in list (Ubuntu 14.04, x86_64); never booted.
pub const LINUX_AMI: &str = "ami-1e749f67";
/// A Windows AMI of moto's built-in list (Windows Server 2008 R2, x86_64): its instances
/// say `platform = windows`.
pub const WINDOWS_AMI: &str = "ami-12c6146b";

/// What can go wrong starting or talking to moto.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    /// No `moto_server` was found.
    #[error("moto_server not found: run scripts/setup.d/aws.sh or set FLOTILLA_MOTO_SERVER")]
    NotInstalled,
    /// Starting it failed.
    #[error("starting moto_server failed: {0}")]
    Start(String),
    /// A call to it failed at the HTTP level.
    #[error("HTTP to moto failed: {0}")]
    Http(String),
    /// moto answered a set-up call with an error.
    #[error("moto refused {action}: HTTP {status}: {body}")]
    Refused {
        /// The API action.
        action: String,
        /// The HTTP status.
        status: u16,
        /// moto's answer.
        body: String,
    },
}

/// A running `moto_server` on 127.0.0.1, killed when dropped.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An Auto Scaling group to create in moto, with its launch template.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// The group's name (the launch template is `<name>-lt`).
    pub name: String,
    /// `MaxSize`.
    pub max_size: u32,
    /// `MinSize`.
    pub min_size: u32,
    /// `DesiredCapacity` at creation.
    pub desired: u32,
    /// `NewInstancesProtectedFromScaleIn`.
    pub protected: bool,
    /// The Availability Zones.
    pub zones: Vec<String>,
    /// Suspend `AZRebalance` after creating it.
    pub suspend_az_rebalance: bool,
    /// A simple scaling policy of this name, if any.
    pub scaling_policy: Option<String>,
    /// The launch template's AMI ([`LINUX_AMI`] unless set).
    pub image_id: String,
}

impl GroupSpec {
    /// A group set up as GitLab's documentation asks: empty, scale-in protection on, one
    /// zone, no scaling policy.
    pub fn new(name: &str, max_size: u32) -> GroupSpec {
        GroupSpec {
            name: name.into(),
            max_size,
            min_size: 0,
            desired: 0,
            protected: true,
            zones: vec![format!("{REGION}a")],
            suspend_az_rebalance: false,
            scaling_policy: None,
            image_id: LINUX_AMI.into(),
        }
    }
}

impl Moto {
    /// Starts `moto_server` on a free loopback port and waits until it answers (at most
    /// 60 s: its first start imports a lot of Python).
    pub async fn start() -> Result<Moto, MotoError> {
        let program = crate::infra::moto_server_path().ok_or(MotoError::NotInstalled)?;
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port().map_err(|e| MotoError::Start(e.to_string()))?;
            let child = Command::new(&program)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| MotoError::Start(format!("{}: {e}", program.display())))?;
            let mut moto = Moto {
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
            };
            match moto.wait_ready(Duration::from_secs(60)).await {
                Ok(()) => return Ok(moto),
                Err(e) => last = e.to_string(),
            }
        }
        Err(MotoError::Start(last))
    }

    async fn wait_ready(&mut self, limit: Duration) -> Result<(), MotoError> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(MotoError::Start(format!("moto_server exited: {status}")));
            }
            if let Ok(r) = request(self.addr, "GET", "/moto-api/data.json", &[], Bytes::new()).await
                && r.status == 200
            {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(MotoError::Start(format!(
                    "moto_server did not answer on {} within {limit:?}",
                    self.addr
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its endpoint URL (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One call in the AWS query protocol to `service` (`ec2`, `autoscaling`); the answer's
    /// body, or an error when moto refused it.
    pub async fn query(
        &self,
        service: &str,
        version: &str,
        action: &str,
        params: &[(&str, String)],
    ) -> Result<String, MotoError> {
        let mut form = format!("Action={action}&Version={version}");
        for (k, v) in params {
            form.push('&');
            form.push_str(&encode(k));
            form.push('=');
            form.push_str(&encode(v));
        }
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20260101/{REGION}/{service}/aws4_request, \
             SignedHeaders=host, Signature=0"
        );
        let r = request(
            self.addr,
            "POST",
            "/",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("authorization", &auth),
            ],
            Bytes::from(form),
        )
        .await?;
        let body = String::from_utf8_lossy(&r.body).into_owned();
        if r.status != 200 {
            return Err(MotoError::Refused {
                action: action.into(),
                status: r.status,
                body,
            });
        }
        Ok(body)
    }

    /// Creates a launch template and an Auto Scaling group from it
    /// (EC2 `CreateLaunchTemplate`, Auto Scaling `CreateAutoScalingGroup`, and
    /// `SuspendProcesses` / `PutScalingPolicy` as `spec` says).
    pub async fn create_group(&self, spec: &GroupSpec) -> Result<(), MotoError> {
        let lt = format!("{}-lt", spec.name);
        self.query(
            "ec2",
            "2016-11-15",
            "CreateLaunchTemplate",
            &[
                ("LaunchTemplateName", lt.clone()),
                ("LaunchTemplateData.ImageId", spec.image_id.clone()),
                ("LaunchTemplateData.InstanceType", "t3.micro".into()),
            ],
        )
        .await?;
        let mut params = vec![
            ("AutoScalingGroupName", spec.name.clone()),
            ("LaunchTemplate.LaunchTemplateName", lt),
            ("LaunchTemplate.Version", "$Latest".into()),
            ("MinSize", spec.min_size.to_string()),
            ("MaxSize", spec.max_size.to_string()),
            ("DesiredCapacity", spec.desired.to_string()),
            (
                "NewInstancesProtectedFromScaleIn",
                spec.protected.to_string(),
            ),
        ];
        let zone_keys: Vec<String> = (1..=spec.zones.len())
            .map(|i| format!("AvailabilityZones.member.{i}"))
            .collect();
        for (k, z) in zone_keys.iter().zip(&spec.zones) {
            params.push((k.as_str(), z.clone()));
        }
        self.query(
            "autoscaling",
            "2011-01-01",
            "CreateAutoScalingGroup",
            &params,
        )
        .await?;
        if spec.suspend_az_rebalance {
            self.query(
                "autoscaling",
                "2011-01-01",
                "SuspendProcesses",
                &[
                    ("AutoScalingGroupName", spec.name.clone()),
                    ("ScalingProcesses.member.1", "AZRebalance".into()),
                ],
            )
            .await?;
        }
        if let Some(policy) = &spec.scaling_policy {
            self.query(
                "autoscaling",
                "2011-01-01",
                "PutScalingPolicy",
                &[
                    ("AutoScalingGroupName", spec.name.clone()),
                    ("PolicyName", policy.clone()),
                    ("PolicyType", "SimpleScaling".into()),
                    ("AdjustmentType", "ChangeInCapacity".into()),
                    ("ScalingAdjustment", "1".into()),
                ],
            )
            .await?;
        }
        Ok(())
    }

    /// The group's `DesiredCapacity`, read from `DescribeAutoScalingGroups`.
    pub async fn desired_capacity(&self, group: &str) -> Result<u32, MotoError> {
        let body = self
            .query(
                "autoscaling",
                "2011-01-01",
                "DescribeAutoScalingGroups",
                &[("AutoScalingGroupNames.member.1", group.into())],
            )
            .await?;
        xml_field(&body, "DesiredCapacity")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| MotoError::Http(format!("no DesiredCapacity in {body}")))
    }

    /// The ids of the group's instances whose lifecycle state is `InService`, from
    /// `DescribeAutoScalingGroups` (a second listing, independent of the provider's).
    pub async fn in_service(&self, group: &str) -> Result<Vec<String>, MotoError> {
        let body = self
            .query(
                "autoscaling",
                "2011-01-01",
                "DescribeAutoScalingGroups",
                &[("AutoScalingGroupNames.member.1", group.into())],
            )
            .await?;
        let mut ids = Vec::new();
        for member in body.split("<member>").skip(1) {
            if let (Some(id), Some(state)) = (
                xml_field(member, "InstanceId"),
                xml_field(member, "LifecycleState"),
            ) && state == "InService"
            {
                ids.push(id);
            }
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }
}

/// The text of the first `<tag>…</tag>` in `xml`.
fn xml_field(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].to_string())
}

/// Percent-encodes a form value (RFC 3986 unreserved characters stay).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A free TCP port on 127.0.0.1 (free when asked; moto binds it right after).
fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// An HTTP answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Bytes,
}

/// One HTTP/1.1 request on a fresh connection.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Answer, MotoError> {
    let err = |e: &dyn std::fmt::Display| MotoError::Http(e.to_string());
    let stream = TcpStream::connect(addr).await.map_err(|e| err(&e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| err(&e))?;
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body)).map_err(|e| err(&e))?;
    let resp = sender.send_request(req).await.map_err(|e| err(&e))?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| err(&e))?
        .to_bytes();
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// A loopback HTTP proxy in front of moto that answers chosen API actions with the
/// throttling error of their API, a given number of times, and forwards everything else.
///
/// The error answers follow each API's documented shape:
/// - Auto Scaling (AWS query protocol): HTTP 400, `<ErrorResponse><Error><Type>Sender</Type>
///   <Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>…` (Amazon
///   EC2 Auto Scaling API Reference, "Common Errors": `Throttling`, 400, "The request was
///   denied due to request throttling"; the query protocol's error shape, Smithy
///   `aws.protocols#awsQuery`, "Operation error serialization").
/// - EC2 (EC2 query protocol): HTTP 503, `<Response><Errors><Error><Code>
///   RequestLimitExceeded</Code><Message>…</Message></Error></Errors><RequestID>…`
///   (Amazon EC2 API Reference, "Error codes", "Example error response", and "Request
///   throttling": `RequestLimitExceeded`).
/// - EC2 Instance Connect (AWS JSON 1.1): HTTP 400, `x-amzn-ErrorType: ThrottlingException`
///   and `{"__type":"ThrottlingException","Message":…}` (EC2 Instance Connect API
///   Reference, SendSSHPublicKey, Errors: `ThrottlingException`, 400).
#[derive(Debug)]
pub struct ThrottlingProxy {
    addr: SocketAddr,
    shared: Arc<ProxyState>,
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct ProxyState {
    /// Throttles still to answer, per action.
    pending: Mutex<HashMap<String, usize>>,
    /// Throttles answered, per action.
    throttled: Mutex<HashMap<String, usize>>,
    /// Requests forwarded to moto.
    forwarded: AtomicUsize,
}

impl Drop for ThrottlingProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl ThrottlingProxy {
    /// A proxy on a free loopback port in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<ThrottlingProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(ProxyState::default());
        let stop = CancellationToken::new();
        tokio::spawn(serve_proxy(
            listener,
            upstream,
            shared.clone(),
            stop.clone(),
        ));
        Ok(ThrottlingProxy { addr, shared, stop })
    }

    /// Its endpoint URL, to give the provider instead of moto's.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers the next `times` calls of `action` (`SetDesiredCapacity`, `DescribeInstances`,
    /// `SendSSHPublicKey`, ...) with a throttling error.
    pub fn throttle(&self, action: &str, times: usize) {
        *self
            .shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(action.into())
            .or_default() += times;
    }

    /// How many calls of `action` were answered with a throttling error.
    pub fn throttled(&self, action: &str) -> usize {
        self.shared
            .throttled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(action)
            .copied()
            .unwrap_or(0)
    }

    /// How many requests reached moto.
    pub fn forwarded(&self) -> usize {
        self.shared.forwarded.load(Ordering::Relaxed)
    }
}

async fn serve_proxy(
    listener: TcpListener,
    upstream: SocketAddr,
    shared: Arc<ProxyState>,
    stop: CancellationToken,
) {
    loop {
        let (stream, _) = tokio::select! {
            () = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
        };
        let shared = shared.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req| proxy_one(req, upstream, shared.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

type ProxyResponse = http::Response<Full<Bytes>>;

async fn proxy_one(
    req: http::Request<Incoming>,
    upstream: SocketAddr,
    shared: Arc<ProxyState>,
) -> Result<ProxyResponse, MotoError> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| MotoError::Http(e.to_string()))?
        .to_bytes();
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let action = match &target {
        // AWS JSON protocols name the operation in X-Amz-Target: `Service.Operation`.
        Some(t) => t.rsplit('.').next().unwrap_or_default().to_string(),
        None => form_value(&body, "Action").unwrap_or_default(),
    };
    let version = form_value(&body, "Version").unwrap_or_default();
    let throttle = {
        let mut pending = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
        match pending.get_mut(&action) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    };
    if throttle {
        *shared
            .throttled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(action.clone())
            .or_default() += 1;
        return Ok(throttling_answer(target.is_some(), &version));
    }
    shared.forwarded.fetch_add(1, Ordering::Relaxed);
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter(|(k, _)| k.as_str() != "host")
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let header_refs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/".to_string(), |p| p.to_string());
    let a = request(upstream, parts.method.as_str(), &path, &header_refs, body).await?;
    let mut resp = http::Response::builder().status(a.status);
    for (k, v) in &a.headers {
        if k != "transfer-encoding" && k != "content-length" && k != "connection" {
            resp = resp.header(k.as_str(), v.as_slice());
        }
    }
    resp.body(Full::new(a.body))
        .map_err(|e| MotoError::Http(e.to_string()))
}

/// The throttling error of the API that was called: JSON for Instance Connect, EC2's shape
/// for EC2's API version, Auto Scaling's otherwise.
fn throttling_answer(json: bool, version: &str) -> ProxyResponse {
    let (status, content_type, extra, body) = if json {
        (
            400,
            "application/x-amz-json-1.1",
            Some(("x-amzn-errortype", "ThrottlingException")),
            r#"{"__type":"ThrottlingException","Message":"Rate exceeded"}"#.to_string(),
        )
    } else if version == "2016-11-15" {
        (
            503,
            "text/xml",
            None,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
             <Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>\
             </Error></Errors><RequestID>flotilla-proxy</RequestID></Response>"
                .to_string(),
        )
    } else {
        (
            400,
            "text/xml",
            None,
            "<ErrorResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\">\
             <Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message>\
             </Error><RequestId>flotilla-proxy</RequestId></ErrorResponse>"
                .to_string(),
        )
    };
    let mut b = http::Response::builder()
        .status(status)
        .header("content-type", content_type);
    if let Some((k, v)) = extra {
        b = b.header(k, v);
    }
    b.body(Full::new(Bytes::from(body))).unwrap_or_default()
}

/// A value of a form-encoded body (only what the tests look at: no `+`-for-space handling
/// beyond what AWS's actions and versions need).
fn form_value(body: &[u8], key: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_encoded_and_read() {
        assert_eq!(encode("$Latest"), "%24Latest");
        assert_eq!(encode("us-east-1a"), "us-east-1a");
        assert_eq!(
            form_value(b"Action=SetDesiredCapacity&Version=2011-01-01", "Action").as_deref(),
            Some("SetDesiredCapacity")
        );
        assert_eq!(form_value(b"Action=X", "Version"), None);
        assert_eq!(
            xml_field(
                "<a><DesiredCapacity>3</DesiredCapacity></a>",
                "DesiredCapacity"
            )
            .as_deref(),
            Some("3")
        );
    }
}
