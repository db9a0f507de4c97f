//! The HTTP side: a hyper server on 127.0.0.1 whose every request passes through fault
//! injection and recording before it reaches the runner API routes. hyper is used directly
//! (not a router framework) because dropping a connection without an answer needs the
//! connection-level control hyper gives when a service fails.

use super::artifacts;
use super::faults::{FaultKind, Faults, Scripted};
use super::jobs;
use super::registration;
use super::runners;
use super::state::{Data, RecordedBody, RecordedRequest};
use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) type Resp = Response<Full<Bytes>>;

/// The path of job requests (Workhorse's long-polling route).
pub(crate) const JOB_REQUEST_PATH: &str = "/api/v4/jobs/request";

/// Shared by every connection.
pub(crate) struct Server {
    pub data: Mutex<Data>,
    pub faults: Mutex<Option<Faults>>,
    /// Woken whenever a queue changes (long polls wait on it).
    pub queue_changed: Notify,
    /// Planned answers: (method, path prefix, answer), consumed first come first served.
    pub scripted: Mutex<Vec<(String, String, Scripted)>>,
    /// Job requests being answered now (long polls waiting included), and the most ever.
    pub job_requests: InFlight,
}

/// A count of requests being answered and its highest value.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl InFlight {
    /// Counts one request until the guard is dropped.
    pub(crate) fn enter(&self) -> InFlightGuard<'_> {
        use std::sync::atomic::Ordering;
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        InFlightGuard(self)
    }

    /// The most requests answered at once so far.
    pub(crate) fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Ends one request's count when dropped.
pub(crate) struct InFlightGuard<'a>(&'a InFlight);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Server {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Data> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn scripted(&self, method: &str, path: &str) -> Option<Scripted> {
        let mut s = self.scripted.lock().unwrap_or_else(|e| e.into_inner());
        let i = s
            .iter()
            .position(|(m, p, _)| m == method && path.starts_with(p.as_str()))?;
        Some(s.remove(i).2)
    }

    fn decide(&self, path: &str) -> (Option<FaultKind>, u64, Duration) {
        let f = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        match f.as_ref() {
            Some(f) => (f.decide(path), f.config().retry_after_secs, f.config().slow),
            None => (None, 0, Duration::ZERO),
        }
    }
}

/// The error that makes hyper close a connection without answering.
#[derive(Debug)]
struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fault injection: connection dropped")
    }
}

impl std::error::Error for DropConnection {}

/// Accepts connections until `stop` fires.
pub(crate) async fn serve(
    listener: TcpListener,
    server: Arc<Server>,
    stop: CancellationToken,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    loop {
        let (stream, _) = tokio::select! {
            () = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
        };
        let server = server.clone();
        let stop = stop.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(server.clone(), req));
            let builder = hyper::server::conn::http1::Builder::new();
            match tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        () = stop.cancelled() => {}
                    }
                }
                Some(acceptor) => {
                    // A client that does not trust the authority ends the handshake here.
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        () = stop.cancelled() => {}
                    }
                }
            }
        });
    }
}

/// A response builder with `status`.
pub(crate) fn respond(status: u16) -> http::response::Builder {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
}

/// A plain-text answer.
pub(crate) fn text(status: u16, body: impl Into<String>) -> Resp {
    respond(status)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from(body.into())))
        .unwrap_or_default()
}

