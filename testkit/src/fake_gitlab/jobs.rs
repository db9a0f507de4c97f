//! Job-token endpoints for a job's state and log: `PUT /api/v4/jobs/:id` and
//! `PATCH /api/v4/jobs/:id/trace`.
//!
//! Sources: Rails' `lib/api/ci/runner.rb` (`put '/:id'`, `patch '/:id/trace'`),
//! `lib/api/ci/helpers/runner.rb` (`authenticate_job!`, `job_token`),
//! `app/services/ci/update_build_state_service.rb`, `app/services/ci/append_build_trace_service.rb`,
//! `app/models/commit_status.rb` (a `success`/`drop` of a `canceling` job makes it
//! `canceled`), `lib/gitlab/ci/runner/backoff.rb`.

use super::backoff;
use super::server::{Request, Resp, Server, error, json_body, query_param, respond};
use super::state::{FakeJobState, FinalUpdate};
use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// `Ci::UpdateBuildStateService::ACCEPT_TIMEOUT`: after this long since the first final
/// update, Rails applies it even if trace chunks are still live.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The answer to a `PUT`: the status code as the body, `Job-Status`, and the backoff.
fn put_answer(status: u16, job_status: FakeJobState, backoff: Option<String>) -> Resp {
    let mut b = respond(status).header("job-status", job_status.as_str());
    if let Some(s) = backoff {
        b = b.header("x-gitlab-trace-update-interval", s);
    }
    b.header("content-type", "text/plain")
        .body(Full::new(Bytes::from(status.to_string())))
        .unwrap_or_default()
}

/// `job_forbidden!`: 403 with the job's status.
fn job_forbidden(state: FakeJobState, reason: &str) -> Resp {
    respond(403)
        .header("job-status", state.as_str())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(format!(
            "{{\"message\":\"403 Forbidden - {reason}\"}}"
        ))))
        .unwrap_or_default()
}

/// `job_token`: the `token` parameter wins over the `JOB-TOKEN` header.
fn job_token(param: Option<&str>, req: &Request<'_>) -> String {
    param
        .map(String::from)
        .or_else(|| req.header("job-token").map(String::from))
        .unwrap_or_default()
}

/// `PUT /api/v4/jobs/:id`.
pub(crate) fn update_job(server: &Server, id: i64, req: &Request<'_>, body: &[u8]) -> Resp {
    let v = json_body(body).unwrap_or(Value::Null);
    // `requires :token` (the job token as a parameter, not only the header).
    let param = v
        .get("token")
        .and_then(Value::as_str)
        .map(String::from)
        .or_else(|| query_param(req.query, "token"));
    let Some(param) = param else {
        return error(400, "400 Bad request - token is missing");
    };
    let token = job_token(Some(&param), req);
    let state = v
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let now = Instant::now();
    let mut d = server.lock();
    d.requeue_expired(now);
    let behaviour = d.behaviour.clone();
    // `authenticate_job!`: an unknown job is a 403 too (a 404 could come from anywhere in
    // the network, so GitLab is explicit).
    let Some(job) = d.jobs.get_mut(&id) else {
        return error(403, "403 Forbidden");
    };
    if job.token != token {
        return error(403, "403 Forbidden");
    }
    let waiting = job.state == FakeJobState::WaitingForAck;
    if !job.state.is_active() && !waiting {
        return job_forbidden(job.state, "Job is not processing on runner");
    }
    if waiting {
        // `handle_runner_ack_workflow`.
        match state.as_str() {
            "pending" => {
                job.ack_deadline = behaviour.ack_timeout.map(|t| now + t);
                return put_answer(200, job.state, None);
            }
            "running" => {
                job.set_state(FakeJobState::Running);
                job.accepts += 1;
                job.ack_deadline = None;
            }
            _ => return put_answer(400, job.state, None),
        }
    }
    let checksum = v
        .pointer("/output/checksum")
        .or_else(|| v.get("checksum"))
        .and_then(Value::as_str)
        .map(String::from);
    // `accept_available?`: a final state with a checksum, live trace on.
    if state != "running"
        && checksum.is_some()
        && let Some(persist) = behaviour.live_trace
    {
        let created = *job.pending_state_at.get_or_insert(now);
        let age = now - created;
        let live_chunks = age < persist;
        if live_chunks && age <= ACCEPT_TIMEOUT {
            return put_answer(202, job.state, Some(backoff::header_value(age)));
        }
    }
    // `update_build_state!`.
    let current = job.state;
    let end = match state.as_str() {
        "running" => return put_answer(200, current, None),
        "success" | "failed" if current == FakeJobState::Canceling => FakeJobState::Canceled,
        "success" => FakeJobState::Success,
        "failed" => FakeJobState::Failed,
        _ => return put_answer(400, current, None),
    };
    let bytesize = v.pointer("/output/bytesize").and_then(Value::as_u64);
    let trace_matched = checksum.as_ref().is_none_or(|c| *c == job.trace_checksum())
        && bytesize.is_none_or(|b| b == job.trace.len() as u64);
    job.final_update = Some(FinalUpdate {
        state: state.clone(),
        failure_reason: v
            .get("failure_reason")
            .and_then(Value::as_str)
            .map(String::from),
        exit_code: v.get("exit_code").and_then(Value::as_i64),
        checksum,
        bytesize,
        trace_matched,
    });
    job.final_updates += 1;
    job.set_state(end);
    put_answer(200, end, None)
}

/// `PATCH /api/v4/jobs/:id/trace`.
pub(crate) fn patch_trace(server: &Server, id: i64, req: &Request<'_>, body: &[u8]) -> Resp {
    let token = job_token(query_param(req.query, "token").as_deref(), req);
    let debug_trace = query_param(req.query, "debug_trace")
        .is_some_and(|v| matches!(v.as_str(), "true" | "1" | "t" | "yes" | "on"));
    let mut d = server.lock();
    let interval = d.behaviour.trace_update_interval;
    let Some(job) = d.jobs.get_mut(&id) else {
        return error(403, "403 Forbidden");
    };
    if job.token != token {
        return error(403, "403 Forbidden");
    }
    if !job.state.is_active() {
        return job_forbidden(job.state, "Job is not processing on runner");
    }
    let Some(range) = req.header("content-range") else {
        return error(400, "400 Missing header Content-Range");
    };
    // A missing Content-Type makes a current GitLab parse the body as JSON and fail
    // (gitlab-runner-protocol.md §1.6; gitlab-runner-rs commit 60eeab7).
    if req.header("content-type").is_none_or(str::is_empty) {
        return error(400, "400 Bad request - the trace was parsed as JSON");
    }
    // Only the start counts: Rails computes the end from the body
    // (`AppendBuildTraceService#execute`, gitlab-runner issue 3275). `to_i` reads the leading
    // digits, so anything else is 0.
    let start: u64 = range
        .split('-')
        .next()
        .map(|s| {
            s.trim()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if start == 0 && debug_trace {
        job.debug_trace = true;
    }
    let size = job.trace.len() as u64;
    if start != size {
        return respond(416)
            .header("range", format!("0-{size}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(
                b"{\"message\":\"416 Range Not Satisfiable\"}",
            )))
            .unwrap_or_default();
    }
    job.trace.extend_from_slice(body);
    job.patches += 1;
    respond(202)
        .header("job-status", job.state.as_str())
        .header("range", format!("0-{}", job.trace.len()))
        .header("x-gitlab-trace-update-interval", interval.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap_or_default()
}
