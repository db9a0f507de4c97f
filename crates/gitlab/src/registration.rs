//! Registering and unregistering runners, as `gitlab-runner register`, `verify` and
//! `unregister` do (`network/gitlab.go`: `RegisterRunner`, `UnregisterRunner`,
//! `UnregisterRunnerManager`).
//!
//! Rails' side is `lib/api/ci/runner.rb`: `post '/'` creates a runner from a legacy
//! registration token (201 with `Entities::Ci::RunnerRegistrationDetails`: `id`, `token`,
//! `token_expires_at`; 403 for a token it does not know, 410 when registration tokens are
//! turned off), `delete '/'` deletes the runner a token authenticates (204), and
//! `delete '/managers'` deletes one manager (`system_id`) of it (204, 404 when there is none).

use crate::client::{Call, Client, Limited, MAX_SMALL_ANSWER, read_limited};
use crate::error::ClientError;
use flotilla_fleet::Secret;
use reqwest::Method;
use serde::{Deserialize, Serialize};

/// A runner authentication token made in GitLab's UI or API starts with this (Rails'
/// `Ci::Runner::CREATED_RUNNER_TOKEN_PREFIX`): it is verified, not registered, and
/// unregistering it removes only this manager.
pub const CREATED_RUNNER_TOKEN_PREFIX: &str = "glrt-";

/// Whether `token` is a runner authentication token made in GitLab (GitLab Runner's
/// `network.TokenIsCreatedRunnerToken`).
pub fn is_created_runner_token(token: &str) -> bool {
    token.starts_with(CREATED_RUNNER_TOKEN_PREFIX)
}

/// What a legacy registration may say of the new runner (`post '/'`'s parameters).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RegistrationRequest {
    /// `description`: the runner's name in GitLab.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `tag_list`, comma-separated.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tag_list: String,
    /// `run_untagged`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_untagged: Option<bool>,
    /// `locked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked: Option<bool>,
    /// `access_level`: `not_protected` or `ref_protected`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_level: Option<String>,
    /// `maximum_timeout`, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_timeout: Option<u64>,
    /// `paused`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// `maintenance_note`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance_note: Option<String>,
}

/// The runner GitLab created.
#[derive(Debug, Clone)]
pub struct RegisteredRunner {
    /// Its id.
    pub id: i64,
    /// Its authentication token.
    pub token: Secret<String>,
    /// When the token expires (RFC 3339), when it does.
    pub token_expires_at: Option<String>,
}

#[derive(Serialize)]
struct RegisterBody<'a> {
    token: &'a str,
    #[serde(flatten)]
    request: &'a RegistrationRequest,
    info: &'a crate::Info,
}

#[derive(Deserialize)]
struct RegisterAnswer {
    id: i64,
    token: String,
    #[serde(default)]
    token_expires_at: Option<String>,
}

#[derive(Serialize)]
struct TokenBody<'a> {
    token: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_id: Option<&'a str>,
}

impl Client {
    /// `POST /api/v4/runners` with this client's token as a legacy registration token:
    /// GitLab creates a runner and answers its authentication token.
    pub async fn register(
        &self,
        request: &RegistrationRequest,
    ) -> Result<RegisteredRunner, ClientError> {
        let call = Call::new("POST", "/api/v4/runners");
        let url = self.api("runners")?;
        let body = RegisterBody {
            token: self.token.expose(),
            request,
            info: &self.info,
        };
        let resp = self
            .send_json(&call, Method::POST, url, &body, false)
            .await?;
        let status = resp.status().as_u16();
        match status {
            200 | 201 => {
                let bytes = match read_limited(resp, MAX_SMALL_ANSWER).await {
                    Ok(Limited::Whole(b)) => b,
                    Ok(Limited::TooLarge(_)) => {
                        return Err(ClientError::TooLarge {
                            method: call.method,
                            path: call.path.clone(),
                            limit: MAX_SMALL_ANSWER as u64,
                        });
                    }
                    Err(e) => {
                        return Err(ClientError::Decode {
                            method: call.method,
                            path: call.path.clone(),
                            message: e.to_string(),
                        });
                    }
                };
                let answer: RegisterAnswer =
                    serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
                        method: call.method,
                        path: call.path.clone(),
                        message: e.to_string(),
                    })?;
                if answer.token.is_empty() {
                    return Err(ClientError::Decode {
                        method: call.method,
                        path: call.path.clone(),
                        message: "no token in the answer".into(),
                    });
                }
                Ok(RegisteredRunner {
                    id: answer.id,
                    token: Secret::new(answer.token),
                    token_expires_at: answer.token_expires_at,
                })
            }
            403 => Err(Client::status_error(
                &call,
                status,
                ": GitLab does not know this registration token",
            )),
            410 => Err(Client::status_error(
                &call,
                status,
                ": this GitLab no longer registers runners with registration tokens; create \
                 the runner in GitLab (Settings > CI/CD > Runners) and register with its \
                 glrt- token",
            )),
            _ => Err(Client::status_error(&call, status, "")),
        }
    }

    /// `DELETE /api/v4/runners`: deletes the runner this client's token authenticates.
    pub async fn unregister(&self) -> Result<(), ClientError> {
        self.delete("runners", "/api/v4/runners", None).await
    }

    /// `DELETE /api/v4/runners/managers`: deletes this manager (its `system_id`) of the runner
    /// this client's token authenticates; the runner itself stays, as it was made in GitLab.
    pub async fn unregister_manager(&self) -> Result<(), ClientError> {
        let system_id = self.system_id.clone();
        self.delete(
            "runners/managers",
            "/api/v4/runners/managers",
            Some(&system_id),
        )
        .await
    }

    async fn delete(
        &self,
        path: &str,
        endpoint: &'static str,
        system_id: Option<&str>,
    ) -> Result<(), ClientError> {
        let call = Call::new("DELETE", endpoint);
        let url = self.api(path)?;
        let body = TokenBody {
            token: self.token.expose(),
            system_id,
        };
        let resp = self
            .send_json(&call, Method::DELETE, url, &body, false)
            .await?;
        match resp.status().as_u16() {
            200 | 204 => Ok(()),
            403 => Err(ClientError::InvalidRunnerToken { endpoint }),
            404 if system_id.is_some() => Err(Client::status_error(
                &call,
                404,
                ": GitLab knows no manager of this runner with this system id",
            )),
            status => Err(Client::status_error(&call, status, "")),
        }
    }
}