/// A JSON answer, like Grape's `error!`/`present` (`{"message": ...}` for errors).
pub(crate) fn json(status: u16, body: &Value) -> Resp {
    respond(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default()
}

/// Grape's error answer: `{"message": "<status text>"}` as JSON.
pub(crate) fn error(status: u16, message: &str) -> Resp {
    json(status, &serde_json::json!({ "message": message }))
}

/// The body as JSON, when it is.
pub(crate) fn json_body(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

/// One query parameter, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(server: Arc<Server>, req: http::Request<Incoming>) -> Result<Resp, DropConnection> {
    let at = Instant::now();
    let seq = {
        let mut d = server.lock();
        d.next_seq += 1;
        d.next_seq
    };
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(String::from);
    let (mut fault, retry_after, slow) = server.decide(&path);
    let mut forced = None;
    match server.scripted(parts.method.as_str(), &path) {
        Some(Scripted::Fault(k)) => fault = Some(k),
        Some(other) => {
            fault = None;
            forced = Some(other);
        }
        None => {}
    }
    let mut headers = BTreeMap::new();
    for (k, v) in &parts.headers {
        headers.insert(
            k.as_str().to_ascii_lowercase(),
            String::from_utf8_lossy(v.as_bytes()).into_owned(),
        );
    }
    let content_type = headers.get("content-type").cloned().unwrap_or_default();
    let recorded_body = if bytes.is_empty() {
        RecordedBody::Empty
    } else if content_type.starts_with("multipart/") {
        RecordedBody::Multipart { size: bytes.len() }
    } else if let Ok(v) = serde_json::from_slice::<Value>(&bytes)
        && content_type.contains("json")
    {
        RecordedBody::Json(v)
    } else {
        RecordedBody::Bytes(bytes.to_vec())
    };
    let host = headers.get("host").cloned().unwrap_or_default();
    let request = Request {
        method: &parts.method,
        path: &path,
        query: query.as_deref(),
        headers: &parts.headers,
    };
    let result = match (forced, fault) {
        (
            Some(Scripted::Status {
                status,
                retry_after,
            }),
            _,
        ) => {
            let mut b = respond(status);
            if let Some(secs) = retry_after {
                b = b.header("retry-after", secs.to_string());
            }
            Ok(b.body(Full::new(Bytes::from_static(b"scripted answer")))
                .unwrap_or_default())
        }
        (Some(Scripted::Redirect { status, location }), _) => Ok(respond(status)
            .header("location", location)
            .body(Full::new(Bytes::new()))
            .unwrap_or_default()),
        (_, Some(FaultKind::ServerError)) => Ok(error(500, "500 Internal Server Error")),
        (_, Some(FaultKind::BadGateway)) => Ok(text(502, "fault injection: bad gateway")),
        (_, Some(FaultKind::TooManyRequests)) => Ok(respond(429)
            .header("retry-after", retry_after.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(
                b"{\"message\":\"429 Too Many Requests\"}",
            )))
            .unwrap_or_default()),
        (_, Some(FaultKind::DropBefore)) => Err(()),
        (_, Some(FaultKind::Slow)) => {
            tokio::time::sleep(slow).await;
            Ok(route(&server, &request, bytes).await)
        }
        (_, Some(FaultKind::DropAfter)) => {
            let _ = route(&server, &request, bytes).await;
            Err(())
        }
        _ => Ok(route(&server, &request, bytes).await),
    };
    // Workhorse sets `Gitlab-Ci-Builds-Polling: yes` on every answer to a job request while
    // long polling is on, before it reads the body or proxies to Rails
    // (`workhorse/internal/builds/register.go` `RegisterHandler`): the header says long
    // polling is configured, not that this request waited.
    let result = result.map(|mut r| {
        if path == JOB_REQUEST_PATH && !server.lock().behaviour.poll_duration.is_zero() {
            r.headers_mut().insert(
                "gitlab-ci-builds-polling",
                http::HeaderValue::from_static("yes"),
            );
        }
        r
    });
    let (status, response_headers) = match &result {
        Ok(r) => (
            r.status().as_u16(),
            r.headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_ascii_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
        ),
        Err(()) => (0, BTreeMap::new()),
    };
    server.lock().requests.push(RecordedRequest {
        seq,
        method: parts.method.to_string(),
        host,
        path: path.clone(),
        query,
        headers,
        body: recorded_body,
        status,
        response_headers,
        fault,
        at,
    });
    result.map_err(|()| DropConnection)
}

/// What a route sees of a request.
pub(crate) struct Request<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

impl Request<'_> {
    /// A header as text.
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn route(server: &Arc<Server>, req: &Request<'_>, body: Bytes) -> Resp {
    let segs: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    match (req.method.as_str(), segs.as_slice()) {
        ("POST", ["api", "v4", "runners", "verify"]) => runners::verify(server, &body),
        ("POST", ["api", "v4", "runners"]) => registration::register(server, req, &body),
        ("DELETE", ["api", "v4", "runners"]) => registration::delete_runner(server, req, &body),
        ("DELETE", ["api", "v4", "runners", "managers"]) => {
            registration::delete_manager(server, req, &body)
        }
        ("POST", ["api", "v4", "jobs", "request"]) => {
            runners::request_job(server, req, &body).await
        }
        ("PUT", ["api", "v4", "jobs", id]) => match id.parse() {
            Ok(id) => jobs::update_job(server, id, req, &body),
            Err(_) => error(404, "404 Not Found"),
        },
        ("PATCH", ["api", "v4", "jobs", id, "trace"]) => match id.parse() {
            Ok(id) => jobs::patch_trace(server, id, req, &body),
            Err(_) => error(404, "404 Not Found"),
        },
        ("POST", ["api", "v4", "jobs", id, "artifacts"]) => match id.parse() {
            Ok(id) => artifacts::upload(server, id, req, body).await,
            Err(_) => error(404, "404 Not Found"),
        },
        ("GET", ["api", "v4", "jobs", id, "artifacts"]) => match id.parse() {
            Ok(id) => artifacts::download(server, id, req),
            Err(_) => error(404, "404 Not Found"),
        },
        ("GET", ["_storage", "jobs", id, "artifacts"]) => match id.parse() {
            Ok(id) => artifacts::from_storage(server, id),
            Err(_) => error(404, "404 Not Found"),
        },
        _ => error(404, "404 Not Found"),
    }
}
