//! The HTTP side: a hyper server on 127.0.0.1 whose every request passes through fault
//! injection and recording before it reaches the runner API routes. hyper is used directly
//! (not a router framework) because dropping a connection without an answer needs the
//! connection-level control hyper gives when a service fails.

use super::faults::{FaultKind, Faults, Scripted};
use super::state::{
    Data, FakeJobState, FinalUpdate, RecordedBody, RecordedRequest, UploadedArtifact,
};
use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

type Resp = Response<Full<Bytes>>;

/// Shared by every connection.
pub(crate) struct Server {
    pub data: Mutex<Data>,
    pub faults: Mutex<Option<Faults>>,
    /// Woken whenever a queue changes (long polls wait on it).
    pub queue_changed: Notify,
    /// Planned answers: (method, path prefix, answer), consumed first come first served.
    pub scripted: Mutex<Vec<(String, String, Scripted)>>,
}

impl Server {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Data> {
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
pub(crate) async fn serve(listener: TcpListener, server: Arc<Server>, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
        };
        let server = server.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(server.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

fn respond(status: u16) -> http::response::Builder {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
}

fn empty(status: u16) -> Resp {
    respond(status)
        .body(Full::new(Bytes::new()))
        .unwrap_or_default()
}

fn text(status: u16, body: impl Into<String>) -> Resp {
    respond(status)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from(body.into())))
        .unwrap_or_default()
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
    let mut forced_status = None;
    match server.scripted(parts.method.as_str(), &path) {
        Some(Scripted::Fault(k)) => fault = Some(k),
        Some(Scripted::Status {
            status,
            retry_after,
        }) => {
            fault = None;
            forced_status = Some((status, retry_after));
        }
        None => {}
    }
    let mut headers = BTreeMap::new();
    for (k, v) in parts.headers.iter() {
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
    let record = |status: u16| RecordedRequest {
        seq,
        method: parts.method.to_string(),
        path: path.clone(),
        query: query.clone(),
        headers: headers.clone(),
        body: recorded_body.clone(),
        status,
        fault,
        at,
    };
    let result = match fault {
        _ if forced_status.is_some() => {
            let (status, retry_after) = forced_status.unwrap_or((500, None));
            let mut b = respond(status);
            if let Some(secs) = retry_after {
                b = b.header("retry-after", secs.to_string());
            }
            Ok(b.body(Full::new(Bytes::from_static(b"scripted answer")))
                .unwrap_or_default())
        }
        Some(FaultKind::ServerError) => Ok(text(500, "fault injection: internal server error")),
        Some(FaultKind::TooManyRequests) => Ok(respond(429)
            .header("retry-after", retry_after.to_string())
            .body(Full::new(Bytes::from_static(
                b"fault injection: too many requests",
            )))
            .unwrap_or_default()),
        Some(FaultKind::DropBefore) => Err(()),
        Some(FaultKind::Slow) => {
            tokio::time::sleep(slow).await;
            Ok(route(
                &server,
                &parts.method,
                &path,
                query.as_deref(),
                &parts.headers,
                bytes,
            )
            .await)
        }
        Some(FaultKind::DropAfter) => {
            let _ = route(
                &server,
                &parts.method,
                &path,
                query.as_deref(),
                &parts.headers,
                bytes,
            )
            .await;
            Err(())
        }
        None => Ok(route(
            &server,
            &parts.method,
            &path,
            query.as_deref(),
            &parts.headers,
            bytes,
        )
        .await),
    };
    let status = result.as_ref().map(|r| r.status().as_u16()).unwrap_or(0);
    server.lock().requests.push(record(status));
    result.map_err(|()| DropConnection)
}

async fn route(
    server: &Arc<Server>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Bytes,
) -> Resp {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method.as_str(), segs.as_slice()) {
        ("POST", ["api", "v4", "runners", "verify"]) => verify(server, &body),
        ("POST", ["api", "v4", "jobs", "request"]) => request_job(server, &body).await,
        ("PUT", ["api", "v4", "jobs", id]) => match id.parse() {
            Ok(id) => update_job(server, id, headers, &body),
            Err(_) => empty(404),
        },
        ("PATCH", ["api", "v4", "jobs", id, "trace"]) => match id.parse() {
            Ok(id) => patch_trace(server, id, headers, &body),
            Err(_) => empty(404),
        },
        ("POST", ["api", "v4", "jobs", id, "artifacts"]) => match id.parse() {
            Ok(id) => upload_artifact(server, id, query, headers, body).await,
            Err(_) => empty(404),
        },
        ("GET", ["api", "v4", "jobs", id, "artifacts"]) => match id.parse() {
            Ok(id) => download_artifact(server, id, headers, true),
            Err(_) => empty(404),
        },
        ("GET", ["_storage", "jobs", id, "artifacts"]) => match id.parse() {
            Ok(id) => download_artifact(server, id, headers, false),
            Err(_) => empty(404),
        },
        _ => text(404, "no such endpoint on the fake GitLab"),
    }
}

fn json_body(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

fn verify(server: &Server, body: &[u8]) -> Resp {
    let Some(v) = json_body(body) else {
        return text(400, "body is not JSON");
    };
    let token = v.get("token").and_then(Value::as_str).unwrap_or("");
    let mut d = server.lock();
    let Some(id) = d.runners.get(token).copied() else {
        return text(403, "403 Forbidden");
    };
    if let Some(s) = v.get("system_id").and_then(Value::as_str) {
        d.system_ids.insert(s.to_string());
    }
    let body = json!({"id": id, "token": token, "token_expires_at": null});
    respond(200)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default()
}

async fn request_job(server: &Arc<Server>, body: &[u8]) -> Resp {
    let Some(v) = json_body(body) else {
        return text(400, "body is not JSON");
    };
    let token = v
        .get("token")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let last_update = v
        .get("last_update")
        .and_then(Value::as_str)
        .map(String::from);
    let two_phase = v
        .pointer("/info/features/two_phase_job_commit")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let poll = {
        let mut d = server.lock();
        if !d.runners.contains_key(&token) {
            return text(403, "403 Forbidden");
        }
        if let Some(s) = v.get("system_id").and_then(Value::as_str) {
            d.system_ids.insert(s.to_string());
        }
        d.requeue_expired(Instant::now());
        d.behaviour.poll_duration
    };
    // Workhorse's long poll: a request whose last_update is current waits for a change.
    if let Some(last) = &last_update
        && !poll.is_zero()
    {
        let deadline = Instant::now() + poll;
        loop {
            let notified = server.queue_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let current = {
                let mut d = server.lock();
                d.requeue_expired(Instant::now());
                d.queue_value(&token)
            };
            if current != *last {
                break;
            }
            // Wake up in time to requeue jobs whose accept never came.
            let ack = server
                .lock()
                .behaviour
                .ack_timeout
                .min(Duration::from_millis(500));
            let wake = (Instant::now() + ack).min(deadline);
            tokio::select! {
                _ = notified => {
                    let current = server.lock().queue_value(&token);
                    if current != *last {
                        return no_job(&current, true);
                    }
                }
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= deadline {
                        let current = server.lock().queue_value(&token);
                        return no_job(&current, true);
                    }
                }
            }
        }
    }
    let mut d = server.lock();
    let current = d.queue_value(&token);
    match d.hand_out(&token, two_phase, Instant::now()) {
        Some(payload) => respond(201)
            .header("content-type", "application/json")
            .header("x-gitlab-last-update", current)
            .body(Full::new(Bytes::from(payload.to_string())))
            .unwrap_or_default(),
        None => no_job(&current, false),
    }
}

/// A 204. Workhorse's own long-poll answers (`polled`) carry `Gitlab-Ci-Builds-Polling: yes`
/// and no queue value (only Rails sets `X-GitLab-Last-Update`), so the runner asks again with
/// its old value, which then differs from the queue's and reaches "Rails".
fn no_job(queue_value: &str, polled: bool) -> Resp {
    let b = if polled {
        respond(204).header("gitlab-ci-builds-polling", "yes")
    } else {
        respond(204).header("x-gitlab-last-update", queue_value)
    };
    b.body(Full::new(Bytes::new())).unwrap_or_default()
}

fn job_token(headers: &HeaderMap, body: Option<&Value>) -> String {
    headers
        .get("job-token")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
        .or_else(|| {
            body.and_then(|b| b.get("token"))
                .and_then(Value::as_str)
                .map(String::from)
        })
        .unwrap_or_default()
}

fn with_status(status: u16, state: FakeJobState) -> http::response::Builder {
    respond(status).header("job-status", state.as_str())
}

fn update_job(server: &Server, id: i64, headers: &HeaderMap, body: &[u8]) -> Resp {
    let Some(v) = json_body(body) else {
        return text(400, "body is not JSON");
    };
    let token = job_token(headers, Some(&v));
    let state = v
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut d = server.lock();
    d.requeue_expired(Instant::now());
    let interval = d.behaviour.trace_update_interval;
    let persist = d.behaviour.persist_202s;
    let Some(job) = d.jobs.get(&id) else {
        return empty(404);
    };
    if job.token != token {
        return text(403, "403 Forbidden");
    }
    let current = job.state;
    if current.is_finished() {
        // GitLab revokes the job token when the job ends.
        return with_status(403, current)
            .body(Full::new(Bytes::new()))
            .unwrap_or_default();
    }
    let ok = |s: FakeJobState| {
        with_status(200, s)
            .body(Full::new(Bytes::new()))
            .unwrap_or_default()
    };
    match state.as_str() {
        "pending" => match current {
            FakeJobState::WaitingForAck => {
                let ack = d.behaviour.ack_timeout;
                if let Some(job) = d.jobs.get_mut(&id) {
                    job.ack_deadline = Some(Instant::now() + ack);
                }
                ok(current)
            }
            FakeJobState::Pending => text(409, "the job is no longer assigned to this runner"),
            _ => ok(current),
        },
        "running" => match current {
            FakeJobState::WaitingForAck => {
                if let Some(job) = d.jobs.get_mut(&id) {
                    job.set_state(FakeJobState::Running);
                    job.accepts += 1;
                    job.ack_deadline = None;
                }
                ok(FakeJobState::Running)
            }
            FakeJobState::Pending => text(409, "the job is no longer assigned to this runner"),
            _ => ok(current),
        },
        "success" | "failed" => {
            if !current.is_active() {
                return text(400, "the job was not accepted");
            }
            let seen = d.persisting.entry(id).or_insert(0);
            if *seen < persist {
                *seen += 1;
                return with_status(202, current)
                    .header("x-gitlab-trace-update-interval", interval.to_string())
                    .body(Full::new(Bytes::new()))
                    .unwrap_or_default();
            }
            let Some(job) = d.jobs.get_mut(&id) else {
                return empty(404);
            };
            let checksum = v
                .pointer("/output/checksum")
                .and_then(Value::as_str)
                .map(String::from);
            let bytesize = v.pointer("/output/bytesize").and_then(Value::as_u64);
            let actual = format!("crc32:{:08x}", crc32fast::hash(&job.trace));
            let mismatch = checksum.as_ref().is_some_and(|c| *c != actual)
                || bytesize.is_some_and(|b| b != job.trace.len() as u64);
            if job.reject_checksum > 0 || mismatch {
                job.reject_checksum = job.reject_checksum.saturating_sub(1);
                // The runner resends the whole trace from offset 0 (feature trace_reset).
                job.trace.clear();
                return with_status(412, current)
                    .body(Full::new(Bytes::new()))
                    .unwrap_or_default();
            }
            let end = match (state.as_str(), current) {
                ("success", _) => FakeJobState::Success,
                ("failed", FakeJobState::Canceling) => FakeJobState::Canceled,
                _ => FakeJobState::Failed,
            };
            job.final_update = Some(FinalUpdate {
                state: state.clone(),
                failure_reason: v
                    .get("failure_reason")
                    .and_then(Value::as_str)
                    .map(String::from),
                exit_code: v.get("exit_code").and_then(Value::as_i64),
                checksum,
                bytesize,
            });
            job.final_updates += 1;
            job.set_state(end);
            ok(end)
        }
        _ => text(400, "unknown state"),
    }
}

fn patch_trace(server: &Server, id: i64, headers: &HeaderMap, body: &[u8]) -> Resp {
    let token = job_token(headers, None);
    let mut d = server.lock();
    let interval = d.behaviour.trace_update_interval;
    let Some(job) = d.jobs.get_mut(&id) else {
        return empty(404);
    };
    if job.token != token {
        return text(403, "403 Forbidden");
    }
    if !job.state.is_active() {
        return with_status(403, job.state)
            .body(Full::new(Bytes::new()))
            .unwrap_or_default();
    }
    if headers.get("content-type").is_none_or(|v| v.is_empty()) {
        return text(
            400,
            "missing Content-Type (GitLab would read the trace as JSON)",
        );
    }
    let Some(range) = headers.get("content-range").and_then(|v| v.to_str().ok()) else {
        return text(400, "missing Content-Range");
    };
    let Some((start, end)) = range
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)))
    else {
        return text(400, "malformed Content-Range");
    };
    if body.is_empty() || end != start + body.len() as u64 - 1 {
        return text(
            400,
            format!(
                "Content-Range {range} does not match a body of {} bytes (the end is inclusive)",
                body.len()
            ),
        );
    }
    let size = job.trace.len() as u64;
    if start != size {
        return with_status(416, job.state)
            .header("range", format!("0-{size}"))
            .body(Full::new(Bytes::new()))
            .unwrap_or_default();
    }
    job.trace.extend_from_slice(body);
    job.patches += 1;
    with_status(202, job.state)
        .header("range", format!("0-{}", job.trace.len()))
        .header("x-gitlab-trace-update-interval", interval.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap_or_default()
}

fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
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

async fn upload_artifact(
    server: &Server,
    id: i64,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Bytes,
) -> Resp {
    let token = job_token(headers, None);
    {
        let d = server.lock();
        let Some(job) = d.jobs.get(&id) else {
            return empty(404);
        };
        if job.token != token || !job.state.is_active() {
            return text(403, "403 Forbidden");
        }
    }
    let Some(boundary) = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| multer::parse_boundary(ct).ok())
    else {
        return text(400, "not multipart/form-data");
    };
    let stream = futures::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut file = None;
    loop {
        match multipart.next_field().await {
            Ok(Some(field)) => {
                if field.name() == Some("file") {
                    let name = field.file_name().unwrap_or("").to_string();
                    match field.bytes().await {
                        Ok(b) => file = Some((name, b.to_vec())),
                        Err(e) => return text(400, format!("reading part file: {e}")),
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return text(400, format!("multipart: {e}")),
        }
    }
    let Some((filename, data)) = file else {
        return text(400, "missing part file");
    };
    let artifact = UploadedArtifact {
        filename,
        artifact_type: query_param(query, "artifact_type").unwrap_or_else(|| "archive".into()),
        artifact_format: query_param(query, "artifact_format").unwrap_or_else(|| "zip".into()),
        expire_in: query_param(query, "expire_in").unwrap_or_default(),
        data,
    };
    let mut d = server.lock();
    if let Some(job) = d.jobs.get_mut(&id) {
        job.artifacts.push(artifact);
    }
    respond(201)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap_or_default()
}

fn download_artifact(server: &Server, id: i64, headers: &HeaderMap, api: bool) -> Resp {
    let d = server.lock();
    let Some(job) = d.jobs.get(&id) else {
        return empty(404);
    };
    if api {
        let token = job_token(headers, None);
        // The job's own token, or the token of a job that depends on it.
        let allowed = job.token == token
            || d.jobs
                .values()
                .any(|j| j.token == token && j.builder.dependencies.contains(&id));
        if !allowed {
            return text(403, "403 Forbidden");
        }
        if d.behaviour.artifact_redirect {
            return respond(302)
                .header(
                    "location",
                    format!(
                        "{}/_storage/jobs/{id}/artifacts?signature=fake-signature",
                        d.storage_origin
                    ),
                )
                .body(Full::new(Bytes::new()))
                .unwrap_or_default();
        }
    }
    match job.artifacts.iter().find(|a| a.artifact_type == "archive") {
        Some(a) => respond(200)
            .header("content-type", "application/zip")
            .body(Full::new(Bytes::from(a.data.clone())))
            .unwrap_or_default(),
        None => text(404, "404 Not Found"),
    }
}
