//! Runner-token endpoints: `POST /api/v4/runners/verify` and `POST /api/v4/jobs/request`,
//! the latter behind Workhorse's long polling.
//!
//! Sources: Rails' `lib/api/ci/runner.rb` (`post '/verify'`, `post '/request'`),
//! `lib/api/ci/helpers/runner.rb` (`authenticate_runner!`), and Workhorse's
//! `workhorse/internal/builds/register.go` (`RegisterHandler`).

use super::server::{Request, Resp, Server, error, json, json_body, respond};
use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// `POST /api/v4/runners/verify`: `requires :token` (400 without), 403 for an unknown token,
/// 422 when the runner is orphaned, else 200 with `Entities::Ci::RunnerRegistrationDetails`
/// (`id`, `token`, `token_expires_at`).
pub(crate) fn verify(server: &Server, body: &[u8]) -> Resp {
    let v = json_body(body).unwrap_or(Value::Null);
    let Some(token) = v.get("token").and_then(Value::as_str) else {
        return error(400, "400 Bad request - token is missing");
    };
    let mut d = server.lock();
    let Some(id) = d.runners.get(token).copied() else {
        return error(403, "403 Forbidden");
    };
    if let Some(s) = v.get("system_id").and_then(Value::as_str) {
        d.system_ids.insert(s.to_string());
        d.managers.insert((token.to_string(), s.to_string()));
    }
    if d.behaviour.orphaned {
        return error(422, "Runner is orphaned");
    }
    json(
        200,
        &json!({"id": id, "token": token, "token_expires_at": null}),
    )
}

/// Workhorse's answer when it saw the queue change, or nothing changed in time: a bare 204
/// (no `X-GitLab-Last-Update`; that header only comes from Rails).
fn workhorse_no_content() -> Resp {
    respond(204)
        .body(Full::new(Bytes::new()))
        .unwrap_or_default()
}

/// `POST /api/v4/jobs/request`, through Workhorse. With long polling on, a request whose
/// JSON body carries both `token` and `last_update` watches the runner's queue key: a value
/// that already differs goes on to Rails; a change seen while waiting, or none within the
/// poll duration, is answered 204 by Workhorse itself. Anything else goes to Rails at once.
pub(crate) async fn request_job(server: &Arc<Server>, req: &Request<'_>, body: &[u8]) -> Resp {
    let _counted = server.job_requests.enter();
    let poll = server.lock().behaviour.poll_duration;
    let is_json = req
        .header("content-type")
        .is_some_and(|ct| ct.starts_with("application/json"));
    let watched = if poll.is_zero() || !is_json {
        None
    } else {
        json_body(body).and_then(|v| {
            let token = v.get("token")?.as_str()?.to_string();
            let last = v.get("last_update")?.as_str()?.to_string();
            (!token.is_empty() && !last.is_empty()).then_some((token, last))
        })
    };
    if let Some((token, last)) = watched {
        // The key of an unknown runner does not exist: its value differs at once, and Rails
        // answers (403).
        let current = |server: &Server| {
            let mut d = server.lock();
            d.requeue_expired(Instant::now());
            if d.runners.contains_key(&token) {
                d.queue_value(&token)
            } else {
                String::new()
            }
        };
        if current(server) == last {
            let deadline = Instant::now() + poll;
            loop {
                let notified = server.queue_changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if current(server) != last {
                    return workhorse_no_content();
                }
                // Wake up in time to requeue jobs whose accept never came.
                let wake = (Instant::now() + Duration::from_millis(500)).min(deadline);
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep_until(wake) => {
                        if Instant::now() >= deadline {
                            return workhorse_no_content();
                        }
                    }
                }
            }
        }
    }
    rails_request_job(server, body)
}

/// Rails' `post '/request'`.
fn rails_request_job(server: &Server, body: &[u8]) -> Resp {
    let v = json_body(body).unwrap_or(Value::Null);
    let Some(token) = v.get("token").and_then(Value::as_str) else {
        return error(400, "400 Bad request - token is missing");
    };
    let last_update = v.get("last_update").and_then(Value::as_str);
    let two_phase = v
        .pointer("/info/features/two_phase_job_commit")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut d = server.lock();
    if !d.runners.contains_key(token) {
        return error(403, "403 Forbidden");
    }
    if let Some(s) = v.get("system_id").and_then(Value::as_str) {
        d.system_ids.insert(s.to_string());
        d.managers.insert((token.to_string(), s.to_string()));
    }
    if d.behaviour.orphaned {
        return error(422, "Runner is orphaned");
    }
    d.requeue_expired(Instant::now());
    let current = d.queue_value(token);
    // `runner_queue_value_latest?`: nothing changed since the runner last asked.
    if last_update == Some(current.as_str()) {
        return respond(204)
            .header("x-gitlab-last-update", current)
            .body(Full::new(Bytes::new()))
            .unwrap_or_default();
    }
    match d.hand_out(token, two_phase, Instant::now()) {
        // A 201 carries no `X-GitLab-Last-Update` (`jobs_request_post_spec.rb`: "picks a
        // job ... not_to have_key('X-GitLab-Last-Update')").
        Some(payload) => json(201, &payload),
        None => respond(204)
            .header("x-gitlab-last-update", current)
            .body(Full::new(Bytes::new()))
            .unwrap_or_default(),
    }
}
