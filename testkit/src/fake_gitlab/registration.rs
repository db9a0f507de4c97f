//! Registering and deleting runners: `POST /api/v4/runners` (a legacy registration token),
//! `DELETE /api/v4/runners` and `DELETE /api/v4/runners/managers`.
//!
//! Sources: Rails' `lib/api/ci/runner.rb` (`post '/'`: `requires :token`, the optional
//! `description`, `tag_list`, `run_untagged`, `locked`, `access_level` (`not_protected` or
//! `ref_protected`), `maximum_timeout`, `paused`, `maintenance_note`, `info`; 403 for a token
//! it does not know, 410 when registration tokens are turned off, 201 with
//! `Entities::Ci::RunnerRegistrationDetails`: `id`, `token`, `token_expires_at`;
//! `delete '/'`: `authenticate_runner!`, 204; `delete '/managers'`: `requires :token,
//! :system_id`, 404 "Runner manager not found", 204), and `app/models/ci/runner.rb` (a runner
//! registered with a registration token does not get the `glrt-` prefix of runners made in
//! GitLab).

use super::server::{Request, Resp, Server, error, json, json_body, query_param, respond};
use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

/// The token of a request: from its JSON body, else its query (Grape reads both).
fn token_of(req: &Request<'_>, body: &Value, name: &str) -> Option<String> {
    body.get(name)
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| query_param(req.query, name))
        .filter(|t| !t.is_empty())
}

fn no_content() -> Resp {
    respond(204)
        .body(Full::new(Bytes::new()))
        .unwrap_or_default()
}

/// `POST /api/v4/runners`.
pub(crate) fn register(server: &Server, req: &Request<'_>, body: &[u8]) -> Resp {
    let v = json_body(body).unwrap_or(Value::Null);
    let Some(token) = token_of(req, &v, "token") else {
        return error(400, "400 Bad request - token is missing");
    };
    let mut d = server.lock();
    if d.behaviour.registration_disallowed {
        return error(
            410,
            "runner registration disallowed: registration tokens are turned off",
        );
    }
    if !d.registration_tokens.contains(&token) {
        return error(403, "403 Forbidden - invalid token supplied");
    }
    if let Some(level) = v.get("access_level").and_then(Value::as_str)
        && !matches!(level, "not_protected" | "ref_protected")
    {
        return error(400, "access_level does not have a valid value");
    }
    if v.get("active").is_some() && v.get("paused").is_some() {
        return error(400, "active, paused are mutually exclusive");
    }
    d.token_counter += 1;
    let new_token = format!("glrtr-fake{:016}", d.token_counter);
    let id = d.add_runner(&new_token) + 1000;
    let mut details = serde_json::Map::new();
    for key in [
        "description",
        "tag_list",
        "run_untagged",
        "locked",
        "access_level",
        "maximum_timeout",
        "paused",
        "maintenance_note",
        "info",
    ] {
        if let Some(value) = v.get(key) {
            details.insert(key.to_string(), value.clone());
        }
    }
    d.registered
        .insert(new_token.clone(), Value::Object(details));
    json(
        201,
        &json!({"id": id, "token": new_token, "token_expires_at": null}),
    )
}

/// `DELETE /api/v4/runners`.
pub(crate) fn delete_runner(server: &Server, req: &Request<'_>, body: &[u8]) -> Resp {
    let v = json_body(body).unwrap_or(Value::Null);
    let Some(token) = token_of(req, &v, "token") else {
        return error(400, "400 Bad request - token is missing");
    };
    let mut d = server.lock();
    if d.runners.remove(&token).is_none() {
        return error(403, "403 Forbidden");
    }
    d.registered.remove(&token);
    d.managers.retain(|(t, _)| *t != token);
    no_content()
}

/// `DELETE /api/v4/runners/managers`.
pub(crate) fn delete_manager(server: &Server, req: &Request<'_>, body: &[u8]) -> Resp {
    let v = json_body(body).unwrap_or(Value::Null);
    let (Some(token), Some(system_id)) =
        (token_of(req, &v, "token"), token_of(req, &v, "system_id"))
    else {
        return error(400, "400 Bad request - token, system_id are missing");
    };
    let mut d = server.lock();
    if !d.runners.contains_key(&token) {
        return error(403, "403 Forbidden");
    }
    if !d.managers.remove(&(token, system_id)) {
        return error(404, "404 Runner manager not found");
    }
    no_content()
}
